//! The decoding functions of the SQL surface: pure arithmetic on the layout.
//!
//! All are `IMMUTABLE STRICT PARALLEL SAFE` (a NULL in gives NULL out), so they can be used
//! in expression indexes, generated columns and partition bounds. They are immutable
//! because the layout is fixed for the life of a fleet (`snowflake_id.epoch`, `shard_bits`
//! and `seq_bits` are set at server start and must never change). They raise
//! 22023 for a negative ID or a shard/seq out of range, and 22003 for a timestamp outside
//! the range of the time bits after the epoch.
//!
//! The decoders with a `layout` argument read IDs made elsewhere (`snowflake_decode(id,
//! 'discord')`) under a named layout, whatever this server's own is; they need no preloading.

use super::{errors, preloaded_layout};
use crate::postgres::fixed_layout;
use pgrx::prelude::*;
use pgrx::JsonB;
use serde::Serialize;
use snowflake_core::layout::{self, Layout, Parts};
use snowflake_core::utc;

/// 2000-01-01T00:00:00Z, PostgreSQL's own epoch, in Unix milliseconds.
const PG_EPOCH_UNIX_MS: i64 = 946_684_800_000;

fn decode(function: &'static str, id: i64) -> (Layout, Parts) {
    let layout = preloaded_layout(function);
    let parts = layout.decode(id).unwrap_or_else(|e| errors::layout_error(function, e));
    (layout, parts)
}

pub(crate) fn timestamptz_of_unix_ms(unix_ms: i64) -> TimestampWithTimeZone {
    let micros = (unix_ms - PG_EPOCH_UNIX_MS) * 1000;
    // Every time part lies between 1970 and 2300, well inside timestamptz's range.
    TimestampWithTimeZone::try_from(micros).expect("time part outside timestamptz range")
}

/// The time part of a timestamp (milliseconds after the epoch; finer digits dropped).
fn time_part_of(function: &'static str, ts: TimestampWithTimeZone) -> u64 {
    if !ts.is_finite() {
        errors::infinite_timestamp(function);
    }
    let micros: pg_sys::TimestampTz = ts.into();
    let unix_ms = micros.div_euclid(1000) + PG_EPOCH_UNIX_MS;
    preloaded_layout(function).time_part(unix_ms).unwrap_or_else(|e| errors::layout_error(function, e))
}

/// When the ID was issued, to the millisecond.
#[pg_extern(immutable, strict, parallel_safe)]
fn snowflake_timestamp(id: i64) -> TimestampWithTimeZone {
    let (layout, parts) = decode("snowflake_timestamp", id);
    timestamptz_of_unix_ms(layout.unix_ms(parts.time_part))
}

/// The shard the ID was issued for.
#[pg_extern(immutable, strict, parallel_safe)]
fn snowflake_shard(id: i64) -> i32 {
    decode("snowflake_shard", id).1.shard as i32
}

/// The ID's sequence number within its millisecond and shard.
#[pg_extern(immutable, strict, parallel_safe)]
fn snowflake_seq(id: i64) -> i32 {
    decode("snowflake_seq", id).1.seq as i32
}

/// An ID made under the named layout `name`, split into its parts.
///
/// The name comes as the bytes of its `text` argument, not as `&str`: pgrx converts a `text`
/// argument to `&str` by panicking on bytes that are not UTF-8, which a `SQL_ASCII` (or
/// LATIN1) database passes as they are. No named layout has such bytes: a name that is not
/// UTF-8 is simply not one of them (22023).
fn decode_named(function: &'static str, id: i64, name: &[u8]) -> (Layout, Parts) {
    let name = String::from_utf8_lossy(name);
    let layout = layout::named_layout(&name).unwrap_or_else(|| errors::unknown_layout(function, &name));
    let parts = layout.decode(id).unwrap_or_else(|e| errors::layout_error(function, e));
    (layout, parts)
}

// The three decoders of a named layout take the `text` argument as bytes (see `decode_named`),
// so their SQL is written here: pgrx would declare a `&[u8]` argument `bytea`. The same
// definitions as the generated ones of 0.4.0 to 0.6.0, which updated databases have.

/// When an ID made under a named layout was issued: `snowflake_timestamp(id, 'twitter')`.
#[pg_extern(
    immutable,
    strict,
    parallel_safe,
    name = "snowflake_timestamp",
    sql = r#"CREATE FUNCTION "snowflake_timestamp"("id" bigint, "layout" TEXT) RETURNS timestamp with time zone
IMMUTABLE STRICT PARALLEL SAFE LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_timestamp_named_wrapper';"#
)]
fn snowflake_timestamp_named(id: i64, layout: &[u8]) -> TimestampWithTimeZone {
    let (layout, parts) = decode_named("snowflake_timestamp", id, layout);
    timestamptz_of_unix_ms(layout.unix_ms(parts.time_part))
}

/// The shard (worker, machine) field of an ID made under a named layout.
#[pg_extern(
    immutable,
    strict,
    parallel_safe,
    name = "snowflake_shard",
    sql = r#"CREATE FUNCTION "snowflake_shard"("id" bigint, "layout" TEXT) RETURNS INT
IMMUTABLE STRICT PARALLEL SAFE LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_shard_named_wrapper';"#
)]
fn snowflake_shard_named(id: i64, layout: &[u8]) -> i32 {
    decode_named("snowflake_shard", id, layout).1.shard as i32
}

/// The sequence field of an ID made under a named layout.
#[pg_extern(
    immutable,
    strict,
    parallel_safe,
    name = "snowflake_seq",
    sql = r#"CREATE FUNCTION "snowflake_seq"("id" bigint, "layout" TEXT) RETURNS INT
IMMUTABLE STRICT PARALLEL SAFE LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_seq_named_wrapper';"#
)]
fn snowflake_seq_named(id: i64, layout: &[u8]) -> i32 {
    decode_named("snowflake_seq", id, layout).1.seq as i32
}

/// The ID with these parts; the inverse of `snowflake_decode`. `ts` is truncated to the
/// millisecond.
#[pg_extern(immutable, strict, parallel_safe)]
fn snowflake_compose(ts: TimestampWithTimeZone, shard: i32, seq: i32) -> i64 {
    const FUNCTION: &str = "snowflake_compose";
    let layout = preloaded_layout(FUNCTION);
    let time_part = time_part_of(FUNCTION, ts);
    let shard = layout.check_shard(shard.into()).unwrap_or_else(|e| errors::layout_error(FUNCTION, e));
    let seq = layout.check_seq(seq.into()).unwrap_or_else(|e| errors::layout_error(FUNCTION, e));
    layout.compose(Parts { time_part, shard, seq })
}

/// The smallest ID of `ts`'s millisecond: `WHERE id >= snowflake_min_id(now() - '1 hour')`.
#[pg_extern(immutable, strict, parallel_safe)]
fn snowflake_min_id(ts: TimestampWithTimeZone) -> i64 {
    fixed_layout::get().min_id(time_part_of("snowflake_min_id", ts))
}

/// The largest ID of `ts`'s millisecond: `WHERE id <= snowflake_max_id(ts)` keeps all of it.
#[pg_extern(immutable, strict, parallel_safe)]
fn snowflake_max_id(ts: TimestampWithTimeZone) -> i64 {
    fixed_layout::get().max_id(time_part_of("snowflake_max_id", ts))
}

/// The JSON form of an ID. `id` is a string where it may not fit a JavaScript number (above
/// 2^53 - 1, which JSON parsers reading doubles round), a number under a layout of 53 bits or
/// fewer (`js53`), whose every ID fits; `unix_ms` fits a JavaScript number exactly.
#[derive(Serialize)]
struct IdJson {
    id: serde_json::Value,
    ts: String,
    unix_ms: i64,
    shard: u32,
    seq: u32,
}

/// An ID in JSON: a number when every ID of its layout is one a double holds exactly (53 bits
/// or fewer), else a string, so that no reader of the JSON changes a digit.
fn json_id(layout: &Layout, id: i64) -> serde_json::Value {
    if layout.ids_fit_a_double() {
        serde_json::Value::from(id)
    } else {
        serde_json::Value::from(id.to_string())
    }
}

/// The decoded parts as `jsonb`, with the ID as text (a number under `js53`) and the time in UTC:
/// `{"id": "…", "ts": "2024-05-01T12:00:00.123Z", "unix_ms": …, "shard": 3, "seq": 0}`.
#[pg_extern(immutable, strict, parallel_safe)]
fn snowflake_json(id: i64) -> JsonB {
    let (layout, parts) = decode("snowflake_json", id);
    let unix_ms = layout.unix_ms(parts.time_part);
    let json = IdJson {
        id: json_id(&layout, id),
        ts: utc::format_utc_ms(unix_ms),
        unix_ms,
        shard: parts.shard,
        seq: parts.seq,
    };
    JsonB(serde_json::to_value(json).expect("plain fields always serialize"))
}

/// This server's ID layout: epoch, bit widths, limits, and when the IDs run out.
#[pg_extern(immutable, parallel_safe)]
fn snowflake_layout() -> TableIterator<
    'static,
    (
        name!(epoch, TimestampWithTimeZone),
        name!(time_bits, i32),
        name!(shard_bits, i32),
        name!(seq_bits, i32),
        name!(max_shard, i32),
        name!(ids_per_ms, i32),
        name!(runs_out, TimestampWithTimeZone),
    ),
> {
    let layout = preloaded_layout("snowflake_layout");
    TableIterator::once((
        timestamptz_of_unix_ms(layout.epoch_unix_ms()),
        layout.time_bits() as i32,
        layout.shard_bits() as i32,
        layout.seq_bits() as i32,
        layout.max_shard() as i32,
        layout.ids_per_ms() as i32,
        timestamptz_of_unix_ms(layout.last_unix_ms() + 1),
    ))
}

extension_sql!(
    r#"
/* The three parts of an ID, as a named type: drivers that know composite types read them typed
   (psycopg's register_composite, tokio-postgres's derive(FromSql)), and SELECT
   (snowflake_decode(id)).* and SELECT * FROM snowflake_decode(id) give three typed columns. */
CREATE TYPE snowflake_parts AS (ts timestamptz, shard integer, seq integer);
COMMENT ON TYPE snowflake_parts IS 'The parts of a snowflake ID: when it was issued, its shard and its sequence number';
/* Written in SQL over the scalar decoders. */
CREATE FUNCTION snowflake_decode(id bigint)
RETURNS snowflake_parts
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT @extschema@.snowflake_timestamp(id), @extschema@.snowflake_shard(id), @extschema@.snowflake_seq(id) $$;
COMMENT ON FUNCTION snowflake_decode(bigint) IS 'The timestamp, shard and sequence number of a snowflake ID';
"#,
    name = "snowflake_decode",
    requires = [snowflake_timestamp, snowflake_shard, snowflake_seq]
);

extension_sql!(
    r#"
/* The same for an ID made under a named layout: SELECT * FROM snowflake_decode(id, 'discord'). */
CREATE FUNCTION snowflake_decode(id bigint, layout text)
RETURNS snowflake_parts
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT @extschema@.snowflake_timestamp(id, layout), @extschema@.snowflake_shard(id, layout), @extschema@.snowflake_seq(id, layout) $$;
COMMENT ON FUNCTION snowflake_decode(bigint, text) IS 'The timestamp, shard and sequence number of an ID made under a named layout (twitter, discord, instagram, mastodon, js53)';
"#,
    name = "snowflake_decode_named",
    requires = ["snowflake_decode", snowflake_timestamp_named, snowflake_shard_named, snowflake_seq_named]
);
