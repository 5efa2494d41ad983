-- snowflake_id 0.6.0 -> 0.6.1
\echo Use "ALTER EXTENSION snowflake_id UPDATE TO '0.6.1'" to load this file. \quit

-- Who holds the committed horizon: per shard, the backend (or prepared transaction) whose open
-- transaction took IDs of it, since when (docs/monitoring.md, docs/reading-in-order.md).
CREATE  FUNCTION "snowflake_horizon_holders"() RETURNS TABLE (
	"pid" INT,  /* Option < i32 > */
	"prepared_xid" xid,  /* Option < pg_sys :: TransactionId > */
	"shard" INT,  /* i32 */
	"held_since" timestamp with time zone,  /* TimestampWithTimeZone */
	"xact_start" timestamp with time zone  /* Option < TimestampWithTimeZone > */
)
STRICT VOLATILE PARALLEL RESTRICTED
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'snowflake_horizon_holders_wrapper';
/* Which sessions hold which shards' horizons, and since when, is operational data like
   pg_stat_activity's: for monitoring roles (pg_monitor is a member of pg_read_all_stats). */
REVOKE ALL ON FUNCTION snowflake_horizon_holders() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION snowflake_horizon_holders() TO pg_read_all_stats;
