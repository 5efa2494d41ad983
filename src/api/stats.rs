//! `snowflake_stats()`: what each shard in use has done since the server started.
//!
//! Cheap to read: plain loads of the shared counters, no lock, nothing on the hot path
//! beyond the counter increments the generator already makes.

use super::decoding::timestamptz_of_unix_ms;
use super::preloaded_layout;
use crate::postgres::{clock, shmem};
use pgrx::prelude::*;
use std::sync::atomic::Ordering::Relaxed;

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
    let reservation = shmem::reservation().expect("preloaded");
    let reserved_until = timestamptz_of_unix_ms(layout.unix_ms(reservation.ceiling.load(Relaxed)));
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

extension_sql!(
    r#"
/* Rates of ID issue per shard are operational data: for monitoring roles, as PostgreSQL's own statistics. */
REVOKE ALL ON FUNCTION snowflake_stats() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION snowflake_stats() TO pg_read_all_stats;
"#,
    name = "snowflake_stats_privileges",
    requires = [snowflake_stats]
);
