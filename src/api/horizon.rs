//! `snowflake_horizon()`: how far a reader paging by ID ("everything after the last ID I
//! saw") may read without skipping a row that commits later (`snowflake_core::horizon`,
//! `postgres::horizon`; docs/reading-in-order.md has the reader's loop); and
//! `snowflake_horizon_holders()`, which transactions hold it, on which shards, since when.
//!
//! Both forms are `VOLATILE` (each call may move the horizon, and raises the floor under
//! which nothing more is issued) and `PARALLEL RESTRICTED` (the statement's snapshot decides
//! the answer, and the leader's is the one). They raise 55000 when the library is not
//! preloaded, 25006 on a hot standby, and the per-shard form 22004 for a NULL shard, 22023 for
//! a shard outside the layout, 55000 for a shard outside the fence.

use super::decoding::timestamptz_of_unix_ms;
use super::{errors, preloaded_layout};
use crate::postgres::fence::{self, shared as shared_fence};
use crate::postgres::{clock, horizon, shmem};
use pgrx::prelude::*;
use snowflake_core::generator::Refusal;
use snowflake_core::layout::Layout;

/// The horizon of this server, of every shard, as an ID: every ID below it that this server
/// issued, or will ever issue, belongs to a transaction that had ended (committed or rolled
/// back) for the snapshot of the statement that calls it, and for every later one. Every open
/// transaction that took an ID holds it, whatever its shard: a reader of every shard must wait
/// for each of them. Read rows with
/// `id > :cursor AND id < :horizon` in a later statement, or in the same one as
/// `id < (SELECT snowflake_horizon())` (a subquery: computed once, an index bound; called
/// bare in a WHERE clause it runs for every row), at any isolation level. IDs issued
/// elsewhere (another server, a client) are not covered.
#[pg_extern(volatile, parallel_restricted)]
fn snowflake_horizon() -> i64 {
    horizon_id("snowflake_horizon", None)
}

/// The horizon for the IDs of `shard`, which this server must issue (its fence names it): held
/// only by the open transactions that took IDs of that shard (at least `snowflake_horizon()`),
/// refused for a shard issued elsewhere, so that a reader with one cursor per shard asks the
/// right server.
#[pg_extern(volatile, parallel_restricted, name = "snowflake_horizon")]
fn snowflake_horizon_of_shard(shard: Option<i32>) -> i64 {
    const FUNCTION: &str = "snowflake_horizon";
    let Some(shard) = shard else { errors::null_argument(FUNCTION, "shard") };
    let layout = preloaded_layout(FUNCTION);
    let shard =
        layout.check_shard(shard.into()).unwrap_or_else(|error| errors::layout_error(FUNCTION, error));
    if !fence::session_allows(shard) || !shared_fence::allows(shard) {
        errors::horizon_of_a_shard_elsewhere(FUNCTION, shard, &fence::setting_text());
    }
    horizon_id(FUNCTION, Some(shard))
}

fn horizon_id(function: &'static str, shard: Option<u32>) -> i64 {
    let layout = preloaded_layout(function);
    // SAFETY: reads shared state under PostgreSQL's own locking.
    if unsafe { pg_sys::RecoveryInProgress() } {
        errors::horizon_on_standby(function);
    }
    let reservation = shmem::reservation().expect("preloaded");
    let now = layout
        .time_part(clock::wall_clock_unix_ms())
        .unwrap_or_else(|error| errors::refusal(function, 0, Refusal::Clock(error)));
    id_at(&layout, horizon::for_active_snapshot(now, reservation, shard))
}

/// One row per shard held by an open transaction: the backend's process id (NULL for a
/// prepared transaction, whose xid `prepared_xid` gives, as `pg_prepared_xacts.transaction`),
/// the shard, the time of the transaction's lowest ID (`held_since`: the shard's horizon is at
/// or below it) and when the transaction started (`xact_start`, as `pg_stat_activity` shows
/// it; NULL for a prepared one). Oldest first within a shard. Volatile, parallel restricted (it
/// reads the leader's statistics snapshot); raises 55000 when the library is not preloaded.
#[pg_extern(volatile, parallel_restricted)]
#[allow(clippy::type_complexity)] // pgrx reads the column names from the tuple written out here
fn snowflake_horizon_holders() -> TableIterator<
    'static,
    (
        name!(pid, Option<i32>),
        name!(prepared_xid, Option<pg_sys::TransactionId>),
        name!(shard, i32),
        name!(held_since, TimestampWithTimeZone),
        name!(xact_start, Option<TimestampWithTimeZone>),
    ),
> {
    let layout = preloaded_layout("snowflake_horizon_holders");
    let rows = horizon::holders::now().into_iter().map(move |hold| {
        (
            hold.pid,
            hold.prepared_xid,
            hold.shard as i32,
            timestamptz_of_unix_ms(layout.unix_ms(hold.since)),
            hold.xact_start.and_then(|start| TimestampWithTimeZone::try_from(start).ok()),
        )
    });
    TableIterator::new(rows.collect::<Vec<_>>())
}

extension_sql!(
    r#"
/* Which sessions hold which shards' horizons, and since when, is operational data like
   pg_stat_activity's: for monitoring roles (pg_monitor is a member of pg_read_all_stats). */
REVOKE ALL ON FUNCTION snowflake_horizon_holders() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION snowflake_horizon_holders() TO pg_read_all_stats;
"#,
    name = "snowflake_horizon_holders_privileges",
    requires = [snowflake_horizon_holders]
);

/// The lowest ID of a time part; past the layout's last millisecond, the highest ID.
fn id_at(layout: &Layout, time_part: u64) -> i64 {
    if time_part > layout.max_time_part() {
        i64::MAX
    } else {
        layout.min_id(time_part)
    }
}
