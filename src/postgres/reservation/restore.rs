//! The ceiling every shard resumes at when the postmaster creates shared memory (at start,
//! and again after a backend crash): the one recorded in the file, raised first under
//! pg_upgrade. `shmem` calls it; crash recovery reads what it found (`recorded_at_start`).

use super::record::{self, FILE, PREFIX};
use super::{old_server_lead_bound_ms, time_part_of_ceiling, write_durably};
use crate::postgres::{clock, compat};
use pgrx::pg_sys::panic::ErrorReport;
use pgrx::{PgLogLevel, PgSqlErrorCode};
use snowflake_core::utc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// The recorded ceiling as a time part (0 on a server that never issued an ID). Read by
/// the postmaster when it creates shared memory; an unreadable record stops the server,
/// since guessing could repeat IDs. Under pg_upgrade, raised first (`record_upgrade_guard`).
pub fn recorded_ceiling() -> u64 {
    let recorded = record::read().unwrap_or_else(|reason| corrupt_record(&reason));
    let ceiling_unix_ms = recorded.map(|record| record.ceiling_unix_ms);
    let ceiling = if compat::in_binary_upgrade() {
        record_upgrade_guard(ceiling_unix_ms)
    } else {
        ceiling_unix_ms.map_or(0, time_part_of_ceiling)
    };
    RECORDED_AT_START.store(ceiling, Relaxed);
    ceiling
}

/// The ceiling the file held when the postmaster last created shared memory, inherited by
/// the startup process: crash recovery never resumes below it (see `wal::replay_ceiling`).
static RECORDED_AT_START: AtomicU64 = AtomicU64::new(0);

/// Every start under pg_upgrade (`postgres -b`), of the new cluster or the old one, and
/// `pg_upgrade --check`'s too: pg_upgrade carries the tables, not this file, and the old
/// server may have issued IDs up to its ceiling, at most `max_lead_ms + reserve_ms` ahead of
/// its clock as it read when it issued them. So the record is raised to that far ahead of now
/// (never lowered), and the first real start resumes above anything the old server issued,
/// as long as it ran with lead settings no larger than these and its clock, whenever it
/// issued, never read ahead of this clock now. A clock that ran fast and was set back before
/// the upgrade breaks the second: that guess is all this start can make, since nothing
/// pg_upgrade hands the new server (its command line, environment or catalogs) says where
/// the old data directory and its record are.
///
/// At every such start, not only the first: `pg_upgrade --check` starts the new cluster too,
/// possibly long before the upgrade while the old server keeps issuing; a guard recorded
/// then would be stale by the upgrade. Copying the old server's file over this one after
/// pg_upgrade (the documented step) is exact, and needs no assumption.
fn record_upgrade_guard(recorded_unix_ms: Option<i64>) -> u64 {
    let bound_ms = old_server_lead_bound_ms();
    let guard_unix_ms = clock::wall_clock_unix_ms().saturating_add(bound_ms as i64);
    if recorded_unix_ms.is_some_and(|recorded| recorded >= guard_unix_ms) {
        return time_part_of_ceiling(recorded_unix_ms.unwrap_or(guard_unix_ms));
    }
    if let Err(error) = write_durably(guard_unix_ms) {
        pgrx::error!(
            "could not record the snowflake_id reservation in \"{FILE}\" during a binary upgrade: {error}"
        );
    }
    pgrx::log!(
        "snowflake_id: binary upgrade: recorded a ceiling of {} ({bound_ms} ms ahead of the clock): above the \
         old server's IDs only if it ran with lead settings no larger than these and its clock never read \
         ahead of this one; copy its \"{FILE}\" over this cluster's before the first start, which is exact",
        utc::format_utc_ms(guard_unix_ms)
    );
    time_part_of_ceiling(guard_unix_ms)
}

fn corrupt_record(reason: &str) -> ! {
    ErrorReport::new(
        PgSqlErrorCode::ERRCODE_DATA_CORRUPTED,
        format!("could not read the snowflake_id reservation file \"{FILE}\": {reason}"),
        "snowflake_id",
    )
    .set_detail("The file records how far this server issued IDs; without it shards could repeat IDs.")
    .set_hint(format!(
        "Restore the file from a backup. Or write the line \"{PREFIX}<ms>\" into it, with a Unix time in ms \
         past every ID this server issued: knowing the highest, after its time; else the current time plus \
         max_lead_ms + reserve_ms plus any amount the clock was ever set back (with the defaults and a clock \
         never set back, a minute ahead is ample: echo \"{PREFIX}$(( $(date +%s%3N) + 60000 ))\" > {FILE})."
    ))
    .report(PgLogLevel::ERROR);
    unreachable!("an ERROR report returns control to PostgreSQL")
}

/// The ceiling the file held when the postmaster last created shared memory (see
/// `RECORDED_AT_START`).
pub fn recorded_at_start() -> u64 {
    RECORDED_AT_START.load(Relaxed)
}
