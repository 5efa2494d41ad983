/* snowflake_check_columns(tables): the columns that cannot hold the snowflake IDs they are
   meant to hold, and the keys automatic keys left on a sequence, each with its fix.

   A snowflake ID is a 64-bit integer above 2^41 from the first millisecond after the epoch:
   it fits bigint, numeric of 19 or more digits before the point, and text; it overflows
   smallint and integer at the first INSERT (22003), and real and double precision round it
   to a neighbour, silently (an ID above 2^53 has no exact double). Under a layout of fewer
   bits (snowflake_id.id_bits, 53 for js53) the IDs stop lower: at 53 bits a double holds every
   one, and numeric and character varying need only the digits of the layout's largest ID (16).
   PostgreSQL accepts such a column as the target of snowflake_nextval(), and a foreign key
   from an integer column to a bigint key: nothing fails until an ID flows. So:
   - 'default too narrow': a column whose default gives it the ID of snowflake_nextval() (the
     call, or the call cast to the column's type) and whose type cannot hold every ID exactly;
     of a domain, its base type, through domains over domains; of an array, its elements';
   - 'reference too narrow': a column of such a type whose foreign key points at a column
     whose default gives it snowflake IDs;
   - 'generic reference too narrow': an integer column that stores other tables' keys by
     convention, without a foreign key: Django's GenericForeignKey (object_id beside
     content_type_id) and Rails' polymorphic associations (x_id beside x_type);
   - 'key left on a sequence': in the schemas snowflake_id.auto_keys lists for this session,
     a single-column primary key still numbered by a sequence or an identity, with the reason
     the trigger left it and the change that converts it.
   A default that passes the ID through another function than PostgreSQL's own
   (snowflake_timestamp(snowflake_nextval(1)) on a timestamptz column, or a wrapper of the
   application's) is not the ID itself, and is not checked: the check cannot see what a
   function body returns (docs/orms.md).
   `tables`, when given, limits the check to columns of those tables and to the references to
   their keys (the event trigger below passes the tables of one statement). Then every catalog
   read starts from those tables, through the catalogs' indexes: its cost is the statement's,
   whatever other roles keep in their schemas or temporary tables (0.7.0 read every column of
   the database first, and a role with TEMP alone could make every CREATE TABLE take seconds).
   Without `tables`, it reads the whole database but other sessions' temporary tables. Reads
   catalogs only, with the caller's rights. */
CREATE FUNCTION snowflake_check_columns(tables regclass[] DEFAULT NULL)
RETURNS TABLE (tbl regclass, col name, type text, finding text, fix text)
LANGUAGE plpgsql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
/* The query's plan made once per session, not per call: its parameters are arrays of oids,
   which every plan reads by index, so a plan for the values of one call gains nothing, and
   planning the query took three times as long as running it (5 ms a call, 1.7 ms with the
   plan kept; the event trigger below calls it for every CREATE and ALTER TABLE). */
SET plan_cache_mode = force_generic_plan
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
        checked := ARRAY(
            SELECT DISTINCT c.oid FROM pg_class c
            WHERE c.oid = ANY (tables::oid[]) AND c.relkind IN ('r', 'p', 'f')
            UNION
            SELECT fk.conrelid FROM pg_depend dep
            JOIN pg_constraint fk ON fk.oid = dep.objid AND fk.contype = 'f'
            WHERE dep.refclassid = 'pg_class'::regclass AND dep.refobjid = ANY (tables::oid[])
              AND dep.classid = 'pg_constraint'::regclass);
    END IF;
    referenced := checked || ARRAY(
        SELECT DISTINCT fk.confrelid FROM pg_constraint fk
        WHERE fk.conrelid = ANY (checked) AND fk.contype = 'f');
    RETURN QUERY
    WITH generators AS (
        -- The functions whose default makes a column a snowflake key.
        SELECT p.oid FROM pg_proc p
        WHERE p.proname = 'snowflake_nextval' AND p.pronamespace = '@extschema@'::regnamespace
    ),
    columns AS (
        -- The checked columns with their base type (through domains, and arrays' elements), and
        -- whether that type holds every ID exactly: bigint; numeric with the largest ID's digits
        -- before the point (or unconstrained); text, and character varying of that many
        -- characters or more; double precision when the layout has 53 bits or fewer (its 53-bit
        -- significand: 2^53 - 1 and below are exact).
        SELECT a.attrelid, a.attnum, a.attname, format_type(a.atttypid, a.atttypmod) AS type_name,
               CASE base.oid
                   WHEN 'bigint'::regtype THEN true
                   WHEN 'numeric'::regtype THEN base.typmod < 0 OR ((base.typmod - 4) >> 16) - ((base.typmod - 4) & 65535) >= id_digits
                   WHEN 'text'::regtype THEN true
                   WHEN 'character varying'::regtype THEN base.typmod < 0 OR base.typmod - 4 >= id_digits
                   WHEN 'double precision'::regtype THEN id_bits <= 53
                   ELSE false
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
            SELECT chain.oid, chain.typmod, chain.in_array FROM chain ORDER BY chain.depth DESC LIMIT 1
        ) AS base
        WHERE a.attrelid = ANY (checked) AND a.attnum > 0 AND NOT a.attisdropped
    ),
    keys AS (
        -- Columns whose default gives them the ID of snowflake_nextval(): it calls it, and no
        -- function but PostgreSQL's own (whose use is not recorded: casts, operators) around it.
        SELECT d.adrelid, d.adnum
        FROM pg_attrdef d
        WHERE d.adrelid = ANY (referenced)
          AND EXISTS (SELECT FROM pg_depend dep
                      WHERE dep.classid = 'pg_attrdef'::regclass AND dep.objid = d.oid
                        AND dep.refclassid = 'pg_proc'::regclass AND dep.refobjid IN (SELECT oid FROM generators))
          AND NOT EXISTS (SELECT FROM pg_depend dep
                          WHERE dep.classid = 'pg_attrdef'::regclass AND dep.objid = d.oid
                            AND dep.refclassid = 'pg_proc'::regclass AND dep.refobjid NOT IN (SELECT oid FROM generators))
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
COMMENT ON FUNCTION snowflake_check_columns(regclass[]) IS
    'Columns that cannot hold the snowflake IDs they receive or reference, and keys automatic keys left on a sequence, each with its fix';

/* snowflake_check_defaults(): the event trigger that refuses, in the statement that makes it,
   a column whose default calls snowflake_nextval() but whose type cannot hold the IDs
   (CREATE TABLE t (id integer DEFAULT snowflake_nextval(1)), or a migration that narrows a
   key: ALTER TABLE t ALTER COLUMN id TYPE smallint), and warns of a foreign key from such a
   column to a snowflake key. A narrowed default would fail at the first INSERT, long after the
   migration; a narrow reference fails only when a new key is referenced, and old keys still
   fit, so that statement goes through (refusing it would also refuse restoring a dump of a
   database that has one): the warning names the fix, and snowflake_check_columns() lists every
   one. Runs with the rights of the role whose statement fired it; reads catalogs only. */
CREATE FUNCTION snowflake_check_defaults()
RETURNS event_trigger
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
-- Its queries' plans made once per session (see snowflake_check_columns).
SET plan_cache_mode = force_generic_plan
AS $trigger$
DECLARE
    touched regclass[];
    generators oid[];
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
    -- Nothing to refuse or warn of unless a column of these tables that is not a plain bigint
    -- has a default calling snowflake_nextval(), or such a column is on either side of a
    -- foreign key of theirs to one with that default: for an application's tables (bigint keys
    -- and references) a few indexed lookups instead of the whole check, which decides the rest
    -- (domains, numeric, text).
    generators := ARRAY(SELECT p.oid FROM pg_proc p
                        WHERE p.proname = 'snowflake_nextval' AND p.pronamespace = '@extschema@'::regnamespace);
    IF NOT EXISTS (
        SELECT FROM pg_attrdef d
        JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
        WHERE d.adrelid = ANY (touched::oid[]) AND a.atttypid <> 'bigint'::regtype
          AND EXISTS (SELECT FROM pg_depend dep
                      WHERE dep.classid = 'pg_attrdef'::regclass AND dep.objid = d.oid
                        AND dep.refclassid = 'pg_proc'::regclass AND dep.refobjid = ANY (generators))
        UNION ALL
        SELECT FROM pg_constraint fk
        CROSS JOIN LATERAL unnest(fk.conkey, fk.confkey) AS k(child_att, parent_att)
        JOIN pg_attribute a ON a.attrelid = fk.conrelid AND a.attnum = k.child_att
        JOIN pg_attrdef d ON d.adrelid = fk.confrelid AND d.adnum = k.parent_att
        WHERE fk.oid IN (SELECT c.oid FROM pg_constraint c WHERE c.conrelid = ANY (touched::oid[])
                         UNION
                         SELECT dep.objid FROM pg_depend dep
                         WHERE dep.classid = 'pg_constraint'::regclass AND dep.refclassid = 'pg_class'::regclass
                           AND dep.refobjid = ANY (touched::oid[]))
          AND fk.contype = 'f' AND a.atttypid <> 'bigint'::regtype
          AND EXISTS (SELECT FROM pg_depend dep
                      WHERE dep.classid = 'pg_attrdef'::regclass AND dep.objid = d.oid
                        AND dep.refclassid = 'pg_proc'::regclass AND dep.refobjid = ANY (generators))) THEN
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
COMMENT ON FUNCTION snowflake_check_defaults() IS
    'The event trigger that refuses a snowflake default on a column too narrow for it, and warns of narrow references to snowflake keys';
CREATE EVENT TRIGGER snowflake_check_defaults ON ddl_command_end
    WHEN TAG IN ('CREATE TABLE', 'ALTER TABLE', 'CREATE FOREIGN TABLE', 'ALTER FOREIGN TABLE')
    EXECUTE FUNCTION snowflake_check_defaults();
