#!/usr/bin/env bash
# Runs the test layers on PostgreSQL 15, 16, 17, 18 and 19 and fails if any fails. Sets up what is
# missing first (scripts/setup.sh). `PG_MAJOR=18 ./scripts/test.sh` runs one major only;
# `PG_MAJOR="17 18" ./scripts/test.sh` the majors named (in the order of SUPPORTED_MAJORS).
#
#   1. format and lints      cargo fmt --check, cargo clippy -D warnings (the pure rules and the
#                            integration tests here; the extension for each major in its turn);
#                            every shell script through shellcheck (scripts/lint-shell.sh);
#                            every SQL function pinning search_path (scripts/lint-sql.sh);
#                            the releases of sql/release-commits tagged in this clone, each
#                            at its commit (scripts/tag-releases.sh)
#   2. the pure rules        cargo test -p snowflake_core: layout, clock policy with a fake
#                            clock, reservation rules, UTC; no PostgreSQL, seconds; the
#                            simulation of where a server resumes, seeds drawn for 90 s
#                            (scripts/simulate.sh), and the registry's, for 20 s
#                            (scripts/simulate.sh --registry); the registry's etcd client
#                            against a real etcd (cargo test -p snowflake_registry); beside
#                            them, on the other core, the lock-free protocol model-checked with
#                            loom (claims racing raises, lowerings, a promotion, advance; every
#                            interleaving and weak-memory outcome within LOOM_MAX_PREEMPTIONS =
#                            3; under a minute on one thread), then the integration tests'
#                            release build
#      monitoring rules      scripts/monitoring-test.sh: promtool checks the alert rules of
#                            deploy/monitoring/ and runs their unit tests (series that fire and
#                            series that do not); each alert's runbook section exists; seconds
#   then, for each major (every layer on 15 and 19, the oldest and the newest; on 16, 17 and 18
#   all but the backend tests, the campaign and the benchmark smoke run; of the integration
#   tests, those of what differs by major on every major, the others on 19: see FULL_MAJORS
#   below):
#      clippy                cargo clippy --all-targets -D warnings for that major
#   3. backend tests         cargo pgrx test: #[pg_test]s (shared memory, settings) in a live
#                            backend, and the extension's own #[test]s
#   4. SQL surface           scripts/regress.sh: pg_regress golden files in tests/pg_regress;
#                            scripts/doc-examples.sh: every sql and psql example of README.md
#                            and docs/ run against a server, the shown output compared
#   5. integration + faults  tests/integration: real servers started by the tests (many
#                            connections at once, startup settings, standby, clock policy;
#                            kill -9, immediate stop, power loss (LazyFS drops what was not
#                            fsynced), faked clocks, failover, dump/restore;
#                            converting a key under concurrent inserts, upgrade from 0.1.0;
#                            deploy/fleet.sh: shard servers behind a PL/Proxy router;
#                            deploy/patroni.sh (15): three Patroni nodes on etcd under one
#                            writer through a multi-host URL, switchovers and crash failovers
#                            (pg_rewind), a leader run ahead then killed, async and synchronous;
#                            deploy/mesh.sh: three active-active nodes on logical replication
#                            under 12 writers, one node killed -9 and restarted, converging with
#                            no conflict on snowflake keys where a bigserial control conflicts;
#                            on 19, pg_upgrade from each earlier major tested in the run;
#                            on 17 and 18 (CITUS_MAJORS), a Citus coordinator and workers
#                            written to from every node while a worker joins, shards move
#                            and a worker is killed -9 (docs/citus.md);
#                            the monitoring queries scraped through the real exporter)
#      fault campaign        scripts/campaign.sh --short, on 15 and 19: a primary, its standby
#                            and a second server under 10 writers and 8 readers, faults drawn
#                            from fixed seeds (kill -9, power losses on LazyFS, failovers, shard
#                            moves, faked clocks, slow and failing fsync, refused starts, an HA
#                            manager's death),
#                            judged by the checks of docs/reliability.md; two seeds on 15 and
#                            one on 19, about 2 minutes each; on 19 also one seed with every
#                            server claiming its shards from an etcd (scripts/campaign.sh
#                            --registry: etcd down, a claim stolen, a copy of the pair's
#                            primary started beside it)
#   6. install channels      scripts/package-test.sh: the Debian package's Depends checked against
#                            the libraries it links; on 15 installed with dpkg as the previous
#                            release, a cluster running, upgraded in place, updated, removed
#                            cleanly (on 16 to 19 unpacked into the tree and used);
#                            scripts/pgxn-test.sh: the PGXN zip installed by pgxnclient (make,
#                            make install), used by a fresh cluster, uninstalled;
#                            scripts/image-test.sh (18, 19): the CloudNativePG extension image
#                            unpacked and mounted into a PostgreSQL without the extension through
#                            extension_control_path and dynamic_library_path, as the operator does
#   7. benchmark smoke       scripts/bench.sh --smoke, on 15 and 19: every contender of the
#                            benchmark runs with tiny sizes, the report is written, and the
#                            scaling sweep runs one short point (no timing asserted)
#   8. clients               tests/clients/run.sh, on the first major only: the recipes of
#                            docs/clients/ run with real drivers and ORMs (Python, Node, Rust,
#                            Go, Java, Ruby), pinned installs in git-ignored folders
#   last, bystanders         a cluster started before the layers, not by any of them, still
#                            answers from the same postmaster (and so does a running demo):
#                            no layer stops or reuses a cluster it did not start
#
# PL/Proxy and pg_partman come from Debian's packages, for PostgreSQL 15 only: the layers that
# need them (the fleet test, the partman regress file) run on 15 and are reported as skipped on
# the others. The mesh test needs subscriptions with origin = none (PostgreSQL 16 or later): it
# is reported as skipped on 15. Citus is built from its source tarball by scripts/setup.sh
# (scripts/citus-install.sh, about a minute per major on 2 cores, once) for 17 and 18: the
# Citus test is reported as skipped on the other majors, and on those where Citus could not be
# installed (no source tarball), saying why.
set -euo pipefail
cd "$(dirname "$0")/.."
REQUESTED_MAJORS=${PG_MAJOR:-}
# lib.sh starts on the first major named (15 when none is).
if [ -n "$REQUESTED_MAJORS" ]; then export PG_MAJOR=${REQUESTED_MAJORS%% *}; fi
source scripts/lib.sh

# The majors of this run, in the order of SUPPORTED_MAJORS (so that pg_upgrade's old majors
# are tested, and installed, before the new one).
MAJORS=()
for major in "${SUPPORTED_MAJORS[@]}"; do
  if [ -z "$REQUESTED_MAJORS" ] || [[ " $REQUESTED_MAJORS " == *" $major "* ]]; then
    MAJORS+=("$major")
  fi
done
for major in $REQUESTED_MAJORS; do
  pg_config_of "$major" >/dev/null || exit 2
done

# The majors' share of the layers, chosen so that the whole command stays under 45 minutes on 2
# cores with five majors (docs/development.md, "What a run costs", has the figures):
# - every major: clippy, the SQL surface, the install channels, and the integration tests of the
#   code and behaviour that differ by major (INTEGRATION_EVERY_MAJOR): the start (shared memory,
#   settings, the layout), the reservation's WAL records and their replay, standbys and
#   failover, crashes;
# - the oldest and the newest (FULL_MAJORS, 15 and 19) also: the backend tests, a standby
#   restarted before its promotion, the mesh's logical replication (16 and later), the fault
#   campaign and the benchmark's smoke run;
# - the newest also the integration files of rules that PostgreSQL's major does not reach
#   (INTEGRATION_NEWEST: every file not named above), and pg_upgrade to it from every earlier
#   major of the run; 15 the tests of Debian's packages for it (PL/Proxy's fleet, Patroni).
NEWEST_MAJOR=${SUPPORTED_MAJORS[-1]}
FULL_MAJORS=("${SUPPORTED_MAJORS[0]}" "$NEWEST_MAJOR")
INTEGRATION_EVERY_MAJOR=(startup layout_memory wal_rmgr replay crash standby failover)
INTEGRATION_FULL=(standby_restart mesh)
full_major() { [[ " ${FULL_MAJORS[*]} " == *" $1 "* ]]; }
# The campaign with the shard registry (docs/registry.md), on the newest major: a seed whose
# schedule draws a copy of the pair's primary started beside it, etcd down three times and a
# claim stolen, beside restarts, a power loss and a failover.
REGISTRY_CAMPAIGN_SEED=1

# Citus is built only for the majors of this run.
SNOWFLAKE_TEST_MAJORS="${MAJORS[*]}" ./scripts/setup.sh
# Power losses need LazyFS in four integration files (power_loss, and cases of failover,
# switchover and registry): without it the run would fail there, minutes in. It stops now,
# saying how to mend it. (The campaign alone, scripts/campaign.sh, makes do with kill -9.)
if [ ! -x "$SNOWFLAKE_LAZYFS" ]; then
  echo "test: LazyFS is not built ($SNOWFLAKE_LAZYFS), and the power-loss tests need it." >&2
  echo "test: put its source where scripts/lazyfs-install.sh said it looked (or name it in SNOWFLAKE_LAZYFS_TARBALL) and run this again: setup builds it, once." >&2
  exit 1
fi

# The clusters of `cargo pgrx test` live here, owned by the unprivileged server user.
WORK=$(mktemp -d /tmp/snowflake_id-test.XXXXXX)
RUNAS=()
if [ "$(id -u)" -eq 0 ]; then
  chown postgres: "$WORK"
  RUNAS=(--runas postgres)
fi
BYSTANDER=$WORK/bystander
# Work a step runs in the background (beside the simulations, below) ends with the run if it
# fails early: that process and every one it started, by process id.
BESIDE_PID=
kill_tree() {
  local child
  for child in $(pgrep -P "$1"); do kill_tree "$child"; done
  kill "$1" 2>/dev/null || true
}
trap '[ -z "$BESIDE_PID" ] || kill_tree "$BESIDE_PID"; SNOWFLAKE_SEED_TARGET=0 use_major "${MAJORS[0]}"; cluster_stop "$BYSTANDER"; rm -rf "$WORK"' EXIT
# Everything is also kept in a log, from which the closing summary is counted.
exec > >(tee "$WORK/output.log") 2>&1

STARTED=$SECONDS
step() { printf '\n=== %s (%d s)\n' "$*" $((SECONDS - STARTED)); }
skipped() { echo "skipped on PostgreSQL $PG_MAJOR: $*"; }

# clippy runs for each major in its turn, below: a major's target folder is made when the
# major is first used (lib.sh's seed_target_dir), or is the previous major's, renamed once
# that one's layers are done.
step "format and lints"
cargo fmt --all --check
cargo fmt --check --manifest-path tests/integration/Cargo.toml
cargo clippy -p snowflake_core -p snowflake_registry --all-targets -- -D warnings
test_crate_cargo clippy --all-targets -- -D warnings
./scripts/lint-shell.sh
./scripts/lint-sql.sh
./scripts/mutations.sh --check
./scripts/tag-releases.sh

step "the pure rules (cargo test -p snowflake_core; no PostgreSQL)"
# Beside everything else of this step: loom's models (one test thread), then the test crate's
# release build that the integration steps run. The two simulations spend fixed budgets of wall
# time on one thread each, so they would leave the second core idle for their 110 s; this work
# fills it (while it compiles it takes both cores, and the simulations draw somewhat fewer runs).
# The models are built with loom's atomics in a target folder of their own (so the normal
# builds stay valid); the output of both is kept apart and shown once they end, and a failure
# of either fails the step.
(
  RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom LOOM_MAX_PREEMPTIONS=3 \
    cargo test -p snowflake_core --release --test loom -- --test-threads=1
  test_crate_cargo test --release --no-run
) >"$WORK/beside.log" 2>&1 &
BESIDE_PID=$!
cargo test -p snowflake_core
# The registry's etcd client against a real etcd each test starts on loopback (seconds).
cargo test -p snowflake_registry
# Where a server resumes, under fault schedules drawn at random for 90 s (the seeds' base is
# printed; a failure prints its seed and its shrunk schedule, and fails the step).
./scripts/simulate.sh --seconds 90
# The registry's rules (docs/registry.md) under clones, promotions and outages, 20 s.
./scripts/simulate.sh --registry --seconds 20
echo "loom's models and the test crate's build (run beside the simulations):"
beside_status=0
wait "$BESIDE_PID" || beside_status=$?
BESIDE_PID=
cat "$WORK/beside.log"
[ "$beside_status" = 0 ] || { echo "loom's models or the test crate's build failed (exit $beside_status)" >&2; exit 1; }

step "monitoring rules (promtool test rules; no PostgreSQL)"
./scripts/monitoring-test.sh

# ---- Bystanders: clusters the layers did not start, checked after them -------------------
# A cluster of the first major, with the extension preloaded like the demo's, in a folder
# of this run, and the demo if one is running: each must still answer from the same
# postmaster once every layer has run.
step "bystanders: a cluster the layers did not start (PostgreSQL ${MAJORS[0]})"
use_major "${MAJORS[0]}"
install_extension
mkdir "$BYSTANDER"
[ "$(id -u)" -eq 0 ] && chown postgres: "$BYSTANDER"
cluster_init "$BYSTANDER"
cluster_start "$BYSTANDER"
declare -A BYSTANDER_PIDS=(["$BYSTANDER"]=$(cluster_postmaster_pid "$BYSTANDER"))
for demo in "$PWD/.run/demo" "$(cluster_fallback_dir demo)"; do
  [ -f "$demo/data/postmaster.pid" ] && BYSTANDER_PIDS["$demo"]=$(cluster_postmaster_pid "$demo")
done
echo "watching: ${!BYSTANDER_PIDS[*]}"

for major in "${MAJORS[@]}"; do
  use_major "$major"

  step "PostgreSQL $major: clippy"
  cargo clippy --all-targets "${CARGO_FEATURES[@]}" -- -D warnings

  if full_major "$major"; then
    step "PostgreSQL $major: backend tests (cargo pgrx test)"
    unlink_installed_library
    cargo pgrx test "pg$major" "${CARGO_FEATURES[@]}" "${RUNAS[@]}" --pgdata "$WORK/pgrx-test-$major"
  else
    skipped "the backend tests (cargo pgrx test; run on ${FULL_MAJORS[*]})"
  fi

  step "PostgreSQL $major: SQL surface (pg_regress and the docs' examples; installs the release build into PostgreSQL $major)"
  ./scripts/regress.sh
  ./scripts/doc-examples.sh

  step "PostgreSQL $major: integration tests against real servers"
  # --lib: the test library's own unit tests (the campaign's helpers), in milliseconds.
  integration=(--lib) left_out=()
  for file in tests/integration/tests/*.rs; do
    name=$(basename "$file" .rs)
    if [ "$name" = campaign ]; then
      continue # a step of its own, below
    elif [ "$name" = fleet ] && [ "$major" != 15 ]; then
      skipped "integration test 'fleet' (PL/Proxy is packaged by Debian for PostgreSQL 15 only)"
    elif [ "$name" = patroni ] && [ "$major" != 15 ]; then
      skipped "integration test 'patroni' (about 2.5 minutes, most of it Patroni's 20 s ttl at each failover: run on 15 only for the time budget)"
    elif [ "$name" = mesh ] && [ "$major" -lt 16 ]; then
      skipped "integration test 'mesh' (active-active needs subscriptions with origin = none, PostgreSQL 16 or later)"
    elif [ "$name" = citus ]; then
      if [ "$major" -ge 19 ]; then
        skipped "integration test 'citus' (no Citus release supports PostgreSQL $major yet: Citus 14's configure accepts 16 to 18)"
      elif [[ " ${CITUS_MAJORS[*]} " != *" $major "* ]]; then
        skipped "integration test 'citus' (Citus is built for ${CITUS_MAJORS[*]} only: a build takes minutes)"
      elif ! citus_installed "$PG_CONFIG"; then
        skipped "integration test 'citus' (Citus is not installed for PostgreSQL $major, and scripts/citus-install.sh found no source tarball to build it from)"
      else
        integration+=(--test "$name")
      fi
    elif [ "$name" = major_upgrade ]; then
      # On the newest major, from every earlier one of this run (each installed by its own
      # layers before this one).
      if [ "$major" = "$NEWEST_MAJOR" ] && [ "${MAJORS[0]}" != "$major" ]; then
        integration+=(--test "$name")
      else
        skipped "integration test 'major_upgrade' (it moves clusters of the earlier majors of the run to $NEWEST_MAJOR)"
      fi
    elif [[ " ${INTEGRATION_EVERY_MAJOR[*]} " == *" $name "* ]] ||
      { full_major "$major" && [[ " ${INTEGRATION_FULL[*]} " == *" $name "* ]]; } ||
      [ "$major" = "$NEWEST_MAJOR" ]; then
      integration+=(--test "$name")
    else
      left_out+=("$name")
    fi
  done
  if [ ${#left_out[@]} -gt 0 ]; then
    skipped "integration tests ${left_out[*]} (on every major: ${INTEGRATION_EVERY_MAJOR[*]}; on ${FULL_MAJORS[*]} also ${INTEGRATION_FULL[*]}; the others on $NEWEST_MAJOR)"
  fi
  # The old majors of pg_upgrade: those of this run before this one.
  old_pg_configs=()
  for old in "${MAJORS[@]}"; do
    if [ "$old" -lt "$major" ]; then old_pg_configs+=("$(pg_config_of "$old")"); fi
  done
  SNOWFLAKE_UPGRADE_FROM_PG_CONFIGS=$(IFS=:; echo "${old_pg_configs[*]}") \
    test_crate_cargo test --release "${integration[@]}"

  if full_major "$major"; then
    step "PostgreSQL $major: fault campaign, short (the named schedules of tests/integration/schedules.tsv; scripts/campaign.sh --short)"
    ./scripts/campaign.sh --short --no-install --out "$WORK/campaign-$major"
  else
    skipped "the fault campaign's short run (run on ${FULL_MAJORS[*]})"
  fi
  if [ "$major" = "$NEWEST_MAJOR" ]; then
    step "PostgreSQL $major: fault campaign with the shard registry, short (seed $REGISTRY_CAMPAIGN_SEED; scripts/campaign.sh --registry)"
    ./scripts/campaign.sh --registry --seed "$REGISTRY_CAMPAIGN_SEED" --minutes 1.25 --no-install \
      --out "$WORK/campaign-registry-$major"
  fi

  step "PostgreSQL $major: Debian package"
  ./scripts/package-test.sh

  step "PostgreSQL $major: PGXN release (pgxn install of the zip; the build above reused)"
  ./scripts/pgxn-test.sh

  step "PostgreSQL $major: CloudNativePG extension image"
  ./scripts/image-test.sh

  if full_major "$major"; then
    step "PostgreSQL $major: benchmark smoke run (tiny sizes; checks the contenders, the report and the scaling sweep, not speed)"
    ./scripts/bench.sh --smoke "$WORK/bench-$major"
  else
    skipped "the benchmark's smoke run (run on ${FULL_MAJORS[*]})"
  fi

  if [ "$major" = "${MAJORS[0]}" ]; then
    step "PostgreSQL $major: clients (the recipes of docs/clients/ with real drivers and ORMs; once, on the first major)"
    ./tests/clients/run.sh
  fi

  # This major's build is done with. It becomes the next major's, renamed rather than copied
  # (most of a build does not depend on the major), so that a run keeps one major's build on
  # disk at a time instead of five (about 3 GB each).
  for next in "${MAJORS[@]}"; do
    if [ "$next" -gt "$major" ]; then
      if [ ! -e "$SNOWFLAKE_ROOT/target/pg$next" ]; then
        mv "$CARGO_TARGET_DIR" "$SNOWFLAKE_ROOT/target/pg$next"
      fi
      break
    fi
  done
done
# From here on no layer builds: pointing at a major must not copy a build for it.
export SNOWFLAKE_SEED_TARGET=0

step "bystanders: still running from the same postmaster"
use_major "${MAJORS[0]}"
for dir in "${!BYSTANDER_PIDS[@]}"; do
  pid=$(cluster_postmaster_pid "$dir" 2>/dev/null || true)
  if [ "$pid" != "${BYSTANDER_PIDS[$dir]}" ]; then
    echo "bystander: FAILED: the cluster in $dir, running before the layers (postmaster ${BYSTANDER_PIDS[$dir]}), was stopped or replaced by one of them (postmaster now: ${pid:-none})" >&2
    exit 1
  fi
  # The same postmaster, alive in the same data directory, and answering. (A postmaster that
  # died keeps its lock file, and its process id may linger as an unreaped zombie with no
  # working directory: hence the check of both. Servers died this way when a layer rewrote the
  # installed library under them; see unlink_installed_library.)
  if ! [ "/proc/$pid/cwd" -ef "$dir/data" ] ||
     ! answer=$(cluster_psql "$dir" -qtA -d postgres -c "SELECT 1" 2>&1); then
    echo "bystander: FAILED: the cluster in $dir (postmaster $pid) died during the layers: ${answer:-its postmaster is gone}" >&2
    tail -n 5 "$dir/server.log" >&2 2>/dev/null || true
    exit 1
  fi
  echo "bystander: $dir: postmaster $pid still running and answering: ok"
done

# One closing line over all layers: cargo's "N passed", pg_regress's "All N tests passed",
# the package test's line and the benchmark's, and what was skipped.
step "summary"
awk '/test result: ok\./ { for (i = 1; i < NF; i++) if ($(i + 1) ~ /^passed/) n += $i }
     /All [0-9]+ tests passed/ { match($0, /All [0-9]+/); n += substr($0, RSTART + 4, RLENGTH - 4) }
     /^(package-test|pgxn-test|image-test|bench|bystander|monitoring-test): .*: ok$/ { n += 1 }
     /^clients: [^ ]+: ok \(/ { n += 1 }
     /^doc-examples: [0-9]+ blocks in [0-9]+ files: ok$/ { n += $2 }
     END { printf "\n%d passed, 0 failed\n", n }' "$WORK/output.log"
grep "^skipped on PostgreSQL" "$WORK/output.log" || true
echo "PostgreSQL majors tested: ${MAJORS[*]}; $((SECONDS - STARTED)) s"
