#!/usr/bin/env bash
# Builds an installable Debian package of the extension for one PostgreSQL major, from the
# output of `cargo pgrx package` plus the earlier versions' scripts in sql/:
#
#   ./scripts/package.sh               ->  target/debian/postgresql-15-snowflake-id_<version>_<arch>.deb
#   PG_MAJOR=16 ./scripts/package.sh   ->  target/debian/postgresql-16-snowflake-id_<version>_<arch>.deb
#                                          (likewise 17 and 18)
#
# The package installs into the layout of Debian's and PGDG's packages
# (/usr/lib/postgresql/<major>/lib and /usr/share/postgresql/<major>/extension) whatever
# pg_config the build used, and depends on their postgresql-<major> and on the packages of the
# shared libraries the library links (dpkg-shlibdeps, with the least versions its symbols
# need). It carries the release notes (CHANGELOG.md) in /usr/share/doc/<package>/. The
# maintainer comes from META.json, which must name the same version as Cargo.toml and the
# majors tested. It prints the package's path as its last line.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

NAME="postgresql-${PG_MAJOR}-snowflake-id"
VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | sed -n 1p)
ARCH=$(dpkg --print-architecture)
DEB="$SNOWFLAKE_ROOT/target/debian/${NAME}_${VERSION}_${ARCH}.deb"

# PGXN's metadata describes the same release: valid JSON, same version.
python3 -m json.tool META.json >/dev/null
META_VERSION=$(python3 -c 'import json; print(json.load(open("META.json"))["version"])')
MAINTAINER=$(python3 -c 'import json; print(json.load(open("META.json"))["maintainer"][0])')
if [ "$META_VERSION" != "$VERSION" ]; then
  echo "package: META.json says version $META_VERSION, Cargo.toml $VERSION" >&2
  exit 1
fi
# ... and lists the majors tested, those of scripts/lib.sh.
META_MAJORS=$(python3 -c 'import json; print(" ".join(json.load(open("META.json"))["x_postgresql_tested"]))')
if [ "$META_MAJORS" != "${SUPPORTED_MAJORS[*]}" ]; then
  echo "package: META.json's x_postgresql_tested says $META_MAJORS, scripts/lib.sh tests ${SUPPORTED_MAJORS[*]}" >&2
  exit 1
fi

STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
log="$STAGE/build.log"
if ! cargo pgrx package --pg-config "$PG_CONFIG" "${CARGO_FEATURES[@]}" --out-dir "$STAGE/pgrx" >"$log" 2>&1; then
  cat "$log"; exit 1
fi

ROOT="$STAGE/root"
LIB_DIR="usr/lib/postgresql/${PG_MAJOR}/lib"
EXT_DIR="usr/share/postgresql/${PG_MAJOR}/extension"
install -D -m 755 "$STAGE/pgrx$("$PG_CONFIG" --pkglibdir)/snowflake_id.so" "$ROOT/$LIB_DIR/snowflake_id.so"
install -d "$ROOT/$EXT_DIR"
install -m 644 "$STAGE/pgrx$("$PG_CONFIG" --sharedir)/extension/"snowflake_id* "$ROOT/$EXT_DIR/"
# cargo pgrx copies only the upgrade scripts; the earlier full scripts come too (sql/README.md).
install -m 644 sql/snowflake_id--*.sql "$ROOT/$EXT_DIR/"
install -D -m 644 CHANGELOG.md "$ROOT/usr/share/doc/$NAME/CHANGELOG.md"

# The libraries the .so links (libc, libgcc_s) and the least versions its symbols need, as
# Debian's own packages declare them; dpkg-shlibdeps wants a debian/control to exist, only.
mkdir "$STAGE/debian"
touch "$STAGE/debian/control"
SHLIBS_DEPENDS=$(cd "$STAGE" && dpkg-shlibdeps -O "root/$LIB_DIR/snowflake_id.so" 2>/dev/null |
  sed -n 's/^shlibs:Depends=//p')
[ -n "$SHLIBS_DEPENDS" ] || { echo "package: dpkg-shlibdeps found no dependency of snowflake_id.so" >&2; exit 1; }

mkdir "$ROOT/DEBIAN"
cat >"$ROOT/DEBIAN/control" <<CONTROL
Package: ${NAME}
Version: ${VERSION}
Architecture: ${ARCH}
Maintainer: ${MAINTAINER}
Section: database
Priority: optional
Depends: postgresql-${PG_MAJOR}, ${SHLIBS_DEPENDS}
Installed-Size: $(du -sk "$ROOT/usr" | cut -f1)
Description: Snowflake-style 64-bit IDs generated inside PostgreSQL ${PG_MAJOR}
 snowflake_id issues time-ordered, decodable 64-bit primary keys for sharded
 databases from shared memory. Add snowflake_id to shared_preload_libraries,
 restart, and run CREATE EXTENSION snowflake_id.
CONTROL

mkdir -p target/debian
dpkg-deb --root-owner-group --build "$ROOT" "$DEB" >/dev/null
echo "$DEB"
