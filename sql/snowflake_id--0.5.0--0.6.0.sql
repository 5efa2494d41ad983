-- snowflake_id 0.5.0 -> 0.6.0
\echo Use "ALTER EXTENSION snowflake_id UPDATE TO '0.6.0'" to load this file. \quit

-- The committed horizon: how far readers paging by ID may read without skipping a row that
-- commits later (docs/reading-in-order.md).
CREATE  FUNCTION "snowflake_horizon"() RETURNS bigint /* i64 */
STRICT VOLATILE PARALLEL RESTRICTED
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'snowflake_horizon_wrapper';

CREATE  FUNCTION "snowflake_horizon"(
	"shard" INT /* Option < i32 > */
) RETURNS bigint /* i64 */
VOLATILE PARALLEL RESTRICTED
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'snowflake_horizon_of_shard_wrapper';

-- Monitoring (deploy/monitoring/): the reservation worker, the reservation and the fence in
-- force, for the server as a whole; whether the fence lets a shard be issued.
CREATE FUNCTION "snowflake_status"() RETURNS TABLE (
	"worker_pid" INT,
	"reserved_until" timestamp with time zone,
	"fence" TEXT
)
STRICT VOLATILE PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'snowflake_status_wrapper';
/* The worker's process id and the reservation's end are operational data, as snowflake_stats(). */
REVOKE ALL ON FUNCTION snowflake_status() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION snowflake_status() TO pg_read_all_stats;

CREATE FUNCTION "snowflake_fence_allows"(
	"shard" INT
) RETURNS bool
STRICT VOLATILE PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'snowflake_fence_allows_wrapper';

-- snowflake_decode() returns a named type, snowflake_parts, instead of an anonymous record, so
-- that drivers read its parts typed (docs/orms.md). A function's result type cannot be
-- changed in place: each form is created anew, and the views over the old one are carried over
-- with CREATE OR REPLACE VIEW and their own definition (same columns, so they keep their
-- owner, privileges, options, comments and the views built on them). Anything else that
-- depends on the old one (a materialized view, an index, a generated column, a constraint, a
-- function with a SQL-standard body) stops the update, named, before anything has changed.
CREATE TYPE snowflake_parts AS (ts timestamptz, shard integer, seq integer);
COMMENT ON TYPE snowflake_parts IS 'The parts of a snowflake ID: when it was issued, its shard and its sequence number';
DO $update$
DECLARE
    old_forms CONSTANT regprocedure[] := ARRAY['@extschema@.snowflake_decode(bigint)'::regprocedure,
                                               '@extschema@.snowflake_decode(bigint, text)'::regprocedure];
    blocking text;
    views regclass[];
    definitions text[];
    options text[];
BEGIN
    SELECT string_agg(DISTINCT pg_describe_object(d.classid, d.objid, d.objsubid), ', ') INTO blocking
    FROM pg_depend d
    LEFT JOIN pg_rewrite r ON d.classid = 'pg_rewrite'::regclass AND r.oid = d.objid
    LEFT JOIN pg_class c ON c.oid = r.ev_class
    WHERE d.refclassid = 'pg_proc'::regclass AND d.refobjid = ANY (old_forms)
      AND d.deptype = 'n'
      AND (r.rulename IS DISTINCT FROM '_RETURN' OR c.relkind <> 'v' OR c.relpersistence <> 'p');
    IF blocking IS NOT NULL THEN
        RAISE EXCEPTION 'snowflake_decode() cannot be updated while other objects than views depend on it'
            USING ERRCODE = 'dependent_objects_still_exist',
                  DETAIL = format('0.6.0 makes its result the type snowflake_parts. Depending on it: %s.', blocking),
                  HINT = 'Drop them, run ALTER EXTENSION snowflake_id UPDATE, and create them again (views over snowflake_decode() are carried over by the update).';
    END IF;
    -- Each view's definition is read before the old functions are renamed: it names
    -- snowflake_decode, which will then be the new one.
    SELECT array_agg(c.oid::regclass ORDER BY c.oid), array_agg(pg_get_viewdef(c.oid) ORDER BY c.oid),
           array_agg(coalesce(array_to_string(c.reloptions, ', '), '') ORDER BY c.oid)
    INTO views, definitions, options
    FROM pg_class c
    WHERE c.oid IN (SELECT r.ev_class FROM pg_depend d JOIN pg_rewrite r ON r.oid = d.objid
                    WHERE d.classid = 'pg_rewrite'::regclass AND d.refclassid = 'pg_proc'::regclass
                      AND d.refobjid = ANY (old_forms));
    ALTER FUNCTION @extschema@.snowflake_decode(bigint) RENAME TO snowflake_decode_0_5;
    ALTER FUNCTION @extschema@.snowflake_decode(bigint, text) RENAME TO snowflake_decode_0_5;
    CREATE FUNCTION @extschema@.snowflake_decode(id bigint)
    RETURNS snowflake_parts
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ SELECT @extschema@.snowflake_timestamp(id), @extschema@.snowflake_shard(id), @extschema@.snowflake_seq(id) $$;
    COMMENT ON FUNCTION @extschema@.snowflake_decode(bigint) IS 'The timestamp, shard and sequence number of a snowflake ID';
    CREATE FUNCTION @extschema@.snowflake_decode(id bigint, layout text)
    RETURNS snowflake_parts
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ SELECT @extschema@.snowflake_timestamp(id, layout), @extschema@.snowflake_shard(id, layout), @extschema@.snowflake_seq(id, layout) $$;
    COMMENT ON FUNCTION @extschema@.snowflake_decode(bigint, text) IS 'The timestamp, shard and sequence number of an ID made under a named layout (twitter, discord, instagram, mastodon)';
    -- An update script may replace only the extension's own objects: each view is its member
    -- for the moment of its replacement.
    FOR i IN 1 .. coalesce(cardinality(views), 0) LOOP
        EXECUTE format('ALTER EXTENSION snowflake_id ADD VIEW %s', views[i]);
        BEGIN
            EXECUTE format('CREATE OR REPLACE VIEW %s %s AS %s', views[i],
                           CASE WHEN options[i] <> '' THEN format('WITH (%s)', options[i]) END, definitions[i]);
        EXCEPTION WHEN OTHERS THEN
            RAISE EXCEPTION 'view % over snowflake_decode() cannot be carried over: %', views[i], SQLERRM
                USING ERRCODE = SQLSTATE,
                      DETAIL = format('Its definition: %s', definitions[i]),
                      HINT = 'Drop the view, run ALTER EXTENSION snowflake_id UPDATE, and create it again.';
        END;
        EXECUTE format('ALTER EXTENSION snowflake_id DROP VIEW %s', views[i]);
    END LOOP;
    DROP FUNCTION @extschema@.snowflake_decode_0_5(bigint);
    DROP FUNCTION @extschema@.snowflake_decode_0_5(bigint, text);
END
$update$;

-- snowflake_id.auto_keys: the event trigger that gives the keys of new tables
-- DEFAULT snowflake_nextval() (docs/orms.md).
CREATE FUNCTION snowflake_auto_keys()
RETURNS event_trigger
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $auto$
DECLARE
    schemas text[];
    key record;
    shard integer;
BEGIN
    -- The setting as the session has it (undefined, without preloading: none). Split as its
    -- check hook reads it: names separated by commas, each an identifier.
    schemas := ARRAY(
        SELECT (parse_ident(btrim(item)))[1]
        FROM unnest(string_to_array(current_setting('snowflake_id.auto_keys', true), ',')) AS item
        WHERE btrim(item) <> '');
    IF cardinality(schemas) = 0 THEN
        RETURN;
    END IF;
    FOR key IN
        SELECT dep.refobjid::regclass AS tbl, a.attname AS col, a.atttypid, a.attidentity,
               pk.indnkeyatts AS pk_columns
        FROM pg_event_trigger_ddl_commands() AS cmd
        -- The column that owns each sequence the statement created: a serial's (deptype 'a')
        -- or an identity's ('i').
        JOIN pg_depend dep ON dep.classid = 'pg_class'::regclass AND dep.objid = cmd.objid
                           AND dep.refclassid = 'pg_class'::regclass AND dep.refobjsubid > 0
                           AND dep.deptype IN ('a', 'i')
        JOIN pg_attribute a ON a.attrelid = dep.refobjid AND a.attnum = dep.refobjsubid
        JOIN pg_class c ON c.oid = dep.refobjid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        JOIN pg_index pk ON pk.indrelid = c.oid AND pk.indisprimary
                         AND a.attnum = ANY (pk.indkey::int2[])
        WHERE cmd.command_tag = 'CREATE SEQUENCE'
          AND (n.nspname = ANY (schemas) OR (n.oid = pg_my_temp_schema() AND 'pg_temp' = ANY (schemas)))
        ORDER BY 1, 2
    LOOP
        IF key.atttypid <> 'bigint'::regtype THEN
            RAISE NOTICE 'key %.% keeps its sequence: % is too small for snowflake IDs', key.tbl, quote_ident(key.col),
                    format_type(key.atttypid, NULL)
                USING DETAIL = 'snowflake_id.auto_keys gives snowflake IDs, 64 bits, to bigint keys only.',
                      HINT = 'Declare the key bigserial or bigint (BigAutoField in Django), or widen and convert it later with snowflake_convert_column().';
        ELSIF key.attidentity = 'a' THEN
            RAISE NOTICE 'key %.% keeps its identity: it is GENERATED ALWAYS', key.tbl, quote_ident(key.col)
                USING DETAIL = 'A snowflake default takes explicit values, which GENERATED ALWAYS promises to refuse.',
                      HINT = 'Declare it GENERATED BY DEFAULT AS IDENTITY to have snowflake keys.';
        ELSIF key.pk_columns > 1 THEN
            RAISE NOTICE 'key %.% keeps its sequence: it is one of % columns of the primary key', key.tbl, quote_ident(key.col),
                    key.pk_columns
                USING DETAIL = 'snowflake_id.auto_keys converts single-column primary keys only (a partitioned table''s key also holds its partition key).',
                      HINT = 'Declare the column bigint DEFAULT snowflake_nextval() to have snowflake keys.';
        ELSE
            shard := nullif(current_setting('snowflake_id.shard', true), '-1')::integer;
            IF shard IS NULL THEN
                RAISE EXCEPTION 'snowflake_id.shard is not set'
                    USING ERRCODE = 'object_not_in_prerequisite_state',
                          DETAIL = format('snowflake_id.auto_keys gives the key %s.%s DEFAULT snowflake_nextval(), which issues IDs for the shard in snowflake_id.shard.',
                                          key.tbl, quote_ident(key.col)),
                          HINT = 'Have a superuser set a default, ALTER DATABASE name SET snowflake_id.shard = 3 (or ALTER ROLE), or leave this schema out of snowflake_id.auto_keys.';
            END IF;
            -- The conversion's checks and steps, then the default that reads the shard per session.
            PERFORM @extschema@.snowflake_convert_column(key.tbl, key.col, shard);
            EXECUTE format('ALTER TABLE %s ALTER COLUMN %I SET DEFAULT @extschema@.snowflake_nextval()', key.tbl, key.col);
        END IF;
    END LOOP;
END
$auto$;
COMMENT ON FUNCTION snowflake_auto_keys() IS
    'The event trigger of snowflake_id.auto_keys: new bigserial and identity keys get DEFAULT snowflake_nextval()';
CREATE EVENT TRIGGER snowflake_auto_keys ON ddl_command_end
    WHEN TAG IN ('CREATE TABLE', 'ALTER TABLE')
    EXECUTE FUNCTION snowflake_auto_keys();
