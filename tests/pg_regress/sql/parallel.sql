-- IDs issued inside parallel workers: the generators are PARALLEL SAFE, because their state
-- is in shared memory, which the workers share with their leader. A parallel scan evaluates
-- snowflake_nextval in every worker; each ID must still be distinct and of its shard.
CREATE TABLE parallel_rows AS SELECT g FROM generate_series(1, 200000) g;
ANALYZE parallel_rows;
SET parallel_setup_cost = 0;
SET parallel_tuple_cost = 0;
SET min_parallel_table_scan_size = 0;
SET max_parallel_workers_per_gather = 2;
SET parallel_leader_participation = off;
-- The function runs below the Gather, in the workers.
EXPLAIN (COSTS OFF, VERBOSE) SELECT snowflake_nextval(4) FROM parallel_rows;
-- Two workers issue the IDs; the leader only gathers them.
SELECT count(*) AS ids, count(DISTINCT id) AS distinct_ids, bool_and(snowflake_shard(id) = 4) AS all_shard_4
FROM (SELECT snowflake_nextval(4) AS id FROM parallel_rows) ids;
-- The same with the whole query in one worker (debug_parallel_query, force_parallel_mode on 15).
SELECT set_config(CASE WHEN current_setting('server_version_num')::int >= 160000
                       THEN 'debug_parallel_query' ELSE 'force_parallel_mode' END, 'on', false) AS forced;
SELECT count(*) AS ids, count(DISTINCT id) AS distinct_ids, bool_and(snowflake_shard(id) = 5) AS all_shard_5
FROM snowflake_nextvals(5, 100000) id;
SELECT count(*) AS ids, count(DISTINCT id) AS distinct_ids, bool_and(snowflake_shard(id) = 5) AS all_shard_5
FROM (SELECT snowflake_nextval(5) AS id FROM parallel_rows) ids;
RESET ALL;
DROP TABLE parallel_rows;
