#!/usr/bin/env bash
# Tests the PGXN release as PGXN's client uses it, on the current major: builds the zip
# (scripts/pgxn.sh), removes the development build from PostgreSQL's folders, and has Debian's
# pgxnclient install the zip (`pgxn install <zip> --pg_config <path>`: it unpacks it and runs
# the Makefile's make and make install); then a fresh cluster preloads the library, creates the
# extension (and one at the first release, updated) and issues IDs; `pgxn uninstall` removes
# every file; the development build is installed back.
#
# The zip's make builds with cargo-pgrx into this major's target folder (CARGO_TARGET_DIR, as
# the other layers do), so only the extension's own two crates are compiled again (the zip is
# unpacked elsewhere, so cargo sees them as other packages), not their dependencies.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

ZIP=$(./scripts/pgxn.sh | tail -n 1)
VERSION=$(python3 -c 'import json; print(json.load(open("META.json"))["version"])')
LIB=$("$PG_CONFIG" --pkglibdir)/snowflake_id.so
EXT_DIR="$("$PG_CONFIG" --sharedir)/extension"
SUDO=()
[ "$(id -u)" -eq 0 ] || SUDO=(--sudo)

DIR=$(cluster_temp_dir pgxn)
cleanup() {
  cluster_stop "$DIR"
  rm -rf "$DIR"
  remove_installed_extension
  install_extension
}
trap cleanup EXIT
fail() { echo "pgxn-test: FAILED: $*" >&2; exit 1; }

remove_installed_extension
quietly pgxn install --pg_config "$PG_CONFIG" "${SUDO[@]}" "$ZIP"
[ -f "$LIB" ] || fail "pgxn install did not install $LIB"
for version in $(full_script_versions sql) "$VERSION"; do
  [ -f "$EXT_DIR/snowflake_id--$version.sql" ] || fail "pgxn install did not install the script of $version"
done

cluster_init "$DIR"
cluster_start "$DIR"
check_installed_extension "$DIR" "$VERSION" || fail "the extension pgxn installed"
cluster_stop "$DIR"

quietly pgxn uninstall --pg_config "$PG_CONFIG" "${SUDO[@]}" "$ZIP"
left=$(find "$LIB" "$EXT_DIR" -maxdepth 1 -name 'snowflake_id*' 2>/dev/null || true)
[ -z "$left" ] || fail "pgxn uninstall left $left"
echo "pgxn-test: $(basename "$ZIP") installed by pgxn into PostgreSQL $PG_MAJOR, preloaded, created, updated from 0.1.0, 10000 IDs issued, uninstalled: ok"
