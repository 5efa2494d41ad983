#!/usr/bin/env bash
# The guard table of docs/reliability.md, measured: each guard removed once
# (tests/mutations/<name>.patch, whose header names the guard and the test that must catch it),
# built into a scratch copy of PostgreSQL, and run against twice: the named integration test,
# then the fault campaign with seeds drawn at random (never chosen), each for a few minutes.
# A mutation is caught by a run that fails. Hours for the whole table: run it in the background.
# A guard that acts only after pg_upgrade (upgrade-guard) runs its seeds on the major below,
# upgraded to the mutated build in the middle of each run; the major below runs the extension
# installed in its shared tree (scripts/test.sh installs it there; this script does not).
#
#   ./scripts/mutations.sh                         every mutation: its test, then 5 drawn seeds
#                                                  of 2 minutes on PostgreSQL 18
#   --only NAME                                    that mutation (again for more)
#   --seeds N | --seed-list "S1 S2 ..."            how many seeds to draw, or which to run again
#   --named                                        the named schedules' seeds
#                                                  (tests/integration/schedules.tsv) instead
#   --no-test                                      the seeds only (the named test measured before)
#   --minutes M --major N                          each seed's length; the major (16 to 18: a copy
#                                                  of its tree is made, the shared one untouched)
#   --out DIR                                      default .run/mutations: table.tsv (one line per
#                                                  run), each seed's campaign folder, build logs
#   --check                                        only check the table itself, in seconds (the lint
#                                                  step runs it): every patch applies to this
#                                                  checkout, names its guard, and either changes the
#                                                  pure core (the simulation measures it,
#                                                  scripts/simulate.sh --mutations) or says in a
#                                                  "Simulation:" line why the simulation cannot reach it
#
# The checkout's HEAD is copied to DIR/src, reset before each mutation, the patch applied, and
# its extension built and installed into DIR/postgresql-N; the tests and the campaign run from
# that copy too (a patch touches only the extension), so this checkout may change meanwhile.
# Nothing is installed into the trees the other scripts use.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

only=() seeds=5 seed_list="" minutes=2 major=18 out=.run/mutations run_test=yes
while [ $# -gt 0 ]; do
  case "$1" in
    --check) check_only=yes; shift ;;
    --only) only+=("$2"); shift 2 ;;
    --seeds) seeds=$2; shift 2 ;;
    --seed-list) seed_list=$2; shift 2 ;;
    --named) seed_list=$(awk -F '\t' '/^#/ || NF < 5 { next } { printf "%s ", $2 }' tests/integration/schedules.tsv); shift ;;
    --no-test) run_test=no; shift ;;
    --minutes) minutes=$2; shift 2 ;;
    --major) major=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "usage: $0 [--check] [--only NAME ...] [--seeds N | --seed-list 'S ...'] [--no-test] [--minutes M] [--major N] [--out DIR]" >&2; exit 2 ;;
  esac
done

if [ "${check_only:-}" = yes ]; then
  bad=0
  # The registry's patches too (tests/mutations/registry/, measured by simulate.sh --registry).
  for patch in tests/mutations/*.patch tests/mutations/registry/*.patch; do
    name=$(basename "$patch" .patch)
    if ! git apply --check "$patch" 2> /dev/null; then
      echo "mutations: $name no longer applies to this checkout: rewrite it where its guard moved" >&2
      bad=1
    fi
    if ! grep -q '^Guard' "$patch"; then
      echo "mutations: $name names no guard (a \"Guard:\" line)" >&2
      bad=1
    fi
    outside=$(grep '^+++ b/' "$patch" | grep -vc '^+++ b/crates/snowflake_core/' || true)
    if [ "$outside" -gt 0 ] && ! grep -q '^Simulation: ' "$patch"; then
      echo "mutations: $name changes code outside the pure core and does not say why the simulation cannot reach it (a \"Simulation:\" line)" >&2
      bad=1
    fi
  done
  [ "$bad" = 0 ] && echo "mutations: $(find tests/mutations -name '*.patch' | wc -l) patches apply and say what they remove"
  exit "$bad"
fi
case $major in
  16 | 17 | 18) ;;
  *) echo "mutations: --major $major: a copy of the tree is made, which the PyPI trees (16 to 18) allow" >&2; exit 2 ;;
esac

mutations=()
if [ ${#only[@]} -gt 0 ]; then
  for name in "${only[@]}"; do mutations+=("tests/mutations/$name.patch"); done
else
  mutations=(tests/mutations/*.patch)
fi
for patch in "${mutations[@]}"; do
  [ -f "$patch" ] || { echo "mutations: no $patch" >&2; exit 2; }
done

./scripts/setup.sh
mkdir -p "$out"
out=$(cd "$out" && pwd)
table=$out/table.tsv
[ -f "$table" ] || printf 'mutation\trun\tcaught\tdetail\n' > "$table"

# The copy of PostgreSQL the mutated builds go into, owned like the original.
tree=$out/postgresql-$major
if [ ! -x "$tree/bin/pg_config" ]; then
  rm -rf "$tree.copying"
  cp -a "$(pg_tree_of "$major")" "$tree.copying"
  mv "$tree.copying" "$tree"
fi
export "SNOWFLAKE_PG_CONFIG_$major=$tree/bin/pg_config"

# The scratch checkout: this one's HEAD, reset before each mutation.
src=$out/src
[ -d "$src/.git" ] || git clone -q --no-hardlinks "$SNOWFLAKE_ROOT" "$src"
git -C "$src" fetch -q "$SNOWFLAKE_ROOT" HEAD
git -C "$src" checkout -q --detach FETCH_HEAD

if [ -z "$seed_list" ]; then
  seed_list=$(shuf -i 1000-9999 -n "$seeds" | tr '\n' ' ')
fi
echo "mutations: ${#mutations[@]} on PostgreSQL $major; seeds $seed_list($minutes minutes each); table in $table"

# The header line "Test: NAME" (an integration test file) of a patch.
named_test() { sed -n '0,/^Test: */s/^Test: *//p' "$1"; }

for patch in "${mutations[@]}"; do
  name=$(basename "$patch" .patch)
  echo "mutations: $name"
  git -C "$src" reset -q --hard && git -C "$src" clean -qfdx -e target -e tests/integration/target
  if ! git -C "$src" apply "$SNOWFLAKE_ROOT/$patch"; then
    printf '%s\tbuild\terror\tthe patch no longer applies to HEAD\n' "$name" >> "$table"
    continue
  fi
  log=$out/$name.build.log
  # In a shell of its own: the scratch checkout's lib.sh, its own target folder.
  if ! (cd "$src" && bash -c 'source scripts/lib.sh && use_major "$1" && install_extension' _ "$major") > "$log" 2>&1; then
    printf '%s\tbuild\terror\tsee %s\n' "$name" "$log" >> "$table"
    continue
  fi
  use_major "$major"
  test=$(named_test "$patch")
  if [ -n "$test" ] && [ "$run_test" = yes ]; then
    log=$out/$name.test.log
    # major_upgrade needs an older major to upgrade from (it skips every case without one).
    if [ "$test" = major_upgrade ] && [ -z "${SNOWFLAKE_UPGRADE_FROM_PG_CONFIGS:-}" ]; then
      export SNOWFLAKE_UPGRADE_FROM_PG_CONFIGS
      SNOWFLAKE_UPGRADE_FROM_PG_CONFIGS=$(pg_config_of $((major - 1)))
    fi
    if CARGO_TARGET_DIR=$src/tests/integration/target \
       cargo test --release --manifest-path "$src/tests/integration/Cargo.toml" --test "$test" > "$log" 2>&1; then
      printf '%s\ttest %s\tno\t\n' "$name" "$test" >> "$table"
    else
      printf '%s\ttest %s\tyes\t%s\n' "$name" "$test" "$(grep -m1 -A1 'panicked at' "$log" | tail -n 1 | cut -c1-200)" >> "$table"
    fi
  fi
  # A guard that acts only in a cluster made by pg_upgrade (its named test is major_upgrade) is
  # drawn only by a run that upgrades: the campaign then runs on the major below and moves its
  # second server to the mutated build with pg_upgrade in the middle of the run.
  runs_on=$major upgrade=()
  if [ "$test" = major_upgrade ]; then runs_on=$((major - 1)) upgrade=(--upgrade-to "$major"); fi
  for seed in $seed_list; do
    folder=$out/$name
    PG_MAJOR=$runs_on "$src/scripts/campaign.sh" --seed "$seed" --minutes "$minutes" --no-install "${upgrade[@]}" \
      --out "$folder" > "$folder.seed-$seed.log" 2>&1 || true
    summary=$folder/seed-$seed/summary.txt
    # A fault that could not be carried out (a server that did not come back) is a finding too,
    # also when the run stopped on it before writing its summary.
    finding=$(grep -m1 '^campaign: FINDING' "$folder.seed-$seed.log" | cut -c1-200 || true)
    if [ ! -f "$summary" ] && [ -n "$finding" ]; then
      printf '%s\tseed %s\tyes\t%s (the run stopped before its summary)\n' "$name" "$seed" "$finding" >> "$table"
    elif [ ! -f "$summary" ]; then
      printf '%s\tseed %s\terror\tno summary: see %s\n' "$name" "$seed" "$folder.seed-$seed.log" >> "$table"
    elif grep -q '^  every check passed' "$summary"; then
      printf '%s\tseed %s\tno\t\n' "$name" "$seed" >> "$table"
    else
      printf '%s\tseed %s\tyes\t%s\n' "$name" "$seed" "$(grep -m1 'FINDING' "$summary" | sed 's/^ *//' | cut -c1-200)" >> "$table"
    fi
  done
done
git -C "$src" reset -q --hard
echo "mutations: done; $table"
column -t -s "$(printf '\t')" "$table" | cut -c1-160
