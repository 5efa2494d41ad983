#!/usr/bin/env bash
# Starts a throwaway PostgreSQL 15 (PG_MAJOR=18: 18) with snowflake_id preloaded, fills a
# table from several connections at once, prints the IDs decoded, and leaves the server
# running for you.
#
#   ./scripts/demo.sh                  set up what the demo needs (scripts/setup.sh --demo: PostgreSQL
#                                      15, Rust, cargo-pgrx), (re)start the demo server, show it
#   PG_MAJOR=18 ./scripts/demo.sh      the same on PostgreSQL 18
#   ./scripts/demo.sh stop             stop the demo server and remove its files
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

DEMO_DIR=$(cluster_dir "${SNOWFLAKE_DEMO_DIR:-$PWD/.run/demo}" demo)
REQUESTED_MAJOR=$PG_MAJOR

# Stops a demo server left running, with the programs of its own major.
stop_demo() {
  [ -f "$DEMO_DIR/major" ] && use_major "$(cat "$DEMO_DIR/major")"
  cluster_stop "$DEMO_DIR"
  use_major "$REQUESTED_MAJOR"
}

if [ "${1:-}" = stop ]; then
  stop_demo
  rm -rf "$DEMO_DIR"
  echo "demo server stopped and removed"
  exit 0
fi

# On 15 (Debian 12's own) only what the demo needs; another major takes the whole setup.
if [ "$PG_MAJOR" = 15 ]; then ./scripts/setup.sh --demo; else ./scripts/setup.sh; fi
echo "building and installing snowflake_id (release)..."
install_extension

stop_demo
as_pg_owner rm -rf "$DEMO_DIR/data"
cluster_init "$DEMO_DIR"
echo "$PG_MAJOR" >"$DEMO_DIR/major"
cluster_start "$DEMO_DIR"

cluster_psql "$DEMO_DIR" -q -d postgres <<'SQL'
CREATE DATABASE demo;
-- Shard 7 is this database's default: snowflake_nextval() without an argument uses it.
ALTER DATABASE demo SET snowflake_id.shard = 7;
SQL
cluster_psql "$DEMO_DIR" -q -d demo <<'SQL'
CREATE EXTENSION snowflake_id;
CREATE TABLE orders (
    id       bigint PRIMARY KEY DEFAULT snowflake_nextval(3),
    customer text NOT NULL,
    conn     int NOT NULL
);
CREATE TABLE events (
    id   bigint PRIMARY KEY DEFAULT snowflake_nextval(),
    what text NOT NULL
);
SQL

# Four connections insert at the same time.
for conn in 1 2 3 4; do
  cluster_psql "$DEMO_DIR" -q -d demo -c \
    "INSERT INTO orders (customer, conn) SELECT 'customer ' || g, $conn FROM generate_series(1, 3) g" &
done
wait
cluster_psql "$DEMO_DIR" -q -d demo -c "INSERT INTO events (what) VALUES ('signup'), ('login')"

cluster_psql "$DEMO_DIR" -d demo <<'SQL'
\echo '== orders: DEFAULT snowflake_nextval(3), rows from 4 connections at once'
SELECT o.id, d.ts, d.shard, d.seq, o.conn, o.customer
FROM orders o, snowflake_decode(o.id) d ORDER BY o.id;
\echo '== events: DEFAULT snowflake_nextval(), shard from ALTER DATABASE ... SET snowflake_id.shard = 7'
SELECT id, snowflake_json(id) FROM events ORDER BY id;
\echo '== this server''s layout'
SELECT * FROM snowflake_layout();
SQL

cat <<EOF
The demo server (PostgreSQL $PG_MAJOR) is running. Connect with:
  $PG_BIN/psql -h $DEMO_DIR -p $PG_PORT -U postgres demo
Stop and remove it with:
  ./scripts/demo.sh stop
EOF
