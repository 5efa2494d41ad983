#!/usr/bin/env bash
# The clients layer: every recipe of docs/clients/ and docs/reading-in-order.md, run with the
# real client libraries against a throwaway server with the extension, asserting what the page
# says: keys read back equal the stored ones, batch inserts return distinct increasing keys,
# decoded parts agree with the server's decoders, the documented way to JSON keeps every digit,
# a reader below the horizon skips no row, and each trap the page states is real; then, on a
# second server in the js53 layout, each language's recipe reads IDs as plain numbers through
# JSON, also as doubles, and fails if a digit changes. First it checks that the pages show the
# code it runs, verbatim (tests/clients/regions.py).
#
#   ./tests/clients/run.sh                   every client
#   ./tests/clients/run.sh pg sqlx ...       the clients named (names: CLIENTS below)
#   PG_MAJOR=18 ./tests/clients/run.sh       on PostgreSQL 18 (default 15)
#
# The extension must be installed into that PostgreSQL (scripts/test.sh does it first). The
# client libraries are pinned and installed into git-ignored folders here, once: Python
# virtualenvs (python/requirements*.txt; Django 6.1 needs Python 3.12 or later), node_modules
# (node/package-lock.json), the Cargo project (rust/Cargo.lock). Go's pgx, pgjdbc and
# ActiveRecord are Debian's packages, which scripts/setup.sh installs. A missing toolchain
# fails the layer and names the setup step. One line per client; the last line
# `clients: N clients: ok`.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib.sh
HERE=$PWD/tests/clients
CLIENTS=(psycopg psycopg-reader asyncpg sqlalchemy sqlalchemy-auto django-5.2 django-6.1 django-auto-5.2
  django-auto-6.1 pg knex tokio-postgres sqlx pgx jdbc activerecord activerecord-auto
  psycopg-js53 pg-js53 tokio-postgres-js53 pgx-js53 jdbc-js53 activerecord-js53)
PGX_SOURCE=/usr/share/gocode/src/github.com/jackc/pgx/v4
JDBC_JAR=/usr/share/java/postgresql.jar

SELECTED=("$@")
[ ${#SELECTED[@]} -gt 0 ] || SELECTED=("${CLIENTS[@]}")
for name in "${SELECTED[@]}"; do
  [[ " ${CLIENTS[*]} " == *" $name "* ]] || { echo "clients: no client '$name' (${CLIENTS[*]})" >&2; exit 2; }
done
# selected NAME: that client runs. wants NAME: it runs, or its recipe on the js53 server does
# (NAME-js53), which needs the same toolchain and libraries.
selected() { [[ " ${SELECTED[*]} " == *" $1 "* ]]; }
wants() { selected "$1" || selected "$1-js53"; }
STARTED=$SECONDS
took() { echo "clients: $1 ($((SECONDS - STARTED)) s into the layer)"; }
fail() { echo "clients: FAILED: $*" >&2; exit 1; }

# ---- The page shows what runs ----------------------------------------------------------------
python3 "$HERE/regions.py" --check docs/clients/*.md docs/reading-in-order.md

# ---- Toolchains: each missing one fails, naming the step that installs it ---------------------
missing() { fail "$1 is missing: ./scripts/setup.sh installs it ($2)"; }
command -v python3 >/dev/null || missing python3 "Debian package python3"
python3 -c 'import venv, ensurepip' 2>/dev/null || missing "Python's venv" "Debian package python3-venv"
if wants django-6.1 || wants django-auto-6.1; then
  # Django 6 needs Python 3.12 or later; Debian 12's python3 is 3.11.
  PYTHON312=
  for candidate in python3.14 python3.13 python3.12 "$(pyenv root 2>/dev/null)"/versions/3.1[2-9]*/bin/python3; do
    if command -v "$candidate" >/dev/null && "$candidate" -c 'import sys, venv; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
      PYTHON312=$(command -v "$candidate"); break
    fi
  done
  [ -n "$PYTHON312" ] || fail "Django 6.1 needs Python 3.12 or later and none was found (python3.12 or later on PATH, or a pyenv version); Debian 12's python3 is 3.11, so ./scripts/setup.sh cannot install it"
fi
if wants pg || wants knex; then
  command -v node >/dev/null || missing "Node.js" "Debian package nodejs"
  command -v npm >/dev/null || missing npm "Debian package npm"
fi
if wants tokio-postgres || wants sqlx; then command -v cargo >/dev/null || fail "cargo is missing: install Rust (rustup), as for building the extension"; fi
if wants pgx; then
  command -v go >/dev/null || missing go "Debian package golang-go"
  [ -d "$PGX_SOURCE" ] || missing "pgx v4" "Debian package golang-github-jackc-pgx-v4-dev"
fi
if wants jdbc; then
  command -v javac >/dev/null || missing "a JDK (javac)" "Debian package default-jdk-headless"
  [ -f "$JDBC_JAR" ] || missing pgjdbc "Debian package libpostgresql-jdbc-java"
fi
if wants activerecord || wants activerecord-auto; then
  command -v ruby >/dev/null || missing ruby "Debian packages ruby-activerecord and ruby-pg"
  ruby -e 'require "active_record"; require "pg"' 2>/dev/null || missing "ActiveRecord with pg" "Debian packages ruby-activerecord and ruby-pg"
fi

# ---- Pinned installs, into git-ignored folders; each redone only when its pins change -----------
# venv DIR PYTHON REQUIREMENTS: a virtualenv in DIR with exactly REQUIREMENTS installed.
venv() {
  local dir=$1 python=$2 requirements=$3
  cmp -s "$requirements" "$dir/installed-requirements.txt" && return 0
  echo "clients: installing $(basename "$requirements") into $(basename "$dir") (pip, pinned)"
  rm -rf "$dir"
  "$python" -m venv "$dir"
  "$dir/bin/pip" install -q --disable-pip-version-check -r "$requirements"
  cp "$requirements" "$dir/installed-requirements.txt"
  took "installed $(basename "$requirements")"
}
if wants psycopg || wants psycopg-reader || wants asyncpg || wants sqlalchemy || wants sqlalchemy-auto ||
  wants django-5.2 || wants django-auto-5.2; then
  venv "$HERE/python/.venv" python3 "$HERE/python/requirements.txt"
fi
if wants django-6.1 || wants django-auto-6.1; then
  venv "$HERE/python/.venv-django61" "$PYTHON312" "$HERE/python/requirements-django61.txt"
fi
if wants pg || wants knex; then
  if ! cmp -s "$HERE/node/package-lock.json" "$HERE/node/node_modules/.installed-package-lock.json"; then
    echo "clients: installing node_modules (npm ci, pinned by package-lock.json)"
    (cd "$HERE/node" && npm ci --no-audit --no-fund --loglevel=error)
    cp "$HERE/node/package-lock.json" "$HERE/node/node_modules/.installed-package-lock.json"
    took "installed node_modules"
  fi
fi
if wants tokio-postgres || wants sqlx; then
  echo "clients: building the Rust recipes (cargo, pinned by Cargo.lock)"
  CARGO_TARGET_DIR="$HERE/rust/target" cargo build --locked --quiet --manifest-path "$HERE/rust/Cargo.toml"
  took "built the Rust recipes"
fi
mkdir -p "$HERE/.build"
if wants pgx; then
  # GOPATH mode: the Debian packages' sources, no module download.
  (cd "$HERE/go" && GO111MODULE=off GOPATH=/usr/share/gocode GOCACHE="$HERE/.build/go-cache" \
    go build -o "$HERE/.build/pgx" main.go js53.go)
  took "built the Go recipes"
fi

# ---- One server for every client: a Unix socket, and 127.0.0.1 for JDBC -----------------------
PG_PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
DIR=$(cluster_temp_dir clients)
SERVERS=("$DIR")
stop_servers() {
  local server
  for server in "${SERVERS[@]}"; do cluster_stop "$server"; rm -rf "$server"; done
}
trap stop_servers EXIT
cluster_init "$DIR" "listen_addresses = '127.0.0.1'" "timezone = 'UTC'"
cluster_start "$DIR" || { tail -n 20 "$DIR/server.log" >&2; fail "the server did not start"; }
# Every database created below has the extension.
cluster_psql "$DIR" -q -d template1 -c "CREATE EXTENSION snowflake_id"
export PGHOST=$DIR PGPORT=$PG_PORT PGUSER=postgres

# run_client NAME COMMAND...: runs COMMAND in a database of its own, NAME, and prints the
# line it printed; a failure is shown in full and counted.
failed=()
passed=0
run_client() {
  local name=$1 start=$SECONDS output; shift
  selected "$name" || return 0
  cluster_psql "$DIR" -q -d postgres -c "CREATE DATABASE \"$name\""
  if output=$(PGDATABASE=$name "$@" 2>&1); then
    echo "clients: $name: ok ($((SECONDS - start)) s): $(tail -n 1 <<<"$output")"
    passed=$((passed + 1))
  else
    echo "clients: $name: FAILED"
    printf '    %s\n' "${output//$'\n'/$'\n'    }"
    failed+=("$name")
  fi
}
PY=$HERE/python/.venv/bin/python
run_client psycopg "$PY" "$HERE/python/test_psycopg.py"
run_client psycopg-reader "$PY" "$HERE/python/test_psycopg_reader.py"
run_client asyncpg "$PY" "$HERE/python/test_asyncpg.py"
run_client sqlalchemy "$PY" "$HERE/python/test_sqlalchemy.py"
run_client django-5.2 "$PY" "$HERE/python/test_django.py"
run_client django-6.1 "$HERE/python/.venv-django61/bin/python" "$HERE/python/test_django.py"
# With automatic keys: the real migration tools on a database with snowflake_id.auto_keys set.
run_client sqlalchemy-auto "$PY" "$HERE/python/test_sqlalchemy_auto.py"
run_client django-auto-5.2 "$PY" "$HERE/python/test_django_auto.py"
run_client django-auto-6.1 "$HERE/python/.venv-django61/bin/python" "$HERE/python/test_django_auto.py"
run_client pg node "$HERE/node/pg.js"
run_client knex node "$HERE/node/knex.js"
run_client tokio-postgres "$HERE/rust/target/debug/snowflake_id_clients" tokio-postgres
run_client sqlx "$HERE/rust/target/debug/snowflake_id_clients" sqlx
run_client pgx "$HERE/.build/pgx"
run_client jdbc java -cp "$JDBC_JAR" "$HERE/java/Jdbc.java" "jdbc:postgresql://127.0.0.1:$PG_PORT/jdbc?user=postgres"
run_client activerecord ruby "$HERE/ruby/activerecord.rb"
run_client activerecord-auto ruby "$HERE/ruby/activerecord_auto.rb"

# ---- The js53 layout: a second server, its IDs read as plain numbers through JSON -------------
if [[ " ${SELECTED[*]} " == *"-js53 "* ]]; then
  cluster_stop "$DIR"
  PG_PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  DIR=$(cluster_temp_dir clients-js53)
  SERVERS+=("$DIR")
  cluster_init "$DIR" "listen_addresses = '127.0.0.1'" "timezone = 'UTC'" "snowflake_id.layout = 'js53'"
  cluster_start "$DIR" || { tail -n 20 "$DIR/server.log" >&2; fail "the js53 server did not start"; }
  cluster_psql "$DIR" -q -d template1 -c "CREATE EXTENSION snowflake_id"
  export PGHOST=$DIR PGPORT=$PG_PORT
  run_client psycopg-js53 "$PY" "$HERE/python/test_psycopg_js53.py"
  run_client pg-js53 node "$HERE/node/js53.js"
  run_client tokio-postgres-js53 "$HERE/rust/target/debug/snowflake_id_clients" tokio-postgres-js53
  run_client pgx-js53 "$HERE/.build/pgx" js53
  run_client jdbc-js53 java -cp "$JDBC_JAR" "$HERE/java/Jdbc.java" "jdbc:postgresql://127.0.0.1:$PG_PORT/jdbc-js53?user=postgres" js53
  run_client activerecord-js53 ruby "$HERE/ruby/activerecord_js53.rb"
fi

[ ${#failed[@]} -eq 0 ] || fail "${failed[*]} (of ${#SELECTED[@]} clients)"
echo "clients: $passed clients: ok ($((SECONDS - STARTED)) s)"
