//! `snowflake_horizon()`: how far a reader paging by ID ("everything after the last ID I
//! saw") may read without skipping a row that commits later (`snowflake_core::horizon`,
//! `postgres::horizon`; docs/reading-in-order.md has the reader's loop).
//!
//! Both forms are `VOLATILE` (each call may move the horizon, and raises the floor under
//! which nothing more is issued) and `PARALLEL RESTRICTED` (the statement's snapshot decides
//! the answer, and the leader's is the one). They raise 55000 when the library is not
//! preloaded, 25006 on a hot standby, and the per-shard form 22004 for a NULL shard, 22023 for
//! a shard outside the layout, 55000 for a shard outside the fence.

use super::{errors, preloaded_layout};
use crate::postgres::fence::{self, shared as shared_fence};
use crate::postgres::{clock, horizon, shmem};
use pgrx::prelude::*;
use snowflake_core::generator::Refusal;
use snowflake_core::layout::Layout;

/// The horizon of this server, as an ID: every ID below it that this server issued, or will
/// ever issue, belongs to a transaction that had ended (committed or rolled back) for the
/// snapshot of the statement that calls it, and for every later one. Read rows with
/// `id > :cursor AND id < :horizon` in a later statement, or in the same one as
/// `id < (SELECT snowflake_horizon())` (a subquery: computed once, an index bound; called
/// bare in a WHERE clause it runs for every row), at any isolation level. IDs issued
/// elsewhere (another server, a client) are not covered.
#[pg_extern(volatile, parallel_restricted)]
fn snowflake_horizon() -> i64 {
    horizon_id("snowflake_horizon")
}

/// The horizon for the IDs of `shard`, which this server must issue (its fence names it):
/// the same value as `snowflake_horizon()`, refused for a shard issued elsewhere, so that a
/// reader with one cursor per shard asks the right server.
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
    horizon_id(FUNCTION)
}

fn horizon_id(function: &'static str) -> i64 {
    let layout = preloaded_layout(function);
    // SAFETY: reads shared state under PostgreSQL's own locking.
    if unsafe { pg_sys::RecoveryInProgress() } {
        errors::horizon_on_standby(function);
    }
    let reservation = shmem::reservation().expect("preloaded");
    let now = layout
        .time_part(clock::wall_clock_unix_ms())
        .unwrap_or_else(|error| errors::refusal(function, 0, Refusal::Clock(error)));
    id_at(&layout, horizon::for_active_snapshot(now, reservation))
}

/// The lowest ID of a time part; past the layout's last millisecond, the highest ID.
fn id_at(layout: &Layout, time_part: u64) -> i64 {
    if time_part > layout.max_time_part() {
        i64::MAX
    } else {
        layout.min_id(time_part)
    }
}
