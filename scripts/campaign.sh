#!/usr/bin/env bash
# The fault campaign (tests/integration/src/campaign/): a primary with a streaming standby and
# a second server under writers and readers, a nemesis of faults drawn from a seed (kill -9,
# immediate stops, failovers, shard moves, faked clocks bumped and strobed, slow and failing
# fsync, starts that must be refused), then Jepsen-style checks of what the clients saw and the
# servers hold. docs/reliability.md describes it and keeps the figures of the long runs.
#
#   ./scripts/campaign.sh --seed 7 --minutes 10     one seed (--seed again for more), on
#                                                   PostgreSQL 15 (PG_MAJOR=18 for another)
#   ./scripts/campaign.sh --short                   the test command's run: the fixed seed of
#                                                   the major, 75 s
#   --out DIR                                       each seed's folder goes there (default
#                                                   .run/campaign): its schedule and summary, and
#                                                   on a failure the clients' history and every
#                                                   server's log. The same seed runs the same
#                                                   schedule again.
#   --no-install                                    the extension is installed already (as
#                                                   scripts/test.sh has done by then)
#   --upgrade-to N                                  in the middle of each run the second server
#                                                   moves to PostgreSQL N with pg_upgrade (the
#                                                   documented procedure; half the seeds start
#                                                   it first without the old reservation
#                                                   record, which must be refused); the
#                                                   extension is installed into N too
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

# The short run: a seed or two per major of the test command's full layers, 75 s each (the test
# command must stay under 45 minutes). 7 draws synchronous replication, a move of shard 5
# under the stray statement, a clean restart of the second server just after its clock was set
# back from 10 s ahead: it catches a missing reservation guard and a missing shared fence
# check. 4 draws asynchronous replication, a move of shard 5, a failover after the standby was
# restarted, and catches a missing shared fence check (docs/reliability.md). 9, on 15, draws the
# HA manager's death: the old primary left running beside the promoted one, the lease on; it
# catches a lease that never fences.
declare -A SHORT_SEED=([15]="7 9" [18]=4 [19]=4)
SHORT_MINUTES=1.25

seeds=() minutes="" out=.run/campaign install=1 upgrade_to=
while [ $# -gt 0 ]; do
  case "$1" in
    --seed) seeds+=("$2"); shift 2 ;;
    --minutes) minutes=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --short) read -ra seeds <<< "${SHORT_SEED[$PG_MAJOR]:-7}"; minutes=$SHORT_MINUTES; shift ;;
    --no-install) install=0; shift ;;
    --upgrade-to) upgrade_to=$2; shift 2 ;;
    *) echo "usage: $0 (--seed N [--seed M ...] --minutes M | --short) [--out DIR] [--no-install] [--upgrade-to MAJOR]" >&2; exit 2 ;;
  esac
done
if [ ${#seeds[@]} -eq 0 ] || [ -z "$minutes" ]; then
  echo "campaign: name the seeds and the minutes, or --short" >&2
  exit 2
fi

if [ -n "$upgrade_to" ]; then
  [ "$upgrade_to" -gt "$PG_MAJOR" ] || { echo "campaign: --upgrade-to $upgrade_to is not a newer major than $PG_MAJOR" >&2; exit 2; }
  runs_on=$PG_MAJOR
  use_major "$upgrade_to"
  if [ "$install" = 1 ]; then install_extension; fi
  export SNOWFLAKE_CAMPAIGN_UPGRADE_PG_CONFIG=$PG_CONFIG
  use_major "$runs_on"
fi
if [ "$install" = 1 ]; then install_extension; fi
mkdir -p "$out"
out=$(cd "$out" && pwd)
echo "campaign: PostgreSQL $PG_MAJOR${upgrade_to:+ (the second server upgraded to $upgrade_to)}, seeds ${seeds[*]}, $minutes minutes each; folders in $out"
SNOWFLAKE_CAMPAIGN_SEEDS=$(IFS=,; echo "${seeds[*]}") SNOWFLAKE_CAMPAIGN_MINUTES=$minutes \
  SNOWFLAKE_CAMPAIGN_OUT=$out CARGO_TARGET_DIR=tests/integration/target \
  cargo test --release --manifest-path tests/integration/Cargo.toml --test campaign -- --nocapture
