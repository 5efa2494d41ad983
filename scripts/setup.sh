#!/usr/bin/env bash
# Installs everything building, testing and demonstrating snowflake_id needs on Debian 12,
# skipping whatever is already present, so every other script can call it first and stay quick.
#
#   Debian packages: PostgreSQL 15 with server headers (the build links against them),
#   libclang (pgrx's bindgen), sudo (cargo pgrx test --runas), faketime (clock-fault tests),
#   PL/Proxy (multi-server tests), pg_partman (the partitioning example's test), procps
#   (kill, used by the crash tests), python3, gnuplot and a font (the benchmark report),
#   valgrind (scripts/profile.sh).
#   cargo-pgrx 0.18.1, pointed at the system PostgreSQL 15 (no source download).
set -euo pipefail

PG_MAJOR=15
PGRX_VERSION=0.18.1
PG_CONFIG=/usr/lib/postgresql/${PG_MAJOR}/bin/pg_config
PACKAGES=(
  "postgresql-${PG_MAJOR}" "postgresql-server-dev-${PG_MAJOR}" "postgresql-${PG_MAJOR}-plproxy"
  "postgresql-${PG_MAJOR}-partman"
  libclang-dev clang sudo faketime libfaketime procps
  python3 gnuplot-nox fonts-liberation valgrind
)

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

missing=()
for pkg in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! cargo pgrx --version 2>/dev/null | grep -q "${PGRX_VERSION}"; then
  echo "setup: installing cargo-pgrx ${PGRX_VERSION} (several minutes, once)"
  cargo install cargo-pgrx --version "${PGRX_VERSION}" --locked
fi

# `cargo pgrx init` without --pg15 would try to download PostgreSQL sources.
if ! grep -qs "pg${PG_MAJOR} *= *\"${PG_CONFIG}\"" "${PGRX_HOME:-$HOME/.pgrx}/config.toml"; then
  cargo pgrx init --pg${PG_MAJOR} "${PG_CONFIG}"
fi
