/* snowflake_convert_column(tbl, col, shard): switches an existing serial, bigserial, identity
   or plain integer key column to DEFAULT snowflake_nextval(shard), in one transaction.
   Written in PL/pgSQL because it is a sequence of DDL statements; every refusal happens
   before the first of them, and any later error rolls all of them back. */
CREATE FUNCTION snowflake_convert_column(tbl regclass, col name, shard integer)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
/* Object names below are qualified or quoted; a caller's search_path cannot redirect them. */
SET search_path = pg_catalog, pg_temp
/* The largest existing value must be read whole: where row-level security applies to the
   caller (FORCE ROW LEVEL SECURITY), the read fails (42501) instead of missing rows. */
SET row_security = off
AS $convert$
DECLARE
    call CONSTANT text := 'snowflake_convert_column(tbl, col, shard)';
    kind "char";
    att record;
    def_oid oid;
    def_text text;
    seq regclass;
    ref record;
    referencing regclass[];
    top bigint;
    first_new bigint;
    not_owned text;
BEGIN
    IF tbl IS NULL OR col IS NULL OR shard IS NULL THEN
        RAISE EXCEPTION '% must not be NULL', CASE WHEN tbl IS NULL THEN 'tbl' WHEN col IS NULL THEN 'col' ELSE 'shard' END
            USING ERRCODE = 'null_value_not_allowed',
                  DETAIL = format('%s was called with a NULL argument.', call),
                  HINT = 'Pass the table, its key column and the shard whose IDs it will get.';
    END IF;
    -- A shard outside the layout gets the generators' own error (22023), and a server without
    -- the library preloaded its 55000, before anything is touched.
    PERFORM @extschema@.snowflake_compose(clock_timestamp(), shard, 0);

    SELECT c.relkind INTO kind FROM pg_class c WHERE c.oid = tbl;
    IF kind IS NULL THEN
        RAISE EXCEPTION 'relation with OID % does not exist', tbl::oid
            USING ERRCODE = 'undefined_table',
                  DETAIL = format('%s was given an OID that names no table.', call),
                  HINT = 'Name the table, such as ''orders''::regclass or ''shop.orders''.';
    END IF;
    IF kind NOT IN ('r', 'p') THEN
        RAISE EXCEPTION '% is not a table', tbl
            USING ERRCODE = 'wrong_object_type',
                  DETAIL = 'Only the key column of an ordinary or partitioned table can be converted.',
                  HINT = 'Name the table that owns the key column.';
    END IF;

    -- Tables whose foreign keys point at the column are locked first, then the table itself:
    -- a writer of a referencing table locks it before it checks the key in this one, so the
    -- opposite order could deadlock with it. From here on, writers wait and then use the new
    -- default; every check below sees the table exactly as it will be converted.
    SELECT array_agg(DISTINCT c.conrelid) INTO referencing
    FROM pg_constraint c
    WHERE c.contype = 'f' AND c.confrelid = tbl AND c.conrelid <> tbl AND c.conparentid = 0;

    -- Converting alters the table and widens the tables that reference it: rewrites that run
    -- their constraints, index expressions and defaults, code their owners wrote, with the
    -- caller's rights. Only a role that may act as the owner of every one of them converts; a
    -- superuser is no exception (another role's constraint would run with a superuser's
    -- rights: the hole of CVE-2020-25695). Membership is followed through pg_auth_members,
    -- where pg_has_role() would answer yes to any superuser. Checked before any lock, so that
    -- a role refused here stalls no one.
    WITH RECURSIVE acting(role) AS (
        SELECT r.oid FROM pg_roles r WHERE r.rolname = current_user
        UNION
        SELECT m.roleid FROM acting a JOIN pg_auth_members m ON m.member = a.role
    )
    SELECT string_agg(DISTINCT r::regclass::text, ', ') INTO not_owned
    FROM unnest(tbl::oid || coalesce(referencing::oid[], '{}')) AS r
    JOIN pg_class c ON c.oid = r
    WHERE c.relowner NOT IN (SELECT role FROM acting);
    IF not_owned IS NOT NULL THEN
        RAISE EXCEPTION 'permission denied to convert column "%" of relation %', col, tbl
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = format('Converting alters %s, which %s does not own (as the owner or a member of the owner), and would run their constraints and index expressions with its rights.',
                                  not_owned, current_user),
                  HINT = 'Convert in a session of the role that owns the tables, after GRANT EXECUTE ON FUNCTION snowflake_convert_column(regclass, name, integer), snowflake_advance(integer, bigint) TO that role.';
    END IF;
    IF referencing IS NOT NULL THEN
        EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', array_to_string(referencing, ', '));
    END IF;
    EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', tbl);

    SELECT a.attnum, a.atttypid, a.attidentity, a.attgenerated INTO att
    FROM pg_attribute a
    WHERE a.attrelid = tbl AND a.attname = col AND a.attnum > 0 AND NOT a.attisdropped;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'column "%" of relation % does not exist', col, tbl
            USING ERRCODE = 'undefined_column',
                  DETAIL = format('%s converts an existing column.', call),
                  HINT = 'Name the table''s key column, such as id.';
    END IF;
    IF att.atttypid NOT IN ('smallint'::regtype, 'integer'::regtype, 'bigint'::regtype) OR att.attgenerated <> '' THEN
        RAISE EXCEPTION 'column "%" of relation % is of type %, not an integer key',
                col, tbl, format_type(att.atttypid, NULL) || CASE WHEN att.attgenerated <> '' THEN ' (generated)' ELSE '' END
            USING ERRCODE = 'datatype_mismatch',
                  DETAIL = 'Snowflake IDs are bigint; only a smallint, integer or bigint column that is not generated can be widened to hold them.',
                  HINT = 'Convert a serial, bigserial, identity or other integer key column.';
    END IF;
    -- Old and new keys stay apart only under a unique constraint on the column alone. An
    -- invalid index (left by a failed CREATE INDEX CONCURRENTLY) guarantees nothing. A
    -- deferrable constraint is checked at commit, which still keeps every value unique.
    IF NOT EXISTS (
        SELECT FROM pg_index i
        WHERE i.indrelid = tbl AND i.indisunique AND i.indnkeyatts = 1 AND i.indkey[0] = att.attnum
          AND i.indpred IS NULL AND i.indexprs IS NULL AND i.indisvalid
    ) AND EXISTS (
        SELECT FROM pg_index i
        WHERE i.indrelid = tbl AND i.indisunique AND i.indnkeyatts = 1 AND i.indkey[0] = att.attnum
          AND i.indpred IS NULL AND i.indexprs IS NULL
    ) THEN
        RAISE EXCEPTION 'the unique index on column "%" of relation % is not valid', col, tbl
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = 'An invalid index, left by a CREATE INDEX CONCURRENTLY that failed, does not guarantee that values are unique.',
                  HINT = format('Rebuild it first: REINDEX INDEX %s.',
                                (SELECT i.indexrelid::regclass FROM pg_index i
                                 WHERE i.indrelid = tbl AND i.indisunique AND i.indnkeyatts = 1 AND i.indkey[0] = att.attnum
                                   AND i.indpred IS NULL AND i.indexprs IS NULL LIMIT 1));
    END IF;
    IF NOT EXISTS (
        SELECT FROM pg_index i
        WHERE i.indrelid = tbl AND i.indisunique AND i.indnkeyatts = 1 AND i.indkey[0] = att.attnum
          AND i.indpred IS NULL AND i.indexprs IS NULL AND i.indisvalid
    ) THEN
        RAISE EXCEPTION 'column "%" of relation % is not a key', col, tbl
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = 'Only a column with a primary key or unique constraint of its own is converted, so that no value can repeat.',
                  HINT = format('Convert the table''s primary key column, or add a constraint first: ALTER TABLE %s ADD UNIQUE (%I).', tbl, col);
    END IF;

    -- The default to replace: none, an identity, or nextval() of a sequence the column owns
    -- (serial). Any other default is someone's decision, and its sequence may serve others.
    SELECT d.oid, pg_get_expr(d.adbin, d.adrelid) INTO def_oid, def_text
    FROM pg_attrdef d WHERE d.adrelid = tbl AND d.adnum = att.attnum;
    IF att.attidentity = '' THEN
        seq := pg_get_serial_sequence(tbl::text, col)::regclass;
        IF def_oid IS NOT NULL AND (seq IS NULL OR NOT EXISTS (
            SELECT FROM pg_depend dep
            WHERE dep.classid = 'pg_attrdef'::regclass AND dep.objid = def_oid
              AND dep.refclassid = 'pg_class'::regclass AND dep.refobjid = seq
        )) THEN
            RAISE EXCEPTION 'column "%" of relation % has a default that is not its own sequence', col, tbl
                USING ERRCODE = 'object_not_in_prerequisite_state',
                      DETAIL = format('Its default is %s.', def_text),
                      HINT = format('If that default is no longer wanted, drop it first: ALTER TABLE %s ALTER COLUMN %I DROP DEFAULT.', tbl, col);
        END IF;
        IF seq IS NOT NULL AND EXISTS (
            SELECT FROM pg_depend dep
            JOIN pg_attrdef d ON d.oid = dep.objid
            WHERE dep.classid = 'pg_attrdef'::regclass AND dep.refclassid = 'pg_class'::regclass
              AND dep.refobjid = seq AND d.oid IS DISTINCT FROM def_oid
              -- The partitions' copies of the default go with it.
              AND d.adrelid NOT IN (SELECT relid FROM pg_partition_tree(tbl))
        ) THEN
            RAISE EXCEPTION 'sequence % of column "%" is also used by other columns', seq, col
                USING ERRCODE = 'object_not_in_prerequisite_state',
                      DETAIL = 'Converting drops the column''s sequence, and other defaults call nextval() on it.',
                      HINT = format('Give the other columns their own sequence, or detach this one: ALTER SEQUENCE %s OWNED BY NONE.', seq);
        END IF;
    END IF;

    -- New IDs must sort after every existing value, and the generator never issues an ID
    -- below the current millisecond's. Keys of the current millisecond, or up to a second
    -- ahead of this clock (another generator's, which ran until this transaction locked the
    -- table), are waited out; values further ahead (keys that are not sequence numbers, or
    -- snowflake IDs from a clock far ahead of this one) are refused.
    EXECUTE format('SELECT max(%I)::bigint FROM %s', col, tbl) INTO top;
    WHILE top >= @extschema@.snowflake_min_id(clock_timestamp())
          AND top <= @extschema@.snowflake_max_id(clock_timestamp() + interval '1 second') LOOP
        PERFORM pg_sleep(0.001);
    END LOOP;
    first_new := @extschema@.snowflake_min_id(clock_timestamp());
    IF top >= first_new THEN
        RAISE EXCEPTION 'existing values of column "%" of relation % are too large to convert', col, tbl
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = format('The largest is %s, not below snowflake_min_id(now()), where new IDs start; they must sort after every existing value.', top),
                  HINT = 'Convert a column whose values are sequence numbers, or renumber the larger keys first.';
    END IF;

    IF att.attidentity <> '' THEN
        EXECUTE format('ALTER TABLE %s ALTER COLUMN %I DROP IDENTITY', tbl, col);
    ELSIF seq IS NOT NULL THEN
        EXECUTE format('ALTER TABLE %s ALTER COLUMN %I DROP DEFAULT', tbl, col);
        EXECUTE format('DROP SEQUENCE %s', seq);
    END IF;
    -- Referencing columns are widened too: a new ID would not fit in an integer foreign key.
    FOR ref IN
        SELECT DISTINCT c.conrelid::regclass AS rel, a.attname
        FROM pg_constraint c
        CROSS JOIN LATERAL unnest(c.conkey, c.confkey) AS k(child_att, parent_att)
        JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.child_att
        WHERE c.contype = 'f' AND c.confrelid = tbl AND c.conparentid = 0 AND k.parent_att = att.attnum
          AND a.atttypid IN ('smallint'::regtype, 'integer'::regtype)
        ORDER BY 1, 2
    LOOP
        EXECUTE format('ALTER TABLE %s ALTER COLUMN %I TYPE bigint', ref.rel, ref.attname);
        RAISE NOTICE 'widened referencing column %.% to bigint', ref.rel, quote_ident(ref.attname);
    END LOOP;
    IF att.atttypid <> 'bigint'::regtype THEN
        EXECUTE format('ALTER TABLE %s ALTER COLUMN %I TYPE bigint', tbl, col);
    END IF;
    EXECUTE format('ALTER TABLE %s ALTER COLUMN %I SET DEFAULT @extschema@.snowflake_nextval(%s)', tbl, col, shard);
    -- Every value is already below the current millisecond's IDs; advancing the shard past the
    -- largest also holds if this server's clock is later stepped back.
    IF top >= 0 THEN
        PERFORM @extschema@.snowflake_advance(shard, top);
    END IF;
END
$convert$;
COMMENT ON FUNCTION snowflake_convert_column(regclass, name, integer) IS
    'Switches an existing integer key column to DEFAULT snowflake_nextval(shard)';
/* Converting rewrites tables: an operator's act, like snowflake_advance, which it calls. */
REVOKE ALL ON FUNCTION snowflake_convert_column(regclass, name, integer) FROM PUBLIC;
