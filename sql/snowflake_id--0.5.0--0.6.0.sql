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
