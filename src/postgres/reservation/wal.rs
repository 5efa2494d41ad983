//! The custom WAL resource manager (custom resource managers exist since PostgreSQL 15): the
//! worker writes each new ceiling as a record, and every server replaying this WAL (a
//! standby, crash or archive recovery) brings it into its shared memory (`replay_ceiling`).

use super::record::FILE;
use super::{legacy_wal, restore, resume_settings, write_durably, LeadSettings};
use crate::postgres::{clock, compat, durable_file, fixed_layout, settings, shmem};
use pgrx::pg_sys;
use pgrx::pg_sys::panic::ErrorReport;
use pgrx::{PgLogLevel, PgSqlErrorCode};
use snowflake_core::{lease, resume, utc};
use std::ffi::{c_char, CStr};
use std::sync::atomic::Ordering::{Relaxed, Release};

/// "The ceiling is now this Unix ms" (8 bytes, native order), written by versions 0.3.0 to
/// 0.7.1 and still replayed.
const XLOG_CEILING: u8 = 0x10;
/// The same with the lead settings it was reserved under (`CeilingWithLead`), written since
/// 0.8.0: a promoted standby's bound then covers a primary that ran with larger ones. A standby
/// of an earlier version stops at the first one (a record of unexpected size): standbys are
/// updated first, as for PostgreSQL's own minor releases.
const XLOG_CEILING_WITH_LEAD: u8 = 0x20;

/// The record's main data since 0.8.0, in native order (WAL is replayed only on the same
/// platform). The settings are GUC integers, within `u32`.
#[repr(C)]
#[derive(Clone, Copy)]
struct CeilingWithLead {
    ceiling_unix_ms: i64,
    max_lead_ms: u32,
    reserve_ms: u32,
}

/// What one of our records says: the ceiling, and the lead settings when it carries them.
#[derive(Clone, Copy)]
struct Replayed {
    ceiling_unix_ms: i64,
    lead: Option<LeadSettings>,
}

/// Lead settings in one word of shared memory (`shmem::StartState::last_replayed_lead`): a
/// mark bit, then each setting in 31 bits (GUC integers are at most `i32::MAX`); 0 is none.
pub struct PackedLead;

impl PackedLead {
    const MARK: u64 = 1 << 63;

    pub fn pack(lead: LeadSettings) -> u64 {
        Self::MARK | (lead.max_lead_ms.min(i32::MAX as u64) << 31) | lead.reserve_ms.min(i32::MAX as u64)
    }

    pub fn unpack(word: u64) -> Option<LeadSettings> {
        let lead =
            LeadSettings { max_lead_ms: (word >> 31) & i32::MAX as u64, reserve_ms: word & i32::MAX as u64 };
        (word & Self::MARK != 0).then_some(lead)
    }
}

/// Registers the resource manager. Replaying our records needs it, so the library must
/// stay preloaded on every server that replays this WAL.
pub fn register() {
    let rmgr = pg_sys::RmgrData {
        rm_name: c"snowflake_id".as_ptr(),
        rm_redo: Some(redo),
        rm_desc: Some(describe),
        rm_identify: Some(identify),
        ..Default::default()
    };
    if let Some(id) = settings::wal_rmgr_id() {
        // SAFETY: called from _PG_init while preloading; PostgreSQL copies the struct.
        unsafe { pg_sys::RegisterCustomRmgr(id, &rmgr as *const _ as *mut _) };
    }
    // Records of earlier versions, written under another id, replay the same way (also
    // with the records turned off now). The name must differ: PostgreSQL refuses two
    // resource managers of one name.
    let may_remain = legacy_wal::at_start();
    let legacy = match settings::legacy_wal_rmgr_id() {
        settings::LegacyRmgr::Auto => may_remain.then_some(legacy_wal::LEGACY_ID),
        settings::LegacyRmgr::Id(id) => Some(id),
        settings::LegacyRmgr::None => None,
    };
    // Not twice under one id: the records written now replay under the first.
    if let Some(legacy) = legacy.filter(|&id| Some(id) != settings::wal_rmgr_id()) {
        let replay_only = pg_sys::RmgrData { rm_name: c"snowflake_id_0.2".as_ptr(), ..rmgr };
        // SAFETY: as above.
        unsafe { pg_sys::RegisterCustomRmgr(legacy, &replay_only as *const _ as *mut _) };
    }
}

/// Writes a ceiling's record, with the lead settings it was reserved under.
pub fn log_ceiling(ceiling_unix_ms: i64, lead: LeadSettings) {
    let Some(id) = settings::wal_rmgr_id() else { return };
    let record = CeilingWithLead {
        ceiling_unix_ms,
        max_lead_ms: lead.max_lead_ms.min(u32::MAX as u64) as u32,
        reserve_ms: lead.reserve_ms.min(u32::MAX as u64) as u32,
    };
    // SAFETY: `CeilingWithLead` is plain integers with no padding (8 + 4 + 4 bytes).
    let mut data: [u8; size_of::<CeilingWithLead>()] = unsafe { std::mem::transmute(record) };
    // SAFETY: the standard sequence for a WAL record without buffers, from a process
    // with WAL access (the worker starts after recovery); `data` outlives the insert.
    unsafe {
        pg_sys::XLogBeginInsert();
        // Not "activity": an idle server still skips checkpoints and segment switches.
        pg_sys::XLogSetRecordFlags(pg_sys::XLOG_MARK_UNIMPORTANT as u8);
        compat::xlog_register_data(&mut data);
        let lsn = pg_sys::XLogInsert(id, XLOG_CEILING_WITH_LEAD);
        // Flushed by the WAL writer shortly, as an asynchronous commit is: the worker
        // waits for no WAL fsync (see the top of this file).
        pg_sys::XLogSetAsyncXactLSN(lsn);
    }
}

/// What one of our records says, read by its type and checked by its size.
unsafe fn read_record(record: *mut pg_sys::XLogReaderState) -> Option<Replayed> {
    // SAFETY: PostgreSQL passes a decoded record; its main data is main_data_len bytes,
    // and is read only when it has the size of its type (it may be NULL otherwise).
    unsafe {
        let decoded = (*record).record;
        let info = (*decoded).header.xl_info & !(pg_sys::XLR_INFO_MASK as u8);
        let data = (*decoded).main_data;
        let size = (*decoded).main_data_len as usize;
        if data.is_null() {
            return None;
        }
        match info {
            XLOG_CEILING if size == size_of::<i64>() => {
                Some(Replayed { ceiling_unix_ms: data.cast::<i64>().read_unaligned(), lead: None })
            }
            XLOG_CEILING_WITH_LEAD if size == size_of::<CeilingWithLead>() => {
                let CeilingWithLead { ceiling_unix_ms, max_lead_ms, reserve_ms } =
                    data.cast::<CeilingWithLead>().read_unaligned();
                let lead = LeadSettings { max_lead_ms: max_lead_ms.into(), reserve_ms: reserve_ms.into() };
                Some(Replayed { ceiling_unix_ms, lead: Some(lead) })
            }
            _ => None,
        }
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn redo(record: *mut pg_sys::XLogReaderState) {
    // SAFETY: called by PostgreSQL with a record of ours.
    match unsafe { read_record(record) } {
        // SAFETY: the record is being replayed: its end is set.
        Some(replayed) => replay_ceiling(replayed, unsafe { (*record).EndRecPtr }),
        None => {
            ErrorReport::new(
                PgSqlErrorCode::ERRCODE_DATA_CORRUPTED,
                "snowflake_id WAL record of unexpected type or size",
                "snowflake_id",
            )
            .set_hint(
                "The WAL is damaged, or was written under this resource manager id by another extension.",
            )
            .report(PgLogLevel::ERROR);
            unreachable!("an ERROR report returns control to PostgreSQL")
        }
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn describe(buffer: pg_sys::StringInfo, record: *mut pg_sys::XLogReaderState) {
    // SAFETY: as in `redo`; appendStringInfoString copies the text into the buffer.
    unsafe {
        let text = match read_record(record) {
            Some(Replayed { ceiling_unix_ms: ms, lead: None }) => {
                format!("ceiling {ms} ({})", utc::format_utc_ms(ms))
            }
            Some(Replayed { ceiling_unix_ms: ms, lead: Some(lead) }) => format!(
                "ceiling {ms} ({}) max_lead_ms {} reserve_ms {}",
                utc::format_utc_ms(ms),
                lead.max_lead_ms,
                lead.reserve_ms
            ),
            None => "malformed".to_string(),
        };
        let text = std::ffi::CString::new(text).unwrap_or_default();
        pg_sys::appendStringInfoString(buffer, text.as_ptr());
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn identify(info: u8) -> *const c_char {
    const CEILING: &CStr = c"CEILING";
    const CEILING_WITH_LEAD: &CStr = c"CEILING_WITH_LEAD";
    match info & !(pg_sys::XLR_INFO_MASK as u8) {
        XLOG_CEILING => CEILING.as_ptr(),
        XLOG_CEILING_WITH_LEAD => CEILING_WITH_LEAD.as_ptr(),
        _ => std::ptr::null(),
    }
}

/// Brings a ceiling read from a primary's WAL (or replayed in crash recovery) into this
/// server's shared memory, as both bounds: later records come later in WAL, so the last one
/// replayed holds, lower or higher (see `Reservation::replay`). With floor and ceiling equal,
/// nothing is issued until the worker has recorded a new ceiling, durably, above them. Where
/// the bounds go and what the file gets is `resume::replay`'s decision; the PostgreSQL reasons
/// behind it follow.
///
/// In crash recovery, never below the ceiling the file held at the start: the worker makes each
/// ceiling durable in the file before any ID uses it (before its WAL record, but at its start),
/// without waiting for the record's flush, so the newest records may be missing from the WAL while
/// the file has them. Above it, the last record replayed holds: on a server restored from a base
/// backup the file may be older than the WAL replayed after it.
///
/// The file:
/// * in crash recovery, left alone: it already holds what was issued under, and rewriting
///   it with the older records replayed first could only set it back;
/// * on a standby (or in archive recovery), rewritten durably with every ceiling replayed
///   (raised to the guard of the highest clock reading, `resume::replay`), and the lead
///   settings the record carries when they exceed this server's own, before the next record
///   is. Shared memory does not survive a restart of the standby, nor the postmaster
///   re-creating it after a backend crash, and recovery then starts again at the last
///   restartpoint: once its redo point has moved past a record, the file is the only place
///   left that knows the ceiling (the old primary may have run with a longer lead than this
///   server's promotion guard covers, or issued while its clock ran ahead), and the lead
///   settings the promotion must keep issuing under (without them every call would be refused
///   until the clock caught up with a ceiling reserved under a longer lead). Restartpoints
///   offer an extension no hook, but one can only follow the replay of a checkpoint record
///   that comes after the ceiling's, so a file written as the ceiling is replayed is always
///   in time; and promotion replays every record first. After a restart, records already
///   in the file are replayed again and written over a newer ceiling: harmless, since every
///   record after them is still ahead of the redo point and is replayed (and written) again
///   before a restartpoint can pass it. The cost is the primary's own: its
///   worker fdatasyncs the file once per record it writes (about four a second), and the
///   standby once per record it replays.
fn replay_ceiling(replayed: Replayed, record_end: pg_sys::XLogRecPtr) {
    let Replayed { ceiling_unix_ms, lead } = replayed;
    // Asked of PostgreSQL for this recovery, not taken from how the postmaster started: a
    // server that started as a standby and was promoted runs crash recovery after a later
    // backend crash, with the postmaster still the same.
    // SAFETY: a PostgreSQL global, set by the startup process before it replays anything.
    let recovery = match unsafe { pg_sys::ArchiveRecoveryRequested } {
        false => resume::Recovery::Crash,
        true => resume::Recovery::Archive,
    };
    match (recovery, shmem::start_state()) {
        (resume::Recovery::Archive, Some(start)) => {
            // Where the old primary stopped, should this be the last ceiling before its clean
            // stop (`switchover`): the ceiling as written, then where its record ends.
            // And the lead settings the primary wrote with it, for the promotion bound.
            start.last_replayed_ceiling_unix_ms.store(ceiling_unix_ms, Relaxed);
            start.last_replayed_lead.store(lead.map_or(0, PackedLead::pack), Relaxed);
            start.last_replayed_ceiling_end.store(record_end, Release);
        }
        (resume::Recovery::Crash, Some(start)) => {
            // The lead this server last logged, for the lead its restart keeps (F10). Read by
            // the worker, which starts only once recovery has ended.
            if let Some(lead) = lead {
                start.crash_replayed_lead.store(PackedLead::pack(lead), Relaxed);
            }
        }
        (_, None) => {}
    }
    let facts = resume::ReplayFacts {
        ceiling_unix_ms,
        lead,
        recovery,
        recorded_at_start: restore::recorded_at_start(),
        now_unix_ms: clock::wall_clock_unix_ms(),
        record_end,
        received: received_wal(record_end),
        boot_ms: lease::boot_clock_ms(),
    };
    let plan = STANDBY_READINGS.with_borrow_mut(|readings| {
        resume::replay(&facts, readings, resume_settings(), &fixed_layout::get())
    });
    if let Some(reservation) = shmem::reservation() {
        reservation.replay(plan.bounds);
    }
    // With the primary's lead settings when they exceed this server's: its promotion after a
    // restart, which may replay no ceiling, finds them there (`resume::PromotionFacts::primary_lead`).
    if let Some(write) = plan.write {
        if let Err(error) = write_durably(write.ceiling_unix_ms, write.lead) {
            durable_file::not_recorded("the snowflake_id reservation", FILE, " during replay", error);
        }
        // In crash recovery, the file is this record now: the restart keeps its lead (F12).
        if let (resume::Recovery::Crash, Some(start)) = (recovery, shmem::start_state()) {
            start.crash_written_lead.store(write.lead.map_or(0, PackedLead::pack), Relaxed);
            start.crash_wrote_file.store(true, Release);
        }
    }
}

/// How much WAL this standby had received when it replays a record ending at `record_end`:
/// its WAL receiver's flushed position, once it streams (`resume::ReplayFacts::received`).
/// Before, as a restarted standby replays what it had received, the receiver's position is
/// none, or where it will start streaming (a segment's start, below WAL already here): not
/// known, which keeps a clock reading taken then against every lowering.
fn received_wal(record_end: pg_sys::XLogRecPtr) -> u64 {
    // SAFETY: reads the WAL receiver's shared state under its spinlock; the startup process
    // may call it at any time (PostgreSQL's own recovery code does).
    let flushed = unsafe { pg_sys::GetWalRcvFlushRecPtr(std::ptr::null_mut(), std::ptr::null_mut()) };
    if flushed >= record_end {
        flushed
    } else {
        u64::MAX
    }
}

thread_local! {
    /// What a standby's replay remembers from one ceiling's record to the next
    /// (`resume::StandbyReadings`): only the startup process replays, one record at a time. A
    /// new startup process (the standby restarted, or reset after a crash) starts from its
    /// file, which holds what the one before it kept.
    static STANDBY_READINGS: std::cell::RefCell<resume::StandbyReadings> = Default::default();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lead_settings_survive_packing_and_none_stays_none() {
        assert_eq!(PackedLead::unpack(0), None);
        for (max_lead_ms, reserve_ms) in
            [(0, 0), (2_000, 250), (60_000, 1), (i32::MAX as u64, i32::MAX as u64)]
        {
            let lead = LeadSettings { max_lead_ms, reserve_ms };
            assert_ne!(PackedLead::pack(lead), 0);
            assert_eq!(PackedLead::unpack(PackedLead::pack(lead)), Some(lead));
        }
    }
}
