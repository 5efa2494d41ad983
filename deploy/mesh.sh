#!/usr/bin/env bash
# Active-active on one machine: PostgreSQL servers ("nodes") that all take writes to the same
# tables and replicate them to each other with logical replication, in a full mesh: each node
# publishes its changes, and subscribes to every other node with origin = none (PostgreSQL 16
# or later), so that a row goes from the node that wrote it to every other node, once. Every
# node issues the keys of its own snowflake shard (node<i> issues shard i, and its fence
# allows no other), so keys never conflict. Each node is a separate PostgreSQL reachable
# through a Unix socket in its own folder under the mesh's folder (.run/mesh, or
# $SNOWFLAKE_MESH_DIR).
#
#   ./deploy/mesh.sh up [N]      set up, start N nodes (default 3), create the example schema
#                                on each, build the mesh, write example rows on every node
#   ./deploy/mesh.sh status      per node: its shard and fence, its subscriptions' state, lag
#                                and conflict counters; fails if the mesh is not healthy
#   ./deploy/mesh.sh ddl FILE    run FILE (DDL) on every node, then refresh every subscription
#                                (logical replication does not carry DDL)
#   ./deploy/mesh.sh start       start the nodes that are not running (after a crash, a reboot)
#   ./deploy/mesh.sh down        stop every node of the mesh and remove its files
#
# SNOWFLAKE_MESH_PORT=P          node<i> runs on port P + i - 1 (default 5441)
# SNOWFLAKE_MESH_LISTEN=ADDR     nodes also listen on TCP at ADDR (127.0.0.1), and subscribe
#                                to each other there; by default on Unix sockets only
# SNOWFLAKE_MESH_EXAMPLE=0       no example rows
# SNOWFLAKE_MESH_SKIP_INSTALL=1  skips the setup and build (when the extension is installed)
set -Eeuo pipefail
cd "$(dirname "$0")/.."
# The mesh needs PostgreSQL 16 or later: PostgreSQL 18 unless PG_MAJOR says otherwise.
PG_MAJOR=${PG_MAJOR:-18}
source scripts/lib.sh

# The mesh's folder (cluster_dir falls back to /tmp when the path is too long for sockets).
mesh_dir() { cluster_dir "${SNOWFLAKE_MESH_DIR:-$PWD/.run/mesh}" mesh; }
MESH_DIR=$(mesh_dir)
FIRST_PORT=${SNOWFLAKE_MESH_PORT:-5441}
LISTEN=${SNOWFLAKE_MESH_LISTEN:-}
SQL_DIR=$PWD/deploy/sql
# The publications of every node: app replicates the snowflake-keyed tables, control the
# bigserial control table, on subscriptions of its own.
PUBLICATIONS=(app control)

die() { echo "mesh: $*" >&2; exit 1; }

server_major() { "$PG_BIN/postgres" --version | sed -E 's/^[^0-9]*([0-9]+).*$/\1/'; }

# The nodes of the mesh, in order (node1, node2, ..., node10): folders named node<number>
# only, so that every name this script puts into a path or a connection string is its own.
nodes() {
  local dir
  for dir in "$MESH_DIR"/node*/; do
    dir=${dir%/}
    [[ ${dir##*/} =~ ^node[0-9]+$ ]] && [ -f "$dir/data/PG_VERSION" ] && echo "${dir##*/}"
  done | sort -V
}

# node<i> issues shard i.
shard_of() { echo "${1#node}"; }

# node_port NAME: the port in the node's postgresql.conf (the last line setting it wins).
node_port() {
  as_pg_owner sed -n 's/^port = \([0-9][0-9]*\)$/\1/p' "$MESH_DIR/$1/data/postgresql.conf" | tail -n 1
}

# node_sql NAME [psql args...]: runs on the node's database, unaligned output without headers.
# The kit's own statements run as the superuser with search_path = pg_catalog, pg_temp: on the
# default path ("$user", public) a role allowed to create schemas in the database could create
# one named postgres, and a function there that matches an argument's type better than
# pg_catalog's (a format(text, name)) would run with the superuser's rights.
KIT_PATH="-c search_path=pg_catalog,pg_temp"
node_sql() {
  local name=$1; shift
  PGOPTIONS="${PGOPTIONS:-} $KIT_PATH" PG_PORT=$(node_port "$name") cluster_psql "$MESH_DIR/$name" -d mesh -qtA "$@"
}
# node_show NAME [psql args...]: the same, as tables for people to read.
node_show() {
  local name=$1; shift
  PGOPTIONS="${PGOPTIONS:-} $KIT_PATH" PG_PORT=$(node_port "$name") cluster_psql "$MESH_DIR/$name" -d mesh -q -P footer=off "$@"
}
# node_run NAME [psql args...]: as node_sql, on the database's own search_path: for the schema
# (deploy/sql/mesh.sql) and the operator's DDL, which name the extension's functions unqualified.
node_run() {
  local name=$1; shift
  PG_PORT=$(node_port "$name") cluster_psql "$MESH_DIR/$name" -d mesh -qtA "$@"
}

running() { cluster_running "$MESH_DIR/$1"; }

# conninfo_value TEXT: TEXT as a value of a libpq connection string (quoted, ' and \ escaped).
conninfo_value() {
  local value=${1//\\/\\\\}
  value=${value//\'/\\\'}
  printf "'%s'" "$value"
}

connstr_of() {
  echo "host=$(conninfo_value "${LISTEN:-$MESH_DIR/$1}") port=$(node_port "$1") dbname=mesh user=postgres"
}

# failed_to_start NAME: says why, with the end of the node's log, and stops.
failed_to_start() {
  local dir=$MESH_DIR/$1
  echo "mesh: node $1 (port ${2:-$(node_port "$1")}) did not start; the end of its log:" >&2
  as_pg_owner tail -n 8 "$dir/server.log" >&2 || true
  exit 1
}

# start_node NAME PORT NODES: a new PostgreSQL with snowflake_id preloaded, issuing only its
# own shard, ready to publish to and subscribe from the other NODES - 1 nodes (each of them
# a slot here and an apply worker there per publication), and its database `mesh`.
start_node() {
  local name=$1 port=$2 links=$(( ${#PUBLICATIONS[@]} * ($3 - 1) )) shard dir=$MESH_DIR/$1 listen=()
  shard=$(shard_of "$name")
  [ -e "$dir/data" ] && die "node $name already exists in $dir"
  mkdir -p "$dir"
  [ "$(id -u)" -eq 0 ] && chown postgres: "$dir"
  [ -z "$LISTEN" ] || listen=("listen_addresses = '$LISTEN'")
  PG_PORT=$port cluster_init "$dir" \
    "cluster_name = '$name'" \
    "snowflake_id.shard = $shard" \
    "snowflake_id.shards = '$shard'" \
    "wal_level = logical" \
    "track_commit_timestamp = on" \
    "max_worker_processes = $((links + 10))" \
    "max_logical_replication_workers = $((links + 2))" \
    "max_replication_slots = $((links + 4))" \
    "max_wal_senders = $((links + 4))" \
    "wal_retrieve_retry_interval = '1s'" \
    "${listen[@]}" || die "initdb of node $name failed: $dir/initdb.log"
  cluster_start "$dir" || failed_to_start "$name" "$port"
  PG_PORT=$port cluster_psql "$dir" -d postgres -q -c "CREATE DATABASE mesh"
}

# subscribe PUBLICATION FROM TO: TO subscribes to FROM's publication, for the changes made on
# FROM itself only (origin = none: not those FROM applied from other nodes, which TO receives
# from them directly), from now on (copy_data = false: the nodes start alike). The name is
# unique on both sides: subscription and slot <publication>_<from>_to_<to>.
#
# No text goes into SQL by the shell (scripts/lint-sql-text.sh): names and values are psql
# variables, which psql quotes (:"name" an identifier, :'name' a literal), in SQL read from
# a quoted heredoc.
subscribe() {
  local publication=$1 from=$2 to=$3 name=$1_$2_to_$3 disable_on_error=false
  # A control subscription stops at its first error (a key conflict) instead of retrying.
  [ "$publication" = app ] || disable_on_error=true
  # (Not in a transaction block: it creates the slot on FROM. Its NOTICE saying so is left out.)
  PGOPTIONS="-c client_min_messages=warning" node_sql "$to" -v name="$name" -v publication="$publication" \
    -v conninfo="$(connstr_of "$from") application_name=$name" -v disable_on_error="$disable_on_error" <<'SQL' ||
CREATE SUBSCRIPTION :"name" CONNECTION :'conninfo' PUBLICATION :"publication"
  WITH (origin = none, copy_data = false, disable_on_error = :'disable_on_error', slot_name = :'name');
SQL
    die "node $to could not subscribe to $from's publication $publication"
}

# wait_streaming: until every enabled subscription of every running node has its apply worker.
wait_streaming() {
  local node missing without i
  for ((i = 0; i < 600; i++)); do
    missing=
    for node in $(nodes); do
      running "$node" || continue
      without=$(node_sql "$node" -c "SELECT string_agg(s.subname, ' ') FROM pg_subscription s
        WHERE s.subenabled AND NOT EXISTS (SELECT FROM pg_stat_subscription w
          WHERE w.subid = s.oid AND w.relid IS NULL AND w.pid IS NOT NULL)")
      [ -z "$without" ] || missing+=" $without"
    done
    [ -z "$missing" ] && return 0
    sleep 0.1
  done
  status >&2 || true
  die "subscriptions without a running apply worker after 60 s (their apply workers fail: see the counters above and the subscribers' logs):$missing"
}

# Every node issues exactly its own shard: snowflake_id.shard and the fence snowflake_id.shards.
check_fences() {
  local node shard have
  for node in $(nodes); do
    running "$node" || continue
    shard=$(shard_of "$node")
    have=$(node_sql "$node" -c "SELECT current_setting('snowflake_id.shard') || ' ' || current_setting('snowflake_id.shards')")
    [ "$have" = "$shard $shard" ] ||
      die "node $node must issue shard $shard only; it has snowflake_id.shard and snowflake_id.shards = '$have'"
  done
}

# Stops and removes the nodes (node1, node2, ...) only: whatever else the folder holds, such
# as another cluster when SNOWFLAKE_MESH_DIR names a shared folder, is not the mesh's.
stop_all() {
  clusters_remove "$MESH_DIR"/node*/
  rmdir "$MESH_DIR" 2>/dev/null || true
}

# The EXIT trap of `up`: a failed `up` stops and removes every node it started.
abandon_up() {
  local status=$?
  [ "$status" -eq 0 ] && return 0
  echo "mesh: up failed; stopping and removing the nodes it started" >&2
  stop_all
  exit "$status"
}

up() {
  local count=${1:-3} i from to publication major
  [[ $count =~ ^[1-9][0-9]*$ && $count -ge 2 ]] || die "a mesh has 2 nodes or more: '$count'"
  [[ $FIRST_PORT =~ ^[1-9][0-9]*$ && $((FIRST_PORT + count - 1)) -le 65535 ]] ||
    die "SNOWFLAKE_MESH_PORT must be a port number with room for $count nodes: '$FIRST_PORT'"
  major=$(server_major)
  [ "$major" -ge 16 ] || die "a mesh needs PostgreSQL 16 or later (subscriptions with origin = none), not $major (PG_MAJOR=$PG_MAJOR)"
  if [ "${SNOWFLAKE_MESH_SKIP_INSTALL:-}" != 1 ]; then
    ./scripts/setup.sh
    echo "building and installing snowflake_id (release) into PostgreSQL $PG_MAJOR..."
    install_extension
  fi
  stop_all
  MESH_DIR=$(mesh_dir)
  trap abandon_up EXIT
  for ((i = 1; i <= count; i++)); do
    start_node "node$i" $((FIRST_PORT + i - 1)) "$count"
  done
  for ((i = 1; i <= count; i++)); do
    node_run "node$i" -f "$SQL_DIR/mesh.sql"
  done
  # The full mesh: every node subscribes to every other node's publications.
  for ((to = 1; to <= count; to++)); do
    for ((from = 1; from <= count; from++)); do
      [ "$from" -ne "$to" ] || continue
      for publication in "${PUBLICATIONS[@]}"; do
        subscribe "$publication" "node$from" "node$to"
      done
    done
  done
  wait_streaming
  check_fences
  trap - EXIT
  echo "mesh up: $count nodes (PostgreSQL $major), each subscribed to the publications of every other (${PUBLICATIONS[*]}), in $MESH_DIR"
  if [ "${SNOWFLAKE_MESH_EXAMPLE:-1}" = 1 ]; then
    example "$count"
  fi
  cat <<MSG
Connect to a node with:
  $PG_BIN/psql -h $MESH_DIR/node1 -p $FIRST_PORT -U postgres mesh
Watch it:   ./deploy/mesh.sh status
Stop and remove the mesh:   ./deploy/mesh.sh down
MSG
}

# converged SCHEMA TABLE: true when every node holds the same rows of SCHEMA.TABLE.
converged() {
  local node sums
  sums=$(for node in $(nodes); do
    node_sql "$node" -v schema="$1" -v table="$2" <<'SQL'
SELECT count(*) || ' ' || coalesce(md5(string_agg(t::text, ',' ORDER BY t.id)), '') FROM :"schema".:"table" t
SQL
  done | sort -u | wc -l)
  [ "$sums" -eq 1 ]
}

example() {
  local i node
  for node in $(nodes); do
    node_sql "$node" -c "INSERT INTO app.orders (customer, amount)
      SELECT 'customer ' || g || ' of ' || current_setting('cluster_name'), g * 10 FROM generate_series(1, 2) g"
  done
  # The control's keys come from each node's own sequence, which logical replication does not
  # carry: every node inserts rows 1 and 2 (in transactions open on all nodes at once, as
  # concurrent writers would), and each node's rows conflict where they are applied, halting
  # that subscription. (Written one node after the other instead, the later nodes' inserts
  # would fail at once on the key of a row already replicated to them.)
  for node in $(nodes); do
    node_sql "$node" -c "BEGIN" -c "INSERT INTO control.orders (customer, amount)
      SELECT 'customer ' || g || ' of ' || current_setting('cluster_name'), g * 10 FROM generate_series(1, 2) g" \
      -c "SELECT pg_sleep(2)" -c "COMMIT" >/dev/null &
  done
  wait
  for ((i = 0; i < 300; i++)); do
    converged app orders && break
    sleep 0.2
  done
  converged app orders || die "app.orders did not converge within 60 s"
  # The control's conflicts are counted once the apply workers reach the rows.
  for ((i = 0; i < 100; i++)); do
    for node in $(nodes); do
      [ -z "$(node_sql "$node" -c "SELECT 1 FROM pg_subscription WHERE subname LIKE 'control\_%' AND NOT subenabled LIMIT 1")" ] || break 2
    done
    sleep 0.2
  done
  echo "== app.orders, as every node holds it: written on every node, each key from its writer's shard"
  node_show node1 -c "SELECT id, public.snowflake_shard(id) AS shard, node, customer, amount FROM app.orders ORDER BY node, id"
  echo "== control.orders on node1 (bigserial): keys of every node's sequence, and what arrived of the others'"
  node_show node1 -c "SELECT id, node, customer FROM control.orders ORDER BY id, node"
  status || true
}

# ddl FILE: DDL is not replicated: run it on every node, each in one transaction, then refresh
# the subscriptions so that new tables of the published schemas are taken (from now on:
# copy_data = false). Write to a new table only once this has returned. New tables of schema
# app get the trigger that observes the keys applied from other nodes (mesh.sql), in the same
# transaction: no row reaches them unobserved.
ddl() {
  local file=$1 node done_on=() sub observed
  [ -r "$file" ] || die "cannot read $file"
  for node in $(nodes); do
    running "$node" || die "node $node is not running; start it first (./deploy/mesh.sh start)"
  done
  for node in $(nodes); do
    observed=$(node_run "$node" --single-transaction -f "$file" -c "SET LOCAL search_path = pg_catalog, pg_temp" \
      -c "SELECT string_agg(t::text, ' ') FROM public.mesh_observe_tables() t" | tail -n 1) ||
      die "$file failed on $node${done_on[*]:+, after it ran on ${done_on[*]}}"
    done_on+=("$node")
  done
  [ -z "$observed" ] || echo "keys applied from other nodes are observed in the new tables: $observed"
  # The names of the subscriptions are catalog text, which any role allowed to create a
  # subscription chooses: the server quotes them (format's %I), and psql runs each statement
  # (\gexec); never does the shell paste them into SQL. Refreshed are the enabled subscriptions
  # of superusers (the kit's own); a refresh connects where the subscription's owner says, and
  # the subscriptions of other roles are theirs to refresh.
  for node in $(nodes); do
    node_sql "$node" <<'SQL'
SELECT format('ALTER SUBSCRIPTION %I REFRESH PUBLICATION WITH (copy_data = false)', s.subname)
FROM pg_subscription s JOIN pg_roles r ON r.oid = s.subowner
WHERE s.subdbid = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND s.subenabled AND r.rolsuper
ORDER BY s.subname \gexec
SQL
    sub=$(node_sql "$node" -c "SELECT string_agg(format('%I', subname), ' ' ORDER BY subname) FROM pg_subscription
      WHERE subdbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND NOT subenabled")
    [ -z "$sub" ] || echo "mesh: $node: disabled, so not refreshed: $sub"
    sub=$(node_sql "$node" -c "SELECT string_agg(format('%I (owner %I)', s.subname, r.rolname), ', ' ORDER BY s.subname)
      FROM pg_subscription s JOIN pg_roles r ON r.oid = s.subowner
      WHERE s.subdbid = (SELECT oid FROM pg_database WHERE datname = current_database())
        AND s.subenabled AND NOT r.rolsuper")
    [ -z "$sub" ] || echo "mesh: $node: owned by a role that is not superuser, so not refreshed: $sub"
  done
  echo "ran $file on ${done_on[*]}; subscriptions refreshed"
}

start() {
  local node pid i
  for node in $(nodes); do
    running "$node" && continue
    # A postmaster killed a moment ago may linger, unreaped, and its lock file names it: the
    # new one would take it for a live server and refuse to start.
    pid=$(cluster_postmaster_pid "$MESH_DIR/$node" 2>/dev/null || true)
    for ((i = 0; i < 300; i++)); do
      [[ -n $pid && -e /proc/$pid ]] || break
      sleep 0.1
    done
    cluster_start "$MESH_DIR/$node" || failed_to_start "$node"
    echo "started $node"
  done
  wait_streaming
  check_fences
}

# lags_to NODE: a line "subscription|lag_bytes|replay_lag" per subscription the kit made on
# NODE (<publication>_<from>_to_<NODE>, for every other node): the bytes of WAL its publisher
# wrote that it has not confirmed yet (its slot there), and the time its last change took to
# apply. The names are the kit's, made here from the nodes' folders, never read from a catalog
# (any role allowed to create a subscription names its own), and they go to SQL as psql
# variables.
lags_to() {
  local node=$1 from publication name
  for from in $(nodes); do
    [ "$from" != "$node" ] || continue
    for publication in "${PUBLICATIONS[@]}"; do
      name=${publication}_${from}_to_${node}
      if ! running "$from"; then
        echo "$name|(publisher down)|"
        continue
      fi
      node_sql "$from" -v name="$name" <<'SQL'
SELECT s.slot_name || '|' || coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), s.confirmed_flush_lsn)::bigint::text, '?')
    || '|' || coalesce((SELECT r.replay_lag::text FROM pg_stat_replication r WHERE r.application_name = s.slot_name), '')
  FROM pg_replication_slots s WHERE s.slot_name = :'name'
SQL
    done
  done
}

# status: per node, its subscriptions (of the mesh's database), their state, lag and conflict
# counters (PostgreSQL 18 counts conflicts; before, a conflict shows as an apply error). The
# subscriptions' names are catalog text: only the server handles them (psql variables carry
# what the shell passes).
status() {
  local node bad=() problems
  [ -n "$(nodes)" ] || die "no mesh in $MESH_DIR (./deploy/mesh.sh up)"
  for node in $(nodes); do
    if ! running "$node"; then
      echo "== $node: NOT RUNNING (port $(node_port "$node")); ./deploy/mesh.sh start"
      bad+=("$node is not running")
      continue
    fi
    echo "== $node: port $(node_port "$node"), $(node_sql "$node" -c \
      "SELECT 'shard ' || current_setting('snowflake_id.shard') || ', fence ' || current_setting('snowflake_id.shards')")"
    node_show "$node" -v lags="$(lags_to "$node")" <<'SQL'
SELECT current_setting('server_version_num')::int >= 180000 AS conflict_counters \gset
CREATE TEMPORARY VIEW mesh_status_subscriptions AS
  SELECT s.subname AS subscription,
      CASE WHEN NOT s.subenabled THEN 'disabled' WHEN w.pid IS NULL THEN 'no worker' ELSE 'streaming' END AS state,
      l.lag_bytes, l.replay_lag, to_jsonb(st) AS stats
    FROM pg_subscription s
    LEFT JOIN pg_stat_subscription w ON w.subid = s.oid AND w.relid IS NULL AND w.leader_pid IS NULL
    LEFT JOIN pg_stat_subscription_stats st ON st.subid = s.oid
    LEFT JOIN (SELECT split_part(line, '|', 1) AS subname, split_part(line, '|', 2) AS lag_bytes,
                      split_part(line, '|', 3) AS replay_lag
               FROM regexp_split_to_table(:'lags', E'\n') line) l ON l.subname = s.subname
    WHERE s.subdbid = (SELECT oid FROM pg_database WHERE datname = current_database());
\if :conflict_counters
SELECT subscription, state, lag_bytes, replay_lag,
    (stats ->> 'confl_insert_exists')::bigint AS insert_exists,
    (stats ->> 'confl_update_origin_differs')::bigint AS update_origin_differs,
    (stats ->> 'confl_update_exists')::bigint AS update_exists,
    (stats ->> 'confl_update_missing')::bigint AS update_missing,
    (stats ->> 'confl_delete_origin_differs')::bigint AS delete_origin_differs,
    (stats ->> 'confl_delete_missing')::bigint AS delete_missing,
    (stats ->> 'confl_multiple_unique_conflicts')::bigint AS multiple_unique,
    (stats ->> 'apply_error_count')::bigint AS apply_errors
  FROM mesh_status_subscriptions ORDER BY subscription;
\else
SELECT subscription, state, lag_bytes, replay_lag, (stats ->> 'apply_error_count')::bigint AS apply_errors
  FROM mesh_status_subscriptions ORDER BY subscription;
\endif
SQL
    problems=$(node_sql "$node" <<'SQL'
SELECT string_agg(format('%I', s.subname) || CASE WHEN NOT s.subenabled THEN ' is disabled'
    WHEN w.pid IS NULL THEN ' has no apply worker' ELSE ' has conflicts' END, ', ' ORDER BY s.subname)
  FROM pg_subscription s
  LEFT JOIN pg_stat_subscription w ON w.subid = s.oid AND w.relid IS NULL AND w.leader_pid IS NULL
  LEFT JOIN pg_stat_subscription_stats st ON st.subid = s.oid
  WHERE s.subdbid = (SELECT oid FROM pg_database WHERE datname = current_database())
    AND s.subname LIKE 'app\_%' AND (NOT s.subenabled OR w.pid IS NULL
      OR coalesce((SELECT sum(c.value::bigint) FROM jsonb_each_text(to_jsonb(st)) c
                   WHERE c.key LIKE 'confl\_%'), 0) > 0)
SQL
    )
    [ -z "$problems" ] || bad+=("$node: $problems")
  done
  check_fences
  if [ ${#bad[@]} -gt 0 ]; then
    printf 'mesh: not healthy: %s\n' "${bad[@]}" >&2
    return 1
  fi
  echo "mesh: every node running and issuing its own shard; every app subscription streaming, without conflicts"
}

case "${1:-}" in
  up) up "${2:-3}" ;;
  down) stop_all; echo "mesh stopped and removed" ;;
  status) status ;;
  ddl) [ $# -eq 2 ] || die "usage: $0 ddl FILE"; ddl "$2" ;;
  start) start ;;
  *) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
