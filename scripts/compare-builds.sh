#!/usr/bin/env bash
# Measures what a change costs on the generator's hot path: builds the library of a given
# commit and of the working tree (release), starts one throwaway server with each, and times
# `snowflake_nextval` over the same query on both, interleaved round by round so machine
# drift hits both alike. Prints medians and the ratio; asserts nothing.
#
#   ./scripts/compare-builds.sh <commit> [rounds] [ids per round]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

BASE=${1:?usage: compare-builds.sh <commit> [rounds] [ids per round]}
ROUNDS=${2:-7}
IDS=${3:-2000000}
WORK=$(cluster_temp_dir compare)
cleanup() {
  cluster_stop "$WORK/base"; cluster_stop "$WORK/head"
  git worktree remove --force "$WORK/src" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT

./scripts/setup.sh
echo "building $BASE and the working tree (release)..."
git worktree add --detach "$WORK/src" "$BASE" >/dev/null 2>&1
(cd "$WORK/src" && CARGO_TARGET_DIR="$WORK/src/target" cargo build --release "${CARGO_FEATURES[@]}" >"$WORK/build.log" 2>&1) ||
  { cat "$WORK/build.log"; exit 1; }
install_extension
mkdir -p "$WORK/lib" && cp "$WORK/src/target/release/libsnowflake_id.so" "$WORK/lib/snowflake_id.so"
chmod -R a+rX "$WORK/lib"

# Each server loads its own build through dynamic_library_path; both get the same SQL
# function, declared by hand (the commits' install scripts may differ).
for side in base head; do
  mkdir -p "$WORK/$side"; [ "$(id -u)" -eq 0 ] && chown postgres: "$WORK/$side"
  # `$libdir` is for PostgreSQL to expand (to its library folder, where the working tree's
  # build is installed), not the shell: the single quotes are meant.
  # shellcheck disable=SC2016
  libpath='$libdir'; [ "$side" = base ] && libpath="$WORK/lib"
  cluster_init "$WORK/$side" "dynamic_library_path = '$libpath'" "synchronous_commit = off"
  cluster_start "$WORK/$side"
  cluster_psql "$WORK/$side" -q -d postgres -c \
    "CREATE FUNCTION snowflake_nextval(integer) RETURNS bigint LANGUAGE c VOLATILE AS 'snowflake_id', 'snowflake_nextval_wrapper'"
done

# Milliseconds for one round on one server.
time_round() {
  cluster_psql "$WORK/$1" -d postgres -qAt -c '\timing on' \
    -c "SELECT count(snowflake_nextval(1)) FROM generate_series(1, $IDS)" | awk '/^Time:/ { print $2 }'
}
for _ in $(seq "$ROUNDS"); do
  echo "base $(time_round base)" >>"$WORK/times"
  echo "head $(time_round head)" >>"$WORK/times"
done

median() { grep "^$1 " "$WORK/times" | awk '{ print $2 }' | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
base_ms=$(median base); head_ms=$(median head)
awk -v b="$base_ms" -v h="$head_ms" -v n="$IDS" -v r="$ROUNDS" -v c="$BASE" 'BEGIN {
  printf "snowflake_nextval, %d IDs per round, median of %d interleaved rounds:\n", n, r
  printf "  %-12s %9.1f ms  %6.2f M IDs/s\n", c, b, n / b / 1000
  printf "  %-12s %9.1f ms  %6.2f M IDs/s\n", "working tree", h, n / h / 1000
  printf "  working tree / %s time ratio: %.3f\n", c, h / b
}'
