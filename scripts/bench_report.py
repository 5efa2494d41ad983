#!/usr/bin/env python3
"""Turns the measurements of scripts/bench.sh into docs/BENCHMARKS.md and a chart.

    bench_report.py RESULTS OUT_DIR MODE WAITS PARAMETERS

RESULTS has one line per measurement: group, contender, value (tab-separated). Values are
IDs (or rows) per second, except `index_bytes` (bytes) and `core` (nanoseconds per
operation). Every figure in the report is a median over the rounds, and every comparison a
ratio between contenders of this same run.
"""

import datetime
import math
import os
import platform
import statistics
import subprocess
import sys
from collections import defaultdict

results_path, out_dir, mode, waits, parameters = sys.argv[1:6]

samples = defaultdict(list)
with open(results_path) as results:
    for line in results:
        group, contender, value = line.rstrip("\n").split("\t")
        samples[(group, contender)].append(float(value))
median = {key: statistics.median(values) for key, values in samples.items()}
rounds = {key: len(values) for key, values in samples.items()}


def get(group, contender):
    try:
        return median[(group, contender)]
    except KeyError:
        sys.exit(f"bench_report: no measurement of {contender} in {group}")


def ns_per_call(ids_per_second):
    return 1e9 / ids_per_second


def machine():
    cpu = "unknown CPU"
    with open("/proc/cpuinfo") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    server = subprocess.run(
        [os.path.join(os.environ["PG_BIN"], "postgres"), "--version"], capture_output=True, text=True
    ).stdout.strip()
    return (
        f"{cpu}, {os.cpu_count()} cores, {memory_gib:.0f} GiB, Linux {platform.release()}; {server}"
    )


PER_CALL = ["snowflake_nextval", "nextval", "gen_random_uuid", "insta_next_id", "clock_timestamp"]
SQL = {
    "snowflake_nextval": "snowflake_nextval(1)",
    "snowflake_nextval_distinct": "snowflake_nextval(10 + client)",
    "nextval": "nextval('a_sequence')",
    "gen_random_uuid": "gen_random_uuid()",
    "insta_next_id": "insta_next_id() (PL/pgSQL)",
    "clock_timestamp": "clock_timestamp()",
}
# The most backends the run measured (bench.sh's BACKENDS_MANY), read from its results.
MANY = max(int(group.removeprefix("calls_")) for group, _ in samples if group.startswith("calls_"))

one = {name: get("calls_1", name) for name in PER_CALL}
# Time ratios: how long the snowflake_nextval query takes against the other one.
sf_vs_clock = one["clock_timestamp"] / one["snowflake_nextval"]
sf_vs_nextval = one["nextval"] / one["snowflake_nextval"]
two_over_one = get("calls_2", "snowflake_nextval") / one["snowflake_nextval"]
batch_speedup = get("batch", "batch_snowflake_nextvals") / get("batch", "batch_nextval")
insert_vs_bigserial = get("insert", "snowflake") / get("insert", "bigserial")
insert_vs_uuid = get("insert", "snowflake") / get("insert", "uuid")


def verdict(met):
    return "met" if met else "**not met**"


lines = []
out = lines.append
out("# Benchmarks")
out("")
if mode == "smoke":
    out("**Smoke run: tiny sizes, the figures mean nothing.** Run `./scripts/bench.sh` for real ones.")
    out("")
out(f"- Command: `./scripts/bench.sh` ({parameters})")
out(f"- Date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC")
out(f"- Machine: {machine()}")
out(
    "- Server: a throwaway cluster started by the command, `synchronous_commit = off`, "
    "`shared_buffers = 512MB`, snowflake_id preloaded with `max_lead_ms = 60000` (bursts of "
    "a million IDs of one shard borrow ahead of the clock; see below)."
)
out(
    "- Method: every contender runs once per round, in a new random order each round, so a "
    "shared machine's drift hits them alike; figures are medians over the rounds, comparisons "
    "are ratios between contenders of this run. Queries run through `pgbench -n -t 1` (time "
    "without connecting)."
)
out(f"- Calls that waited for the clock or the reservation during the run: {waits}.")
out("")
out("![chart](benchmarks.png)")
out("")
out("## Targets")
out("")
out("| target | measured | |")
out("|---|---|---|")
out(
    f"| per call, one backend: `snowflake_nextval(1)` query at most 1.25x the `clock_timestamp()` query "
    f"| {sf_vs_clock:.2f}x | {verdict(sf_vs_clock <= 1.25)} |"
)
out(
    f"| per call, one backend: at most half the time of the `nextval` query "
    f"| {sf_vs_nextval:.2f}x | {verdict(sf_vs_nextval <= 0.5)} |"
)
out(
    f"| 2 backends on one shard: at least 1.6x one backend's throughput "
    f"| {two_over_one:.2f}x | {verdict(two_over_one >= 1.6)} |"
)
out(
    f"| INSERT throughput at least `bigserial`'s | {insert_vs_bigserial:.2f}x "
    f"| {verdict(insert_vs_bigserial >= 1.0)} |"
)
out(
    f"| INSERT throughput well above the UUID table's | {insert_vs_uuid:.2f}x "
    f"| {verdict(insert_vs_uuid > 1.1)} |"
)
out(
    f"| a batch of {parameters.split('CALLS=')[1].split()[0]} at least 3x faster than as many `nextval` calls "
    f"| {batch_speedup:.2f}x | {verdict(batch_speedup >= 3)} |"
)
out("")
out(
    "Why a target is missed, with the profile, and what the hot path does: README, section "
    "\"Performance\" (`./scripts/profile.sh` counts the instructions per call)."
)
out("")
out("## Per call, one backend")
out("")
out(
    "`SELECT count(f) FROM generate_series(1, N)`: the time per row includes the query's own "
    "cost of producing and counting a row, which every contender pays alike; "
    "`clock_timestamp()` is the floor, since every generator reads the clock at least once."
)
out("")
out("| function | ns per call | time vs `clock_timestamp()` | time vs `snowflake_nextval` |")
out("|---|---:|---:|---:|")
for name in PER_CALL:
    ns = ns_per_call(one[name])
    out(
        f"| `{SQL[name]}` | {ns:.0f} | {one['clock_timestamp'] / one[name]:.2f}x "
        f"| {one['snowflake_nextval'] / one[name]:.2f}x |"
    )
out("")
out("## Several backends at once")
out("")
out(
    f"The same query split over 1, 2 and {MANY} backends running together (total IDs per second; "
    "this machine has " + str(os.cpu_count()) + " cores). \"Distinct shards\": each backend its own shard."
)
out("")
out(f"| function | 1 backend | 2 backends | {MANY} backends | 2 vs 1 |")
out("|---|---:|---:|---:|---:|")
for name in PER_CALL + ["snowflake_nextval_distinct"]:
    single = get("calls_1", "snowflake_nextval" if name == "snowflake_nextval_distinct" else name)
    label = f"`{SQL[name]}`" + (" (distinct shards)" if name == "snowflake_nextval_distinct" else "")
    two, many = get("calls_2", name), get(f"calls_{MANY}", name)
    out(f"| {label} | {single:,.0f} | {two:,.0f} | {many:,.0f} | {two / single:.2f}x |")
out("")
out("## A batch")
out("")
out("| query | IDs per second | |")
out("|---|---:|---:|")
out(f"| `SELECT count(*) FROM snowflake_nextvals(shard, N)` | {get('batch', 'batch_snowflake_nextvals'):,.0f} | {batch_speedup:.2f}x |")
out(f"| `SELECT count(nextval('a_sequence')) FROM generate_series(1, N)` | {get('batch', 'batch_nextval'):,.0f} | 1.00x |")
out("")
out("## INSERT throughput and index size")
out("")
out(
    "pgbench clients inserting multi-row `INSERT ... SELECT FROM generate_series` into a table "
    "whose key is the contender; the tables are emptied and checkpointed before each round, and "
    "the primary-key index is measured after the last round (the same number of rows in each)."
)
out("")
out("| key | rows per second | vs `bigserial` | primary-key index |")
out("|---|---:|---:|---:|")
KEYS = {
    "bigserial": "`bigserial`",
    "snowflake": "`bigint DEFAULT snowflake_nextval(2)`",
    "uuid": "`uuid DEFAULT gen_random_uuid()`",
}
for key, label in KEYS.items():
    rows = get("insert", key)
    size_mib = get("index_bytes", key) / 2**20
    out(f"| {label} | {rows:,.0f} | {rows / get('insert', 'bigserial'):.2f}x | {size_mib:.1f} MiB |")
out("")
out("## The generator core alone")
out("")
out(
    "`cargo bench --bench generator`: `generator::claim` outside PostgreSQL (the same code the "
    "SQL functions run, with the system clock), median of 7 runs."
)
out("")
out("| operation | ns |")
out("|---|---:|")
CORE = {
    "clock_read": "one wall-clock read (`clock_gettime(CLOCK_REALTIME)`)",
    "claim_one_thread": "one ID, one thread",
    "claim_two_threads_one_shard": "one ID, two threads on one shard (per ID, all threads)",
}
for name, label in CORE.items():
    out(f"| {label} | {get('core', name):.1f} |")
out("")

os.makedirs(out_dir, exist_ok=True)
with open(os.path.join(out_dir, "BENCHMARKS.md"), "w") as report:
    report.write("\n".join(lines))

# The chart: per-call cost on the left, INSERT throughput on the right.
data = os.path.join(out_dir, ".benchmarks.dat")
with open(data, "w") as table:
    for name in PER_CALL:
        table.write(f'"{name}" {ns_per_call(one[name]):.1f}\n')
    table.write("\n\n")
    for key in KEYS:
        table.write(f'"{key}" {get("insert", key) / 1000:.1f}\n')
# The log axis starts at the power of ten below the cheapest call, so every bar shows.
log_axis_from = 10 ** math.floor(math.log10(min(ns_per_call(one[name]) for name in PER_CALL) * 0.9))
gnuplot = f"""
set terminal pngcairo size 1100,450 font "Liberation Sans,10" noenhanced
set output "{os.path.join(out_dir, 'benchmarks.png')}"
set multiplot layout 1,2 title "snowflake_id benchmarks ({mode} run): medians, lower left and higher right are better"
set style fill solid 0.8 border -1
set boxwidth 0.6
set grid ytics
set yrange [0:*]
set xtics rotate by -20
unset key
set title "ns per call, one backend (log scale)"
set logscale y
set yrange [{log_axis_from}:*]
plot "{data}" index 0 using 0:2:xtic(1) with boxes lc rgb "#4477aa", "" index 0 using 0:2:(sprintf("%.0f", $2)) with labels offset 0,0.8
set title "INSERT throughput, thousand rows/s"
unset logscale y
set yrange [0:*]
plot "{data}" index 1 using 0:2:xtic(1) with boxes lc rgb "#228833", "" index 1 using 0:2:(sprintf("%.0f", $2)) with labels offset 0,0.8
unset multiplot
"""
subprocess.run(["gnuplot"], input=gnuplot, text=True, check=True)
os.remove(data)
