//! The ceiling every shard resumes at when the postmaster creates shared memory (at start,
//! and again after a backend crash): the one recorded in the file, raised first under
//! pg_upgrade. `shmem` calls it; crash recovery reads what it found (`recorded_at_start`).

use super::legacy_wal;
use super::record::{self, Record, FILE, PREFIX};
use super::{resume_settings, LeadSettings};
use crate::postgres::{clock, compat, durable_file, fixed_layout};
use pgrx::pg_sys::panic::ErrorReport;
use pgrx::{PgLogLevel, PgSqlErrorCode};
use snowflake_core::{resume, utc};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

/// The recorded ceiling as a time part (0 on a server that never issued an ID), where every
/// shard resumes. Read by the postmaster when it creates shared memory; the decision is
/// `resume::at_start`'s: an unreadable record stops the server, since guessing could repeat IDs;
/// under pg_upgrade the record is raised first (the upgrade guard, written here); a record
/// pg_upgrade's starts marked as an estimate stops the first real start (`refuse_unconfirmed`).
pub fn recorded_ceiling() -> u64 {
    let record = record::read_noted().map(|noted| {
        noted.map(|noted| resume::RecordRead {
            ceiling_unix_ms: noted.record.ceiling_unix_ms,
            lead: noted.record.lead,
            unconfirmed: noted.unconfirmed,
        })
    });
    let facts = resume::StartFacts {
        record,
        binary_upgrade: compat::in_binary_upgrade(),
        now_unix_ms: clock::wall_clock_unix_ms(),
    };
    let (ceiling, lead_kept) = match resume::at_start(&facts, resume_settings(), &fixed_layout::get()) {
        resume::StartPlan::Refuse(resume::StartRefusal::Unreadable(reason)) => corrupt_record(&reason),
        resume::StartPlan::Refuse(resume::StartRefusal::Unconfirmed { estimate_unix_ms }) => {
            refuse_unconfirmed(estimate_unix_ms)
        }
        resume::StartPlan::Resume { ceiling, write, lead_kept, reason } => {
            if let Some(write) = write {
                record_upgrade_guard(write);
            }
            if let resume::StartReason::UpgradeGuard { bound_ms, ceiling_unix_ms, new_cluster } = reason {
                log_upgrade_guard(bound_ms, ceiling_unix_ms, new_cluster);
            }
            (ceiling, lead_kept)
        }
    };
    RECORDED_AT_START.store(ceiling, Relaxed);
    *RECORDED_LEAD_AT_START.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = lead_kept;
    ceiling
}

/// The ceiling the file held when the postmaster last created shared memory, inherited by
/// the startup process: crash recovery never resumes below it (see `resume::replay`).
static RECORDED_AT_START: AtomicU64 = AtomicU64::new(0);

/// The lead settings the file kept with that ceiling (`record::Record::lead`), inherited by
/// the worker: on a standby restarted since the last ceiling it replayed, the lead its primary
/// ran with (`resume::PromotionFacts::primary_lead`); on a primary, a lead it kept (`worker`'s start).
static RECORDED_LEAD_AT_START: Mutex<Option<LeadSettings>> = Mutex::new(None);

/// Every start under pg_upgrade (`postgres -b`), of the new cluster or the old one, and
/// `pg_upgrade --check`'s too, records the upgrade guard `resume::at_start` decided: pg_upgrade
/// carries the tables, not this file, and the old server may have issued IDs up to its
/// ceiling, at most `max_lead_ms + reserve_ms` ahead of its clock. A clock that ran fast and
/// was set back before the upgrade breaks that estimate, and nothing pg_upgrade hands the new
/// server (its command line, environment or catalogs) says where the old data directory and
/// its exact record are: so on a new cluster the guard is written marked unconfirmed, and its
/// first real start refuses to issue on it until the operator copies the old server's file over
/// it (the documented step, exact) or deletes the mark. The old cluster's own record is raised
/// but never marked: it stays usable if the upgrade is abandoned.
fn record_upgrade_guard(write: resume::RecordToWrite) {
    let record =
        Record { ceiling_unix_ms: write.ceiling_unix_ms, wal128: legacy_wal::may_remain(), lead: write.lead };
    let written = if write.unconfirmed { record::write_unconfirmed(record) } else { record::write(record) };
    if let Err(error) = written {
        durable_file::not_recorded("the snowflake_id reservation", FILE, " during a binary upgrade", error);
    }
}

fn log_upgrade_guard(bound_ms: u64, ceiling_unix_ms: i64, new_cluster: bool) {
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
