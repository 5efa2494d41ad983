-- pg_partman (Debian's postgresql-15-partman) partitioning a table by its snowflake ID:
-- id-based native partitioning with one day of IDs per partition, the interval computed from
-- the layout. ID 0 is the epoch's first millisecond, and pg_partman starts partitions at
-- multiples of the interval, so each partition holds exactly one UTC day.
SET TimeZone = 'UTC';
CREATE SCHEMA partman;
CREATE EXTENSION pg_partman SCHEMA partman;
CREATE SCHEMA daily;
SET search_path = daily, public;

CREATE TABLE events (
    id bigint NOT NULL DEFAULT snowflake_nextval(2),
    what text,
    PRIMARY KEY (id)
) PARTITION BY RANGE (id);

-- IDs per day: 86,400,000 ms times 2^(22 - 10 shard bits) IDs per ms per shard, times 1,024 shards.
SELECT snowflake_min_id('2026-01-02 00:00+00') - snowflake_min_id('2026-01-01 00:00+00') AS ids_per_day \gset
SELECT :ids_per_day AS ids_per_day, :ids_per_day = 86400000::bigint << 22 AS one_day_of_ids;

SELECT partman.create_parent(
    p_parent_table := 'daily.events',
    p_control := 'id',
    p_type := 'native',
    p_interval := :'ids_per_day',
    p_premake := 3,
    p_start_partition := snowflake_min_id('2026-01-01 00:00+00')::text
);

-- Each partition's name carries its first ID, which decodes to midnight UTC.
CREATE VIEW partitions AS
SELECT c.relname AS partition,
       snowflake_timestamp(substring(c.relname FROM '_p(\d+)$')::bigint) AS first_ms
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = 'daily.events'::regclass;
SELECT * FROM partitions ORDER BY first_ms NULLS LAST;

-- Rows land in the partition of their day.
INSERT INTO events (id, what) VALUES
    (snowflake_compose('2026-01-01 00:00:00+00', 2, 0), 'first ID of Jan 1'),
    (snowflake_compose('2026-01-01 23:59:59.999+00', 1023, 4095), 'last ID of Jan 1'),
    (snowflake_compose('2026-01-03 12:00:00+00', 2, 5), 'noon, Jan 3');
SELECT tableoid::regclass AS partition, snowflake_timestamp(id), what FROM events ORDER BY id;

-- Maintenance keeps premake (3) partitions ahead of the newest row's day.
SELECT partman.run_maintenance('daily.events');
SELECT * FROM partitions ORDER BY first_ms NULLS LAST;
INSERT INTO events (id, what) VALUES (snowflake_compose('2026-01-06 08:00:00+00', 2, 0), 'Jan 6');
SELECT tableoid::regclass AS partition, what FROM events WHERE what = 'Jan 6';

-- Pruning works on pg_partman's partitions as on hand-made ones.
EXPLAIN (COSTS OFF) SELECT count(*) FROM events
WHERE id >= snowflake_min_id('2026-01-03 00:00+00') AND id < snowflake_min_id('2026-01-04 00:00+00');

SET client_min_messages = warning;
DROP SCHEMA daily CASCADE;
DROP EXTENSION pg_partman;
DROP SCHEMA partman CASCADE;
