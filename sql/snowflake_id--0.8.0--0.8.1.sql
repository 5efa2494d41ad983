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
