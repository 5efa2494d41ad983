#!/usr/bin/env bash
# Builds and installs the extension (release), then runs the pg_regress golden files
# (tests/pg_regress) against a throwaway server with it preloaded.
#
#   ./scripts/regress.sh                   every test of tests/pg_regress/schedule
#   ./scripts/regress.sh generate errors   the tests named (after `setup`, which creates the extension)
#   ./scripts/regress.sh --accept [NAME...]
#                                          copies the new output over the expected files instead
#                                          of failing: review the diff before committing it
#
# Every file of tests/pg_regress/sql must be named in the schedule, and every test the schedule
# names must have its file: pg_regress runs only what the schedule names, so a file left out of
# it would silently never run.
#
# (`cargo pgrx regress` would start its server as the calling user, which initdb refuses
# for root; this runner starts its own, as the unprivileged server user.)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

ACCEPT=false
if [ "${1:-}" = --accept ]; then
  ACCEPT=true
  shift
fi
NAMED=("$@")

# in_list WORD [LIST...]: whether WORD is one of LIST.
in_list() {
  local word=$1 item
  shift
  for item in "$@"; do [ "$item" != "$word" ] || return 0; done
  return 1
}

# The schedule against the files, before anything is built.
INPUT=tests/pg_regress
mapfile -t SCHEDULED < <(awk '$1 == "test:" { for (i = 2; i <= NF; i++) print $i }' "$INPUT/schedule")
problems=()
for file in "$INPUT"/sql/*.sql; do
  name=$(basename "$file" .sql)
  in_list "$name" "${SCHEDULED[@]}" ||
    problems+=("$file is not in $INPUT/schedule, so it never runs: add the line 'test: $name' to the schedule, or remove the file")
done
for name in "${SCHEDULED[@]}"; do
  if [ ! -f "$INPUT/sql/$name.sql" ]; then
    problems+=("$INPUT/schedule names the test '$name', which has no file $INPUT/sql/$name.sql: add the file, or remove the test from the schedule")
  elif [ ! -f "$INPUT/expected/$name.out" ] && ! $ACCEPT; then
    problems+=("$INPUT/sql/$name.sql has no expected output $INPUT/expected/$name.out: run ./scripts/regress.sh --accept $name and review the file it writes")
  fi
done
for name in "${NAMED[@]}"; do
  in_list "$name" "${SCHEDULED[@]}" || problems+=("no test '$name' in $INPUT/schedule (its tests: ${SCHEDULED[*]})")
done
if [ ${#problems[@]} -gt 0 ]; then
  printf 'regress: %s\n' "${problems[@]}" >&2
  exit 1
fi

install_extension
PG_REGRESS="$("$PG_CONFIG" --pkglibdir)/pgxs/src/test/regress/pg_regress"
DIR=$(cluster_temp_dir regress)
trap 'cluster_stop "$DIR"; rm -rf "$DIR"' EXIT

# The reservation kept 2 s ahead (at most max_lead_ms + max_wait_ms): the largest batch
# (generate.sql) borrows the whole 2 s lead, and with the default 500 ms of headroom a slow
# fsync on a loaded machine could make it chase the worker. No expected output shows this setting.
cluster_init "$DIR" "snowflake_id.reserve_ms = 2s"
cluster_start "$DIR"

# The schedule run: the whole one, or setup and the tests named, each line of the schedule
# keeping its place. pg_partman is packaged by Debian for PostgreSQL 15 only; its file runs there alone.
while read -r kind names; do
  [ "$kind" = test: ] || continue
  kept=()
  for name in $names; do
    if [ ${#NAMED[@]} -gt 0 ] && [ "$name" != setup ] && ! in_list "$name" "${NAMED[@]}"; then
      continue
    elif [ "$name" = partman ] && [ "$PG_MAJOR" != 15 ]; then
      echo "skipped on PostgreSQL $PG_MAJOR: regress file 'partman' (pg_partman is packaged by Debian for PostgreSQL 15 only)"
    else
      kept+=("$name")
    fi
  done
  [ ${#kept[@]} -eq 0 ] || echo "test: ${kept[*]}" >>"$DIR/schedule"
done <"$INPUT/schedule"

# Without --use-existing, pg_regress (re)creates the test database itself.
status=0
"$PG_REGRESS" --host="$DIR" --port="$PG_PORT" --user=postgres --bindir="$PG_BIN" \
  --inputdir="$INPUT" --outputdir="$DIR/out" --dbname=snowflake_id_regress \
  --schedule="$DIR/schedule" >"$DIR/pg_regress.log" 2>&1 || status=$?
cat "$DIR/pg_regress.log"

if $ACCEPT; then
  cp "$DIR"/out/results/*.out "$INPUT/expected/"
  echo "regress: expected output replaced; review it with git diff"
elif [ $status -ne 0 ]; then
  [ -f "$DIR/out/regression.diffs" ] && cat "$DIR/out/regression.diffs"
  exit $status
fi
