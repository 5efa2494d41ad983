-- snowflake_observe(id): after it, every ID of this server, on every shard, is above id; within
-- the lead bound (snowflake_id.max_lead_ms, 2 s by default), else refused with nothing moved.
-- The IDs depend on the clock, so only comparisons and error codes are printed.
CREATE TEMP TABLE seen AS SELECT
    snowflake_compose(clock_timestamp() + interval '150 ms', 9, 4095) AS ahead,
    snowflake_compose(clock_timestamp() + interval '10 s', 9, 0) AS too_far,
    snowflake_compose(clock_timestamp() - interval '1 hour', 9, 0) AS old;

-- Ahead of the clock, within the bound: returned, and the next ID of any shard is above it.
SELECT snowflake_observe(ahead) = ahead AS returned FROM seen;
SELECT snowflake_nextval(1) > ahead AS shard_1_above, snowflake_nextval(700) > ahead AS shard_700_above
FROM seen;

-- Further ahead than the lead bound: 55000, and nothing moved (the next ID keeps to the clock).
\x on
SELECT e.code, e.hint FROM seen, regress.error_of(format('SELECT snowflake_observe(%s)', too_far)) e;
\x off
SELECT snowflake_timestamp(snowflake_nextval(1)) < clock_timestamp() + interval '5 s' AS not_moved;

-- NULL observes nothing (a request without a causality token); an old ID changes nothing.
SELECT snowflake_observe(NULL) IS NULL AS null_observes_nothing;
SELECT snowflake_observe(old) = old AS old_returned,
       snowflake_timestamp(snowflake_nextval(1)) > clock_timestamp() - interval '1 minute' AS clock_kept
FROM seen;

-- Not an ID: 22023, as for every decoder.
SELECT e.code FROM regress.error_of('SELECT snowflake_observe(-1)') e;

-- Not for PUBLIC: raising the floor moves every shard of the server (docs/security.md).
CREATE ROLE reader LOGIN;
GRANT SELECT ON seen TO reader;
SELECT has_function_privilege('reader', 'snowflake_observe(bigint)', 'EXECUTE') AS reader_observes;
SET ROLE reader;
SELECT snowflake_observe(old) FROM seen;
RESET ROLE;
GRANT EXECUTE ON FUNCTION snowflake_observe(bigint) TO reader;
SET ROLE reader;
SELECT snowflake_observe(old) = old AS granted_observes FROM seen;
RESET ROLE;
DROP TABLE seen;
DROP OWNED BY reader;
DROP ROLE reader;
