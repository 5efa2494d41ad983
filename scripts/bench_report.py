#!/usr/bin/env python3
"""Turns the measurements of scripts/bench.sh, one run per PostgreSQL major, into a report.

    bench_report.py OUT_DIR      writes OUT_DIR/benchmarks.md and OUT_DIR/benchmarks.png
    bench_report.py --machine    prints this machine (CPU, cores, memory, kernel) on one line,
                                 for bench.sh's meta file

OUT_DIR/results/ holds, for every major measured (`PG_MAJOR=<major> ./scripts/bench.sh`):

- pg<major>.tsv: one line per measurement and round: group, contender, value (tab-separated).
  Values are IDs (or rows) per second, except `index_bytes` and `index_bytes_10m` (bytes)
  and `core` (nanoseconds per operation). Groups: `calls_<backends>` (1, 2 and the most
  measured), `batch`, `insert`, `index_bytes` (after the INSERT rounds), `index_bytes_10m`
  (after one INSERT of `index_rows` rows) and `core`. From PostgreSQL 18 on, the `calls_*`,
  `insert`, `index_bytes` and `index_bytes_10m` groups also have the contender `uuidv7`.
- pg<major>.meta: `key=value` lines: mode (full or smoke), date (UTC, "YYYY-MM-DD HH:MM"),
  machine (as --machine prints it), server (`postgres --version`), build (where that
  PostgreSQL comes from, and whether it was built with OpenSSL), parameters (bench.sh's
  "ROUNDS=.. CALLS=.. INSERT_CLIENTS=.. INSERT_TXS=.. INSERT_ROWS=.. INSERT_ROUNDS=.."),
  waits and index_rows (integers).

Every figure is a median over the rounds of one run, and every comparison a ratio between
contenders of that same run: the majors were measured in different runs, so the report puts
their ratios side by side, and their absolute figures only for reference.
"""

import math
import os
import platform
import re
import statistics
import subprocess
import sys
from collections import defaultdict

# uuidv7() is built in from PostgreSQL 18 on; its runs must have measured it.
UUIDV7_FROM = 18
META_KEYS = ["mode", "date", "machine", "server", "build", "parameters", "waits", "index_rows"]
# Parameters the report itself uses (the batch size and the rows of the INSERT rounds).
PARAMETER_KEYS = ["CALLS", "INSERT_CLIENTS", "INSERT_TXS", "INSERT_ROWS"]

PER_CALL = ["snowflake_nextval", "nextval", "gen_random_uuid", "insta_next_id", "clock_timestamp", "uuidv7"]
SQL = {
    "snowflake_nextval": "snowflake_nextval(1)",
    "snowflake_nextval_distinct": "snowflake_nextval(10 + client)",
    "nextval": "nextval('a_sequence')",
    "gen_random_uuid": "gen_random_uuid()",
    "insta_next_id": "insta_next_id() (PL/pgSQL)",
    "clock_timestamp": "clock_timestamp()",
    "uuidv7": "uuidv7()",
}
KEYS = {
    "bigserial": "`bigserial`",
    "snowflake": "`bigint DEFAULT snowflake_nextval(2)`",
    "uuid": "`uuid DEFAULT gen_random_uuid()`",
    "uuidv7": "`uuid DEFAULT uuidv7()`",
}
CORE = {
    "clock_read": "one wall-clock read (`clock_gettime(CLOCK_REALTIME)`)",
    "claim_one_thread": "one ID, one thread",
    "claim_two_threads_one_shard": "one ID, two threads on one shard (per ID, all threads)",
}
# One colour per major, in the chart's bars and legend.
COLOURS = ["#4477aa", "#ee6677", "#228833", "#ccbb44", "#66ccee", "#aa3377"]
NOT_APPLICABLE = "–"


def fail(message):
    sys.exit(f"bench_report: {message}")


def machine():
    cpu = "unknown CPU"
    with open("/proc/cpuinfo") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{cpu}, {os.cpu_count()} cores, {memory_gib:.0f} GiB, Linux {platform.release()}"


class Run:
    """One major's run: its meta data and the medians of its measurements."""

    def __init__(self, results_dir, major):
        self.major = major
        self.name = f"PostgreSQL {major}"
        self.tsv = tsv = os.path.join(results_dir, f"pg{major}.tsv")
        meta = os.path.join(results_dir, f"pg{major}.meta")
        if not os.path.exists(meta):
            fail(f"{tsv} has no {os.path.basename(meta)} beside it")

        self.meta = {}
        with open(meta) as lines:
            for line in lines:
                if line.strip():
                    key, sep, value = line.rstrip("\n").partition("=")
                    if not sep:
                        fail(f"{meta}: not a key=value line: {line.rstrip()!r}")
                    self.meta[key] = value
        for key in META_KEYS:
            if not self.meta.get(key):
                fail(f"{meta} has no {key}")
        if self.meta["mode"] not in ("full", "smoke"):
            fail(f"{meta}: mode is {self.meta['mode']!r}, not full or smoke")
        for key in ("waits", "index_rows"):
            if not self.meta[key].isdigit():
                fail(f"{meta}: {key} is {self.meta[key]!r}, not an integer")
        self.smoke = self.meta["mode"] == "smoke"
        self.waits = int(self.meta["waits"])
        self.index_rows = int(self.meta["index_rows"])
        parameters = dict(word.split("=", 1) for word in self.meta["parameters"].split() if "=" in word)
        for key in PARAMETER_KEYS:
            if not parameters.get(key, "").isdigit():
                fail(f"{meta}: parameters give no {key}: {self.meta['parameters']!r}")
        self.batch_size = int(parameters["CALLS"])
        self.insert_rows = (
            int(parameters["INSERT_CLIENTS"]) * int(parameters["INSERT_TXS"]) * int(parameters["INSERT_ROWS"])
        )

        samples = defaultdict(list)
        with open(tsv) as lines:
            for number, line in enumerate(lines, 1):
                fields = line.rstrip("\n").split("\t")
                try:
                    group, contender, value = fields
                    samples[(group, contender)].append(float(value))
                except ValueError:
                    fail(f"{tsv}:{number}: not group<TAB>contender<TAB>number: {line.rstrip()!r}")
        self.median = {key: statistics.median(values) for key, values in samples.items()}
        self.has_uuidv7 = major >= UUIDV7_FROM
        self.per_call = [name for name in PER_CALL if name != "uuidv7" or self.has_uuidv7]
        # The multi-backend rounds add one backend per shard to the per-call contenders.
        self.several = self.per_call + ["snowflake_nextval_distinct"]
        self.keys = [key for key in KEYS if key != "uuidv7" or self.has_uuidv7]
        # The most backends the run measured (bench.sh's BACKENDS_MANY).
        many = [int(group[6:]) for group, _ in samples if re.fullmatch(r"calls_\d+", group)]
        if not many:
            fail(f"{tsv} has no calls_<backends> group")
        self.many = max(many)

    def get(self, group, contender):
        try:
            return self.median[(group, contender)]
        except KeyError:
            fail(f"{self.tsv} has no measurement of {contender} in {group}")

    def ns_per_call(self, name):
        return 1e9 / self.get("calls_1", name)

    def time_ratio(self, name, against):
        """How long the `name` query takes per ID against the `against` query."""
        return self.get("calls_1", against) / self.get("calls_1", name)


def load_runs(out_dir):
    results_dir = os.path.join(out_dir, "results")
    if not os.path.isdir(results_dir):
        fail(f"no directory {results_dir}")
    majors = []
    for name in os.listdir(results_dir):
        found = re.fullmatch(r"pg(\d+)\.(tsv|meta)", name)
        if found and found[2] == "tsv":
            majors.append(int(found[1]))
        elif found and not os.path.exists(os.path.join(results_dir, f"pg{found[1]}.tsv")):
            fail(f"{os.path.join(results_dir, name)} has no pg{found[1]}.tsv beside it")
    if not majors:
        fail(f"no pg<major>.tsv in {results_dir}")
    return [Run(results_dir, major) for major in sorted(majors)]


def verdict(ratio, met):
    # Two decimals, or more where two would round a miss onto the bound (0.7215 as 0.72).
    digits = next(d for d in (2, 3, 4) if met(round(ratio, d)) == met(ratio) or d == 4)
    return f"{ratio:.{digits}f}x, " + ("met" if met(ratio) else "**not met**")


def per_major(runs, value):
    """`value` of every run: once if they all agree, else each with its major."""
    values = [value(run) for run in runs]
    if len(set(values)) == 1:
        return values[0]
    return ", ".join(f"{v} on {run.name}" for v, run in zip(values, runs))


def report(runs):
    lines = []
    out = lines.append

    def side_by_side(first, rows, columns):
        """A table of `rows` (label, key) with, for each of `columns` (header, cell), one
        column per major; a header may depend on the run, and a cell gives None where that
        major has no such measurement. A column of a major with none at all is left out."""
        table = []
        for header, cell in columns:
            for run in runs:
                cells = [cell(run, key) for _, key in rows]
                if any(c is not None for c in cells):
                    title = header(run) if callable(header) else header
                    table.append((f"{title} ({run.major})", [NOT_APPLICABLE if c is None else c for c in cells]))
        out("| " + " | ".join([first] + [title for title, _ in table]) + " |")
        out("|---|" + "---:|" * len(table))
        for number, (label, _) in enumerate(rows):
            out("| " + " | ".join([label] + [cells[number] for _, cells in table]) + " |")
        out("")

    uuidv7_runs = [run for run in runs if run.has_uuidv7]
    per_call = [name for name in PER_CALL if any(name in run.per_call for run in runs)]
    keys = [key for key in KEYS if any(key in run.keys for run in runs)]

    out("# Benchmarks")
    out("")
    smoke = [run.name for run in runs if run.smoke]
    if smoke:
        out(
            f"**Smoke run ({', '.join(smoke)}): tiny sizes, the figures mean nothing.** "
            "Run `PG_MAJOR=<major> ./scripts/bench.sh` for real ones."
        )
        out("")
    for run in runs:
        out(
            f"- {run.name}: `PG_MAJOR={run.major} ./scripts/bench.sh`"
            + (" (smoke run)" if run.smoke else "")
        )
        out(f"  - Date: {run.meta['date']} UTC")
        out(f"  - Machine: {run.meta['machine']}")
        out(f"  - Server: {run.meta['server']}")
        out(f"  - Build: {run.meta['build']}")
        out(f"  - Parameters: {run.meta['parameters']}")
        out(f"  - Calls that waited for the clock or the reservation during the run: {run.waits}")
    out(
        "- Setup: each run starts a throwaway cluster, `synchronous_commit = off`, "
        "`shared_buffers = 512MB`, snowflake_id preloaded with `max_lead_ms = 60000` (bursts of "
        "a million IDs of one shard borrow ahead of the clock; see below)."
    )
    out(
        "- Method: every contender runs once per round, in a new random order each round, so a "
        "shared machine's drift hits them alike; figures are medians over the rounds, comparisons "
        "are ratios between contenders of one run. Queries run through `pgbench -n -t 1` (time "
        "without connecting). Each major was measured in a run of its own, at another time, so "
        "compare the ratios across majors, not the absolute figures."
    )
    out("")
    out("![chart](benchmarks.png)")
    out("")

    out("## Targets")
    out("")
    # label, the runs it applies to, a run's ratio, and whether a ratio meets the target
    targets = [
        (
            "per call, one backend: `snowflake_nextval(1)` query at most 1.25x the `clock_timestamp()` query",
            runs,
            lambda run: run.time_ratio("snowflake_nextval", "clock_timestamp"),
            lambda ratio: ratio <= 1.25,
        ),
        (
            "per call, one backend: at most half the time of the `nextval` query",
            runs,
            lambda run: run.time_ratio("snowflake_nextval", "nextval"),
            lambda ratio: ratio <= 0.5,
        ),
        (
            "per call, one backend: at most 0.20x the time of the `uuidv7()` query",
            uuidv7_runs,
            lambda run: run.time_ratio("snowflake_nextval", "uuidv7"),
            lambda ratio: ratio <= 0.20,
        ),
        (
            "2 backends on one shard: at least 1.6x one backend's throughput",
            runs,
            lambda run: run.get("calls_2", "snowflake_nextval") / run.get("calls_1", "snowflake_nextval"),
            lambda ratio: ratio >= 1.6,
        ),
        (
            "INSERT throughput at least `bigserial`'s",
            runs,
            lambda run: run.get("insert", "snowflake") / run.get("insert", "bigserial"),
            lambda ratio: ratio >= 1.0,
        ),
        (
            "INSERT throughput well above the `gen_random_uuid()` table's",
            runs,
            lambda run: run.get("insert", "snowflake") / run.get("insert", "uuid"),
            lambda ratio: ratio > 1.1,
        ),
        (
            "INSERT throughput at least 1.3x the `uuidv7()` table's",
            uuidv7_runs,
            lambda run: run.get("insert", "snowflake") / run.get("insert", "uuidv7"),
            lambda ratio: ratio >= 1.3,
        ),
        (
            f"primary-key index after {per_major(uuidv7_runs, lambda run: f'{run.index_rows:,}')} rows "
            "at most 0.72x the `uuidv7()` table's",
            uuidv7_runs,
            lambda run: run.get("index_bytes_10m", "snowflake") / run.get("index_bytes_10m", "uuidv7"),
            lambda ratio: ratio <= 0.72,
        ),
        (
            f"a batch of {per_major(runs, lambda run: f'{run.batch_size:,}')} at least 3x faster "
            "than as many `nextval` calls",
            runs,
            lambda run: run.get("batch", "batch_snowflake_nextvals") / run.get("batch", "batch_nextval"),
            lambda ratio: ratio >= 3,
        ),
    ]
    out("| target | " + " | ".join(run.name for run in runs) + " |")
    out("|---|" + "---|" * len(runs))
    for label, applies, ratio, met in targets:
        if applies:
            cells = [verdict(ratio(run), met) if run in applies else NOT_APPLICABLE for run in runs]
            out(f"| {label} | " + " | ".join(cells) + " |")
    out("")
    if uuidv7_runs:
        out(
            "The index target's floor: a B-tree leaf entry takes 20 bytes for a `bigint` key "
            "(a 16-byte index tuple and a 4-byte line pointer) against 28 for a `uuid` (24 + 4), "
            "so where both indexes fill their pages alike, as time-ordered keys do, the `bigint` "
            "index is at best 20/28 = 0.714x the `uuid` one (against `gen_random_uuid()`, whose "
            "random keys leave pages part empty, the ratio goes lower)."
        )
        out("")
    out(
        "Why a target is missed, and what the hot path does: [performance.md](performance.md) "
        "(`./scripts/profile.sh` counts the instructions per call)."
    )
    out("")

    out("## Per call, one backend")
    out("")
    out(
        "`SELECT count(f) FROM generate_series(1, N)`: the time per row includes the query's own "
        "cost of producing and counting a row, which every contender pays alike; "
        "`clock_timestamp()` is the floor, since every generator reads the clock at least once."
        + (f" `uuidv7()` exists from PostgreSQL {UUIDV7_FROM} on." if uuidv7_runs else "")
        + " `gen_random_uuid()` and `uuidv7()` draw their random bytes from OpenSSL in a server "
        "built with it, from `/dev/urandom` at every call (about three times slower) in one built "
        "without: each run's build is named above."
    )
    out("")

    def measured(cell):
        """`cell` where the run measured that per-call contender, None elsewhere."""
        return lambda run, name: cell(run, name) if name in run.per_call else None

    side_by_side(
        "function",
        [(f"`{SQL[name]}`", name) for name in per_call],
        [
            ("ns per call", measured(lambda run, name: f"{run.ns_per_call(name):.0f}")),
            (
                "time vs `clock_timestamp()`",
                measured(lambda run, name: f"{run.time_ratio(name, 'clock_timestamp'):.2f}x"),
            ),
            (
                "time vs `snowflake_nextval`",
                measured(lambda run, name: f"{run.time_ratio(name, 'snowflake_nextval'):.2f}x"),
            ),
        ],
    )

    out("## Several backends at once")
    out("")
    out(
        f"The same query split over 1, 2 and {per_major(runs, lambda run: run.many)} backends "
        "running together (total IDs per second; the machines' cores are listed above). "
        "\"Distinct shards\": each backend its own shard."
    )
    out("")

    def backends(count):
        def cell(run, name):
            if name not in run.several:
                return None
            if name == "snowflake_nextval_distinct" and count == 1:
                # One backend has no other shard to be distinct from.
                name = "snowflake_nextval"
            return f"{run.get(f'calls_{count}', name):,.0f}"

        return cell

    def two_over_one(run, name):
        if name not in run.several:
            return None
        one = run.get("calls_1", "snowflake_nextval" if name == "snowflake_nextval_distinct" else name)
        return f"{run.get('calls_2', name) / one:.2f}x"

    side_by_side(
        "function",
        [(f"`{SQL[name]}`", name) for name in per_call]
        + [(f"`{SQL['snowflake_nextval_distinct']}` (distinct shards)", "snowflake_nextval_distinct")],
        [
            ("1 backend", backends(1)),
            ("2 backends", backends(2)),
            (lambda run: f"{run.many} backends", lambda run, name: backends(run.many)(run, name)),
            ("2 vs 1", two_over_one),
        ],
    )

    out("## A batch")
    out("")
    out(f"Batches of {per_major(runs, lambda run: f'{run.batch_size:,}')} IDs.")
    out("")
    side_by_side(
        "query",
        [
            ("`SELECT count(*) FROM snowflake_nextvals(shard, N)`", "batch_snowflake_nextvals"),
            ("`SELECT count(nextval('a_sequence')) FROM generate_series(1, N)`", "batch_nextval"),
        ],
        [
            ("IDs per second", lambda run, name: f"{run.get('batch', name):,.0f}"),
            ("vs `nextval`", lambda run, name: f"{run.get('batch', name) / run.get('batch', 'batch_nextval'):.2f}x"),
        ],
    )

    out("## INSERT throughput and index size")
    out("")
    out(
        "pgbench clients inserting multi-row `INSERT ... SELECT FROM generate_series` into a table "
        "whose key is the contender; the tables are emptied and checkpointed before each round, and "
        f"the primary-key index is measured after the last round "
        f"({per_major(runs, lambda run: f'{run.insert_rows:,}')} rows in each)."
    )
    out("")

    def keyed(cell):
        """`cell` where the run has that table, None elsewhere."""
        return lambda run, key: cell(run, key) if key in run.keys else None

    side_by_side(
        "key",
        [(KEYS[key], key) for key in keys],
        [
            ("rows per second", keyed(lambda run, key: f"{run.get('insert', key):,.0f}")),
            ("vs `bigserial`", keyed(lambda run, key: f"{run.get('insert', key) / run.get('insert', 'bigserial'):.2f}x")),
            ("primary-key index", keyed(lambda run, key: f"{run.get('index_bytes', key) / 2**20:.1f} MiB")),
        ],
    )
    out(
        f"The primary-key index of each table after one `INSERT ... SELECT FROM generate_series` of "
        f"{per_major(runs, lambda run: f'{run.index_rows:,}')} rows into it, empty before:"
    )
    out("")

    def against(other):
        def cell(run, key):
            if key not in run.keys or other not in run.keys:
                return None
            return f"{run.get('index_bytes_10m', key) / run.get('index_bytes_10m', other):.2f}x"

        return cell

    side_by_side(
        "key",
        [(KEYS[key], key) for key in keys],
        [
            ("primary-key index", keyed(lambda run, key: f"{run.get('index_bytes_10m', key) / 2**20:,.1f} MiB")),
            ("bytes per row", keyed(lambda run, key: f"{run.get('index_bytes_10m', key) / run.index_rows:.1f}")),
            ("vs `gen_random_uuid()`", against("uuid")),
            ("vs `uuidv7()`", against("uuidv7")),
        ],
    )

    out("## The generator core alone")
    out("")
    out(
        "`cargo bench --bench generator`: `generator::claim` outside PostgreSQL (the same code the "
        "SQL functions run, with the system clock), median of 7 runs; measured in each major's run, "
        "though PostgreSQL plays no part in it."
    )
    out("")
    side_by_side(
        "operation",
        [(label, name) for name, label in CORE.items()],
        [("ns", lambda run, name: f"{run.get('core', name):.1f}")],
    )
    return "\n".join(lines)


def chart(runs, out_dir):
    """Per-call cost on the left, INSERT throughput on the right: one cluster of bars per
    contender, one bar per major."""
    per_call = [name for name in PER_CALL if any(name in run.per_call for run in runs)]
    keys = [key for key in KEYS if any(key in run.keys for run in runs)]
    data = os.path.join(out_dir, ".benchmarks.dat")
    with open(data, "w") as table:
        # One column per major; "?" where a major lacks the contender (uuidv7 before 18).
        for name in per_call:
            cells = [f"{run.ns_per_call(name):.1f}" if name in run.per_call else "?" for run in runs]
            table.write(f'"{name}" {" ".join(cells)}\n')
        table.write("\n\n")
        for key in keys:
            cells = [f"{run.get('insert', key) / 1000:.1f}" if key in run.keys else "?" for run in runs]
            table.write(f'"{key}" {" ".join(cells)}\n')
    # The log axis starts at the power of ten below the cheapest call, so every bar shows.
    cheapest = min(run.ns_per_call(name) for run in runs for name in run.per_call)
    log_axis_from = 10 ** math.floor(math.log10(cheapest * 0.9))
    count, gap = len(runs), 1
    styles = "\n".join(
        f'set style line {i + 1} lc rgb "{COLOURS[i % len(COLOURS)]}"' for i in range(count)
    )

    def plot(index):
        bars = ", ".join(
            f'"{data}" index {index} using {i + 2}:xtic(1) ls {i + 1} title "{run.name}"'
            for i, run in enumerate(runs)
        )
        # A bar's centre: clusters sit at 0, 1, ...; each bar is 1 / (count + gap) wide.
        values = ", ".join(
            f'"" index {index} using ($0 + ({i} - {(count - 1) / 2}) / {count + gap}.0):{i + 2}:'
            f'(sprintf("%.0f", ${i + 2})) with labels font ",8" offset 0,0.6 notitle'
            for i in range(count)
        )
        return f"plot {bars}, {values}"

    mode = ("smoke" if any(run.smoke for run in runs) else "full") + (" runs" if len(runs) > 1 else " run")
    gnuplot = f"""
set terminal pngcairo size 1100,450 font "Liberation Sans,10" noenhanced
set output "{os.path.join(out_dir, 'benchmarks.png')}"
set datafile missing "?"
set multiplot layout 1,2 title "snowflake_id benchmarks ({mode}): medians, lower left and higher right are better"
set style data histograms
set style histogram clustered gap {gap}
set style fill solid 0.8 border -1
{styles}
set grid ytics
set xtics rotate by -20
# Below the plots: above, it would cover the first cluster's bars.
set key below horizontal
set title "ns per call, one backend (log scale)"
set logscale y
set yrange [{log_axis_from}:*]
{plot(0)}
set title "INSERT throughput, thousand rows/s"
unset logscale y
set yrange [0:*]
{plot(1)}
unset multiplot
"""
    subprocess.run(["gnuplot"], input=gnuplot, text=True, check=True)
    os.remove(data)


# The page's last section holds figures taken by hand with other commands (the fleet test,
# scripts/profile.sh, scripts/compare-builds.sh): every dated figure lives in this one page,
# so a rewritten report carries that section over as it is.
BY_HAND_MARKER = "<!-- measured by hand: kept as it is when scripts/bench.sh rewrites this page -->"


def kept_by_hand(page):
    """The section measured by hand of the page as it is, from its marker on; empty if none."""
    if not os.path.exists(page):
        return ""
    with open(page) as f:
        text = f.read()
    at = text.find(BY_HAND_MARKER)
    return "" if at < 0 else "\n" + text[at:].rstrip("\n") + "\n"


def main():
    if sys.argv[1:] == ["--machine"]:
        print(machine())
        return
    if len(sys.argv) != 2 or sys.argv[1].startswith("-"):
        fail("usage: bench_report.py OUT_DIR | bench_report.py --machine")
    out_dir = sys.argv[1]
    runs = load_runs(out_dir)
    # The whole report first: a missing measurement stops it before anything is written.
    text = report(runs) + "\n" + kept_by_hand(os.path.join(out_dir, "benchmarks.md"))
    with open(os.path.join(out_dir, "benchmarks.md"), "w") as out:
        out.write(text)
    chart(runs, out_dir)


if __name__ == "__main__":
    main()
