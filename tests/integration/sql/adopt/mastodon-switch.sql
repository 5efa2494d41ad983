BEGIN;
-- Takes the table's lock: from here until COMMIT, writers wait.
ALTER TABLE statuses ALTER COLUMN id DROP DEFAULT;
SELECT snowflake_convert_column('statuses', 'id', 0);
COMMIT;
