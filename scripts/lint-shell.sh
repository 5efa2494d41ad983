#!/usr/bin/env bash
# Runs shellcheck, at its default severity and following sourced files, over every shell script
# of the repository: each file git knows (tracked, or new and not ignored) that is named *.sh
# or starts with a sh or bash shebang. Fails on any finding. A finding that is meant is
# disabled at its line, with a comment giving the reason.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts=()
while IFS= read -r -d '' file; do
  [ -f "$file" ] || continue # deleted in the work tree
  if [[ $file == *.sh ]] || head -n 1 "$file" | grep -qE '^#!(/usr/bin/env |/bin/|/usr/bin/)(ba)?sh([[:space:]]|$)'; then
    scripts+=("$file")
  fi
done < <(git ls-files -z --cached --others --exclude-standard | sort -zu)

# Sourced paths (`source scripts/lib.sh`) are relative to the repository's top.
shellcheck -x "${scripts[@]}"
echo "lint-shell: ${#scripts[@]} scripts: ok"
