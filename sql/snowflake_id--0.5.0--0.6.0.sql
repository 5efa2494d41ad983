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
