-- The SQL surface as a user sees it: names, signatures, attributes, and exact values for
-- fixed inputs. The server runs the default layout (epoch 2024-01-01, 10 shard bits).
SET TimeZone = 'UTC';

-- Every function of the extension with its volatility (i/s/v), strictness and parallel safety (s/r/u).
SELECT p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ')' AS function,
       pg_get_function_result(p.oid) AS returns,
       p.provolatile AS vol, p.proisstrict AS strict, p.proparallel AS par
FROM pg_proc p
JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'snowflake_id'
ORDER BY 1;

SELECT * FROM snowflake_layout();

-- The horizon of an idle server follows the clock: past every ID issued so far, at most the
-- lowest ID of the clock's millisecond.
SELECT snowflake_horizon() > 0 AS horizon_positive,
       snowflake_horizon() <= snowflake_min_id(clock_timestamp()) AS horizon_not_ahead,
       snowflake_horizon(3) >= snowflake_horizon() - (1 << 22) AS per_shard_form;

-- A known ID: 2024-05-01 12:00:00.123 UTC, shard 3, seq 5.
SELECT snowflake_compose('2024-05-01 12:00:00.123+00', 3, 5) AS id \gset
SELECT :id AS id;
SELECT * FROM snowflake_decode(:id);
SELECT snowflake_decode(:id) AS record,
       (snowflake_decode(:id)).ts AS ts_field,
       snowflake_timestamp(:id), snowflake_shard(:id), snowflake_seq(:id);
SELECT snowflake_json(:id);
SELECT snowflake_json(:id)->>'id' = :id::text AS id_text_exact;

-- compose is the inverse of decode; sub-millisecond digits are dropped.
SELECT snowflake_compose(ts, shard, seq) = :id AS round_trip FROM snowflake_decode(:id);
SELECT snowflake_compose('2024-05-01 12:00:00.123999+00', 3, 5) = :id AS truncated_to_ms;
SELECT snowflake_compose('2024-05-01 14:00:00.123+02', 3, 5) = :id AS any_time_zone;

-- Range bounds of a millisecond.
SELECT snowflake_min_id('2024-05-01 12:00:00.123+00') AS min_id,
       snowflake_max_id('2024-05-01 12:00:00.123+00') AS max_id;
SELECT snowflake_min_id('2024-05-01 12:00:00.123+00') <= :id
   AND :id <= snowflake_max_id('2024-05-01 12:00:00.123+00') AS within_its_ms,
       snowflake_max_id('2024-05-01 12:00:00.122+00') < snowflake_min_id('2024-05-01 12:00:00.123+00') AS ms_do_not_overlap;

-- The edges of the ID space: the epoch and the last millisecond.
SELECT * FROM snowflake_decode(0);
SELECT * FROM snowflake_decode(9223372036854775807);
SELECT snowflake_min_id('2024-01-01 00:00:00+00') AS first_id,
       snowflake_max_id('2093-09-06 15:47:35.551+00') = 9223372036854775807 AS last_id_is_bigint_max;

-- Decoders are strict: NULL in, NULL out.
SELECT snowflake_timestamp(NULL) IS NULL AS ts_null, snowflake_shard(NULL) IS NULL AS shard_null,
       (snowflake_decode(NULL)).ts IS NULL AS decode_null, snowflake_json(NULL) IS NULL AS json_null;

-- Immutable decoders work in expression indexes and generated columns.
CREATE TABLE decoded (
    id bigint PRIMARY KEY,
    shard integer GENERATED ALWAYS AS (snowflake_shard(id)) STORED
);
CREATE INDEX decoded_by_time ON decoded (snowflake_timestamp(id));
INSERT INTO decoded (id) VALUES (:id);
SELECT * FROM decoded;
DROP TABLE decoded;

-- IDs made elsewhere, decoded under named layouts whatever this server's own layout is.
-- Discord's developer docs ("Snowflakes") break 175928847299117063 down as 2016-04-30
-- 11:18:25.796 UTC, worker 1, process 0, increment 7: shard (worker << 5 | process) 32, seq 7.
SELECT * FROM snowflake_decode(175928847299117063, 'discord');
SELECT snowflake_timestamp(175928847299117063, 'discord') AS ts,
       snowflake_shard(175928847299117063, 'discord') AS shard,
       snowflake_seq(175928847299117063, 'discord') AS seq;
-- The same bits under the other layouts, and under this server's.
SELECT layout, (snowflake_decode(175928847299117063, layout)).*
FROM unnest(ARRAY['twitter', 'discord', 'instagram', 'mastodon']) layout;
SELECT * FROM snowflake_decode(175928847299117063);
-- Instagram's formula ((ms - epoch) << 23) | (shard << 10) | seq, and Mastodon's
-- (unix_ms << 16) | tail.
SELECT * FROM snowflake_decode((1387263000::int8 << 23) | (1341 << 10) | 7, 'instagram');
SELECT * FROM snowflake_decode((1700000000123::int8 << 16) | 48879, 'mastodon');

-- snowflake_decode returns the named type snowflake_parts (drivers read its parts typed);
-- expanded, three typed columns.
SELECT pg_typeof(snowflake_decode(1 << 22)) AS decoded, pg_typeof((snowflake_decode(1 << 22)).ts) AS ts,
       pg_typeof((snowflake_decode(1 << 22, 'twitter')).shard) AS shard;
SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute
WHERE attrelid = 'snowflake_parts'::regclass ORDER BY attnum;
-- The event trigger of snowflake_id.auto_keys (auto_keys.sql tests what it does).
SELECT evtname, evtevent, evttags, evtfoid::regproc, evtenabled FROM pg_event_trigger;
