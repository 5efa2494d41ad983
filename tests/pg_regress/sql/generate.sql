-- Generating IDs as a user does: column defaults, the default shard, batches, advance.
-- Values change every run, so the checks are booleans.

CREATE TABLE orders (
    id    bigint PRIMARY KEY DEFAULT snowflake_nextval(3),
    n     serial,          -- insertion order
    note  text
);
INSERT INTO orders (note) SELECT 'order ' || g FROM generate_series(1, 1000) g;
INSERT INTO orders (note) VALUES ('one more');
SELECT count(*) AS rows,
       count(DISTINCT id) = count(*) AS all_unique,
       bool_and(id > 0) AS all_positive,
       bool_and(snowflake_shard(id) = 3) AS all_shard_3,
       bool_and(snowflake_timestamp(id) BETWEEN now() - interval '1 minute'
                                            AND clock_timestamp() + interval '3 seconds') AS times_are_now
FROM orders;
-- IDs increase in the order the rows were inserted.
SELECT bool_and(id > previous) AS increasing
FROM (SELECT id, lag(id) OVER (ORDER BY n) AS previous FROM orders) o
WHERE previous IS NOT NULL;

-- snowflake_nextval() takes its shard from snowflake_id.shard.
SET snowflake_id.shard = 42;
SELECT snowflake_shard(snowflake_nextval()) AS default_shard;
CREATE TABLE events (id bigint PRIMARY KEY DEFAULT snowflake_nextval(), what text);
INSERT INTO events (what) VALUES ('a'), ('b');
SELECT bool_and(snowflake_shard(id) = 42) AS events_on_shard_42 FROM events;
RESET snowflake_id.shard;

-- A batch is one reservation: consecutive, increasing, above everything before it.
SELECT max(id) AS before_batch FROM orders \gset
SELECT count(*) AS ids, count(DISTINCT id) = 10000 AS all_unique, min(id) > :before_batch AS above_earlier,
       bool_and(snowflake_shard(id) = 3) AS all_shard_3
FROM snowflake_nextvals(3, 10000) AS id;
SELECT bool_and(id > previous) AS batch_increasing
FROM (SELECT id, lag(id) OVER (ORDER BY ord) AS previous
      FROM snowflake_nextvals(3, 5000) WITH ORDINALITY AS b(id, ord)) b
WHERE previous IS NOT NULL;
-- The largest batch the default policy allows (2 s of lead at 4,096 per ms).
SELECT count(*) AS largest_batch FROM snowflake_nextvals(11, 8196096);

-- snowflake_advance: later IDs of the shard exceed the given ID, whichever shard it is from.
SELECT snowflake_compose(clock_timestamp() + interval '500 ms', 900, 77) AS ahead \gset
SELECT snowflake_advance(8, :ahead) = :ahead AS returns_its_argument;
SELECT snowflake_nextval(8) > :ahead AS next_is_above;
-- It never moves a shard back.
SELECT snowflake_nextval(8) AS last_of_8 \gset
SELECT snowflake_advance(8, snowflake_compose(now() - interval '1 day', 8, 0)) IS NOT NULL AS advanced_to_past;
SELECT snowflake_nextval(8) > :last_of_8 AS still_increasing;

-- Generators are volatile: one ID per row, not one per statement.
SELECT count(DISTINCT snowflake_nextval(5)) AS distinct_per_row FROM generate_series(1, 100);

-- snowflake_stats(): one row per shard used since the server started.
SELECT shard, issued, snowflake_shard(last_id) = shard AND snowflake_timestamp(last_id) = last_ts AS last_id_ok,
       lead_ms BETWEEN 0 AND 2000 AS lead_within_bound, waits >= 0 AND wait_ms >= 0 AS waits_counted,
       clock_regressions = 0 AS no_regressions, reserved_until > clock_timestamp() AS reserved_ahead
FROM snowflake_stats() ORDER BY shard;

-- snowflake_status(): the server's worker, reservation and fence (none set: NULL, every shard);
-- no lease and no shard registry configured: NULL, and no claim.
SELECT worker_pid > 0 AS worker_running, reserved_until > clock_timestamp() AS reserved_ahead,
       fence IS NULL AS no_fence, lease_url IS NULL AS no_lease,
       registry_url IS NULL AND registry_last_answer IS NULL AS no_registry
FROM snowflake_status();
SELECT count(*) AS claims FROM snowflake_registry_claims();
SELECT snowflake_fence_allows(0) AS first, snowflake_fence_allows(1023) AS last,
       snowflake_fence_allows(NULL) IS NULL AS null_is_null;

-- This transaction holds the horizon of shard 9 (and of every shard), not that of shard 3, and
-- snowflake_horizon_holders() names it: its process, the shard, since its ID, its start.
BEGIN;
SELECT snowflake_nextval(9) AS held \gset
SELECT pg_sleep(0.01);
SELECT snowflake_horizon(9) <= :held AS shard_9_held, snowflake_horizon() <= :held AS every_shard_held,
       snowflake_horizon(3) > :held AS shard_3_free;
SELECT pid = pg_backend_pid() AS this_backend, prepared_xid, shard,
       held_since = snowflake_timestamp(:held) AS since_its_id, xact_start = now() AS since_its_start
FROM snowflake_horizon_holders();
COMMIT;
SELECT count(*) AS holders FROM snowflake_horizon_holders();
