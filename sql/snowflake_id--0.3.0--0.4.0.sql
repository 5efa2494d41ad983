-- snowflake_id 0.3.0 -> 0.4.0: decoders for IDs made under a named layout (twitter, discord,
-- instagram, mastodon), whatever this server's own layout is. The configurable split
-- (snowflake_id.seq_bits) and the named layouts (snowflake_id.layout) are settings of the
-- library, not objects of the extension.
\echo Use "ALTER EXTENSION snowflake_id UPDATE TO '0.4.0'" to load this file. \quit

CREATE FUNCTION "snowflake_timestamp"(
	"id" bigint, /* i64 */
	"layout" TEXT /* & str */
) RETURNS timestamp with time zone /* TimestampWithTimeZone */
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'snowflake_timestamp_named_wrapper';

CREATE FUNCTION "snowflake_shard"(
	"id" bigint, /* i64 */
	"layout" TEXT /* & str */
) RETURNS INT /* i32 */
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'snowflake_shard_named_wrapper';

CREATE FUNCTION "snowflake_seq"(
	"id" bigint, /* i64 */
	"layout" TEXT /* & str */
) RETURNS INT /* i32 */
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'snowflake_seq_named_wrapper';

/* The same for an ID made under a named layout: SELECT * FROM snowflake_decode(id, 'discord'). */
CREATE FUNCTION snowflake_decode(id bigint, layout text, OUT ts timestamptz, OUT shard integer, OUT seq integer)
RETURNS record
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT @extschema@.snowflake_timestamp(id, layout), @extschema@.snowflake_shard(id, layout), @extschema@.snowflake_seq(id, layout) $$;
COMMENT ON FUNCTION snowflake_decode(bigint, text) IS 'The timestamp, shard and sequence number of an ID made under a named layout (twitter, discord, instagram, mastodon)';
