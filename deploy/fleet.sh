#!/usr/bin/env bash
# A fleet on one machine: shard servers, each holding several logical shards (one schema per
# logical shard, IDs from snowflake_nextval(<that shard>)), behind a router running PL/Proxy.
# Every server is a separate PostgreSQL reachable only through a Unix socket in its own
# folder under the fleet's folder (.run/fleet, or $SNOWFLAKE_FLEET_DIR).
#
#   ./deploy/fleet.sh up [N]               set up, start a router and N shard servers (default 3)
#                                          holding 16 logical shards, load the example, show it
#   ./deploy/fleet.sh status               the shard map, checked against what each server holds
#   ./deploy/fleet.sh add-server NAME      start another shard server and move logical shards to
#                                          it until they are evenly spread
#   ./deploy/fleet.sh move-shard SHARD NAME  move one logical shard, with its rows, to server NAME
#   ./deploy/fleet.sh down                 stop every server of the fleet and remove its files
#
# SNOWFLAKE_FLEET_SKIP_INSTALL=1 skips the setup and build (when the extension is installed).
# SNOWFLAKE_FLEET_STANDBY_WAIT_S (default 300): how long a move waits for the target's standbys
# to replay the copy before it drops the source's.
set -Eeuo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

# The fleet's folder (cluster_dir falls back to /tmp when the path is too long for sockets).
fleet_dir() { cluster_dir "${SNOWFLAKE_FLEET_DIR:-$PWD/.run/fleet}" fleet; }
FLEET_DIR=$(fleet_dir)
SQL_DIR=$PWD/deploy/sql

die() { echo "fleet: $*" >&2; exit 1; }

# No text goes into SQL by the shell (scripts/lint-sql-text.sh): numbers and names go to psql
# as variables (-v), which psql quotes (:'name' a literal), in SQL read from a quoted heredoc.
#
# router_sql [psql args...]: runs on the router's database, unaligned output without headers.
router_sql() { cluster_psql "$FLEET_DIR/router" -d fleet -qtA "$@"; }
# server_sql NAME [psql args...]: the same on a shard server.
server_sql() { local name=$1; shift; cluster_psql "$FLEET_DIR/$name" -d fleet -qtA "$@"; }
# router_show [psql args...]: on the router, as tables for people to read.
router_show() { cluster_psql "$FLEET_DIR/router" -d fleet -q -P footer=off "$@"; }

connstr_of() { echo "host=$FLEET_DIR/$1 port=$PG_PORT dbname=fleet"; }

valid_name() { [[ $1 =~ ^[a-z][a-z0-9_]{0,30}$ ]] || die "server names are lowercase letters, digits and _: '$1'"; }

# start_server NAME: a new PostgreSQL with snowflake_id preloaded, and its database `fleet`.
# It starts fenced off every shard (snowflake_id.shards = 'none'): `fence` opens the shards it
# holds, so that no server ever issues IDs of a shard another one holds.
start_server() {
  local dir=$FLEET_DIR/$1
  [ -e "$dir/data" ] && die "server $1 already exists in $dir"
  mkdir -p "$dir"
  [ "$(id -u)" -eq 0 ] && chown postgres: "$dir"
  cluster_init "$dir" "cluster_name = '$1'" "snowflake_id.shards = 'none'"
  cluster_start "$dir"
  cluster_psql "$dir" -d postgres -q -c "CREATE DATABASE fleet"
}

# new_shard_server NAME: a started server with the shard functions, registered on the router.
new_shard_server() {
  start_server "$1"
  server_sql "$1" -f "$SQL_DIR/shard.sql"
  router_sql -v name="$1" -v conninfo="$(connstr_of "$1")" >/dev/null <<'SQL'
SELECT fleet.add_server(:'name', :'conninfo')
SQL
}

# fence_of NAME [SHARD]: the shard fence NAME should have: the logical shards it holds
# active, and SHARD (one it is about to adopt); 'none' for none.
fence_of() {
  server_sql "$1" -v shard="${2:-}" <<'SQL'
SELECT coalesce(string_agg(shard::text, ',' ORDER BY shard), 'none')
  FROM (SELECT shard FROM fleet.owned_shards WHERE state = 'active' UNION SELECT nullif(:'shard', '')::int) s
  WHERE shard IS NOT NULL
SQL
}

# fence NAME [SHARD]: sets NAME's snowflake_id.shards to fence_of, and waits until new
# sessions have it. (A session that is running a statement applies it at its next one; the
# fleet's write functions refuse a shard that is not active there anyway.)
fence() {
  local shards i
  shards=$(fence_of "$@")
  server_sql "$1" -v shards="$shards" <<<"ALTER SYSTEM SET snowflake_id.shards = :'shards'"
  server_sql "$1" -c "SELECT pg_reload_conf()" >/dev/null
  for ((i = 0; i < 200; i++)); do
    [ "$(server_sql "$1" -c "SHOW snowflake_id.shards")" = "$shards" ] && return 0
    sleep 0.05
  done
  die "server $1 did not apply snowflake_id.shards = '$shards' after a reload"
}

# fenced_off NAME SHARD: waits until NAME's reservation worker has applied its new fence, so
# that no call there can issue SHARD any more (a statement running since before the reload
# included: the generator checks the fence the worker publishes).
fenced_off() {
  local i
  for ((i = 0; i < 200; i++)); do
    [ "$(server_sql "$1" -v shard="$2" <<<"SELECT snowflake_fence_allows(:'shard'::int)")" = f ] && return 0
    sleep 0.05
  done
  die "the reservation worker of server $1 did not apply the fence without logical shard $2 (snowflake_status(), its log)"
}

# standbys_replayed NAME: waits until every standby streaming from NAME has replayed NAME's WAL
# as it is now, and every physical replication slot of NAME has been flushed that far (none: at
# once); fails after SNOWFLAKE_FLEET_STANDBY_WAIT_S seconds. The slots are for a standby cut off
# or restarting at that moment, which pg_stat_replication does not list but which may be
# promoted later (finding F8 of docs/reliability.md): give each standby of a fleet server a slot
# (docs/several-servers.md).
standbys_replayed() {
  local lsn deadline behind
  lsn=$(server_sql "$1" -c "SELECT pg_current_wal_lsn()")
  deadline=$((SECONDS + ${SNOWFLAKE_FLEET_STANDBY_WAIT_S:-300}))
  while :; do
    behind=$(server_sql "$1" -v lsn="$lsn" <<'SQL'
SELECT string_agg(who, ', ') FROM (
  SELECT application_name || ' at ' || coalesce(replay_lsn::text, 'nothing') AS who
    FROM pg_stat_replication WHERE replay_lsn IS NULL OR replay_lsn < :'lsn'
  UNION ALL
  SELECT 'slot ' || slot_name || ' at ' || coalesce(restart_lsn::text, 'nothing')
    FROM pg_replication_slots
   WHERE slot_type = 'physical' AND (restart_lsn IS NULL OR restart_lsn < :'lsn')
) AS standbys
SQL
    )
    [ -z "$behind" ] && return 0
    [ "$SECONDS" -lt "$deadline" ] || { echo "$behind"; return 1; }
    sleep 0.2
  done
}

stop_all() {
  clusters_remove "$FLEET_DIR"/*/
  rmdir "$FLEET_DIR" 2>/dev/null || true
}

# Every logical shard must be held, active, by exactly the server the map names.
check_fleet() {
  local bad name
  bad=$(router_sql -c "SELECT string_agg(shard::text, ', ') FROM fleet.status() WHERE NOT ok")
  [ -z "$bad" ] || { router_show -c "SELECT * FROM fleet.status()"; die "logical shards not held as mapped: $bad"; }
  for name in $(router_sql -c "SELECT name FROM fleet.servers ORDER BY name"); do
    # A name read from a table names a folder here: only a valid one.
    valid_name "$name"
    [ "$(server_sql "$name" -c "SHOW snowflake_id.shards")" = "$(fence_of "$name")" ] ||
      die "server $name issues other shards than it holds: snowflake_id.shards = '$(server_sql "$name" -c "SHOW snowflake_id.shards")', holding '$(fence_of "$name")'"
  done
}

up() {
  local servers=${1:-3} count shard name i n share
  [[ $servers =~ ^[1-9][0-9]*$ ]] || die "the number of shard servers is a positive integer: '$servers'"
  if [ "${SNOWFLAKE_FLEET_SKIP_INSTALL:-}" != 1 ]; then
    ./scripts/setup.sh
    echo "building and installing snowflake_id (release)..."
    install_extension
  fi
  stop_all
  FLEET_DIR=$(fleet_dir)
  start_server router
  router_sql -f "$SQL_DIR/router.sql"
  count=$(router_sql -c "SELECT fleet.shard_count()")
  [ "$servers" -le "$count" ] || die "$count logical shards cannot spread over $servers servers"
  # Consecutive logical shards per server: 16 over 3 gives 0-5, 6-10, 11-15.
  shard=0
  for ((i = 1; i <= servers; i++)); do
    name=node$i
    new_shard_server "$name"
    share=$(( count / servers + (i <= count % servers ? 1 : 0) ))
    for ((n = 0; n < share; n++, shard++)); do
      server_sql "$name" -v shard="$shard" <<<"SELECT fleet.create_shard(:'shard'::int)" >/dev/null
      router_sql -v shard="$shard" -v name="$name" <<<"SELECT fleet.assign_shard(:'shard'::int, :'name')" >/dev/null
    done
    fence "$name"
  done
  check_fleet
  echo "fleet up: router and $servers shard servers holding $count logical shards, in $FLEET_DIR"
  if [ "${SNOWFLAKE_FLEET_EXAMPLE:-1}" = 1 ]; then
    router_show -f "$SQL_DIR/example.sql"
  fi
  cat <<MSG
Connect to the router with:
  $PG_BIN/psql -h $FLEET_DIR/router -p $PG_PORT -U postgres fleet
Add a server:   ./deploy/fleet.sh add-server node$((servers + 1))
Stop and remove the fleet:   ./deploy/fleet.sh down
MSG
}

# The procedure of moving one logical shard; each step is safe to stop after (see
# docs/several-servers.md): the source refuses writes before the copy, and the target
# generates only once it holds every copied row and has moved its generator above every ID
# the source handed out (stored or not: the source's durable reservation, read once its
# fence is in force). The source's copy is dropped only once the target's standbys hold the
# copy too: a failover of the target must not lose the only other one.
move_shard() {
  local shard=$1 target=$2 source schema theirs ours reserved behind
  [[ $shard =~ ^[0-9]+$ ]] || die "a logical shard is a number: '$shard'"
  valid_name "$target"
  source=$(router_sql -v shard="$shard" <<<"SELECT server FROM fleet.shard_map WHERE shard = :'shard'::int")
  [ -n "$source" ] || die "logical shard $shard is not in the shard map"
  # A name read from a table names a folder here: only a valid one.
  valid_name "$source"
  [ "$source" != "$target" ] || die "logical shard $shard is already on $target"
  [ -n "$(router_sql -v name="$target" <<<"SELECT 1 FROM fleet.servers WHERE name = :'name'")" ] ||
    die "no server $target (add it with: ./deploy/fleet.sh add-server $target)"
  schema=$(server_sql "$source" -v shard="$shard" <<<"SELECT fleet.schema_of(:'shard'::int)")

  server_sql "$target" -v shard="$shard" <<<"SELECT fleet.expect_absent(:'shard'::int)" >/dev/null
  # From here until the router points at the target, writes to the shard fail (SQLSTATE
  # 55006) and can be retried; reads keep being served by the source.
  server_sql "$source" -v shard="$shard" <<<"SELECT fleet.freeze_shard(:'shard'::int)" >/dev/null
  local cancel old_fence
  old_fence=$(server_sql "$source" -c "SHOW snowflake_id.shards")
  cancel="logical shard $shard stays frozen (no writes) on $source; to cancel the move, drop schema $schema on $target if present, then on $source: SELECT fleet.thaw_shard($shard), and set snowflake_id.shards back to $old_fence (ALTER SYSTEM, then SELECT pg_reload_conf())"
  trap 'echo "fleet: moving logical shard $shard to $target failed: $cancel" >&2' ERR
  # The source stops issuing the shard before the target may start.
  fence "$source"
  fenced_off "$source" "$shard"
  "$PG_BIN/pg_dump" -h "$FLEET_DIR/$source" -p "$PG_PORT" -U postgres --schema="$schema" fleet |
    server_sql "$target" --single-transaction >/dev/null
  theirs=$(server_sql "$source" -v shard="$shard" <<<"SELECT fleet.shard_fingerprint(:'shard'::int)")
  ours=$(server_sql "$target" -v shard="$shard" <<<"SELECT fleet.shard_fingerprint(:'shard'::int)")
  [ "$theirs" = "$ours" ] || die "the copy differs: $source has $theirs, $target has $ours; $cancel"
  # Every ID the source handed out lies below its reservation, also those never stored (a
  # bare snowflake_nextval, a rolled-back insert) and those of a server it was promoted from.
  reserved=$(server_sql "$source" -v shard="$shard" <<<"SELECT snowflake_compose(reserved_until, :'shard'::int, 0) FROM snowflake_status()")
  fence "$target" "$shard"
  # The reservation may lie up to reserve_ms past the lead bound of the target's clock: then
  # snowflake_advance refuses (55000) until the clock has come that close, a moment later.
  local i
  for ((i = 0; ; i++)); do
    server_sql "$target" -v shard="$shard" -v reserved="$reserved" <<<"SELECT fleet.adopt_shard(:'shard'::int, :'reserved'::bigint)" \
      >/dev/null 2>"$FLEET_DIR/adopt.err" && break
    if [ "$i" -ge 100 ] || ! grep -q "ahead of the wall clock" "$FLEET_DIR/adopt.err"; then
      cat "$FLEET_DIR/adopt.err" >&2
      false
    fi
    sleep 0.1
  done
  router_sql -v shard="$shard" -v name="$target" <<<"SELECT fleet.assign_shard(:'shard'::int, :'name')" >/dev/null
  trap - ERR
  if ! behind=$(standbys_replayed "$target"); then
    die "moved logical shard $shard to $target, but its standbys have not replayed the copy ($behind): $source keeps its copy (frozen, fenced off); once they have, drop it there: SELECT fleet.drop_shard($shard)"
  fi
  server_sql "$source" -v shard="$shard" <<<"SELECT fleet.drop_shard(:'shard'::int)" >/dev/null
  echo "moved logical shard $shard from $source to $target ($ours)"
}

add_server() {
  local name=$1 shard
  valid_name "$name"
  new_shard_server "$name"
  while shard=$(router_sql -v name="$name" <<<"SELECT fleet.next_shard_for(:'name')") && [ -n "$shard" ]; do
    move_shard "$shard" "$name"
  done
  check_fleet
  status
}

status() {
  router_show -c "SELECT * FROM fleet.status()"
  router_show -c \
    "SELECT server, count(*) AS logical_shards, string_agg(shard::text, ' ' ORDER BY shard) AS shards
     FROM fleet.shard_map GROUP BY server ORDER BY server"
  check_fleet
}

case "${1:-}" in
  up) up "${2:-3}" ;;
  down) stop_all; echo "fleet stopped and removed" ;;
  status) status ;;
  add-server) [ $# -eq 2 ] || die "usage: $0 add-server NAME"; add_server "$2" ;;
  move-shard) [ $# -eq 3 ] || die "usage: $0 move-shard SHARD NAME"; move_shard "$2" "$3"; check_fleet ;;
  *) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
