BEGIN;
-- Takes the table's lock: from here until COMMIT, writers wait.
ALTER TABLE insta5.photos ALTER COLUMN id DROP DEFAULT;
-- Every old ID was made before the lock; a millisecond later, all of them are below the
-- current millisecond's IDs, as snowflake_convert_column requires.
SELECT pg_sleep(0.002);
SELECT snowflake_convert_column('insta5.photos', 'id', 5);
COMMIT;
