#!/usr/bin/env bash
# Tests the Debian package as a user would use it: builds it (scripts/package.sh), removes
# the development build from PostgreSQL's folders so that only the package's files are
# there, installs the package with `dpkg -i`, starts a fresh cluster with the library
# preloaded, creates the extension (and updates one created at the first release), issues
# IDs, then removes the package with `dpkg -r` and installs the development build back.
#
# dpkg installs into Debian's PostgreSQL (/usr/lib/postgresql/15, PG_MAJOR=15, the default);
# for a PostgreSQL elsewhere (16, 17 and 18: the trees scripts/setup.sh unpacks, which no
# package owns) the package's files are unpacked (`dpkg-deb -x`) and copied into that one.
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
remove_files() { as_root rm -f "$LIB_DIR/snowflake_id.so" "$EXT_DIR"/snowflake_id.control "$EXT_DIR"/snowflake_id--*.sql; }
cleanup() {
  cluster_stop "$DIR"
  rm -rf "$DIR"
  if $SYSTEM; then
    as_root dpkg -r "$NAME" >/dev/null || true
  fi
  remove_files
  install_extension
}
trap cleanup EXIT
fail() { echo "package-test: FAILED: $*" >&2; exit 1; }

remove_files
if $SYSTEM; then
  as_root dpkg -i "$DEB" >/dev/null
  dpkg-query -W -f='${Status}' "$NAME" | grep -q "install ok installed" || fail "$NAME is not installed"
else
  dpkg-deb -x "$DEB" "$DIR/unpacked"
  as_root cp "$DIR/unpacked/usr/lib/postgresql/${PG_MAJOR}/lib/snowflake_id.so" "$LIB_DIR/"
  as_root cp "$DIR/unpacked/usr/share/postgresql/${PG_MAJOR}/extension/"* "$EXT_DIR/"
fi

cluster_init "$DIR"
cluster_start "$DIR"
cluster_psql "$DIR" -q -d postgres -c "CREATE DATABASE first_release"
result=$(cluster_psql "$DIR" -qtA -d postgres <<'SQL'
CREATE EXTENSION snowflake_id;
CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT snowflake_nextval(3), note text);
INSERT INTO orders (note) SELECT 'order ' || g FROM generate_series(1, 10000) g;
SELECT extversion FROM pg_extension WHERE extname = 'snowflake_id';
SELECT count(DISTINCT id) || ' ' || bool_and(snowflake_shard(id) = 3) FROM orders;
SQL
)
[ "$result" = "$VERSION
10000 true" ] || fail "expected version $VERSION and 10000 distinct IDs of shard 3, got: $result"
updated=$(cluster_psql "$DIR" -qtA -d first_release <<'SQL'
CREATE EXTENSION snowflake_id VERSION '0.1.0';
ALTER EXTENSION snowflake_id UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'snowflake_id';
SQL
)
[ "$updated" = "$VERSION" ] || fail "ALTER EXTENSION UPDATE from 0.1.0 reached '$updated', not $VERSION"
echo "package-test: $(basename "$DEB") installed, preloaded, created, updated from 0.1.0, 10000 IDs issued: ok"
