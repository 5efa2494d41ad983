/* snowflake_auto_keys(): the event trigger of snowflake_id.auto_keys. At the end of each
   CREATE TABLE or ALTER TABLE, every key column whose sequence the statement created (a
   bigserial or an identity column), in a schema that snowflake_id.auto_keys lists, is given
   DEFAULT snowflake_nextval() when it is its table's single-column bigint primary key that
   accepts explicit values, its table has no rows, and no other table references it. Every
   other key is left alone, with a NOTICE saying why and what converts it
   (snowflake_convert_column, run by the table's owner).

   Not SECURITY DEFINER: it runs with the rights of the role whose statement fired it, so it
   can do nothing that role could not do itself (docs/security.md). That is also why it
   converts only what needs no privilege beyond the table's: on an empty table, dropping the
   new sequence and setting a default rewrite nothing and evaluate no expression of the
   table's (constraints, index expressions), and a table referenced by another owner's
   foreign key is not touched at all. */
CREATE FUNCTION snowflake_auto_keys()
RETURNS event_trigger
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
/* Its queries' plans made once per session, every catalog read by index from the statement's
   own objects, whatever the statistics say (see snowflake_check_columns). */
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
/* A table is read whole, to see whether it has rows: where row-level security would filter the
   read, it is refused instead (42501), and the key left alone. */
SET row_security = off
AS $auto$
DECLARE
    schemas text[];
    sequences oid[];
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
    -- The sequences the statement created: none, nothing to do.
    sequences := ARRAY(SELECT cmd.objid FROM pg_event_trigger_ddl_commands() AS cmd
                       WHERE cmd.command_tag = 'CREATE SEQUENCE');
    IF cardinality(sequences) = 0 THEN
        RETURN;
    END IF;
    FOR key IN
        SELECT dep.refobjid::regclass AS tbl, a.attname AS col, a.atttypid, a.attidentity,
               pk.indnkeyatts AS pk_columns, dep.objid::regclass AS seq,
               -- Other tables' foreign keys on it (partitions' copies of one count once).
               -- Found through pg_depend's index on the referenced object, as every read here
               -- goes by index from the statement's own objects: the trigger's cost is the
               -- statement's, not that of other roles' catalogs. (Each catalog is given
               -- conditions on the columns of the index it is meant to be read by, and only
               -- those: the others are tested after the read, so that no statistics can make
               -- another index, unbounded by the statement's objects, look cheaper.)
               (SELECT string_agg(DISTINCT CASE WHEN fk.conparentid = 0 THEN fk.conrelid::regclass::text END, ', ')
                FROM pg_depend fkdep
                JOIN pg_constraint fk ON fk.oid = CASE WHEN fkdep.classid = 'pg_constraint'::regclass THEN fkdep.objid END
                WHERE fkdep.refclassid = 'pg_class'::regclass AND fkdep.refobjid = c.oid
                  AND fk.contype = 'f' AND fk.confrelid = c.oid AND fk.conrelid <> c.oid) AS referenced_by
        -- The column that owns each sequence the statement created: a serial's (deptype 'a')
        -- or an identity's ('i').
        FROM pg_depend dep
        JOIN pg_attribute a ON a.attrelid = CASE WHEN dep.refclassid = 'pg_class'::regclass AND dep.deptype IN ('a', 'i')
                                                 THEN dep.refobjid END
                           AND a.attnum = dep.refobjsubid
        JOIN pg_class c ON c.oid = a.attrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        JOIN pg_index pk ON pk.indrelid = c.oid AND pk.indisprimary
                         AND a.attnum = ANY (pk.indkey::int2[])
        WHERE dep.classid = 'pg_class'::regclass AND dep.objid = ANY (sequences)
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
            WHERE c.contype = 'f' AND c.confrelid = key.tbl AND c.conrelid = key.tbl
              AND CASE WHEN c.conparentid = 0 THEN true END
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
COMMENT ON FUNCTION snowflake_auto_keys() IS
    'The event trigger of snowflake_id.auto_keys: new bigserial and identity keys of new, unreferenced tables get DEFAULT snowflake_nextval()';
CREATE EVENT TRIGGER snowflake_auto_keys ON ddl_command_end
    WHEN TAG IN ('CREATE TABLE', 'ALTER TABLE')
    EXECUTE FUNCTION snowflake_auto_keys();
