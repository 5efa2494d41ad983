-- Who may do what: single IDs, decoders and the fence are for everyone; batches (which can run
-- a shard up to its lead bound), moving a shard forward and reading the statistics and the
-- status and who holds the horizon are not (pg_monitor may read, through pg_read_all_stats);
-- the default shard is a superuser's setting.
CREATE ROLE app LOGIN;
SELECT has_function_privilege('app', 'snowflake_nextval(integer)', 'EXECUTE') AS app_generates,
       has_function_privilege('app', 'snowflake_decode(bigint)', 'EXECUTE') AS app_decodes,
       has_function_privilege('app', 'snowflake_nextvals(integer, integer)', 'EXECUTE') AS app_takes_batches,
       has_function_privilege('app', 'snowflake_advance(integer, bigint)', 'EXECUTE') AS app_advances,
       has_function_privilege('app', 'snowflake_stats()', 'EXECUTE') AS app_reads_stats,
       has_function_privilege('pg_monitor', 'snowflake_stats()', 'EXECUTE') AS monitor_reads_stats,
       has_function_privilege('app', 'snowflake_status()', 'EXECUTE') AS app_reads_status,
       has_function_privilege('pg_monitor', 'snowflake_status()', 'EXECUTE') AS monitor_reads_status,
       has_function_privilege('app', 'snowflake_registry_claims()', 'EXECUTE') AS app_reads_claims,
       has_function_privilege('pg_monitor', 'snowflake_registry_claims()', 'EXECUTE') AS monitor_reads_claims,
       has_function_privilege('app', 'snowflake_horizon_holders()', 'EXECUTE') AS app_reads_holders,
       has_function_privilege('pg_monitor', 'snowflake_horizon_holders()', 'EXECUTE') AS monitor_reads_holders,
       has_function_privilege('app', 'snowflake_fence_allows(integer)', 'EXECUTE') AS app_reads_fence;

SET ROLE app;
SELECT snowflake_shard(snowflake_nextval(3)) AS app_shard;
SELECT snowflake_nextvals(3, 10);
SELECT snowflake_advance(3, 1);
SELECT count(*) FROM snowflake_stats();
SELECT count(*) FROM snowflake_status();
SELECT count(*) FROM snowflake_registry_claims();
SELECT count(*) FROM snowflake_horizon_holders();
-- An unprivileged role can change the default shard neither for itself nor for others.
SET snowflake_id.shard = 7;
ALTER ROLE app SET snowflake_id.shard = 7;
RESET ROLE;
-- Granted, batches work.
GRANT EXECUTE ON FUNCTION snowflake_nextvals(integer, integer) TO app;
SET ROLE app;
SELECT count(*) AS batch FROM snowflake_nextvals(3, 10);
RESET ROLE;
REVOKE EXECUTE ON FUNCTION snowflake_nextvals(integer, integer) FROM app;

-- No function runs with another user's rights: not even the event trigger of
-- snowflake_id.auto_keys, which runs with the rights of the role whose statement fired it (and
-- which no one can call). hostile_tenant.sql tries what an ordinary role could do with them.
SELECT p.proname AS security_definer_functions
FROM pg_proc p JOIN pg_depend d ON d.objid = p.oid AND d.deptype = 'e'
JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'snowflake_id'
WHERE p.prosecdef;
SELECT snowflake_auto_keys();

DROP ROLE app;
