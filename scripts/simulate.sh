#!/usr/bin/env bash
# The deterministic simulation of where a server resumes (crates/snowflake_core/examples/simulate/):
# servers, clocks, record files and WAL modelled, faults drawn by a seed, the real decisions of
# snowflake_core (resume, claim, next_ceiling, lower_ceiling) driven through them, every run
# checked. No PostgreSQL; one seed is one run, replayed exactly by --seed.
#
#   ./scripts/simulate.sh [--seconds N | --minutes N]    seeds drawn at random until the budget
#                                                        is spent (default 60 s); fails on the
#                                                        first violation, printing its seed and
#                                                        its schedule shrunk
#   ./scripts/simulate.sh --seed N [--verbose]           that run again, its events printed
#   ./scripts/simulate.sh --unfix f2|f3|f8 [--seconds N] the shard moves' procedure without that
#                                                        finding's fix: the checks must fail
#   ./scripts/simulate.sh --registry [--seconds N]       the registry's simulation instead
#                                                        (crates/snowflake_core/examples/registry/):
#                                                        servers claiming shards from one registry
#                                                        under clones, promotions, outages
#   ./scripts/simulate.sh --registry --seed N [--verbose] that run again, traced
#   ./scripts/simulate.sh --mutations [--only NAME ...] [--seconds N] [--budgets K] [--out DIR]
#       the guard table against the simulation: each patch of tests/mutations/ that changes the
#       pure core applied to a scratch copy of this checkout's HEAD (reset before each), the
#       simulation run for N seconds (default 60) drawing seeds and counting every one that
#       fails; a line per mutation in DIR/simulation.tsv (default .run/mutations): runs, runs
#       that caught it, seconds to the first catch. With --budgets K (K > 1), K budgets of N
#       seconds instead, each from its own drawn base and stopped at its first catch: the line
#       says how many of the K caught it and when (the guard table's "most drawn seeds"). A
#       patch outside the core gets its header's "Simulation:" line, why the model cannot
#       reach it. With --registry, the patches of tests/mutations/registry/ against the
#       registry's simulation instead (DIR/registry.tsv).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

mode=run only=() seconds=60 budgets=1 out=.run/mutations pass=() unfix=() example=simulate
while [ $# -gt 0 ]; do
  case "$1" in
    --mutations) mode=mutations; shift ;;
    --registry) example=registry; shift ;;
    --only) only+=("$2"); shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --budgets) budgets=$2; shift 2 ;;
    --minutes) seconds=$(($2 * 60)); shift 2 ;;
    --out) out=$2; shift 2 ;;
    --unfix) unfix+=(--unfix "$2"); shift 2 ;;
    --seed | --verbose) pass+=("$@"); break ;;
    *) echo "usage: $0 [--registry] [--seconds N | --minutes N] [--unfix f2|f3|f8] | [--registry] --seed N [--verbose] | [--registry] --mutations [--only NAME ...] [--seconds N] [--budgets K] [--out DIR]" >&2; exit 2 ;;
  esac
done

if [ "$mode" = run ]; then
  if [ ${#pass[@]} -gt 0 ]; then
    exec cargo run --quiet --release -p snowflake_core --example "$example" -- "${pass[@]}"
  fi
  exec cargo run --quiet --release -p snowflake_core --example "$example" -- --seconds "$seconds" "${unfix[@]}"
fi

folder=tests/mutations table_name=simulation.tsv
if [ "$example" = registry ]; then folder=tests/mutations/registry table_name=registry.tsv; fi
mutations=()
if [ ${#only[@]} -gt 0 ]; then
  for name in "${only[@]}"; do mutations+=("$folder/$name.patch"); done
else
  mutations=("$folder"/*.patch)
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)
table=$out/$table_name
[ -f "$table" ] || printf 'mutation\truns\tcaught\tfirst catch (s)\tdetail\n' > "$table"
src=$out/sim-src
[ -d "$src/.git" ] || git clone -q --no-hardlinks "$SNOWFLAKE_ROOT" "$src"
git -C "$src" fetch -q "$SNOWFLAKE_ROOT" HEAD
git -C "$src" checkout -q --detach FETCH_HEAD
echo "simulate: ${#mutations[@]} mutations, ${seconds} s each; table in $table"

for patch in "${mutations[@]}"; do
  name=$(basename "$patch" .patch)
  outside=$(grep '^+++ b/' "$patch" | grep -vc '^+++ b/crates/snowflake_core/' || true)
  if [ "$outside" -gt 0 ]; then
    reason=$(sed -n '/^Simulation: /,/^$/p' "$patch" | tr '\n' ' ' | sed 's/^Simulation: //; s/ *$//')
    printf '%s\t-\t-\t-\t%s\n' "$name" "$reason" >> "$table"
    continue
  fi
  git -C "$src" reset -q --hard
  git -C "$src" apply "$SNOWFLAKE_ROOT/$patch"
  log=$out/$name.simulation.log
  # Built before the clock starts: the budget is the simulation's alone.
  if ! (cd "$src" && CARGO_TARGET_DIR=$out/sim-target cargo build --quiet --release -p snowflake_core --example "$example") > "$log" 2>&1; then
    printf '%s\terror\t-\t-\tthe build failed: see %s\n' "$name" "$log" >> "$table"
    continue
  fi
  if [ "$budgets" -gt 1 ]; then
    caught=0 firsts=()
    for _ in $(seq "$budgets"); do
      budget_log=$(mktemp)
      "$out/sim-target/release/examples/$example" --seconds "$seconds" --stop-at-first --quiet > "$budget_log" 2>&1 || true
      cat "$budget_log" >> "$log"
      first=$(sed -n 's/^[a-z]*: first failure after \([0-9.]*\) s.*/\1/p' "$budget_log")
      rm -f "$budget_log"
      if [ -n "$first" ]; then caught=$((caught + 1)); firsts+=("$first"); else firsts+=("-"); fi
    done
    detail=$(sed -n '/^[a-z]*: FAILED seed/{s/^[a-z]*: FAILED seed [0-9]*: //;p;q;}' "$log" | cut -c1-200)
    printf '%s\t%s budgets\t%s\t%s\t%s\n' "$name" "$budgets" "$caught" "${firsts[*]}" "$detail" >> "$table"
    echo "simulate: $name: caught in $caught of $budgets budgets of $seconds s, first catches (s): ${firsts[*]}"
    continue
  fi
  "$out/sim-target/release/examples/$example" --seconds "$seconds" --keep-going --quiet >> "$log" 2>&1 || true
  # (Each grep may find nothing: a mutation never caught has no failure line.)
  summary=$(grep '^[a-z]*: [0-9]* runs' "$log" | tail -n 1 || true)
  runs=$(sed -n 's/^[a-z]*: \([0-9]*\) runs.*/\1/p' <<< "$summary")
  failed=$(sed -n 's/.*, \([0-9]*\) failed.*/\1/p' <<< "$summary")
  first=$(sed -n 's/^[a-z]*: first failure after \([0-9.]*\) s.*/\1/p' "$log" | tail -n 1)
  detail=$(sed -n '/^[a-z]*: FAILED seed/{s/^[a-z]*: FAILED seed [0-9]*: //;p;q;}' "$log" | cut -c1-200)
  printf '%s\t%s\t%s\t%s\t%s\n' "$name" "${runs:-?}" "${failed:-?}" "${first:--}" "$detail" >> "$table"
  echo "simulate: $name: ${failed:-?} of ${runs:-?} runs caught it, the first after ${first:--} s"
done
git -C "$src" reset -q --hard
echo "simulate: done; $table"
