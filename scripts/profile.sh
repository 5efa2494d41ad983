#!/usr/bin/env bash
# Counts the CPU instructions one call of each generator, and of snowflake_observe, costs
# inside a backend, with valgrind's callgrind: counts, not seconds, so they repeat on a busy
# machine. Each function runs in a query of N and of 2N rows, each in its own backend; the
# difference divided by N is the cost of one call, free of connection and query set-up. The
# top functions of snowflake_nextval's backend are listed too. snowflake_nextval() uses the
# database's default shard (snowflake_id.shard = 3).
#
#   ./scripts/profile.sh [N]     (default N = 100000; the server runs under valgrind, slowly)
#   PG_MAJOR=18 ./scripts/profile.sh   on PostgreSQL 18, with uuidv7() beside the others
#   PROFILE_LAYOUT=js53 ./scripts/profile.sh   the server in a named layout (snowflake_id.layout)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

N=${1:-100000}
./scripts/setup.sh
install_extension

PROFILE_DIR=$(cluster_temp_dir profile)
stop_profile_server() {
  cluster_stop "$PROFILE_DIR"
  # Processes under callgrind may still be writing their counts after the postmaster is gone.
  rm -rf "$PROFILE_DIR" 2>/dev/null || { sleep 3; rm -rf "$PROFILE_DIR"; }
}
trap stop_profile_server EXIT
mkdir "$PROFILE_DIR/callgrind"
[ "$(id -u)" -eq 0 ] && chown postgres: "$PROFILE_DIR/callgrind"
# Enough work_mem that generate_series never spills: spilling would not grow in proportion.
LAYOUT_SETTING=()
if [ -n "${PROFILE_LAYOUT:-}" ]; then LAYOUT_SETTING=("snowflake_id.layout = '$PROFILE_LAYOUT'"); fi
cluster_init "$PROFILE_DIR" "work_mem = '1GB'" "${LAYOUT_SETTING[@]}"
# Every server process runs under callgrind and writes its counts when it exits; counting
# starts in each process at its start, so only differences between backends mean anything.
as_pg_owner bash -c "valgrind --tool=callgrind --trace-children=yes --quiet \
  --callgrind-out-file='$PROFILE_DIR/callgrind/%p.out' \
  '$PG_BIN/postgres' -D '$PROFILE_DIR/data' >'$PROFILE_DIR/server.log' 2>&1 &"
for _ in $(seq 120); do
  cluster_psql "$PROFILE_DIR" -d postgres -c "SELECT 1" >/dev/null 2>&1 && break
  sleep 1
done
cluster_psql "$PROFILE_DIR" -q -d postgres \
  -c "CREATE EXTENSION snowflake_id" -c "CREATE SEQUENCE a_sequence" \
  -c "ALTER DATABASE postgres SET snowflake_id.shard = 3"

# instructions QUERY: total instructions of a backend that ran QUERY (with N in place of :n) once.
instructions() {
  local pid
  pid=$(cluster_psql "$PROFILE_DIR" -d postgres -tA -v n="$2" -c "${1//:n/$2}" -c "SELECT pg_backend_pid()" | tail -1)
  # The backend writes its file when it exits, just after the connection closes.
  for _ in $(seq 60); do
    [ -s "$PROFILE_DIR/callgrind/$pid.out" ] && grep -q '^totals:' "$PROFILE_DIR/callgrind/$pid.out" && break
    sleep 1
  done
  awk '/^totals:/ { print $2 }' "$PROFILE_DIR/callgrind/$pid.out"
  echo "$pid" >"$PROFILE_DIR/last_pid"
}

# per_row QUERY: instructions per row of QUERY, from runs with N and 2N rows.
per_row() {
  local once twice
  once=$(instructions "$1" "$N")
  twice=$(instructions "$1" $((2 * N)))
  echo $(((twice - once) / N))
}

# snowflake_observe of an ID of another shard issued at the start: a causality token a moment
# old, the case of every request (the reservation covers it, nothing waits).
OBSERVED=$(cluster_psql "$PROFILE_DIR" -d postgres -tA -c "SELECT snowflake_compose(clock_timestamp(), 9, 0)")
FUNCTIONS=("clock_timestamp()" "snowflake_nextval(1)" "snowflake_nextval()" "nextval('a_sequence')" "gen_random_uuid()"
  "snowflake_observe($OBSERVED)")
# PostgreSQL 18's built-in time-ordered UUID.
[ "$(cluster_psql "$PROFILE_DIR" -d postgres -tA -c "SELECT count(*) > 0 FROM pg_proc WHERE proname = 'uuidv7'")" = t ] &&
  FUNCTIONS+=("uuidv7()")
printf '%-72s %s\n' "query" "instructions per row"
for function in "${FUNCTIONS[@]}"; do
  query="SELECT count($function) FROM generate_series(1, :n)"
  printf '%-72s %s\n' "$query" "$(per_row "$query")"
done
query="SELECT count(*) FROM snowflake_nextvals(2, :n)"
# One call takes at most a lead bound's worth of a shard's IDs (128,064 under js53).
max_batch=$(cluster_psql "$PROFILE_DIR" -d postgres -tA -c \
  "SELECT ids_per_ms * ((SELECT setting::int FROM pg_settings WHERE name = 'snowflake_id.max_lead_ms') + 1) FROM snowflake_layout()")
if [ $((2 * N)) -le "$max_batch" ]; then
  printf '%-72s %s\n' "$query" "$(per_row "$query")"
else
  printf '%-72s %s\n' "$query" "skipped: 2N = $((2 * N)) is above one call's $max_batch (a smaller N)"
fi
# The functions that cost the most in a snowflake_nextval backend.
instructions "SELECT count(snowflake_nextval(1)) FROM generate_series(1, :n)" $((2 * N)) >/dev/null
echo
echo "most expensive functions in a backend running snowflake_nextval(1) $((2 * N)) times:"
callgrind_annotate --inclusive=no "$PROFILE_DIR/callgrind/$(cat "$PROFILE_DIR/last_pid").out" 2>/dev/null |
  sed -n '/^Ir/,$p' | sed -n 1,25p   # not head: it would close the pipe early, and pipefail fail the script
