-- Bad input never reaches an internal error (XX000, which a Rust panic becomes): every function
-- of the extension is called with every combination of NULL, extreme, huge and malformed
-- values of its argument types, in this UTF8 database and in a SQL_ASCII one, where text may
-- hold bytes that are not UTF-8. Each call runs in a subtransaction that is always rolled back,
-- and the SQLSTATE it raised is kept; the file lists the calls that raised XX000 (none).

-- The values tried for each argument type, as SQL literals. `\xff` and `\xc3(` are not UTF-8.
SELECT $fuzz$
-- The functions that raised XX000 for any of their calls.
CREATE FUNCTION pg_temp.internal_errors(OUT calls bigint, OUT internal text[])
LANGUAGE plpgsql AS $body$
DECLARE
    fn record;
    pools text[][];
    sizes int[];
    total bigint;
    combo bigint;
    rest bigint;
    args text[];
    call text;
    code text;
BEGIN
    calls := 0;
    internal := '{}';
    FOR fn IN
        SELECT p.oid::regprocedure AS signature, p.oid, p.proname, ARRAY(SELECT unnest(p.proargtypes::oid[])) AS types
        FROM pg_proc p
        JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
        JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'snowflake_id'
        WHERE p.prorettype <> 'event_trigger'::regtype
        ORDER BY 1::text
    LOOP
        sizes := '{}';
        pools := '{}';
        FOR i IN 1 .. coalesce(cardinality(fn.types), 0) LOOP
            DECLARE
                pool text[] := CASE fn.types[i]
                    WHEN 'integer'::regtype THEN ARRAY['NULL', '-1', '0', '1', '1023', '1024', '4096', '2147483647', '-2147483648']
                    WHEN 'bigint'::regtype THEN ARRAY['NULL', '-1', '0', '1', '4194304', '382718766577881088',
                                                      '9223372036854775807', '-9223372036854775808']
                    WHEN 'text'::regtype THEN ARRAY['NULL', $$''$$, $$'twitter'$$, $$'TWITTER'$$, $$E'tw\xffitter'$$,
                                                    $$E'\xc3('$$, $$repeat('x', 100000)$$, $$'twitter '$$]
                    WHEN 'timestamp with time zone'::regtype THEN ARRAY['NULL', $$'-infinity'$$, $$'infinity'$$,
                                                    $$'1970-01-01 00:00:00+00'$$, $$'2024-01-01 00:00:00+00'$$,
                                                    $$'2200-01-01 00:00:00+00'$$, $$'294276-12-31 23:59:59+00'$$, 'now()']
                    WHEN 'regclass'::regtype THEN ARRAY['NULL', '0', '4294967295', $$'pg_temp.fuzz_target'$$]
                    WHEN 'name'::regtype THEN ARRAY['NULL', $$''$$, $$'id'$$, $$repeat('y', 63)$$, $$E'\xff'$$]
                    ELSE ARRAY['NULL']
                END;
            BEGIN
                -- Every pool padded to one width, so that they fit one two-dimensional array.
                pools := pools || ARRAY[(pool || array_fill(NULL::text, ARRAY[9 - cardinality(pool)]))];
                sizes := sizes || cardinality(pool);
            END;
        END LOOP;
        total := 1;
        FOR i IN 1 .. coalesce(cardinality(sizes), 0) LOOP
            total := total * sizes[i];
        END LOOP;
        FOR combo IN 0 .. total - 1 LOOP
            args := '{}';
            rest := combo;
            FOR i IN 1 .. coalesce(cardinality(sizes), 0) LOOP
                args := args || format('(%s)::%s', pools[i][1 + rest % sizes[i]], format_type(fn.types[i], NULL));
                rest := rest / sizes[i];
            END LOOP;
            call := format('SELECT %s(%s)', fn.oid::regproc, array_to_string(args, ', '));
            BEGIN
                EXECUTE call;
                -- Rolled back whatever it did (a conversion, a table's key).
                RAISE EXCEPTION 'rolled back';
            EXCEPTION WHEN OTHERS THEN
                GET STACKED DIAGNOSTICS code = RETURNED_SQLSTATE;
                IF code = 'XX000' AND NOT fn.signature::text = ANY (internal) THEN
                    internal := internal || fn.signature::text;
                END IF;
            END;
            calls := calls + 1;
        END LOOP;
    END LOOP;
END $body$;
$fuzz$ AS internal_errors_function \gset

-- A table a conversion could act on.
CREATE TEMP TABLE fuzz_target (id serial PRIMARY KEY, ref int REFERENCES fuzz_target (id));
:internal_errors_function
SET snowflake_id.shard = 3;
SET client_min_messages = warning;
SELECT calls > 1000 AS many_calls, internal AS calls_raising_xx000 FROM pg_temp.internal_errors();
RESET client_min_messages;

-- The same in a SQL_ASCII database, where a text argument reaches the function as it was sent.
CREATE DATABASE snowflake_id_sql_ascii ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0;
\c snowflake_id_sql_ascii
CREATE EXTENSION snowflake_id;
CREATE TEMP TABLE fuzz_target (id serial PRIMARY KEY, ref int REFERENCES fuzz_target (id));
:internal_errors_function
SET snowflake_id.shard = 3;
SET client_min_messages = warning;
SELECT calls > 1000 AS many_calls, internal AS calls_raising_xx000 FROM pg_temp.internal_errors();
RESET client_min_messages;
-- The reviewer's calls: a layout name that is not UTF-8 is no named layout (22023), and a
-- setting is checked as it is stored, not on a UTF-8 copy (22023). Only the SQLSTATE is shown:
-- the messages quote the bytes.
CREATE FUNCTION pg_temp.code_of(call text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE code text;
BEGIN
    EXECUTE call;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS code = RETURNED_SQLSTATE;
    RETURN code;
END $$;
SELECT call, pg_temp.code_of(call) FROM (VALUES
    ($$SELECT snowflake_decode(1, E'tw\xffitter')$$),
    ($$SELECT snowflake_shard(1, E'tw\xffitter')$$),
    ($$SELECT snowflake_seq(1, E'tw\xffitter')$$),
    ($$SELECT snowflake_timestamp(1, E'tw\xffitter')$$),
    ($$SET snowflake_id.auto_keys = E'"pub\xfflic"'$$),
    ($$SET snowflake_id.allowed_shards = E'1\xff'$$)) AS c(call);
SELECT snowflake_shard((1 << 22) + (3 << 12), 'twitter') AS twitter_shard;
\c snowflake_id_regress
DROP DATABASE snowflake_id_sql_ascii;
