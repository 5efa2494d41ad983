#!/usr/bin/env bash
# What the event triggers cost DDL: a migration in the shape of an ORM's (150 tables, each with
# a bigserial key, a name, a timestamp and a foreign key to the one before, an index and two
# added columns: 600 statements, one session), timed on a throwaway server with the event
# triggers disabled, with them and snowflake_id.auto_keys off, and with auto_keys on, each on
# this version's SQL objects and on those of an earlier version (same library: only the
# triggers' SQL differs). Each case RUNS times, the cases in turn, the median printed with its
# ratio to the same version without triggers (the release bound: 1.3). Times, not counts: run
# it on a quiet machine and compare ratios within one run.
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

# one_run VERSION MODE: the migration's time on a new database, in ms.
one_run() {
  local version=$1 mode=$2 schemas="''" start end
  psql_quiet -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS bench_ddl" -c "CREATE DATABASE bench_ddl"
  psql_quiet -d bench_ddl -c "CREATE EXTENSION snowflake_id VERSION '$version'" -c "CREATE SCHEMA app" \
    -c "ALTER DATABASE bench_ddl SET snowflake_id.shard = 1"
  if [ "$mode" = "no triggers" ]; then
    psql_quiet -d bench_ddl -c "ALTER EVENT TRIGGER snowflake_auto_keys DISABLE" \
      -c "ALTER EVENT TRIGGER snowflake_check_defaults DISABLE"
  fi
  [ "$mode" = "auto_keys on" ] && schemas=app
  start=$(date +%s%N)
  { echo "SET snowflake_id.auto_keys = $schemas;"; cat "$MIGRATION"; } | psql_quiet -d bench_ddl >/dev/null
  end=$(date +%s%N)
  echo $(((end - start) / 1000000))
}

# The cases taken in turn, one run of each per round, so that a machine whose load changes
# during the benchmark slows every case alike and the ratios within a version hold.
MODES=("no triggers" "auto_keys off" "auto_keys on")
declare -A TIMES=()
for _ in $(seq "$RUNS"); do
  for version in "$EARLIER" "$CURRENT"; do
    for mode in "${MODES[@]}"; do
      TIMES["$version/$mode"]+="$(one_run "$version" "$mode") "
    done
  done
done
# median "TIME TIME ...": the middle one.
median() { tr ' ' '\n' <<<"$1" | sed '/^$/d' | sort -n | sed -n "$(((RUNS + 1) / 2))p"; }

printf '%-8s %-14s %10s %16s\n' version case "median ms" "/ no triggers"
for version in "$EARLIER" "$CURRENT"; do
  base=$(median "${TIMES["$version/no triggers"]}")
  for mode in "${MODES[@]}"; do
    ms=$(median "${TIMES["$version/$mode"]}")
    printf '%-8s %-14s %10s %16s\n' "$version" "$mode" "$ms" "$(awk -v a="$ms" -v b="$base" 'BEGIN { printf "%.2f", a / b }')"
  done
done
