//! The ceiling every shard resumes at when the postmaster creates shared memory (at start,
//! and again after a backend crash): the one recorded in the file, raised first under
//! pg_upgrade. `shmem` calls it; crash recovery reads what it found (`recorded_at_start`).

use super::legacy_wal;
use super::record::{self, Record, FILE, PREFIX};
use super::{old_server_lead_bound_ms, time_part_of_ceiling, LeadSettings};
use crate::postgres::{clock, compat, durable_file};
use pgrx::pg_sys::panic::ErrorReport;
use pgrx::{PgLogLevel, PgSqlErrorCode};
use snowflake_core::utc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

/// The recorded ceiling as a time part (0 on a server that never issued an ID). Read by
/// the postmaster when it creates shared memory; an unreadable record stops the server,
/// since guessing could repeat IDs. Under pg_upgrade, raised first (`record_upgrade_guard`);
/// a record pg_upgrade's starts marked as an estimate stops the first real start
/// (`refuse_unconfirmed`).
pub fn recorded_ceiling() -> u64 {
    let noted = record::read_noted().unwrap_or_else(|reason| corrupt_record(&reason));
    let ceiling = if compat::in_binary_upgrade() {
        record_upgrade_guard(noted)
    } else {
        match noted {
            Some(noted) if noted.unconfirmed => refuse_unconfirmed(noted.record.ceiling_unix_ms),
            noted => noted.map_or(0, |noted| time_part_of_ceiling(noted.record.ceiling_unix_ms)),
        }
    };
    RECORDED_AT_START.store(ceiling, Relaxed);
    *RECORDED_LEAD_AT_START.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) =
        noted.and_then(|noted| noted.record.lead);
    ceiling
}

/// The ceiling the file held when the postmaster last created shared memory, inherited by
/// the startup process: crash recovery never resumes below it (see `wal::replay_ceiling`).
static RECORDED_AT_START: AtomicU64 = AtomicU64::new(0);

/// The lead settings the file kept with that ceiling (`record::Record::lead`), inherited by
/// the worker: on a standby restarted since the last ceiling it replayed, the lead its primary
/// ran with (`worker::old_primary_lead`); on a primary, a lead it kept (`worker`'s start).
static RECORDED_LEAD_AT_START: Mutex<Option<LeadSettings>> = Mutex::new(None);

/// Every start under pg_upgrade (`postgres -b`), of the new cluster or the old one, and
/// `pg_upgrade --check`'s too: pg_upgrade carries the tables, not this file, and the old
/// server may have issued IDs up to its ceiling, at most `max_lead_ms + reserve_ms` ahead of
/// its clock as it read when it issued them. So the record is raised to that far ahead of now
/// (never lowered): above anything the old server issued as long as it ran with lead settings
/// no larger than these and its clock, whenever it issued, never read ahead of this clock now.
/// A clock that ran fast and was set back before the upgrade breaks the second, and nothing
/// pg_upgrade hands the new server (its command line, environment or catalogs) says where the
/// old data directory and its exact record are.
///
/// So on a new cluster (no record of its own yet, or one these starts marked) the guard is
/// written marked as unconfirmed, and its first real start refuses to issue on it: the
/// operator copies the old server's file over it (the documented step, exact), or deletes the
/// mark to resume at the estimate knowingly. The old cluster's own record (pg_upgrade starts
/// it too, to read its schema) is raised but never marked: it stays usable if the upgrade is
/// abandoned.
///
/// At every such start, not only the first: `pg_upgrade --check` starts the new cluster too,
/// possibly long before the upgrade while the old server keeps issuing; a guard recorded
/// then would be stale by the upgrade.
fn record_upgrade_guard(noted: Option<record::Noted>) -> u64 {
    let bound_ms = old_server_lead_bound_ms();
    let guard_unix_ms = clock::wall_clock_unix_ms().saturating_add(bound_ms as i64);
    let new_cluster = noted.is_none_or(|noted| noted.unconfirmed);
    let ceiling_unix_ms =
        noted.map_or(guard_unix_ms, |noted| noted.record.ceiling_unix_ms.max(guard_unix_ms));
    // Already that far ahead (and marked, on a new cluster): nothing to write.
    if noted.is_some_and(|noted| noted.record.ceiling_unix_ms >= guard_unix_ms) {
        return time_part_of_ceiling(ceiling_unix_ms);
    }
    // The lead settings the old record kept, if any, stay with it.
    let lead = noted.and_then(|noted| noted.record.lead);
    let record = Record { ceiling_unix_ms, wal128: legacy_wal::may_remain(), lead };
    let written = if new_cluster { record::write_unconfirmed(record) } else { record::write(record) };
    if let Err(error) = written {
        durable_file::not_recorded("the snowflake_id reservation", FILE, " during a binary upgrade", error);
    }
    pgrx::log!(
        "snowflake_id: binary upgrade: recorded a ceiling of {} ({bound_ms} ms ahead of the clock){}",
        utc::format_utc_ms(ceiling_unix_ms),
        if new_cluster {
            format!(
                ", marked unconfirmed: an estimate, which the first real start refuses until the old server's \
                 \"{FILE}\" is copied over it"
            )
        } else {
            String::new()
        }
    );
    time_part_of_ceiling(ceiling_unix_ms)
}

/// The first real start of a cluster made by pg_upgrade without the old server's reservation
/// record: its ceiling is pg_upgrade's estimate (`record_upgrade_guard`).
fn refuse_unconfirmed(estimate_unix_ms: i64) -> ! {
    ErrorReport::new(
        PgSqlErrorCode::ERRCODE_CONFIG_FILE_ERROR,
        "snowflake_id cannot tell how far the old server issued IDs: this cluster made by pg_upgrade has only \
         an estimate"
            .to_string(),
        "snowflake_id",
    )
    .set_detail(format!(
        "pg_upgrade does not carry \"{FILE}\", the record of how far the old server issued IDs; this cluster's \
         starts under pg_upgrade recorded an estimate there, {}, marked unconfirmed. It is above the old \
         server's IDs only if that server ran with lead settings no larger than this one's and its clock never \
         read ahead of this one's: a clock that ran fast and was set back would repeat IDs.",
        utc::format_utc_ms(estimate_unix_ms)
    ))
    .set_hint(format!(
        "Copy \"{FILE}\" from the old cluster's data directory over this one's (as the pg_upgrade steps in \
         docs/operations.md do), then start again. If the old data directory is gone, raise the number in that \
         line past every ID the old server issued if you know it (or keep it, if the conditions above held), \
         then delete \"{}\" from the end of the line to confirm it.",
        compat::UNCONFIRMED_BY_PG_UPGRADE.trim_start()
    ))
    .report(PgLogLevel::ERROR);
    unreachable!("an ERROR report returns control to PostgreSQL")
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

/// The lead settings the file kept with it (see `RECORDED_LEAD_AT_START`).
pub fn recorded_lead_at_start() -> Option<LeadSettings> {
    *RECORDED_LEAD_AT_START.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
