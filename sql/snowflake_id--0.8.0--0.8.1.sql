-- snowflake_id 0.8.0 -> 0.8.1 (CHANGELOG.md): the security and safety release.
\echo Use "ALTER EXTENSION snowflake_id UPDATE TO '0.8.1'" to load this file. \quit

-- snowflake_status() shows the lease: its URL and length (NULL while off), since when it is
-- lost, and when the request of its last 200 was sent (src/api/stats.rs). New columns of a
-- function returning TABLE: dropped and created again, with its privileges.
DROP FUNCTION snowflake_status();
CREATE  FUNCTION "snowflake_status"() RETURNS TABLE (
	"worker_pid" INT,  /* Option < i32 > */
	"reserved_until" timestamp with time zone,  /* TimestampWithTimeZone */
	"fence" TEXT,  /* Option < String > */
	"lease_url" TEXT,  /* Option < String > */
	"lease_ms" INT,  /* Option < i32 > */
	"lease_lost_since" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"lease_last_200" timestamp with time zone  /* Option < TimestampWithTimeZone > */
)
STRICT VOLATILE PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'snowflake_status_wrapper';
REVOKE ALL ON FUNCTION snowflake_status() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION snowflake_status() TO pg_read_all_stats;

-- The column checks and the event triggers (src/api/column_checks.sql, src/api/auto_keys.sql):
-- the generators found by their whole key, not by name (another role's 50,000 overloads of
-- snowflake_nextval in pg_temp slowed every ALTER TABLE); every catalog read by index from the
-- statement's own objects whatever the statistics say (another role's temporary column
-- defaults and stale statistics made the plans read all of pg_attrdef); and a column refused
-- only when its default gives it the ID, or the ID cast, and its type cannot hold it (char(19),
-- name, and defaults that compute something else from the ID are accepted again).
CREATE OR REPLACE FUNCTION snowflake_check_columns(tables regclass[] DEFAULT NULL)
RETURNS TABLE (tbl regclass, col name, type text, finding text, fix text)
LANGUAGE plpgsql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
/* The query's plan made once per session, not per call: its parameters are arrays of oids,
   which every plan reads by index, so a plan for the values of one call gains nothing, and
   planning the query took three times as long as running it (5 ms a call, 1.7 ms with the
   plan kept; the event trigger below calls it for every CREATE and ALTER TABLE). */
SET plan_cache_mode = force_generic_plan
/* Every catalog read goes by index, from the oids of the tables asked about, whatever the
   catalogs' statistics say. A plan kept for the session, or made from statistics taken before
   some role filled a catalog, must not turn into a scan of that catalog: with 100,000
   temporary column defaults of another role and pg_attrdef's statistics from before them, 0.8.0
   read all of pg_attrdef on every ALTER TABLE (18-27 ms instead of 0.19) until the next
   ANALYZE. So no sequential scan, and joins by nested loop over an index, each driven from the
   statement's own objects: where a catalog has two indexes, the query gives only the one it
   means to use a condition it can use (the others' conditions are tested after the read). */
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $checks$
#variable_conflict use_column
DECLARE
    -- The relations whose columns are checked, and those whose keys their references may
    -- point at: as oid arrays, so that every query below reads the catalogs by index.
    checked oid[];
    referenced oid[];
    -- The layout's width, as the server started with it (the setting is fixed at start, and a
    -- named layout sets it); 63 where the library is not loaded, the widest, so that nothing
    -- too narrow passes. Its largest ID's digits: 19 at 63 bits, 16 at 53.
    id_bits integer := coalesce(current_setting('snowflake_id.id_bits', true)::integer, 63);
    id_digits integer := length((((1::bigint << (id_bits - 1)) - 1) * 2 + 1)::text);
    -- The functions whose default makes a column a snowflake key, snowflake_nextval(integer)
    -- and snowflake_nextval(), each found by its whole key (name, argument types, schema: one
    -- probe of pg_proc's unique index). Never by name alone: that reads every function of the
    -- name in every schema, and any role may make thousands in pg_temp (0.8.0: 50,000 of them
    -- made every ALTER TABLE of the database 60 times slower).
    generators oid[] := ARRAY[
        (SELECT p.oid FROM pg_proc p
         WHERE p.proname = 'snowflake_nextval' AND p.proargtypes = '23'::oidvector -- (integer)
           AND p.pronamespace = '@extschema@'::regnamespace),
        (SELECT p.oid FROM pg_proc p
         WHERE p.proname = 'snowflake_nextval' AND p.proargtypes = ''::oidvector
           AND p.pronamespace = '@extschema@'::regnamespace)];
BEGIN
    IF tables IS NULL THEN
        checked := ARRAY(
            SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE c.relkind IN ('r', 'p', 'f')
              AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\_toast%'
              AND NOT pg_is_other_temp_schema(n.oid));
    ELSE
        -- The tables, and the tables whose foreign keys reference them: a foreign key depends
        -- on the referenced table's columns (pg_depend's index on the referenced object).
        -- (pg_depend read by its index on the referenced object alone: the kind of the
        -- dependent object is tested after the read.)
        checked := ARRAY(
            SELECT DISTINCT c.oid FROM pg_class c
            WHERE c.oid = ANY (tables::oid[]) AND c.relkind IN ('r', 'p', 'f')
            UNION
            SELECT fk.conrelid FROM pg_depend dep
            JOIN pg_constraint fk ON fk.oid = CASE WHEN dep.classid = 'pg_constraint'::regclass THEN dep.objid END
                                 AND fk.contype = 'f'
            WHERE dep.refclassid = 'pg_class'::regclass AND dep.refobjid = ANY (tables::oid[]));
    END IF;
    referenced := checked || ARRAY(
        SELECT DISTINCT fk.confrelid FROM pg_constraint fk
        WHERE fk.conrelid = ANY (checked) AND fk.contype = 'f');
    RETURN QUERY
    WITH columns AS (
        -- The checked columns with their base type (through domains, and arrays' elements), and
        -- whether that type holds every ID exactly: bigint; numeric with the largest ID's digits
        -- before the point (or unconstrained); the string types: text, name (63 bytes),
        -- character varying and character of that many characters or more (character pads a
        -- shorter ID with spaces, which its comparisons ignore), and any other string type
        -- without a length (citext); double precision when the layout has 53 bits or fewer (its
        -- 53-bit significand: 2^53 - 1 and below are exact).
        SELECT a.attrelid, a.attnum, a.attname, format_type(a.atttypid, a.atttypmod) AS type_name,
               CASE base.oid
                   WHEN 'bigint'::regtype THEN true
                   WHEN 'numeric'::regtype THEN base.typmod < 0 OR ((base.typmod - 4) >> 16) - ((base.typmod - 4) & 65535) >= id_digits
                   WHEN 'text'::regtype THEN true
                   WHEN 'character varying'::regtype THEN base.typmod < 0 OR base.typmod - 4 >= id_digits
                   WHEN 'character'::regtype THEN base.typmod < 0 OR base.typmod - 4 >= id_digits
                   WHEN 'name'::regtype THEN true
                   WHEN 'double precision'::regtype THEN id_bits <= 53
                   ELSE base.category = 'S' AND base.typmod < 0
               END AS holds_ids,
               base.oid IN ('smallint'::regtype, 'integer'::regtype) AND NOT base.in_array AS is_small_integer
        FROM pg_attribute a
        CROSS JOIN LATERAL (
            -- A domain's base type (its type modifier, if it has one), an array's element type,
            -- and so on down to a type that is neither.
            WITH RECURSIVE chain (oid, typmod, in_array, depth) AS (
                SELECT a.atttypid, a.atttypmod, false, 0
                UNION ALL
                SELECT CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE t.typelem END,
                       CASE WHEN t.typtype = 'd' AND t.typtypmod >= 0 THEN t.typtypmod ELSE chain.typmod END,
                       chain.in_array OR t.typtype <> 'd',
                       chain.depth + 1
                FROM chain JOIN pg_type t ON t.oid = chain.oid
                WHERE t.typtype = 'd' OR (t.typsubscript = 'array_subscript_handler'::regproc AND t.typelem <> 0)
            )
            SELECT chain.oid, chain.typmod, chain.in_array,
                   (SELECT t.typcategory FROM pg_type t WHERE t.oid = chain.oid) AS category
            FROM chain ORDER BY chain.depth DESC LIMIT 1
        ) AS base
        WHERE a.attrelid = ANY (checked) AND a.attnum > 0 AND NOT a.attisdropped
    ),
    keys AS (
        -- Columns whose default gives them the ID of snowflake_nextval(): the call itself, or
        -- the call cast to the column's type, and no function but PostgreSQL's own anywhere in
        -- it (the use of a function of the application's is recorded in pg_depend). A default
        -- that computes something else from the ID holds what it computes, whatever PostgreSQL
        -- function does it: to_jsonb(snowflake_nextval(1)) on jsonb, int8range(...) on
        -- int8range, (snowflake_nextval(1) % 16) on smallint (0.8.0 refused these, and so the
        -- restore of a dump that has one).
        SELECT d.adrelid, d.adnum
        FROM pg_attrdef d
        -- The functions the default calls (PostgreSQL's own are not recorded), read by
        -- pg_depend's index on the dependent object alone.
        CROSS JOIN LATERAL (
            SELECT array_remove(ARRAY(
                       SELECT CASE WHEN dep.refclassid = 'pg_proc'::regclass THEN dep.refobjid END
                       FROM pg_depend dep
                       WHERE dep.classid = 'pg_attrdef'::regclass AND dep.objid = d.oid), NULL) AS functions
        ) AS calls
        WHERE d.adrelid = ANY (referenced)
          AND calls.functions && generators AND calls.functions <@ generators
          AND EXISTS (
              -- The default's expression tree (pg_node_tree's text), peeled from the top, one
              -- cast at a time, down to the call: a cast is a coercion node (through I/O, a
              -- relabelling, to a domain, of an array's elements), an array constructor (its
              -- first element), or a function call written as a cast or implicit (an
              -- assignment's), or a cast's function called by name (int4(...)). What is
              -- peeled is each node's head, up to its first argument: the text that follows
              -- starts with that argument.
              WITH RECURSIVE peel (node, depth) AS (
                  SELECT d.adbin::text, 0
                  UNION ALL
                  SELECT substr(peel.node, length(head.m[1]) + 1), peel.depth + 1
                  FROM peel
                  CROSS JOIN LATERAL regexp_match(peel.node,
                      '^(\{(?:COERCEVIAIO|RELABELTYPE|COERCETODOMAIN|ARRAYCOERCEEXPR) [^{}]*?:arg |\{ARRAYEXPR [^{}]*?:elements \(|\{FUNCEXPR :funcid (\d+) [^{}]*?:funcformat (\d+) [^{}]*?:args \()') AS head(m)
                  WHERE head.m IS NOT NULL AND peel.depth < 64
                    AND (head.m[2] IS NULL OR head.m[3] IN ('1', '2')
                         OR EXISTS (SELECT FROM pg_proc p
                                    JOIN pg_cast c ON c.castsource = p.proargtypes[0] AND c.casttarget = p.prorettype
                                    WHERE p.oid = head.m[2]::oid AND c.castfunc = p.oid))
              )
              SELECT FROM peel
              WHERE (regexp_match(peel.node, '^\{FUNCEXPR :funcid (\d+) '))[1]::oid = ANY (generators))
    ),
    narrow_defaults AS (
        SELECT c.attrelid, c.attname, c.type_name, 'default too narrow' AS finding,
               format('Keep the column bigint: ALTER TABLE %s ALTER COLUMN %I TYPE bigint (in a migration that narrowed it, keep the model''s BigAutoField or BigInteger); or drop the default first: ALTER TABLE %s ALTER COLUMN %I DROP DEFAULT.',
                      c.attrelid::regclass, c.attname, c.attrelid::regclass, c.attname) AS fix
        FROM columns c JOIN keys k ON k.adrelid = c.attrelid AND k.adnum = c.attnum
        WHERE NOT c.holds_ids
          AND (tables IS NULL OR c.attrelid = ANY (tables::oid[]))
    ),
    narrow_references AS (
        SELECT DISTINCT c.attrelid, c.attname, c.type_name, 'reference too narrow' AS finding,
               format('Its foreign key %I points at %s.%I, whose IDs do not fit in %s: the first reference to a new row fails. Widen it: ALTER TABLE %s ALTER COLUMN %I TYPE bigint (Django: BigIntegerField or a ForeignKey to a BigAutoField; SQLAlchemy: BigInteger; Rails: t.references ... type: :bigint).',
                      fk.conname, fk.confrelid::regclass, target.attname, c.type_name, c.attrelid::regclass, c.attname) AS fix
        FROM pg_constraint fk
        CROSS JOIN LATERAL unnest(fk.conkey, fk.confkey) AS k(child_att, parent_att)
        JOIN columns c ON c.attrelid = fk.conrelid AND c.attnum = k.child_att
        JOIN keys ON keys.adrelid = fk.confrelid AND keys.adnum = k.parent_att
        JOIN pg_attribute target ON target.attrelid = fk.confrelid AND target.attnum = k.parent_att
        WHERE fk.conrelid = ANY (checked) AND fk.contype = 'f' AND NOT c.holds_ids
          AND (tables IS NULL OR fk.conrelid = ANY (tables::oid[]) OR fk.confrelid = ANY (tables::oid[]))
    ),
    generic_references AS (
        -- object_id beside content_type_id (Django), x_id beside x_type (Rails).
        SELECT c.attrelid, c.attname, c.type_name, 'generic reference too narrow' AS finding,
               CASE WHEN c.attname = 'object_id'
                   THEN format('Django''s GenericForeignKey stores any table''s key in %s.%I, which cannot hold a snowflake ID. Declare object_id = models.PositiveBigIntegerField() (or TextField) and migrate: ALTER TABLE %s ALTER COLUMN %I TYPE bigint.',
                               c.attrelid::regclass, c.attname, c.attrelid::regclass, c.attname)
                   ELSE format('A polymorphic reference (%s beside %s) stores any table''s key in %s, which cannot hold a snowflake ID. Declare it bigint (Rails: t.references :%s, polymorphic: true, type: :bigint): ALTER TABLE %s ALTER COLUMN %I TYPE bigint.',
                               c.attname, left(c.attname, -3) || '_type', c.type_name, left(c.attname, -3), c.attrelid::regclass, c.attname)
               END AS fix
        FROM columns c
        WHERE c.is_small_integer
          AND (tables IS NULL OR c.attrelid = ANY (tables::oid[]))
          AND NOT EXISTS (SELECT FROM pg_constraint fk WHERE fk.conrelid = c.attrelid AND fk.contype = 'f' AND c.attnum = ANY (fk.conkey))
          AND ((c.attname = 'object_id' AND EXISTS (
                    SELECT FROM pg_attribute o WHERE o.attrelid = c.attrelid AND o.attname = 'content_type_id' AND NOT o.attisdropped))
               OR (c.attname LIKE '%\_id' AND EXISTS (
                    SELECT FROM pg_attribute o WHERE o.attrelid = c.attrelid AND NOT o.attisdropped
                      AND o.attname = left(c.attname, -3) || '_type')))
    ),
    keys_left AS (
        -- Single-column primary keys numbered by a sequence or an identity, in the schemas of
        -- snowflake_id.auto_keys (read by the setting's own parser, as the trigger reads it).
        SELECT c.attrelid, c.attname, c.type_name, 'key left on a sequence' AS finding,
               CASE
                   WHEN c.is_small_integer THEN format('%s is too small for snowflake IDs, so snowflake_id.auto_keys left it. Make the model''s keys 64-bit (Django: DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"; SQLAlchemy: type_annotation_map = {int: BigInteger}; Rails: the default bigint), then have the owner convert it: SELECT snowflake_convert_column(%L, %L, <shard>).',
                                                       c.type_name, c.attrelid::regclass, c.attname)
                   WHEN a.attidentity = 'a' THEN format('It is GENERATED ALWAYS, which refuses the explicit values a snowflake default gives. Declare it GENERATED BY DEFAULT AS IDENTITY, then have the owner convert it: SELECT snowflake_convert_column(%L, %L, <shard>).',
                                                        c.attrelid::regclass, c.attname)
                   ELSE format('It had rows or was referenced by other tables when it was made, was made before snowflake_id.auto_keys was set, or was made with another role''s rights than the session''s. Have the owner convert it: SELECT snowflake_convert_column(%L, %L, <shard>).',
                               c.attrelid::regclass, c.attname)
               END AS fix
        FROM columns c
        JOIN pg_attribute a ON a.attrelid = c.attrelid AND a.attnum = c.attnum
        JOIN pg_class rel ON rel.oid = c.attrelid
        JOIN pg_namespace n ON n.oid = rel.relnamespace
        JOIN pg_index pk ON pk.indrelid = c.attrelid AND pk.indisprimary AND pk.indnkeyatts = 1 AND pk.indkey[0] = c.attnum
        WHERE (n.nspname = ANY (@extschema@.snowflake_auto_keys_schemas())
               OR (n.oid = pg_my_temp_schema() AND 'pg_temp' = ANY (@extschema@.snowflake_auto_keys_schemas())))
          AND (tables IS NULL OR c.attrelid = ANY (tables::oid[]))
          AND (a.attidentity <> '' OR pg_get_serial_sequence(c.attrelid::regclass::text, c.attname) IS NOT NULL)
    )
    SELECT found.attrelid::regclass, found.attname, found.type_name, found.finding, found.fix
    FROM (SELECT * FROM narrow_defaults UNION ALL SELECT * FROM narrow_references
          UNION ALL SELECT * FROM generic_references UNION ALL SELECT * FROM keys_left) AS found
    ORDER BY found.attrelid::regclass::text, found.attname, found.finding;
END
$checks$;

CREATE OR REPLACE FUNCTION snowflake_check_defaults()
RETURNS event_trigger
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
-- Its queries' plans made once per session, every catalog read by index from the statement's
-- own objects, whatever the statistics say (see snowflake_check_columns).
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $trigger$
DECLARE
    touched regclass[];
    generators oid[];
    constraints oid[];
    found record;
    -- How the messages name the IDs' width (snowflake_check_columns reads the same setting).
    id_width text := CASE WHEN coalesce(current_setting('snowflake_id.id_bits', true)::integer, 63) < 63
                          THEN format('%s-bit', current_setting('snowflake_id.id_bits'))
                          ELSE '64-bit' END;
BEGIN
    touched := ARRAY(
        SELECT DISTINCT cmd.objid::regclass FROM pg_event_trigger_ddl_commands() AS cmd
        WHERE cmd.classid = 'pg_class'::regclass AND cmd.object_type IN ('table', 'table column', 'foreign table'));
    IF cardinality(touched) = 0 THEN
        RETURN;
    END IF;
    -- By their whole key, as snowflake_check_columns finds them.
    generators := ARRAY[
        (SELECT p.oid FROM pg_proc p
         WHERE p.proname = 'snowflake_nextval' AND p.proargtypes = '23'::oidvector -- (integer)
           AND p.pronamespace = '@extschema@'::regnamespace),
        (SELECT p.oid FROM pg_proc p
         WHERE p.proname = 'snowflake_nextval' AND p.proargtypes = ''::oidvector
           AND p.pronamespace = '@extschema@'::regnamespace)];
    -- Nothing to refuse or warn of unless a column of these tables that is not a plain bigint
    -- has a default calling snowflake_nextval(), or such a column is on either side of a
    -- foreign key of theirs to one with that default: for an application's tables (bigint keys
    -- and references) a few indexed lookups instead of the whole check, which decides the rest
    -- (domains, numeric, text).
    -- The foreign keys of these tables and those referencing them: each catalog read by the
    -- one index its conditions fit (pg_depend's on the referenced object; the kind of the
    -- dependent object tested after the read).
    constraints := ARRAY(
        SELECT c.oid FROM pg_constraint c WHERE c.conrelid = ANY (touched::oid[])
        UNION
        SELECT CASE WHEN dep.classid = 'pg_constraint'::regclass THEN dep.objid END
        FROM pg_depend dep
        WHERE dep.refclassid = 'pg_class'::regclass AND dep.refobjid = ANY (touched::oid[]));
    -- Then one catalog is read from these oids (pg_attrdef by the table, pg_constraint by the
    -- constraint), and every other row looked up by its key from the row at hand, in a
    -- subquery run for that row: no join the planner could turn around to start from a
    -- catalog it thought small when the plan was made.
    IF NOT EXISTS (
        SELECT FROM pg_attrdef d
        WHERE d.adrelid = ANY (touched::oid[])
          AND (SELECT a.atttypid FROM pg_attribute a WHERE a.attrelid = d.adrelid AND a.attnum = d.adnum)
              <> 'bigint'::regtype
          AND ARRAY(SELECT CASE WHEN dep.refclassid = 'pg_proc'::regclass THEN dep.refobjid END
                    FROM pg_depend dep
                    WHERE dep.classid = 'pg_attrdef'::regclass AND dep.objid = d.oid) && generators
        UNION ALL
        SELECT FROM pg_constraint fk
        CROSS JOIN LATERAL unnest(fk.conkey, fk.confkey) AS k(child_att, parent_att)
        WHERE fk.oid = ANY (constraints) AND fk.contype = 'f'
          AND (SELECT a.atttypid FROM pg_attribute a WHERE a.attrelid = fk.conrelid AND a.attnum = k.child_att)
              <> 'bigint'::regtype
          AND ARRAY(SELECT CASE WHEN dep.refclassid = 'pg_proc'::regclass THEN dep.refobjid END
                    FROM pg_depend dep
                    WHERE dep.classid = 'pg_attrdef'::regclass
                      AND dep.objid = (SELECT d.oid FROM pg_attrdef d
                                       WHERE d.adrelid = fk.confrelid AND d.adnum = k.parent_att)) && generators) THEN
        RETURN;
    END IF;
    FOR found IN SELECT * FROM @extschema@.snowflake_check_columns(touched)
                 WHERE finding IN ('default too narrow', 'reference too narrow') LOOP
        IF found.finding = 'default too narrow' THEN
            RAISE EXCEPTION 'column "%" of relation % is too narrow for snowflake IDs', found.col, found.tbl
                USING ERRCODE = 'datatype_mismatch',
                      DETAIL = format('Its default calls snowflake_nextval(), whose IDs are %s; %s cannot hold them, and the first INSERT would fail.', id_width, found.type),
                      HINT = found.fix;
        END IF;
        RAISE WARNING 'column "%" of relation % is too narrow for the snowflake IDs it references', found.col, found.tbl
            USING DETAIL = format('It is %s; the IDs are %s. Old keys fit; the first reference to a new row fails with 22003.', found.type, id_width),
                  HINT = found.fix;
    END LOOP;
END
$trigger$;

CREATE OR REPLACE FUNCTION snowflake_auto_keys()
RETURNS event_trigger
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
/* Its queries' plans made once per session (see snowflake_check_columns). */
SET plan_cache_mode = force_generic_plan
/* A table is read whole, to see whether it has rows: where row-level security would filter the
   read, it is refused instead (42501), and the key left alone. */
SET row_security = off
AS $auto$
DECLARE
    schemas text[];
    key record;
    shard integer;
    has_rows boolean;
    alter_table text;
    widened name[];
    ref_col name;
BEGIN
    -- The setting as the session has it, read by the parser of its own check: the schemas
    -- the check accepted are the schemas acted on.
    schemas := @extschema@.snowflake_auto_keys_schemas();
    IF cardinality(schemas) = 0 THEN
        RETURN;
    END IF;
    -- No sequence created by the statement (ALTER TABLE ... ADD COLUMN, a table without a
    -- serial or identity key): nothing to do.
    IF NOT EXISTS (SELECT FROM pg_event_trigger_ddl_commands() AS cmd WHERE cmd.command_tag = 'CREATE SEQUENCE') THEN
        RETURN;
    END IF;
    FOR key IN
        SELECT dep.refobjid::regclass AS tbl, a.attname AS col, a.atttypid, a.attidentity,
               pk.indnkeyatts AS pk_columns, dep.objid::regclass AS seq,
               -- Other tables' foreign keys on it (partitions' copies of one count once).
               -- Found through pg_depend's index on the referenced object, as every read here
               -- goes by index from the statement's own objects: the trigger's cost is the
               -- statement's, not that of other roles' catalogs.
               (SELECT string_agg(DISTINCT fk.conrelid::regclass::text, ', ')
                FROM pg_depend fkdep
                JOIN pg_constraint fk ON fk.oid = fkdep.objid
                WHERE fkdep.classid = 'pg_constraint'::regclass AND fkdep.refclassid = 'pg_class'::regclass
                  AND fkdep.refobjid = c.oid
                  AND fk.contype = 'f' AND fk.confrelid = c.oid AND fk.conrelid <> c.oid
                  AND fk.conparentid = 0) AS referenced_by
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
            CONTINUE;
        ELSIF key.attidentity = 'a' THEN
            RAISE NOTICE 'key %.% keeps its identity: it is GENERATED ALWAYS', key.tbl, quote_ident(key.col)
                USING DETAIL = 'A snowflake default takes explicit values, which GENERATED ALWAYS promises to refuse.',
                      HINT = 'Declare it GENERATED BY DEFAULT AS IDENTITY to have snowflake keys.';
            CONTINUE;
        ELSIF key.pk_columns > 1 THEN
            RAISE NOTICE 'key %.% keeps its sequence: it is one of % columns of the primary key', key.tbl, quote_ident(key.col),
                    key.pk_columns
                USING DETAIL = 'snowflake_id.auto_keys converts single-column primary keys only (a partitioned table''s key also holds its partition key).',
                      HINT = 'Declare the column bigint DEFAULT snowflake_nextval() to have snowflake keys.';
            CONTINUE;
        ELSIF current_user <> session_user THEN
            -- Inside another role's SECURITY DEFINER function, or after SET ROLE: the setting is
            -- the session's, the table another role's, made with that role's rights. Whoever
            -- set it, it must not change what another role's code makes (docs/security.md).
            RAISE NOTICE 'key %.% keeps its %: the statement runs as role %, not as the session''s role %', key.tbl, quote_ident(key.col),
                    CASE WHEN key.attidentity = '' THEN 'sequence' ELSE 'identity' END, quote_ident(current_user), quote_ident(session_user)
                USING DETAIL = 'snowflake_id.auto_keys acts only on statements run with the rights of the session''s own role: not inside another role''s SECURITY DEFINER function, not after SET ROLE.',
                      HINT = format('Run the migration in a session of role %s itself, or have it convert the key: SELECT snowflake_convert_column(%L, %L, <shard>).', quote_ident(current_user), key.tbl, key.col);
            CONTINUE;
        ELSIF key.referenced_by IS NOT NULL THEN
            -- Converting would widen other tables' columns: their owners' decision, not this statement's.
            RAISE NOTICE 'key %.% keeps its %: other tables reference it', key.tbl, quote_ident(key.col),
                    CASE WHEN key.attidentity = '' THEN 'sequence' ELSE 'identity' END
                USING DETAIL = format('Foreign keys of %s point at it; snowflake_id.auto_keys changes only the table its statement made.', key.referenced_by),
                      HINT = format('Have the owner of the tables convert it: SELECT snowflake_convert_column(%L, %L, <shard>).', key.tbl, key.col);
            CONTINUE;
        END IF;
        -- Rows already there (a key added with ALTER TABLE) were numbered by the sequence; new
        -- IDs must sort after them, which takes an advance of the shard: an operator's act. Read
        -- as the session's role, whole (row_security is off: refused rather than filtered where
        -- a policy would apply), and any refusal leaves the key alone.
        BEGIN
            EXECUTE format('SELECT EXISTS (SELECT FROM %s)', key.tbl) INTO has_rows;
        EXCEPTION WHEN insufficient_privilege THEN
            has_rows := NULL;
        END;
        IF has_rows IS DISTINCT FROM false THEN
            RAISE NOTICE 'key %.% keeps its %: %', key.tbl, quote_ident(key.col),
                    CASE WHEN key.attidentity = '' THEN 'sequence' ELSE 'identity' END,
                    CASE WHEN has_rows THEN 'its table already has rows' ELSE 'its table cannot be read whole by this role' END
                USING DETAIL = 'snowflake_id.auto_keys converts the keys of empty tables only; existing keys must first be moved below the new IDs.',
                      HINT = format('Have the table''s owner convert it: SELECT snowflake_convert_column(%L, %L, <shard>).', key.tbl, key.col);
            CONTINUE;
        END IF;
        shard := nullif(current_setting('snowflake_id.shard', true), '-1')::integer;
        IF shard IS NULL THEN
            RAISE EXCEPTION 'snowflake_id.shard is not set'
                USING ERRCODE = 'object_not_in_prerequisite_state',
                      DETAIL = format('snowflake_id.auto_keys gives the key %s.%s DEFAULT snowflake_nextval(), which issues IDs for the shard in snowflake_id.shard.',
                                      key.tbl, quote_ident(key.col)),
                      HINT = 'Have a superuser set a default, ALTER DATABASE name SET snowflake_id.shard = 3 (or ALTER ROLE), or leave this schema out of snowflake_id.auto_keys.';
        END IF;
        -- One ALTER TABLE, since each fires the event triggers again: the identity dropped (a
        -- serial's default is simply replaced), the table's own integer foreign keys on its key
        -- widened (a tree: parent_id; an ID would not fit, and the table is empty, so nothing is
        -- rewritten), and the snowflake default set. Then the serial's sequence, no longer used
        -- by the default, is dropped.
        alter_table := format('ALTER TABLE %s ', key.tbl);
        IF key.attidentity <> '' THEN
            alter_table := alter_table || format('ALTER COLUMN %I DROP IDENTITY, ', key.col);
        END IF;
        widened := ARRAY(
            SELECT DISTINCT a.attname
            FROM pg_constraint c
            CROSS JOIN LATERAL unnest(c.conkey, c.confkey) AS k(child_att, parent_att)
            JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.child_att
            WHERE c.contype = 'f' AND c.confrelid = key.tbl AND c.conrelid = key.tbl AND c.conparentid = 0
              AND k.parent_att = (SELECT attnum FROM pg_attribute WHERE attrelid = key.tbl AND attname = key.col)
              AND a.atttypid IN ('smallint'::regtype, 'integer'::regtype)
            ORDER BY 1);
        FOREACH ref_col IN ARRAY widened LOOP
            alter_table := alter_table || format('ALTER COLUMN %I TYPE bigint, ', ref_col);
        END LOOP;
        EXECUTE alter_table || format('ALTER COLUMN %I SET DEFAULT @extschema@.snowflake_nextval()', key.col);
        IF key.attidentity = '' THEN
            EXECUTE format('DROP SEQUENCE %s', key.seq);
        END IF;
        FOREACH ref_col IN ARRAY widened LOOP
            RAISE NOTICE 'widened referencing column %.% to bigint', key.tbl, quote_ident(ref_col);
        END LOOP;
    END LOOP;
END
$auto$;
