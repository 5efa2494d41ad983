-- Columns too narrow for snowflake IDs, caught where they are made (the event trigger
-- snowflake_check_defaults) and listed with their fix (snowflake_check_columns()); the hint on
-- an ORM's nextval() of a converted key's sequence.
CREATE SCHEMA narrow;
SET search_path = narrow, public;

-- A snowflake default on a column that cannot hold the IDs: refused in that statement.
CREATE TABLE small_key (id integer PRIMARY KEY DEFAULT snowflake_nextval(1));
CREATE TABLE float_key (id double precision PRIMARY KEY DEFAULT snowflake_nextval(1));
CREATE TABLE short_numeric_key (id numeric(12) PRIMARY KEY DEFAULT snowflake_nextval(1));
CREATE DOMAIN small_id AS integer;
CREATE TABLE domain_key (id small_id PRIMARY KEY DEFAULT snowflake_nextval(1));
SELECT to_regclass('small_key') AS small_key, to_regclass('float_key') AS float_key;
-- Types that hold every ID exactly are fine: bigint, numeric of 19 digits or more, text.
CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT snowflake_nextval(1), note text);
CREATE TABLE numeric_key (id numeric(20) PRIMARY KEY DEFAULT snowflake_nextval(1));
CREATE TABLE text_key (id text PRIMARY KEY DEFAULT snowflake_nextval(1));
INSERT INTO numeric_key DEFAULT VALUES;
INSERT INTO text_key DEFAULT VALUES;
SELECT snowflake_shard(id::bigint) AS numeric_shard FROM numeric_key;
SELECT snowflake_shard(id::bigint) AS text_shard FROM text_key;

-- A migration that narrows the key (Django's BigAutoField to SmallAutoField), or sets the
-- default on a narrow column: refused, and the column stays as it was.
ALTER TABLE orders ALTER COLUMN id TYPE smallint;
CREATE TABLE plain (id integer PRIMARY KEY);
ALTER TABLE plain ALTER COLUMN id SET DEFAULT snowflake_nextval(1);
SELECT format_type(atttypid, atttypmod) AS orders_id FROM pg_attribute WHERE attrelid = 'orders'::regclass AND attname = 'id';
SELECT count(*) AS plain_defaults FROM pg_attrdef WHERE adrelid = 'plain'::regclass;
-- Dropping the default first, then narrowing: the user's choice, allowed.
CREATE TABLE shrinking (id bigint PRIMARY KEY DEFAULT snowflake_nextval(1));
ALTER TABLE shrinking ALTER COLUMN id DROP DEFAULT, ALTER COLUMN id TYPE smallint;

-- A foreign key from an integer column to a snowflake key: PostgreSQL accepts it, and old keys
-- fit; the statement goes through with a WARNING naming the fix (refusing would also refuse
-- restoring a dump that has one).
CREATE TABLE order_lines (id bigint PRIMARY KEY DEFAULT snowflake_nextval(1),
                          order_id integer REFERENCES orders (id), qty int);
INSERT INTO orders (id, note) VALUES (7, 'an old key');
INSERT INTO order_lines (order_id, qty) VALUES (7, 1);
INSERT INTO orders (note) VALUES ('a new key');
INSERT INTO order_lines (order_id, qty) SELECT max(id), 1 FROM orders;

-- A Django-like schema: GenericForeignKey (object_id integer beside content_type_id), and a
-- Rails-like one: a polymorphic association (taggable_id integer beside taggable_type).
CREATE TABLE django_content_type (id integer PRIMARY KEY, app_label text, model text);
CREATE TABLE comments (id bigint PRIMARY KEY DEFAULT snowflake_nextval(1),
                       content_type_id integer REFERENCES django_content_type (id),
                       object_id integer CHECK (object_id >= 0), body text);
CREATE TABLE taggings (id bigint PRIMARY KEY DEFAULT snowflake_nextval(1), tag_id bigint,
                       taggable_type varchar, taggable_id integer);
-- Fixed, they are no longer listed.
CREATE TABLE comments_fixed (id bigint PRIMARY KEY DEFAULT snowflake_nextval(1),
                             content_type_id integer, object_id bigint CHECK (object_id >= 0));
CREATE TABLE user_accounts (id bigint PRIMARY KEY DEFAULT snowflake_nextval(1), user_id integer);

-- Keys automatic keys left on a sequence, with the model change that fixes each.
SET snowflake_id.auto_keys = narrow;
SET snowflake_id.shard = 1;
CREATE TABLE sqlalchemy_default (id serial PRIMARY KEY);
CREATE TABLE always_key (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY);
CREATE TABLE converted (id bigserial PRIMARY KEY);

\x on
SELECT * FROM snowflake_check_columns() WHERE tbl::text NOT LIKE 'pg_temp%';
\x off
-- Limited to some tables: the columns of those tables and the references to their keys.
SELECT tbl, col, finding FROM snowflake_check_columns(ARRAY['orders'::regclass]);
SELECT tbl, col, finding FROM snowflake_check_columns(ARRAY['taggings'::regclass]);
RESET snowflake_id.auto_keys;

-- An ORM that asks for a converted key's sequence by name (SQLAlchemy's implicit_returning=False
-- runs nextval('<table>_<column>_seq')) is told why it is gone and what to declare instead.
SELECT nextval('converted_id_seq');
-- Other missing relations get PostgreSQL's message alone.
SELECT * FROM no_such_table;

-- What the checks judge is the value the column receives: the ID itself, or the ID cast to the
-- column's type. Columns that hold it, or hold what their default computes from it, are
-- accepted (0.8.0 refused each of these with 42804, and so the restore of a dump that has one):
-- character types of 19 characters or more and name, and defaults that make something else of
-- the ID (a jsonb number, a range, a bucket).
CREATE TABLE char_key (id char(19) PRIMARY KEY DEFAULT snowflake_nextval(1));
CREATE TABLE bpchar_key (id bpchar PRIMARY KEY DEFAULT snowflake_nextval(1));
CREATE TABLE name_key (id name PRIMARY KEY DEFAULT snowflake_nextval(1));
CREATE TABLE documents (id bigint PRIMARY KEY DEFAULT snowflake_nextval(1),
                        doc jsonb DEFAULT to_jsonb(snowflake_nextval(1)),
                        span int8range DEFAULT int8range(snowflake_nextval(1), NULL),
                        bucket smallint DEFAULT (snowflake_nextval(1) % 16));
INSERT INTO char_key DEFAULT VALUES;
INSERT INTO bpchar_key DEFAULT VALUES;
INSERT INTO name_key DEFAULT VALUES;
INSERT INTO documents DEFAULT VALUES;
SELECT snowflake_shard(c.id::bigint) AS char_shard, snowflake_shard(b.id::bigint) AS bpchar_shard,
       snowflake_shard(n.id::text::bigint) AS name_shard, snowflake_shard(d.doc::bigint) AS jsonb_shard,
       snowflake_shard(lower(d.span)) AS range_shard, d.bucket BETWEEN 0 AND 15 AS bucket_in_range
FROM char_key c, bpchar_key b, name_key n, documents d;
-- Still refused: the ID itself, or cast, into a type that cannot hold it.
SELECT (regress.error_of(format('CREATE TABLE %s (id %s DEFAULT %s)', t, type, def))).code, type, def
FROM (VALUES ('real_key', 'real', 'snowflake_nextval(1)'),
             ('money_key', 'money', 'snowflake_nextval(1)'),
             ('oid_key', 'oid', 'snowflake_nextval(1)'),
             ('integer_key', 'integer', 'snowflake_nextval(1)'),
             ('integer_cast_key', 'integer', 'int4(snowflake_nextval(1))'),
             ('integer_text_key', 'integer', 'snowflake_nextval(1)::text::integer'),
             ('short_char_key', 'char(18)', 'snowflake_nextval(1)'),
             ('short_varchar_key', 'varchar(18)', 'snowflake_nextval()'),
             ('integer_array_key', 'integer[]', 'ARRAY[snowflake_nextval(1)]')) AS refused (t, type, def);
-- A dump of such tables restores, event triggers and all (pg_dump and psql of the server under
-- test, into a database of their own). The tables dumped are made with the check off, so that
-- the restore is what is tested.
ALTER EVENT TRIGGER snowflake_check_defaults DISABLE;
CREATE SCHEMA dumped;
CREATE TABLE dumped.char_key (id char(19) PRIMARY KEY DEFAULT snowflake_nextval(1));
CREATE TABLE dumped.bpchar_key (id bpchar PRIMARY KEY DEFAULT snowflake_nextval(1));
CREATE TABLE dumped.name_key (id name PRIMARY KEY DEFAULT snowflake_nextval(1));
CREATE TABLE dumped.documents (id bigint PRIMARY KEY DEFAULT snowflake_nextval(1),
                               doc jsonb DEFAULT to_jsonb(snowflake_nextval(1)),
                               span int8range DEFAULT int8range(snowflake_nextval(1), NULL),
                               bucket smallint DEFAULT (snowflake_nextval(1) % 16));
ALTER EVENT TRIGGER snowflake_check_defaults ENABLE;
INSERT INTO dumped.char_key DEFAULT VALUES;
INSERT INTO dumped.bpchar_key DEFAULT VALUES;
INSERT INTO dumped.name_key DEFAULT VALUES;
INSERT INTO dumped.documents DEFAULT VALUES;
SELECT setting AS bindir FROM pg_config WHERE name = 'BINDIR' \gset
\setenv PG_BINDIR :bindir
\set regress_db :DBNAME
\setenv REGRESS_DB :DBNAME
CREATE DATABASE narrow_restored;
\! "$PG_BINDIR/psql" -X -q -d narrow_restored -c 'CREATE EXTENSION snowflake_id' && "$PG_BINDIR/pg_dump" --schema=dumped -d "$REGRESS_DB" | "$PG_BINDIR/psql" -X -q -v ON_ERROR_STOP=1 -d narrow_restored >/dev/null 2>&1; echo "restored: $?"
\c narrow_restored
SELECT count(*) AS restored_rows
FROM dumped.char_key, dumped.bpchar_key, dumped.name_key, dumped.documents;
\c :regress_db
DROP DATABASE narrow_restored;
DROP SCHEMA dumped CASCADE;

RESET search_path;
DROP SCHEMA narrow CASCADE;
