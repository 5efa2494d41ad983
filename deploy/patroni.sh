#!/usr/bin/env bash
# High availability on one machine: three PostgreSQL nodes run by Patroni on etcd, a leader and
# two streaming standbys, the extension's settings in the DCS (deploy/patroni/node.yml). etcd
# (Debian's etcd-server, run by this script with a data folder of its own, never the system's
# service), Patroni's REST APIs and PostgreSQL listen on 127.0.0.1 only, on free ports; every
# node also has a Unix socket in its folder under the kit's folder (.run/patroni, or
# $SNOWFLAKE_PATRONI_DIR). See docs/high-availability.md.
#
#   ./deploy/patroni.sh up [N] [OPTIONS]   set up, start etcd and N nodes (default 3), wait until
#                                          one leads and the others stream, create the extension
#       --ttl S (20, Patroni's smallest) --loop-wait S (10) --retry-timeout S (5)
#                                          Patroni's timings (in the DCS)
#       --synchronous                      synchronous_mode: a standby confirms every commit
#       --lease-ms MS (0: off)             each node's snowflake_id.lease_ms, with its own
#                                          snowflake_id.lease_url (its REST API's /primary)
#   ./deploy/patroni.sh status             the members, as patronictl lists them
#   ./deploy/patroni.sh leader             the leader's name
#   ./deploy/patroni.sh connstr [NODE]     a libpq multi-host connection string that reaches the
#                                          leader (target_session_attrs=read-write); a node's own
#   ./deploy/patroni.sh switchover [NODE]  a planned switchover to NODE (default: any standby)
#   ./deploy/patroni.sh kill-patroni NODE  kill -9 the node's Patroni alone (PostgreSQL runs on)
#   ./deploy/patroni.sh kill-node NODE     kill -9 the node's Patroni and PostgreSQL together
#   ./deploy/patroni.sh restart-patroni NODE  start the node's Patroni again
#   ./deploy/patroni.sh edit-config KEY=VALUE...  change the DCS configuration
#                                          (postgresql.parameters.snowflake_id.max_lead_ms=5s)
#   ./deploy/patroni.sh down               stop everything the kit started and remove its files
#
# The options of `up` may also come from SNOWFLAKE_PATRONI_TTL, _LOOP_WAIT, _RETRY_TIMEOUT,
# _SYNCHRONOUS (1) and _LEASE_MS. SNOWFLAKE_PATRONI_SKIP_INSTALL=1 skips the setup and build
# (when the extension is installed). Patroni comes from the venv scripts/setup.sh makes.
set -Eeuo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

# The kit's folder (cluster_dir falls back to /tmp when the path is too long for sockets).
kit_dir() { cluster_dir "${SNOWFLAKE_PATRONI_DIR:-$PWD/.run/patroni}" patroni; }
KIT_DIR=$(kit_dir)
TEMPLATE=$PWD/deploy/patroni/node.yml
VENV=$(patroni_venv)
ETCD=/usr/bin/etcd

die() { echo "patroni: $*" >&2; exit 1; }

# The nodes of the kit, in order (node1, node2, node3).
nodes() {
  local dir
  for dir in "$KIT_DIR"/node*/; do
    [ -f "$dir/patroni.yml" ] && basename "$dir"
  done | sort -V
}

valid_node() {
  { [[ $1 =~ ^node[0-9]+$ ]] && [ -f "$KIT_DIR/$1/patroni.yml" ]; } || die "no node '$1' (nodes: $(nodes | tr '\n' ' '))"
}

# setting NODE KEY: a value of the node's patroni.yml written by `up` (ports).
setting() { sed -n "s/^# kit: $2=//p" "$KIT_DIR/$1/patroni.yml"; }

patronictl() {
  as_pg_owner "$VENV/bin/patronictl" -c "$KIT_DIR/$(nodes | sed -n 1p)/patroni.yml" "$@"
}

# members: "name role state" lines, as Patroni's DCS has them.
members() {
  patronictl list -f json 2>/dev/null |
    /usr/bin/python3 -c 'import json, sys; [print(m["Member"], m["Role"], m["State"]) for m in json.load(sys.stdin)]'
}

leader() { members | awk '$2 == "Leader" && $3 == "running" { print $1 }'; }

# free_ports N: N TCP ports of 127.0.0.1 nothing listens on now (given by the system).
free_ports() {
  /usr/bin/python3 - "$1" <<'PY'
import socket, sys
held = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in held:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in held))
PY
}

# alive PIDFILE PATTERN: true when the process the file names runs and its command line holds
# PATTERN (a process id may since name another process).
alive() {
  local pid command
  [ -f "$1" ] || return 1
  pid=$(cat "$1")
  [ -n "$pid" ] && command=$(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline") && [[ $command == *"$2"* ]]
}

# kill_recorded PIDFILE PATTERN SIGNAL: signals the process, if alive; waits until it is gone.
kill_recorded() {
  local i
  alive "$1" "$2" || return 0
  kill "-$3" "$(cat "$1")" 2>/dev/null || true
  for ((i = 0; i < 300; i++)); do
    alive "$1" "$2" || return 0
    sleep 0.1
  done
  die "process $(cat "$1") ($2) did not end after SIG$3"
}

start_etcd() {
  local dir=$KIT_DIR/etcd client=$1 peer=$2 i
  as_pg_owner mkdir -p "$dir"
  echo "$client" | as_pg_owner tee "$dir/client_port" >/dev/null
  # From its own folder: the server owner may not enter the checkout (a clone under a private
  # folder), and what it starts inherits the working directory.
  # shellcheck disable=SC2016 # expanded by the inner shell, which records its own pid
  as_pg_owner sh -c 'cd "$(dirname "$1")" && echo $$ >"$1"; shift; exec "$@"' sh "$dir/etcd.pid" \
    "$ETCD" --name kit --data-dir "$dir/data" \
    --listen-client-urls "http://127.0.0.1:$client" --advertise-client-urls "http://127.0.0.1:$client" \
    --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
    --initial-cluster "kit=http://127.0.0.1:$peer" --initial-cluster-state new \
    --initial-cluster-token "snowflake-kit-$client" >"$dir/etcd.log" 2>&1 </dev/null &
  for ((i = 0; i < 100; i++)); do
    if /usr/bin/etcdctl --endpoints "http://127.0.0.1:$client" endpoint health >/dev/null 2>&1; then return 0; fi
    sleep 0.2
  done
  tail -n 20 "$dir/etcd.log" >&2
  die "etcd did not start on 127.0.0.1:$client"
}

# start_patroni NODE: runs the node's Patroni as the server's owner, in the background; it
# records its own process id (that of Patroni, not of a wrapper) in the node's patroni.pid.
start_patroni() {
  local dir=$KIT_DIR/$1
  alive "$dir/patroni.pid" "$dir/patroni.yml" && die "the Patroni of $1 runs already (pid $(cat "$dir/patroni.pid"))"
  # From the node's folder, as etcd (start_etcd): Patroni's PostgreSQL inherits it.
  # shellcheck disable=SC2016 # expanded by the inner shell, which records its own pid
  as_pg_owner sh -c 'cd "$(dirname "$1")" && echo $$ >"$1"; shift; exec "$@"' sh "$dir/patroni.pid" \
    "$VENV/bin/patroni" "$dir/patroni.yml" >>"$dir/patroni.log" 2>&1 </dev/null &
  local i
  for ((i = 0; i < 50; i++)); do
    [ -s "$dir/patroni.pid" ] && return 0
    sleep 0.1
  done
  die "the Patroni of $1 did not start"
}

# write_config NODE REST_PORT PG_PORT ETCD_PORT: the node's patroni.yml from the template.
write_config() {
  local name=$1 dir=$KIT_DIR/$1 lease=
  if [ "$LEASE_MS" != 0 ]; then
    # The lease is per node: each node asks its own REST API whether it leads.
    lease="snowflake_id.lease_url: 'http://127.0.0.1:$2/primary'\\n    snowflake_id.lease_ms: $LEASE_MS"
  fi
  as_pg_owner mkdir -p "$dir"
  {
    echo "# kit: rest_port=$2"
    echo "# kit: pg_port=$3"
    sed -e "s|@NAME@|$name|g" -e "s|@REST_PORT@|$2|g" -e "s|@PG_PORT@|$3|g" -e "s|@ETCD_PORT@|$4|g" \
      -e "s|@NODE_DIR@|$dir|g" -e "s|@PG_BIN@|$PG_BIN|g" -e "s|@TTL@|$TTL|g" \
      -e "s|@LOOP_WAIT@|$LOOP_WAIT|g" -e "s|@RETRY_TIMEOUT@|$RETRY_TIMEOUT|g" \
      -e "s|@SYNCHRONOUS_MODE@|$SYNCHRONOUS|g" -e "s|^    # @LEASE@$|    $lease|" "$TEMPLATE"
  } | as_pg_owner tee "$dir/patroni.yml" >/dev/null
  as_pg_owner chmod 600 "$dir/patroni.yml"
}

# stop_all: everything the kit started, by the process ids they recorded and pg_ctl, then its
# files. Each Patroni first (killed: stopped gently, a leader's would hand over, a standby's
# would promote), then each PostgreSQL, then etcd.
stop_all() {
  local dir
  for dir in "$KIT_DIR"/node*/; do
    dir=${dir%/}
    [ -f "$dir/patroni.yml" ] || continue
    kill_recorded "$dir/patroni.pid" "$dir/patroni.yml" KILL
    if cluster_running "$dir"; then
      as_pg_owner "$PG_BIN/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null || true
    fi
  done
  [ -d "$KIT_DIR/etcd" ] && kill_recorded "$KIT_DIR/etcd/etcd.pid" "$KIT_DIR/etcd/data" TERM
  as_pg_owner rm -rf "$KIT_DIR"/node* "$KIT_DIR/etcd"
  rmdir "$KIT_DIR" 2>/dev/null || true
}

# wait_for_members N SECONDS: until a leader runs and N-1 standbys stream (synchronous ones too).
wait_for_members() {
  local want=$1 deadline=$((SECONDS + $2)) list
  while :; do
    list=$(members || true)
    if [ -n "$(leader)" ] && [ "$(grep -cE ' (streaming|running)$' <<<"$list")" -eq "$want" ]; then
      return 0
    fi
    [ "$SECONDS" -lt "$deadline" ] || { echo "$list" >&2; return 1; }
    sleep 0.5
  done
}

leader_sql() {
  local name
  name=$(leader)
  [ -n "$name" ] || die "no leader"
  "$PG_BIN/psql" -X -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$(setting "$name" pg_port)" -U postgres -d postgres -qtA "$@"
}

up() {
  local count=3
  TTL=${SNOWFLAKE_PATRONI_TTL:-20} LOOP_WAIT=${SNOWFLAKE_PATRONI_LOOP_WAIT:-10}
  RETRY_TIMEOUT=${SNOWFLAKE_PATRONI_RETRY_TIMEOUT:-5} LEASE_MS=${SNOWFLAKE_PATRONI_LEASE_MS:-0}
  SYNCHRONOUS=false
  [ "${SNOWFLAKE_PATRONI_SYNCHRONOUS:-0}" = 1 ] && SYNCHRONOUS=true
  while [ $# -gt 0 ]; do
    case $1 in
      --ttl) TTL=$2; shift 2 ;;
      --loop-wait) LOOP_WAIT=$2; shift 2 ;;
      --retry-timeout) RETRY_TIMEOUT=$2; shift 2 ;;
      --lease-ms) LEASE_MS=$2; shift 2 ;;
      --synchronous) SYNCHRONOUS=true; shift ;;
      [0-9]*) count=$1; shift ;;
      *) die "unknown option of up: '$1'" ;;
    esac
  done
  local value
  for value in "$count" "$TTL" "$LOOP_WAIT" "$RETRY_TIMEOUT" "$LEASE_MS"; do
    [[ $value =~ ^[0-9]+$ ]] || die "not a whole number: '$value'"
  done
  { [ "$count" -ge 1 ] && [ "$count" -le 9 ]; } || die "from 1 to 9 nodes: '$count'"
  # Patroni raises a ttl below 20 to 20 (and lowers loop_wait until loop_wait + 2 *
  # retry_timeout <= ttl): said here rather than found in the DCS later.
  [ "$TTL" -ge 20 ] || die "Patroni's smallest ttl is 20 (it would raise $TTL to 20)"
  [ $((LOOP_WAIT + 2 * RETRY_TIMEOUT)) -le "$TTL" ] ||
    die "Patroni needs loop_wait + 2 * retry_timeout <= ttl: $LOOP_WAIT + 2 * $RETRY_TIMEOUT > $TTL"
  [ -x "$ETCD" ] || die "no $ETCD: install Debian's etcd-server (./scripts/setup.sh does)"
  if [ "${SNOWFLAKE_PATRONI_SKIP_INSTALL:-}" != 1 ]; then
    ./scripts/setup.sh
    echo "building and installing snowflake_id (release)..."
    install_extension
  fi
  [ -x "$VENV/bin/patroni" ] || die "no Patroni in $VENV: ./scripts/setup.sh installs it"
  stop_all
  KIT_DIR=$(kit_dir)
  # On any failure from here (die exits without an ERR trap), what was started is stopped.
  trap 'echo "patroni: up failed; stopping what it started" >&2; stop_all' EXIT

  local ports i
  read -r -a ports <<<"$(free_ports $((2 + 2 * count)))"
  start_etcd "${ports[0]}" "${ports[1]}"
  for ((i = 1; i <= count; i++)); do
    write_config "node$i" "${ports[2 * i]}" "${ports[2 * i + 1]}" "${ports[0]}"
  done
  # The first node bootstraps the cluster (initdb, the DCS configuration); the others copy it.
  start_patroni node1
  wait_for_members 1 120 || die "node1 did not become the leader (its log: $KIT_DIR/node1/patroni.log)"
  for ((i = 2; i <= count; i++)); do start_patroni "node$i"; done
  wait_for_members "$count" 180 || die "the standbys did not all stream (their logs: $KIT_DIR/node*/patroni.log)"
  leader_sql -c "CREATE EXTENSION IF NOT EXISTS snowflake_id"
  trap - EXIT
  patronictl list
  cat <<MSG
Patroni up: $count nodes on etcd 127.0.0.1:${ports[0]}, ttl $TTL, loop_wait $LOOP_WAIT, retry_timeout $RETRY_TIMEOUT, synchronous_mode $SYNCHRONOUS, lease_ms $LEASE_MS; in $KIT_DIR
Connect to the leader with:
  $PG_BIN/psql "$(connstr)"
A switchover:   ./deploy/patroni.sh switchover
Stop and remove it all:   ./deploy/patroni.sh down
MSG
}

connstr() {
  local hosts=() ports=() name
  if [ $# -eq 1 ]; then
    valid_node "$1"
    echo "host=127.0.0.1 port=$(setting "$1" pg_port) user=postgres dbname=postgres"
    return 0
  fi
  for name in $(nodes); do
    hosts+=(127.0.0.1)
    ports+=("$(setting "$name" pg_port)")
  done
  echo "host=$(IFS=,; echo "${hosts[*]}") port=$(IFS=,; echo "${ports[*]}") user=postgres dbname=postgres target_session_attrs=read-write connect_timeout=2"
}

switchover() {
  local old new candidate=()
  old=$(leader)
  [ -n "$old" ] || die "no leader to switch over from"
  if [ $# -eq 1 ]; then
    valid_node "$1"
    candidate=(--candidate "$1")
  fi
  patronictl switchover --leader "$old" "${candidate[@]}" --force >/dev/null
  local deadline=$((SECONDS + 120))
  while new=$(leader); [ -z "$new" ] || [ "$new" = "$old" ]; do
    [ "$SECONDS" -lt "$deadline" ] || die "no new leader after the switchover from $old"
    sleep 0.2
  done
  echo "$new"
}

# kill_patroni NODE: kill -9 of the node's Patroni, by the pid it recorded.
kill_patroni() {
  local dir=$KIT_DIR/$1
  alive "$dir/patroni.pid" "$dir/patroni.yml" || die "the Patroni of $1 does not run"
  kill_recorded "$dir/patroni.pid" "$dir/patroni.yml" KILL
}

# kill_node NODE: kill -9 of the node's Patroni, its postmaster and the postmaster's children
# at once, as a machine's crash would (the postmaster found by its lock file and working folder).
kill_node() {
  local dir=$KIT_DIR/$1 postmaster children i
  kill_patroni "$1"
  if cluster_running "$dir"; then
    postmaster=$(cluster_postmaster_pid "$dir")
    children=$(ps -o pid= --ppid "$postmaster" || true)
    kill -KILL "$postmaster" 2>/dev/null || true
    for pid in $children; do kill -KILL "$pid" 2>/dev/null || true; done
    for ((i = 0; i < 300; i++)); do
      [ -d "/proc/$postmaster" ] || break
      sleep 0.1
    done
    for pid in $children; do
      for ((i = 0; i < 300; i++)); do
        [ -d "/proc/$pid" ] || break
        sleep 0.1
      done
    done
  fi
}

edit_config() {
  local args=() pair
  for pair in "$@"; do
    [[ $pair == *=* ]] || die "KEY=VALUE, not '$pair'"
    args+=(--set "$pair")
  done
  patronictl edit-config --force --quiet "${args[@]}" >/dev/null
  patronictl show-config
}

command=${1:-}
[ $# -gt 0 ] && shift
case $command in
  up) up "$@" ;;
  down) stop_all; echo "patroni kit stopped and removed" ;;
  status) patronictl list ;;
  leader) name=$(leader); [ -n "$name" ] || die "no leader"; echo "$name" ;;
  connstr) connstr "$@" ;;
  switchover) switchover "$@" ;;
  kill-patroni) [ $# -eq 1 ] || die "usage: $0 kill-patroni NODE"; valid_node "$1"; kill_patroni "$1" ;;
  kill-node) [ $# -eq 1 ] || die "usage: $0 kill-node NODE"; valid_node "$1"; kill_node "$1" ;;
  restart-patroni) [ $# -eq 1 ] || die "usage: $0 restart-patroni NODE"; valid_node "$1"; start_patroni "$1" ;;
  edit-config) [ $# -ge 1 ] || die "usage: $0 edit-config KEY=VALUE..."; edit_config "$@" ;;
  *) sed -n '2,31p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
