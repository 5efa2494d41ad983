//! What monitoring reads: `snowflake_stats()`, what each shard in use has done since the
//! server started; `snowflake_status()`, the server's reservation worker, reservation and
//! fence; `snowflake_fence_allows(shard)`, whether the fence in force lets a shard be issued;
//! `snowflake_registry_claims()`, each shard's claim in the registry.
//! The queries file of `deploy/monitoring/` turns them into Prometheus metrics.
//!
//! Cheap to read: plain loads of the shared counters, no lock, nothing on the hot path
//! beyond the counter increments the generator already makes.

use super::decoding::timestamptz_of_unix_ms;
use super::{errors, preloaded_layout};
use crate::postgres::reservation::worker;
use crate::postgres::{clock, fence, registry, shmem};
use pgrx::prelude::*;
use snowflake_core::layout::Layout;
use std::sync::atomic::Ordering::Relaxed;

/// The end of the durable reservation: the server-wide bound of the IDs it may issue before
/// recording more.
fn reserved_until(layout: &Layout) -> TimestampWithTimeZone {
    let reservation = shmem::reservation().expect("preloaded");
    timestamptz_of_unix_ms(layout.unix_ms(reservation.ceiling.load(Relaxed)))
}

/// One row per shard that issued an ID (or was advanced) since the server started:
/// IDs issued, the last ID and its time, how far that time leads the wall clock (0 when it
/// does not), calls that waited and for how long in all, clock steps back seen, and the
/// durable reservation (the server-wide end of the IDs it may issue before recording more).
#[pg_extern(volatile, parallel_safe)]
#[allow(clippy::type_complexity)] // pgrx reads the column names from the tuple written out here
fn snowflake_stats() -> TableIterator<
    'static,
    (
        name!(shard, i32),
        name!(issued, i64),
        name!(last_id, i64),
        name!(last_ts, TimestampWithTimeZone),
        name!(lead_ms, i64),
        name!(waits, i64),
        name!(wait_ms, i64),
        name!(clock_regressions, i64),
        name!(reserved_until, TimestampWithTimeZone),
    ),
> {
    let layout = preloaded_layout("snowflake_stats");
    let reserved_until = reserved_until(&layout);
    let now = clock::wall_clock_unix_ms();
    let rows = shmem::slots().iter().enumerate().filter_map(move |(shard, state)| {
        let last = state.last_issued.load(Relaxed);
        if last == 0 {
            return None;
        }
        let last_unix_ms = layout.unix_ms(layout.counter_time_part(last));
        Some((
            shard as i32,
            state.issued.load(Relaxed) as i64,
            layout.id_of_counter(shard as u32, last),
            timestamptz_of_unix_ms(last_unix_ms),
            (last_unix_ms - now).max(0),
            state.waits.load(Relaxed) as i64,
            state.wait_ms.load(Relaxed) as i64,
            state.clock_regressions.load(Relaxed) as i64,
            reserved_until,
        ))
    });
    TableIterator::new(rows.collect::<Vec<_>>())
}

/// One row about the whole server: the reservation worker's process id (NULL while none
/// runs: it is not in `pg_stat_activity`, having no database connection), the end of the
/// durable reservation (calls stop there if the worker does not renew it), the fence in force
/// on every call (`snowflake_id.shards` as the worker last applied it, ranges merged; NULL when
/// every shard may be issued, `none` for none), and the lease (`fence::lease`): its URL and
/// length (NULL while it is off), since when it is lost and every shard fenced for it (NULL
/// while it holds or is off), and when the request of its last 200 was sent (NULL when none
/// since the worker started), and the shard registry (`registry`): its URL (NULL while off) and
/// when it last answered (NULL when not since the worker started). A proxy or a client can tell
/// from these that a server which is still read-write is fenced. Volatile, parallel safe;
/// raises 55000 when the library is not preloaded.
#[pg_extern(volatile, parallel_safe)]
#[allow(clippy::type_complexity)] // pgrx reads the column names from the tuple written out here
fn snowflake_status() -> TableIterator<
    'static,
    (
        name!(worker_pid, Option<i32>),
        name!(reserved_until, TimestampWithTimeZone),
        name!(fence, Option<String>),
        name!(lease_url, Option<String>),
        name!(lease_ms, Option<i32>),
        name!(lease_lost_since, Option<TimestampWithTimeZone>),
        name!(lease_last_200, Option<TimestampWithTimeZone>),
        name!(registry_url, Option<String>),
        name!(registry_last_answer, Option<TimestampWithTimeZone>),
    ),
> {
    let layout = preloaded_layout("snowflake_status");
    let worker_pid = worker::running_pid(shmem::reservation().expect("preloaded"));
    let open = (0..layout.shard_count()).all(fence::shared::allows);
    let lease_on = fence::lease::configured().is_some();
    let (lease_url, lease_ms) = fence::lease::settings_text();
    let when = |unix_ms: Option<u64>| unix_ms.map(|ms| timestamptz_of_unix_ms(ms as i64));
    TableIterator::once((
        worker_pid,
        reserved_until(&layout),
        (!open).then(fence::shared::text),
        lease_on.then_some(lease_url),
        lease_on.then_some(lease_ms),
        when(fence::shared::lease_refused_since()),
        when(fence::shared::lease_last_yes().filter(|_| lease_on)),
        registry::configured().map(|config| config.url),
        when(registry::shared::last_answer_unix_ms()),
    ))
}

/// One row per shard of `snowflake_id.shards` while the shard registry is on (none while it is
/// off, or names no shard): the claim's state as the reservation worker last learnt it
/// (`held`: issued here, up to the mark; `not_yet`, `held_elsewhere`, `waiting` (another
/// postmaster of this data directory holds it until its lease runs out), `replaced` (a promotion
/// took it), `lost`, `unreachable`: fenced), the holder's system identifier and timeline (this
/// server's while held; NULL when unknown), since when it holds the claim, and the mark: the
/// time part this server issues up to while it holds the claim, and the next holder resumes
/// above. Volatile, parallel safe; 55000 when the library is not preloaded.
#[pg_extern(volatile, parallel_safe)]
#[allow(clippy::type_complexity)] // pgrx reads the column names from the tuple written out here
fn snowflake_registry_claims() -> TableIterator<
    'static,
    (
        name!(shard, i32),
        name!(state, String),
        name!(holder_system_identifier, Option<i64>),
        name!(holder_timeline, Option<i32>),
        name!(since, Option<TimestampWithTimeZone>),
        name!(mark, Option<TimestampWithTimeZone>),
    ),
> {
    let layout = preloaded_layout("snowflake_registry_claims");
    let shards: Vec<u32> = match (registry::configured(), fence::session_fence()) {
        (Some(_), fence @ snowflake_core::fence::ShardFence::Only(_)) => {
            (0..layout.shard_count()).filter(|&shard| fence.allows(shard)).collect()
        }
        _ => Vec::new(),
    };
    let when = |unix_ms: Option<u64>| unix_ms.map(|ms| timestamptz_of_unix_ms(ms as i64));
    let rows = shards.into_iter().filter_map(|shard| {
        let view = registry::shared::claim(shard)?.view();
        Some((
            shard as i32,
            view.state.name().to_owned(),
            // pg_control_system() shows the system identifier as bigint too.
            view.holder.map(|(system, _)| system as i64),
            view.holder.map(|(_, timeline)| timeline as i32),
            when(view.since_unix_ms),
            when(view.mark_unix_ms),
        ))
    });
    TableIterator::new(rows.collect::<Vec<_>>())
}

/// Whether the fence in force on the whole server (`snowflake_id.shards`, as the reservation
/// worker last applied it) lets this server issue `shard`: what a generator checks first.
/// Volatile (a reload moves the fence), strict, parallel safe; 22023 for a shard outside the
/// layout, 55000 when the library is not preloaded.
#[pg_extern(volatile, strict, parallel_safe)]
fn snowflake_fence_allows(shard: i32) -> bool {
    const FUNCTION: &str = "snowflake_fence_allows";
    let layout = preloaded_layout(FUNCTION);
    let shard = layout.check_shard(shard.into()).unwrap_or_else(|e| errors::layout_error(FUNCTION, e));
    fence::shared::allows(shard)
}

extension_sql!(
    r#"
/* Rates of ID issue per shard, the worker's process id and the reservation's end are operational
   data: for monitoring roles (pg_monitor is a member of pg_read_all_stats), as PostgreSQL's own
   statistics. The fence is not: the setting is readable by every role. */
REVOKE ALL ON FUNCTION snowflake_stats() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION snowflake_stats() TO pg_read_all_stats;
REVOKE ALL ON FUNCTION snowflake_status() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION snowflake_status() TO pg_read_all_stats;
/* Who holds each shard, as the registry says: operational data as well. */
REVOKE ALL ON FUNCTION snowflake_registry_claims() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION snowflake_registry_claims() TO pg_read_all_stats;
"#,
    name = "snowflake_stats_privileges",
    requires = [snowflake_stats, snowflake_status, snowflake_registry_claims]
);
