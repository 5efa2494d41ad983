-- snowflake_id 0.8.1 -> 0.9.0 (CHANGELOG.md): the shard registry.
\echo Use "ALTER EXTENSION snowflake_id UPDATE TO '0.9.0'" to load this file. \quit

-- snowflake_status() shows the shard registry too: its URL (NULL while off) and when it last
-- answered (src/api/stats.rs). New columns of a function returning TABLE: dropped and created
-- again, with its privileges.
DROP FUNCTION snowflake_status();
CREATE  FUNCTION "snowflake_status"() RETURNS TABLE (
	"worker_pid" INT,  /* Option < i32 > */
	"reserved_until" timestamp with time zone,  /* TimestampWithTimeZone */
	"fence" TEXT,  /* Option < String > */
	"lease_url" TEXT,  /* Option < String > */
	"lease_ms" INT,  /* Option < i32 > */
	"lease_lost_since" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"lease_last_200" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"registry_url" TEXT,  /* Option < String > */
	"registry_last_answer" timestamp with time zone  /* Option < TimestampWithTimeZone > */
)
STRICT VOLATILE PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'snowflake_status_wrapper';
REVOKE ALL ON FUNCTION snowflake_status() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION snowflake_status() TO pg_read_all_stats;

-- Each shard's claim in the shard registry (src/api/stats.rs, docs/registry.md): for
-- monitoring roles, as snowflake_status().
CREATE  FUNCTION "snowflake_registry_claims"() RETURNS TABLE (
	"shard" INT,  /* i32 */
	"state" TEXT,  /* String */
	"holder_system_identifier" bigint,  /* Option < i64 > */
	"holder_timeline" INT,  /* Option < i32 > */
	"since" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"mark" timestamp with time zone  /* Option < TimestampWithTimeZone > */
)
STRICT VOLATILE PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'snowflake_registry_claims_wrapper';
REVOKE ALL ON FUNCTION snowflake_registry_claims() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION snowflake_registry_claims() TO pg_read_all_stats;
