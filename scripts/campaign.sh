#!/usr/bin/env bash
# The fault campaign (tests/integration/src/campaign/): a primary with a streaming standby and
# a second server under writers and readers, a nemesis of faults drawn from a seed (kill -9,
# immediate stops, failovers, shard moves, faked clocks bumped and strobed, slow and failing
# fsync, starts that must be refused), then Jepsen-style checks of what the clients saw and the
# servers hold. docs/reliability.md describes it and keeps the figures of the long runs.
#
#   ./scripts/campaign.sh --seed 7 --minutes 10     one seed (--seed again for more), on
#                                                   PostgreSQL 15 (PG_MAJOR=18 for another)
#   ./scripts/campaign.sh --short                   the test command's run: the named schedules
#                                                   of the major (tests/integration/schedules.tsv),
#                                                   75 s each
#   ./scripts/campaign.sh --schedule NAME --minutes M   a named schedule's seed
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
#   --registry                                      every server claims its shards from an etcd
#                                                   of the run's own (docs/registry.md), whose
#                                                   faults join the schedule: etcd down, a
#                                                   claim stolen, a copy of the pair's primary
#                                                   started beside it
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

# The short run: the named schedules (tests/integration/schedules.tsv) of the major, 75 s each
# (the test command must stay under 45 minutes); a major none names runs the first.
SCHEDULES=tests/integration/schedules.tsv
SHORT_MINUTES=1.25

# schedule_seeds FIELD VALUE: the seeds of the schedules whose FIELD (1: the name, 3: the
# majors) holds VALUE.
schedule_seeds() {
  awk -F '\t' -v field="$1" -v value="$2" '
    /^#/ || NF < 5 { next }
    { first = first ? first : $2 }
    index(" " $field " ", " " value " ") { print $2; found = 1 }
    END { if (!found && field == 3) print first }' "$SCHEDULES"
}

seeds=() minutes="" out=.run/campaign install=1 registry=0 upgrade_to=
while [ $# -gt 0 ]; do
  case "$1" in
    --seed) seeds+=("$2"); shift 2 ;;
    --minutes) minutes=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --short) mapfile -t seeds < <(schedule_seeds 3 "$PG_MAJOR"); minutes=$SHORT_MINUTES; shift ;;
    --schedule)
      mapfile -t named < <(schedule_seeds 1 "$2")
      [ ${#named[@]} -gt 0 ] || { echo "campaign: no schedule named $2 in $SCHEDULES" >&2; exit 2; }
      seeds+=("${named[@]}"); shift 2 ;;
    --no-install) install=0; shift ;;
    --upgrade-to) upgrade_to=$2; shift 2 ;;
    --registry) registry=1; shift ;;
    *) echo "usage: $0 (--seed N [--seed M ...] --minutes M | --schedule NAME --minutes M | --short) [--out DIR] [--no-install] [--upgrade-to MAJOR] [--registry]" >&2; exit 2 ;;
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
SNOWFLAKE_CAMPAIGN_REGISTRY=$registry \
  SNOWFLAKE_CAMPAIGN_SEEDS=$(IFS=,; echo "${seeds[*]}") SNOWFLAKE_CAMPAIGN_MINUTES=$minutes \
  SNOWFLAKE_CAMPAIGN_OUT=$out test_crate_cargo test --release --test campaign -- --nocapture
