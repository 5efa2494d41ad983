BEGIN;
-- Takes the table's lock: from here until COMMIT, writers wait.
ALTER TABLE insta5.photos ALTER COLUMN id DROP DEFAULT;
SELECT snowflake_convert_column('insta5.photos', 'id', 5);
COMMIT;
