#!/usr/bin/env bash
# How many IDs a second one shard and one server reach under a layout, where the sequence, not
# the CPU, may be the limit (js53: 64 IDs a millisecond per shard). A throwaway server in the
# layout; pgbench for SECONDS each (default 10), two figures:
#
#   one shard       1 client calling snowflake_nextval(5) 10,000 times per statement, for
#                   SECONDS: the shard's sustained rate once its lead bound's burst is spent
#   one server      as many clients as cores, each on a shard of its own
#
#   ./scripts/layout-rate.sh js53 [SECONDS]      (a named layout, or "default")
#   PG_MAJOR=18 ./scripts/layout-rate.sh js53
#
# Speed is measured here, never asserted: the figures go into docs/js53.md with the run's date.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

LAYOUT=${1:?usage: $0 LAYOUT|default [SECONDS]}
SECONDS_EACH=${2:-10}
CALLS=10000
CLIENTS=$(nproc)
./scripts/setup.sh
install_extension

DIR=$(cluster_temp_dir layout-rate)
trap 'cluster_stop "$DIR"; rm -rf "$DIR"' EXIT
settings=()
[ "$LAYOUT" = default ] || settings=("snowflake_id.layout = '$LAYOUT'")
cluster_init "$DIR" "${settings[@]}"
cluster_start "$DIR"
cluster_psql "$DIR" -q -d postgres -c "CREATE EXTENSION snowflake_id"
cluster_psql "$DIR" -d postgres -tA \
  -c "SELECT format('layout %s: %s bits of time, %s of shard, %s of sequence (%s IDs per ms and shard)', '$LAYOUT', time_bits, shard_bits, seq_bits, ids_per_ms) FROM snowflake_layout()"

SCRIPTS=$DIR/scripts
mkdir -p "$SCRIPTS"
echo "SELECT count(snowflake_nextval(5)) FROM generate_series(1, $CALLS);" >"$SCRIPTS/one_shard.sql"
# Each client its own shard: pgbench's client_id (0, 1, ...) is below every layout's shard count.
echo "SELECT count(snowflake_nextval(:client_id)) FROM generate_series(1, $CALLS);" >"$SCRIPTS/own_shard.sql"

# ids_per_second SCRIPT CLIENTS: IDs a second over SECONDS_EACH (transactions a second x CALLS).
ids_per_second() {
  local out tps
  out=$("$PG_BIN/pgbench" -n -h "$DIR" -p "$PG_PORT" -U postgres -c "$2" -j "$2" -T "$SECONDS_EACH" \
    -f "$SCRIPTS/$1.sql" postgres 2>&1) || { echo "$out" >&2; return 1; }
  tps=$(awk '/^tps = / { print $3 }' <<<"$out")
  awk -v tps="$tps" -v calls="$CALLS" 'BEGIN { printf "%.0f", tps * calls }'
}
echo "one shard, 1 client, ${SECONDS_EACH} s: $(ids_per_second one_shard 1) IDs/s"
echo "one server, $CLIENTS clients on shards of their own, ${SECONDS_EACH} s: $(ids_per_second own_shard "$CLIENTS") IDs/s"
