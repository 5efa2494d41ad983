#!/usr/bin/env bash
# Builds Citus from its source tarball and installs it into the PostgreSQL majors named
# (default: those of CITUS_MAJORS in lib.sh, less those SNOWFLAKE_TEST_MAJORS leaves out when
# scripts/test.sh sets it to the majors of its run), for the Citus layer of the tests
# (tests/integration/tests/citus.rs, docs/citus.md). Called by scripts/setup.sh;
# `./scripts/citus-install.sh 17` builds for one major.
#
# No package registry has Citus, so its source comes as a tarball beside the checkout:
# ../shared/vendor/citus-<version>.tar.gz, or the file SNOWFLAKE_CITUS_TARBALL names. Its sha256
# is checked before anything is built. Nothing of it goes into this repository.
#
# A major that already has Citus (this script's earlier run, or a machine's own package) is
# skipped. Without the tarball, nothing is built and the Citus layer reports itself skipped
# on the majors that lack Citus, saying why. One major took 25 to 51 s on 2 cores here (make -j2),
# about 6 minutes with one job while other work ran.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"

CITUS_VERSION=14.0.1
CITUS_SHA256=acfa9a77cd84a8e1edab26cca4a71355f39c910c01586da89560e0240d4b05ba
TARBALL=${SNOWFLAKE_CITUS_TARBALL:-$SNOWFLAKE_ROOT/../shared/vendor/citus-$CITUS_VERSION.tar.gz}

majors=("$@")
if [ ${#majors[@]} -eq 0 ]; then
  for major in "${CITUS_MAJORS[@]}"; do
    if [ -z "${SNOWFLAKE_TEST_MAJORS:-}" ] || [[ " $SNOWFLAKE_TEST_MAJORS " == *" $major "* ]]; then
      majors+=("$major")
    fi
  done
fi

for major in "${majors[@]}"; do
  pg_config=$(pg_config_of "$major")
  if citus_installed "$pg_config"; then
    continue
  fi
  if [ ! -f "$TARBALL" ]; then
    echo "citus-install: no Citus for PostgreSQL $major: neither installed nor its source at $TARBALL (SNOWFLAKE_CITUS_TARBALL names another); the Citus layer will be skipped there"
    continue
  fi
  if ! echo "$CITUS_SHA256  $TARBALL" | sha256sum --check --status; then
    echo "citus-install: $TARBALL is not Citus $CITUS_VERSION's source (sha256 differs from $CITUS_SHA256)" >&2
    exit 1
  fi
  echo "citus-install: building Citus $CITUS_VERSION for PostgreSQL $major (a minute or more, once)"
  work=$(mktemp -d)
  tar xzf "$TARBALL" --no-same-owner -C "$work"
  log=$work/build.log
  # The trees are built with lz4, zstd and GSSAPI, whose headers Citus's build includes;
  # libcurl serves only Citus's anonymous statistics collection, not wanted in tests.
  if ! (cd "$work/citus-$CITUS_VERSION" &&
        ./configure PG_CONFIG="$pg_config" --without-libcurl &&
        make -j2 &&
        as_root make install) >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    echo "citus-install: the build for PostgreSQL $major failed (above, the end of its log)" >&2
    rm -rf "$work"
    exit 1
  fi
  rm -rf "$work"
  # The server runs as an unprivileged user, which must read what was installed.
  as_root chmod a+r "$("$pg_config" --pkglibdir)"/citus*.so "$("$pg_config" --sharedir)"/extension/citus*
  citus_installed "$pg_config" || { echo "citus-install: Citus not found in PostgreSQL $major after its install" >&2; exit 1; }
done
