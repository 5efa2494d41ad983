#!/usr/bin/env bash
# Runs every test layer and fails if any fails. Sets up what is missing first (scripts/setup.sh).
#
#   1. format and lints      cargo fmt --check, cargo clippy -D warnings
#   2. unit + backend tests  cargo pgrx test: plain #[test]s (layout, clock policy with a fake
#                            clock) and #[pg_test]s (shared memory, settings) in a live backend
#   3. SQL surface           scripts/regress.sh: pg_regress golden files in tests/pg_regress
#   4. integration + faults  tests/integration: real servers started by the tests (many
#                            connections at once, startup settings, standby, clock policy;
#                            kill -9, immediate stop, faked clocks, failover, dump/restore;
#                            converting a key under concurrent inserts, upgrade from 0.1.0;
#                            deploy/fleet.sh: shard servers behind a PL/Proxy router)
#   5. package               scripts/package-test.sh: the Debian package installed with dpkg,
#                            used by a fresh cluster, removed; the development build put back
#   6. benchmark smoke       scripts/bench.sh --smoke: every contender of the benchmark runs
#                            with tiny sizes and the report is written (no timing asserted)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

./scripts/setup.sh

# The cluster of `cargo pgrx test` lives here, owned by the unprivileged server user.
WORK=$(mktemp -d /tmp/snowflake_id-test.XXXXXX)
RUNAS=()
if [ "$(id -u)" -eq 0 ]; then
  chown postgres: "$WORK"
  RUNAS=(--runas postgres)
fi
trap 'rm -rf "$WORK"' EXIT
# Everything is also kept in a log, from which the closing summary is counted.
exec > >(tee "$WORK/output.log") 2>&1

step() { printf '\n=== %s\n' "$*"; }

step "format and lints"
cargo fmt --check
cargo clippy --all-targets --features pg15 -- -D warnings
cargo fmt --check --manifest-path tests/integration/Cargo.toml
cargo clippy --all-targets --manifest-path tests/integration/Cargo.toml -- -D warnings

step "unit and backend tests (cargo pgrx test)"
cargo pgrx test "pg$PG_MAJOR" "${RUNAS[@]}" --pgdata "$WORK/pgrx-test"

step "SQL surface (pg_regress; installs the release build into the system PostgreSQL)"
./scripts/regress.sh

step "integration tests against real servers"
cargo test --release --manifest-path tests/integration/Cargo.toml

step "Debian package (installs it into the system PostgreSQL with dpkg, then removes it)"
./scripts/package-test.sh

step "benchmark smoke run (tiny sizes; checks the contenders and the report, not speed)"
./scripts/bench.sh --smoke "$WORK/bench"

# One closing line over all layers: cargo's "N passed", pg_regress's "All N tests passed",
# the package test's line and the benchmark's.
awk '/test result: ok\./ { for (i = 1; i < NF; i++) if ($(i + 1) ~ /^passed/) n += $i }
     /All [0-9]+ tests passed/ { n += $2 }
     /^(package-test|bench): .*: ok$/ { n += 1 }
     END { printf "\n%d passed, 0 failed\n", n }' "$WORK/output.log"
