BEGIN;
-- Takes the table's lock: from here until COMMIT, writers wait.
ALTER TABLE statuses ALTER COLUMN id DROP DEFAULT;
-- Every old ID was made before the lock (its millisecond rounded, at most half a millisecond
-- up); a millisecond later, all of them are below the current millisecond's IDs.
SELECT pg_sleep(0.002);
SELECT snowflake_convert_column('statuses', 'id', 0);
COMMIT;
