#!/usr/bin/env bash
# What the event triggers cost DDL: a migration in the shape of an ORM's (150 tables, each with
# a bigserial key, a name, a timestamp and a foreign key to the one before, an index and two
# added columns: 600 statements, one session), timed on a throwaway server with the event
# triggers disabled, with them and snowflake_id.auto_keys off, and with auto_keys on, each on
# this version's SQL objects and on those of an earlier version (same library: only the
# triggers' SQL differs). Each case RUNS times, the median printed. Times, not counts: run it on
# a quiet machine and compare ratios within one run.
#
#   ./scripts/bench-ddl.sh [EARLIER_VERSION] [RUNS]     (defaults: 0.7.0, 5)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

EARLIER=${1:-0.7.0}
RUNS=${2:-5}
CURRENT=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml)
./scripts/setup.sh
install_extension

DIR=$(cluster_temp_dir bench-ddl)
trap 'cluster_stop "$DIR"; rm -rf "$DIR"' EXIT
cluster_init "$DIR"
cluster_start "$DIR"
psql_quiet() { cluster_psql "$DIR" -qtA "$@"; }

MIGRATION="$DIR/migration.sql"
for i in $(seq 0 149); do
  parent=""
  [ "$i" -gt 0 ] && parent=", parent_id bigint REFERENCES app.t$((i - 1)) (id)"
  echo "CREATE TABLE app.t$i (id bigserial PRIMARY KEY, name varchar(100) NOT NULL, created timestamptz NOT NULL$parent);"
  echo "CREATE INDEX ON app.t$i (created);"
  echo "ALTER TABLE app.t$i ADD COLUMN note text;"
  echo "ALTER TABLE app.t$i ADD COLUMN flag boolean NOT NULL DEFAULT false;"
done >"$MIGRATION"

# case VERSION MODE: prints the median time of the migration, in ms.
case_ms() {
  local version=$1 mode=$2 times=() start end
  for _ in $(seq "$RUNS"); do
    psql_quiet -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS bench_ddl" -c "CREATE DATABASE bench_ddl"
    psql_quiet -d bench_ddl -c "CREATE EXTENSION snowflake_id VERSION '$version'" -c "CREATE SCHEMA app" \
      -c "ALTER DATABASE bench_ddl SET snowflake_id.shard = 1"
    if [ "$mode" = "no triggers" ]; then
      psql_quiet -d bench_ddl -c "ALTER EVENT TRIGGER snowflake_auto_keys DISABLE" \
        -c "ALTER EVENT TRIGGER snowflake_check_defaults DISABLE"
    fi
    local schemas="''"
    [ "$mode" = "auto_keys on" ] && schemas=app
    start=$(date +%s%N)
    { echo "SET snowflake_id.auto_keys = $schemas;"; cat "$MIGRATION"; } | psql_quiet -d bench_ddl >/dev/null
    end=$(date +%s%N)
    times+=($(((end - start) / 1000000)))
  done
  printf '%s\n' "${times[@]}" | sort -n | sed -n "$(((RUNS + 1) / 2))p"
}

printf '%-8s %-14s %10s\n' version case "median ms"
for version in "$EARLIER" "$CURRENT"; do
  for mode in "no triggers" "auto_keys off" "auto_keys on"; do
    printf '%-8s %-14s %10s\n' "$version" "$mode" "$(case_ms "$version" "$mode")"
  done
done
