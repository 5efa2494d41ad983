#!/usr/bin/env bash
# Builds and installs the extension (release), then runs the pg_regress golden files
# (tests/pg_regress) against a throwaway server with it preloaded. `--accept` copies the new output over the expected files
# instead of failing: review the diff before committing it.
#
# (`cargo pgrx regress` would start its server as the calling user, which initdb refuses
# for root; this runner starts its own, as the unprivileged server user.)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

ACCEPT=${1:-}
install_extension
PG_REGRESS="$("$PG_CONFIG" --pkglibdir)/pgxs/src/test/regress/pg_regress"
DIR=$(mktemp -d /tmp/snowflake_id-regress.XXXXXX)
[ "$(id -u)" -eq 0 ] && chown postgres: "$DIR"
trap 'cluster_stop "$DIR"; rm -rf "$DIR"' EXIT

# The reservation kept 5 s ahead: the largest batch (generate.sql) borrows the whole 2 s lead,
# and with the default 500 ms of headroom a slow fsync on a loaded machine could make it chase
# the worker past max_wait_ms. No expected output shows this setting.
cluster_init "$DIR" "snowflake_id.reserve_ms = 5s"
cluster_start "$DIR"

# pg_partman is packaged by Debian for PostgreSQL 15 only; its file runs there alone.
SCHEDULE=tests/pg_regress/schedule
if [ "$PG_MAJOR" != 15 ]; then
  grep -v '^test: partman$' "$SCHEDULE" >"$DIR/schedule"
  SCHEDULE=$DIR/schedule
  echo "skipped on PostgreSQL $PG_MAJOR: regress file 'partman' (pg_partman is packaged by Debian for PostgreSQL 15 only)"
fi

# Without --use-existing, pg_regress (re)creates the test database itself.
status=0
"$PG_REGRESS" --host="$DIR" --port="$PG_PORT" --user=postgres --bindir="$PG_BIN" \
  --inputdir=tests/pg_regress --outputdir="$DIR/out" --dbname=snowflake_id_regress \
  --schedule="$SCHEDULE" >"$DIR/pg_regress.log" 2>&1 || status=$?
cat "$DIR/pg_regress.log"

if [ "$ACCEPT" = --accept ]; then
  cp "$DIR"/out/results/*.out tests/pg_regress/expected/
  echo "regress: expected output replaced; review it with git diff"
elif [ $status -ne 0 ]; then
  [ -f "$DIR/out/regression.diffs" ] && cat "$DIR/out/regression.diffs"
  exit $status
fi
