#!/usr/bin/env bash
# Gives this clone an annotated tag `v<version>` for every release that sql/release-commits
# names, at the commit it names, so that `git tag` lists the releases and `git show v0.8.0`
# shows one. Tags are not carried by every way a clone is made (a mirror of main, a fetch
# without --tags), so the file is the source of truth and the tags are made from it: each tag's
# message is the release's CHANGELOG heading.
#
# It fails, saying which, when the file and the history disagree: a commit that is not in this
# clone's history of HEAD, a tag v<version> already at another commit, or a release the
# CHANGELOG dates (other than the version being worked on, Cargo.toml's) with no line in the
# file. The test command runs it in its first layer.
#
#   ./scripts/tag-releases.sh           check, and make the tags that are missing
#   ./scripts/tag-releases.sh --check   check only; say which tags are missing
set -euo pipefail
cd "$(dirname "$0")/.."

make_tags=1
case "${1:-}" in
  "") ;;
  --check) make_tags=0 ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

fail() { echo "tag-releases: $*" >&2; exit 1; }

if [ "$(git rev-parse --is-shallow-repository)" = true ]; then
  echo "tag-releases: a shallow clone holds no release commits; skipped (git fetch --unshallow)"
  exit 0
fi

current=$(awk -F'"' '/^version = /{ print $2; exit }' Cargo.toml)
[ -n "$current" ] || fail "no version in Cargo.toml"

declare -A listed=()
made=0 missing=0
while read -r version commit; do
  case "$version" in ''|'#'*) continue ;; esac
  listed[$version]=1
  git cat-file -e "$commit^{commit}" 2>/dev/null \
    || fail "release $version: commit $commit (sql/release-commits) is not in this clone"
  git merge-base --is-ancestor "$commit" HEAD \
    || fail "release $version: commit $commit (sql/release-commits) is not in the history of HEAD"
  tag="v$version"
  if at=$(git rev-parse -q --verify "refs/tags/$tag^{commit}"); then
    [ "$at" = "$commit" ] \
      || fail "tag $tag is at $at, but sql/release-commits names $commit; delete the tag (git tag -d $tag) and run this again"
    continue
  fi
  heading=$(grep -m 1 "^## $version (" CHANGELOG.md | sed 's/^## //') \
    || fail "release $version: CHANGELOG.md has no heading '## $version (<date>): ...'"
  if [ "$make_tags" = 1 ]; then
    # A clone with no identity of its own (a CI machine) tags as the project.
    git -c user.name="$(git config user.name || echo 'snowflake_id maintainers')" \
        -c user.email="$(git config user.email || echo 'maintainers@snowflake-id.invalid')" \
        tag -a "$tag" "$commit" -m "snowflake_id $heading"
    made=$((made + 1))
  else
    echo "tag-releases: $tag missing (at $commit)"
    missing=$((missing + 1))
  fi
done < sql/release-commits

# Every release the CHANGELOG dates has its line, but the one being worked on: its commit is
# written when the next version begins (sql/README.md).
while read -r version; do
  [ "$version" = "$current" ] || [ -n "${listed[$version]:-}" ] \
    || fail "CHANGELOG.md dates release $version, but sql/release-commits has no line for it"
done < <(sed -n 's/^## \([0-9][0-9.]*\) (.*/\1/p' CHANGELOG.md)

echo "tag-releases: ${#listed[@]} releases checked; $made tags made, $missing missing"
[ "$missing" = 0 ]
