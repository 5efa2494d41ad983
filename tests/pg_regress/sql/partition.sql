-- Partitioning by time on the ID: native range partitions whose bounds are the first IDs of
-- each month. Queries on ID ranges built with snowflake_min_id/snowflake_max_id prune
-- partitions at planning time (the functions are immutable, so constant bounds fold).
SET TimeZone = 'UTC';
CREATE SCHEMA by_month;
SET search_path = by_month, public;

CREATE TABLE events (
    id bigint NOT NULL DEFAULT snowflake_nextval(2),
    what text,
    PRIMARY KEY (id)
) PARTITION BY RANGE (id);

-- One partition per month of 2026's first half: [first ID of the month, first ID of the next).
DO $$
DECLARE
    month timestamptz;
BEGIN
    FOR month IN SELECT generate_series('2026-01-01 00:00+00'::timestamptz, '2026-06-01 00:00+00', '1 month') LOOP
        EXECUTE format('CREATE TABLE %I PARTITION OF events FOR VALUES FROM (%s) TO (%s)',
                       'events_' || to_char(month, 'YYYY_MM'),
                       snowflake_min_id(month), snowflake_min_id(month + interval '1 month'));
    END LOOP;
END $$;

SELECT c.relname AS partition, pg_get_expr(c.relpartbound, c.oid) AS bounds
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = 'events'::regclass ORDER BY 1;

-- Rows land in the partition of the month their ID was issued in, to the millisecond.
INSERT INTO events (id, what) VALUES
    (snowflake_compose('2026-01-01 00:00:00.000+00', 2, 0), 'first ms of January'),
    (snowflake_compose('2026-01-31 23:59:59.999+00', 1023, 4095), 'last ID of January'),
    (snowflake_compose('2026-02-01 00:00:00.000+00', 0, 0), 'first ID of February'),
    (snowflake_compose('2026-03-15 12:00:00+00', 2, 7), 'mid March'),
    (snowflake_compose('2026-06-30 23:59:59.999+00', 2, 0), 'end of June');
SELECT tableoid::regclass AS partition, snowflake_timestamp(id), what FROM events ORDER BY id;
-- An ID outside every partition is refused, as for any range partitioning.
INSERT INTO events (id) VALUES (snowflake_compose('2026-07-01 00:00+00', 2, 0));

-- Pruning: only the partitions that can hold the range are scanned.
EXPLAIN (COSTS OFF) SELECT count(*) FROM events WHERE id >= snowflake_min_id('2026-05-01 00:00+00');
EXPLAIN (COSTS OFF) SELECT * FROM events
WHERE id BETWEEN snowflake_min_id('2026-02-10 00:00+00') AND snowflake_max_id('2026-02-20 00:00+00');
SELECT count(*) AS from_march FROM events WHERE id >= snowflake_min_id('2026-03-01 00:00+00');

DROP SCHEMA by_month CASCADE;
