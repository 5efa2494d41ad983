#!/usr/bin/env bash
# Tests the Debian package as a user gets it: builds it (scripts/package.sh), checks that its
# Depends names the package of every shared library the extension's library links (objdump's
# NEEDED entries, found through ldconfig and dpkg -S) and the major's server, removes the
# development build from PostgreSQL's folders so that only the package's files are there, and:
#
# On Debian's PostgreSQL (/usr/lib/postgresql/15, PG_MAJOR=15, the default), whose server comes
# from its package: installs the previous release's package (built once from that release's
# commit, see previous_release_deb), starts a cluster with the library preloaded, creates the
# extension and issues IDs; upgrades the package in place (apt-get install) while the cluster runs
# (the server goes on answering), restarts it, updates the extension (ALTER EXTENSION UPDATE),
# and checks that new IDs follow the old ones; creates the extension in new databases (and one
# at the first release, updated); then stops the cluster, removes the package (apt-get remove)
# and checks that none of its files is left.
#
# On a PostgreSQL elsewhere (16, 17 and 18: the trees scripts/setup.sh unpacks, which no
# package owns) the package's files are unpacked (`dpkg-deb -x`) and copied into that one, and
# a fresh cluster creates the extension in new databases.
#
# Either way the development build is installed back at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

DEB=$(./scripts/package.sh | tail -n 1)
NAME=$(dpkg-deb -f "$DEB" Package)
VERSION=$(dpkg-deb -f "$DEB" Version)
LIB_DIR=$("$PG_CONFIG" --pkglibdir)
EXT_DIR="$("$PG_CONFIG" --sharedir)/extension"
SYSTEM=false
[ "$LIB_DIR" = "/usr/lib/postgresql/${PG_MAJOR}/lib" ] && SYSTEM=true

DIR=$(cluster_temp_dir package)
BUILD=""
cleanup() {
  cluster_stop "$DIR"
  rm -rf "$DIR"
  [ -z "$BUILD" ] || git worktree remove --force "$BUILD" 2>/dev/null || true
  if $SYSTEM; then
    as_root dpkg -r "$NAME" >/dev/null 2>&1 || true
  fi
  remove_installed_extension
  install_extension
}
trap cleanup EXIT
fail() { echo "package-test: FAILED: $*" >&2; exit 1; }
# apt_get install FILE | remove NAME: as a user does it, apt resolving the declared Depends
# against what is installed (offline: nothing it needs may be missing).
apt_get() {
  local what=$2
  [ "$1" = remove ] || what=$(realpath "$2")
  quietly as_root env DEBIAN_FRONTEND=noninteractive apt-get "$1" -y --no-install-recommends "$what"
}

# Depends: the major's server, and the package of each library the .so needs.
dpkg-deb -x "$DEB" "$DIR/unpacked"
depends=$(dpkg-deb -f "$DEB" Depends)
[[ ", $depends," == *", postgresql-$PG_MAJOR,"* ]] || fail "Depends ($depends) does not name postgresql-$PG_MAJOR"
for soname in $(objdump -p "$DIR/unpacked/usr/lib/postgresql/$PG_MAJOR/lib/snowflake_id.so" | awk '$1 == "NEEDED" { print $2 }'); do
  path=$(ldconfig -p | awk -v lib="$soname" '$1 == lib && path == "" { path = $NF } END { print path }')
  [ -n "$path" ] || fail "snowflake_id.so needs $soname, which this system does not have"
  owner=$(dpkg -S "$path" 2>/dev/null || dpkg -S "$(readlink -f "$path")") || fail "no package owns $path ($soname)"
  owner=${owner%%:*}
  [[ ", $depends," == *", $owner "* || ", $depends," == *", $owner,"* ]] ||
    fail "snowflake_id.so needs $soname, from $owner, which Depends ($depends) does not name"
done

# cargo_pgrx_bin VERSION: a folder holding cargo-pgrx VERSION: ~/.cargo/bin's when it is that
# version, else PG_TREES/cargo-pgrx-VERSION, installed there the first time (minutes). Built
# unoptimised (`--debug`): it only drives cargo and writes the package's files, and its ~300
# crates compile in less time so (on a fresh machine the release build took 5.2 minutes of the
# test command's 45).
cargo_pgrx_bin() {
  local version=$1 home_bin=${CARGO_HOME:-$HOME/.cargo}/bin folder
  if [ -x "$home_bin/cargo-pgrx" ] && [ "$("$home_bin/cargo-pgrx" pgrx --version 2>/dev/null)" = "cargo-pgrx $version" ]; then
    echo "$home_bin"
    return 0
  fi
  folder=$PG_TREES/cargo-pgrx-$version
  if [ "$("$folder/bin/cargo-pgrx" pgrx --version 2>/dev/null)" != "cargo-pgrx $version" ]; then
    echo "package-test: installing cargo-pgrx $version into $folder, for the previous release's build (once)" >&2
    (cd / && as_root cargo install cargo-pgrx --version "$version" --locked --debug --root "$folder" >&2)
  fi
  echo "$folder/bin"
}

# previous_release_deb: sets PREVIOUS_DEB to the previous release's package of this major. The
# previous release is the newest whose install script sql/ keeps; its commit, the one
# sql/release-commits names for it. Built from that commit in a temporary
# worktree by its own scripts/package.sh (seeded with this major's release build, so that only
# what changed is compiled), once: kept in target/debian/previous/, as a released package
# never changes. Fails when the history does not hold the commit (a shallow clone whose origin
# cannot be fetched from).
previous_release_deb() {
  local previous release commit built
  previous=$(full_script_versions sql | tail -n 1)
  PREVIOUS_DEB="$SNOWFLAKE_ROOT/target/debian/previous/${NAME}_${previous}_$(dpkg --print-architecture).deb"
  [ -f "$PREVIOUS_DEB" ] && return 0
  # A shallow clone lacks the release's commit: its history is fetched first (from the clone's
  # origin), once.
  if [ "$(git rev-parse --is-shallow-repository)" = true ]; then
    git fetch -q --unshallow || true
  fi
  release=$(awk -v version="$previous" '$1 == version { print $2 }' sql/release-commits)
  [ -n "$release" ] || fail "sql/release-commits names no commit for release $previous"
  commit=$(git rev-parse --verify -q "$release^{commit}") || fail "no commit $release of release $previous in this history (a shallow clone? git fetch --unshallow)"
  grep -qx "version = \"$previous\"" <<<"$(git show "$commit:Cargo.toml")" || fail "commit $commit is not release $previous"
  BUILD=$(mktemp -d)
  git worktree add --detach "$BUILD" "$commit" >/dev/null 2>&1
  mkdir -p "$BUILD/target/pg$PG_MAJOR"
  cp -a "$CARGO_TARGET_DIR/release" "$BUILD/target/pg$PG_MAJOR/"
  # The release is built as it was: with the cargo-pgrx of the pgrx its Cargo.toml pins (one
  # cargo-pgrx builds only its own pgrx), first on PATH, and the Rust its checkout names
  # (outside this checkout: none before 0.8.0's rust-toolchain.toml, so rustup's default).
  local old_pgrx old_cargo_pgrx
  old_pgrx=$(git show "$commit:Cargo.toml" | sed -n 's/^pgrx = "=\([0-9.]*\)"/\1/p')
  [ -n "$old_pgrx" ] || fail "commit $commit's Cargo.toml pins no pgrx version"
  old_cargo_pgrx=$(cargo_pgrx_bin "$old_pgrx")
  built=$(PATH="$old_cargo_pgrx:$PATH" PG_MAJOR="$PG_MAJOR" "$BUILD/scripts/package.sh" | tail -n 1)
  mkdir -p "$(dirname "$PREVIOUS_DEB")"
  cp "$built" "$PREVIOUS_DEB"
  git worktree remove --force "$BUILD"
  BUILD=""
}

remove_installed_extension
if ! $SYSTEM; then
  as_root cp "$DIR/unpacked/usr/lib/postgresql/${PG_MAJOR}/lib/snowflake_id.so" "$LIB_DIR/"
  as_root cp "$DIR/unpacked/usr/share/postgresql/${PG_MAJOR}/extension/"* "$EXT_DIR/"
  cluster_init "$DIR"
  cluster_start "$DIR"
  check_installed_extension "$DIR" "$VERSION" || fail "the installed extension"
  echo "package-test: $(basename "$DEB") unpacked into PostgreSQL $PG_MAJOR, preloaded, created, updated from 0.1.0, 10000 IDs issued: ok"
  exit 0
fi

# The previous release, installed, running and issuing.
previous_release_deb
PREVIOUS=$(dpkg-deb -f "$PREVIOUS_DEB" Version)
apt_get install "$PREVIOUS_DEB"
cluster_init "$DIR"
cluster_start "$DIR"
cluster_psql "$DIR" -q -d postgres -c "CREATE DATABASE shop"
cluster_psql "$DIR" -q -d shop <<'SQL'
CREATE EXTENSION snowflake_id;
CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT snowflake_nextval(5), note text);
INSERT INTO orders (note) SELECT 'before ' || g FROM generate_series(1, 1000) g;
SQL

# Upgraded in place under the running server, which goes on answering on the old library.
postmaster=$(cluster_postmaster_pid "$DIR")
apt_get install "$DEB"
[ "$(dpkg-query -W -f='${Status} ${Version}' "$NAME")" = "install ok installed $VERSION" ] ||
  fail "$NAME $VERSION is not installed after the upgrade"
cluster_psql "$DIR" -qtA -d shop -c "INSERT INTO orders (note) VALUES ('during')" >/dev/null ||
  fail "the server running $PREVIOUS stopped working when the package was upgraded"
[ "$(cluster_postmaster_pid "$DIR")" = "$postmaster" ] || fail "the upgrade restarted the server"
cluster_stop "$DIR"
cluster_start "$DIR"
result=$(cluster_psql "$DIR" -qtA -d shop <<'SQL'
SELECT extversion FROM pg_extension WHERE extname = 'snowflake_id';
ALTER EXTENSION snowflake_id UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'snowflake_id';
INSERT INTO orders (note) SELECT 'after ' || g FROM generate_series(1, 1000) g;
SELECT count(DISTINCT id) || ' ' || bool_and(snowflake_shard(id) = 5) FROM orders;
SELECT (SELECT min(id) FROM orders WHERE note LIKE 'after%') > (SELECT max(id) FROM orders WHERE note NOT LIKE 'after%');
SQL
)
[ "$result" = "$PREVIOUS
$VERSION
2001 true
t" ] || fail "expected $PREVIOUS updated to $VERSION and 2001 IDs of shard 5 in order, got: $result"
check_installed_extension "$DIR" "$VERSION" || fail "the upgraded package"

# Removed cleanly: not installed, and none of its files left.
files=$(dpkg-query -L "$NAME" | while read -r path; do [ -f "$path" ] && echo "$path"; done)
cluster_stop "$DIR"
apt_get remove "$NAME"
if [[ "$(dpkg-query -W -f='${Status}' "$NAME" 2>/dev/null || true)" == *"ok installed"* ]]; then fail "$NAME is still installed"; fi
for path in $files; do
  [ ! -e "$path" ] || fail "$path is left after the package was removed"
done
echo "package-test: $(basename "$DEB"): Depends right, upgraded in place from $PREVIOUS under a running server, updated, 2001 IDs in order, created, updated from 0.1.0, removed ($(echo "$files" | wc -l) files): ok"
