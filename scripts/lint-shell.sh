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
  if [[ $file == *.sh ]] || grep -qE '^#!(/usr/bin/env |/bin/|/usr/bin/)(ba)?sh([[:space:]]|$)' <<<"$(head -n 1 "$file")"; then
    scripts+=("$file")
  fi
done < <(git ls-files -z --cached --others --exclude-standard | sort -zu)

# Sourced paths (`source scripts/lib.sh`) are relative to the repository's top.
shellcheck -x "${scripts[@]}"

# Under `set -o pipefail` a pipeline fails with 141 when its reader stops before the writer is
# done (the writer gets SIGPIPE), which depends on how the writer's output falls into writes:
# a test that passes on one machine fails on another. So no pipeline may end in a reader that
# stops early (head, grep -q or -m, awk's exit); read all of it (sed -n 1p, awk's END), or give
# the reader a here-string (<<<"$(command)").
early=$(grep -nE '(^|[^|])\|[[:space:]]*(head([[:space:]]|$)|grep[[:space:]]+-[a-zA-Z]*[qm]|awk[^|]*[[:space:]{;]exit([[:space:]}; ]|$))' "${scripts[@]}" |
  grep -vE '^[^:]+:[0-9]+:[[:space:]]*#' || true)
if [ -n "$early" ]; then
  echo "lint-shell: a pipeline ends in a reader that stops early (SIGPIPE under pipefail, exit 141):" >&2
  echo "$early" >&2
  exit 1
fi
echo "lint-shell: ${#scripts[@]} scripts: ok"
