#!/usr/bin/env bash
# Builds LazyFS, the FUSE file system that loses what was written but not fsynced when told to
# (the power loss Jepsen tests with), for the campaign's power-loss fault and the power_loss
# integration test: every server's data directory of theirs lies on a LazyFS mount of its own.
# Called by scripts/setup.sh; skipped when built already.
#
# No package registry has LazyFS, so its source comes as a tarball beside the checkout:
# ../shared/vendor/lazyfs-<version>.tar.gz, or the file SNOWFLAKE_LAZYFS_TARBALL names. Its sha256
# is checked before anything is built, and scripts/lazyfs-0.3.0.patch applied (Debian's toml11
# and spdlog instead of downloads; new files owned by their maker). It lands in
# $PG_TREES/lazyfs-<version> (lazyfs_binary in lib.sh). Without the tarball nothing is built and
# the tests that need it fail saying so. About a minute on 2 cores.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"

LAZYFS_SHA256=8f9aee44d7df7d22240fbb275b4b184ab8890c799356efa96c61c4c2c4514e90
TARBALL=${SNOWFLAKE_LAZYFS_TARBALL:-$SNOWFLAKE_ROOT/../shared/vendor/lazyfs-$LAZYFS_VERSION.tar.gz}
folder=$PG_TREES/lazyfs-$LAZYFS_VERSION

if [ -x "$(lazyfs_binary)" ] && [ -f "$folder/.complete" ]; then
  exit 0
fi
if [ ! -f "$TARBALL" ]; then
  echo "lazyfs-install: no LazyFS: its source is not at $TARBALL (SNOWFLAKE_LAZYFS_TARBALL names another); the test command stops before its layers, since the power-loss tests need it (the campaign alone makes do with kill -9)"
  exit 0
fi
if ! echo "$LAZYFS_SHA256  $TARBALL" | sha256sum --check --status; then
  echo "lazyfs-install: $TARBALL is not LazyFS $LAZYFS_VERSION's source (sha256 differs from $LAZYFS_SHA256)" >&2
  exit 1
fi
echo "lazyfs-install: building LazyFS $LAZYFS_VERSION into $folder (a minute, once)"
as_root rm -rf "$folder"
as_root mkdir -p "$folder"
as_root tar xzf "$TARBALL" --no-same-owner --strip-components=1 -C "$folder"
log=$(mktemp)
# The library first: the file system links it from its build folder, where it stays.
if ! (cd "$folder" &&
      as_root patch -p1 --quiet < "$SNOWFLAKE_ROOT/scripts/lazyfs-$LAZYFS_VERSION.patch" &&
      cd libs/libpcache && as_root ./build.sh &&
      cd ../../lazyfs && as_root ./build.sh) >"$log" 2>&1; then
  tail -n 40 "$log" >&2
  echo "lazyfs-install: the build failed (above, the end of its log)" >&2
  rm -f "$log"
  exit 1
fi
rm -f "$log"
as_root chmod -R a+rX "$folder"
as_root touch "$folder/.complete"
echo "lazyfs-install: $(lazyfs_binary)"
