//! The durable reservation: how far this server may issue IDs, kept on disk ahead of use.
//!
//! Shared memory is lost on any restart, so the generator may hand out a time part only
//! below a ceiling that is already durable (see `generator.rs`). A background worker keeps
//! the ceiling `snowflake_id.reserve_ms` ahead of the clock (further while recording is slow,
//! see `generator::next_ceiling`); each time it moves it, it
//!
//! 1. writes a WAL record carrying the ceiling (PostgreSQL 15+, through a custom WAL resource
//!    manager), without waiting for its flush: a streaming standby replays it, so once
//!    promoted it resumes above anything the old primary issued in rows the standby has
//!    received. Those rows' WAL follows the record, and their commits flush it;
//! 2. writes the ceiling to `snowflake_id.reservation` in the data directory, over the old
//!    one in place, and fdatasyncs it (see `durable_file::overwrite`), so a crash leaves the
//!    old or the new ceiling, never a torn one. This is what makes the ceiling durable on
//!    this server: crash recovery replays only the WAL after the last checkpoint, and may
//!    miss the newest records, which were not flushed;
//! 3. only then publishes the new ceiling in shared memory.
//!
//! So a new ceiling costs one fsync. On every start (and after a backend crash, when the
//! postmaster re-creates shared memory) all shards resume at the recorded ceiling. The hot
//! path never touches the disk: about four reservations a second are done by the worker
//! alone, or sooner when a call borrowing time asks for more (it sets `wanted` and the
//! worker's latch).
//!
//! One subsystem with `shmem.rs` (see `postgres/mod.rs`): the postmaster reads the record
//! here when it creates shared memory, and the worker publishes new ceilings there.

use super::reservation_record::{self, Record, FILE, PREFIX};
use super::{clock, compat, settings, shared_fence, shmem};
use pgrx::bgworkers::{BackgroundWorker, BackgroundWorkerBuilder, BgWorkerStartTime, SignalWakeFlags};
use pgrx::pg_sys::{self, panic::ErrorReport};
use pgrx::{PgLogLevel, PgSqlErrorCode};
use snowflake_core::generator::{self, Reservation, ReservationKeeper};
use snowflake_core::utc;
use std::sync::atomic::{
    AtomicBool, AtomicU64,
    Ordering::{Acquire, Relaxed, Release},
};
use std::time::{Duration, Instant};

/// How often the worker looks at the clock.
const TICK: Duration = Duration::from_millis(50);

/// Records a ceiling so that it survives a crash at any moment.
fn write_durably(ceiling_unix_ms: i64) -> std::io::Result<()> {
    reservation_record::write(Record { ceiling_unix_ms, wal128: legacy_wal::may_remain() })
}

/// The recorded ceiling as a time part (0 on a server that never issued an ID). Read by
/// the postmaster when it creates shared memory; an unreadable record stops the server,
/// since guessing could repeat IDs. Under pg_upgrade, raised first (`record_upgrade_guard`).
pub fn recorded_ceiling() -> u64 {
    let recorded = reservation_record::read().unwrap_or_else(|reason| corrupt_record(&reason));
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
/// the startup process: crash recovery never resumes below it (see `replay_ceiling`).
static RECORDED_AT_START: AtomicU64 = AtomicU64::new(0);

/// Every start under pg_upgrade (`postgres -b`), of the new cluster or the old one, and
/// `pg_upgrade --check`'s too: pg_upgrade carries the tables, not this file, and the old
/// server may have issued IDs up to its ceiling, at most `max_lead_ms + reserve_ms` ahead of
/// its clock when it stopped, which was before now. So the record is raised to that far
/// ahead of now (never lowered), and the first real start resumes above anything the old
/// server could have issued, as long as it ran with lead settings no larger than these.
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
        "snowflake_id: binary upgrade: recorded a ceiling of {} ({bound_ms} ms ahead of the clock), above \
         what the old server could have issued with the same lead settings",
        utc::format_utc_ms(guard_unix_ms)
    );
    time_part_of_ceiling(guard_unix_ms)
}

/// How far ahead of its own clock a server with this server's lead settings can have issued
/// IDs (`generator::max_ceiling_lead_ms`). Both guards resume this far ahead.
fn old_server_lead_bound_ms() -> u64 {
    generator::max_ceiling_lead_ms(settings::reserve_ms(), settings::clock_policy().max_lead_ms)
}

/// The end of recovery on a standby (promotion) or after archive recovery, once per
/// recovery: the reservation worker runs it when it first starts after the recovery (see
/// `shmem::StartState`), not when it is restarted later. The WAL this server replayed may
/// stop short of what the old primary wrote: with asynchronous replication it never
/// received the latest records, ceilings included, nor the rows with the IDs issued under
/// them. The old primary issued at most `max_lead_ms + reserve_ms` ahead of its clock, and
/// that clock, when it stopped, read at most `max_clock_skew_ms` more than this server's
/// does now. So the shards resume that far ahead of this clock: above every ID the old
/// primary could have issued, as long as it ran with lead settings no larger than these and
/// the clocks agree within the skew. The first calls wait (within `max_wait_ms`) until the
/// clock is within `max_lead_ms` of the resumed position, at most `reserve_ms + max_clock_skew_ms`.
///
/// Or at the floor replayed from the old primary's WAL, when that is higher (the old primary
/// ran with a longer lead). Either way it is recorded before anything is issued: replay
/// writes the file at most once a second, so the floor may not be in it yet, and a clean
/// restart (no signal file, no WAL to replay) resumes at the file.
fn record_promotion_guard(reservation: &Reservation) {
    let layout = settings::layout();
    let bound_ms = old_server_lead_bound_ms() + settings::max_clock_skew_ms();
    let guard = time_part_of_ceiling(clock::wall_clock_unix_ms().saturating_add(bound_ms as i64));
    let ceiling = guard.max(reservation.floor.load(Relaxed));
    let ceiling_unix_ms = layout.unix_ms(ceiling);
    wal::log_ceiling(ceiling_unix_ms);
    if let Err(error) = write_durably(ceiling_unix_ms) {
        // Without the record the shards cannot resume above it after a crash: issue nothing.
        pgrx::error!("could not record the snowflake_id reservation in \"{FILE}\" after recovery: {error}");
    }
    reservation.resume_at(ceiling);
    if ceiling == guard {
        pgrx::log!(
            "snowflake_id: recovery ended; shards resume at {} ({bound_ms} ms ahead of the clock), above \
             anything the old primary could have issued, including WAL this server never received, if the \
             clocks agree within snowflake_id.max_clock_skew_ms",
            utc::format_utc_ms(ceiling_unix_ms)
        );
    } else {
        pgrx::log!(
            "snowflake_id: recovery ended; shards resume at {}, the reservation replayed from the old \
             primary's WAL (further ahead than {bound_ms} ms)",
            utc::format_utc_ms(ceiling_unix_ms)
        );
    }
}

/// A recorded ceiling (Unix ms) as a time part: before the epoch it restricts nothing,
/// past the range of the time bits it means the IDs ran out.
fn time_part_of_ceiling(unix_ms: i64) -> u64 {
    let layout = settings::layout();
    match layout.time_part(unix_ms) {
        Ok(time_part) => time_part,
        Err(_) if unix_ms < layout.epoch_unix_ms() => 0,
        Err(_) => layout.max_time_part() + 1,
    }
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

/// Registers the worker; called from `_PG_init` while preloading. Not under pg_upgrade: the
/// worker would record a reservation of its own (and WAL) in a cluster that issues nothing.
pub fn register_worker() {
    if compat::in_binary_upgrade() {
        return;
    }
    BackgroundWorkerBuilder::new("snowflake_id reservation")
        .set_type("snowflake_id reservation")
        .set_library("snowflake_id")
        .set_function("snowflake_id_reservation_worker")
        .enable_shmem_access(None)
        // A standby issues nothing; on promotion the worker starts from the replayed ceiling.
        .set_start_time(BgWorkerStartTime::RecoveryFinished)
        .set_restart_time(Some(Duration::from_secs(1)))
        .load();
}

/// The worker's main loop: renew the reservation whenever it gets too close.
#[pgrx::pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn snowflake_id_reservation_worker(_argument: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    let reservation = shmem::reservation().expect("the worker runs only when preloaded");
    // SAFETY: MyLatch is this process's latch in shared memory, valid while it runs.
    // Release: a caller that loads the address (with Acquire) sees the latch as set up.
    reservation.worker.store(unsafe { pg_sys::MyLatch } as usize, Release);
    // Once per recovery: cleared only once the guard is recorded, so a worker that failed
    // to record it runs it again when restarted, and one restarted later does not.
    let start = shmem::start_state().expect("the worker runs only when preloaded");
    if start.promotion_guard_pending.load(Acquire) {
        record_promotion_guard(reservation);
        start.promotion_guard_pending.store(false, Release);
    }
    legacy_wal::worker_started();
    let layout = settings::layout();
    pgrx::log!(
        "snowflake_id reservation worker started: shards resume at {}",
        utc::format_utc_ms(layout.unix_ms(reservation.floor.load(Relaxed)))
    );
    shared_fence::apply_setting(true);
    let mut failing = false;
    loop {
        if BackgroundWorker::sighup_received() {
            // SAFETY: the documented way for a worker to apply a reload.
            unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
            shared_fence::apply_setting(false);
        }
        legacy_wal::look_at_checkpoints();
        match renew(reservation) {
            Ok(()) if failing => {
                pgrx::log!("snowflake_id reservation is being recorded again");
                failing = false;
            }
            Ok(()) => {}
            Err(error) if !failing => {
                pgrx::warning!(
                    "could not record the snowflake_id reservation in \"{FILE}\": {error}; IDs will stop once \
                     the current reservation is used up"
                );
                failing = true;
            }
            Err(_) => {}
        }
        if !BackgroundWorker::wait_latch(Some(TICK)) {
            break;
        }
    }
    reservation.worker.store(0, Release);
    // Exit code 1, so that the postmaster restarts the worker if it was terminated while the
    // server goes on (at shutdown it is not restarted anyway); without it no ID can be issued.
    // SAFETY: the standard way for a worker to exit.
    unsafe { pg_sys::proc_exit(1) }
}

/// The worker, as the generator's keeper of the reservation: a call that wants more
/// reserved sets the worker's latch, and the worker records it within a few milliseconds.
pub struct Worker;

impl ReservationKeeper for Worker {
    fn extend_soon(&mut self, reservation: &Reservation, _now: u64) {
        let latch = reservation.worker.load(Acquire) as *mut pg_sys::Latch;
        if !latch.is_null() {
            // SAFETY: the worker's latch lives in shared memory for the server's lifetime; a
            // stale one (worker restarted) only causes a harmless spurious wake-up.
            unsafe { pg_sys::SetLatch(latch) };
        }
    }
}

/// One look at the clock: records and publishes a new ceiling when the current one is too close.
fn renew(reservation: &Reservation) -> std::io::Result<()> {
    let layout = settings::layout();
    // A clock outside the ID range makes every call refuse anyway; nothing to reserve.
    let Ok(now) = layout.time_part(clock::wall_clock_unix_ms()) else { return Ok(()) };
    let max_lead_ms = settings::clock_policy().max_lead_ms;
    if let Some(lower) = generator::lower_ceiling(
        now,
        reservation,
        shmem::shards(),
        &layout,
        settings::reserve_ms(),
        max_lead_ms,
    ) {
        // Already published: until it is recorded, the higher record on disk still holds.
        let lower_unix_ms = layout.unix_ms(lower);
        wal::log_ceiling(lower_unix_ms);
        write_durably(lower_unix_ms)?;
        pgrx::log!(
            "snowflake_id: the clock had jumped ahead and is back, and no ID was issued up there: the \
             reservation moves back to {}",
            utc::format_utc_ms(lower_unix_ms)
        );
        return Ok(());
    }
    let recording_ms = LAST_RECORDING_MS.load(Relaxed);
    let Some(ceiling) =
        generator::next_ceiling(now, reservation, &layout, settings::reserve_ms(), max_lead_ms, recording_ms)
    else {
        return Ok(());
    };
    let started = Instant::now();
    let ceiling_unix_ms = layout.unix_ms(ceiling);
    wal::log_ceiling(ceiling_unix_ms);
    write_durably(ceiling_unix_ms)?;
    reservation.publish_ceiling(ceiling);
    LAST_RECORDING_MS.store(started.elapsed().as_millis() as u64, Relaxed);
    Ok(())
}

/// How long the worker's last recording of a new ceiling took (ms): the next one is reserved
/// further ahead when the disk is slow (`generator::next_ceiling`).
static LAST_RECORDING_MS: AtomicU64 = AtomicU64::new(0);

/// Brings a ceiling read from a primary's WAL (or replayed in crash recovery) into this
/// server's shared memory, as both bounds: later records come later in WAL, so the last one
/// replayed holds, lower or higher (see `Reservation::replay`). With floor and ceiling equal,
/// nothing is issued until the worker has recorded a new ceiling, durably, above them.
///
/// In crash recovery, never below the ceiling the file held at the start: the worker records
/// each ceiling in the file right after its WAL record and before any ID uses it, without
/// waiting for the record's flush, so the newest records may be missing from the WAL while
/// the file has them. Above it, the last record replayed holds: on a server restored from a
/// base backup the file may be older than the WAL replayed after it.
///
/// The file is not rewritten and fsynced for every record (replay would wait for an fsync
/// per record; a standby catching up replays thousands):
/// * in crash recovery not at all: the file already holds what was issued under, and
///   rewriting it with the older records replayed first could only set it back;
/// * on a standby (or in archive recovery) at most once per `REPLAY_RECORD_INTERVAL`, so
///   that a restart of the standby, or a base backup taken from it, starts from a recent
///   ceiling; the rest, should the standby restart, is replayed again from WAL, and at
///   promotion `record_promotion_guard` covers what the standby never received.
fn replay_ceiling(ceiling_unix_ms: i64) {
    // Asked of PostgreSQL for this recovery, not taken from how the postmaster started: a
    // server that started as a standby and was promoted runs crash recovery after a later
    // backend crash, with the postmaster still the same.
    // SAFETY: a PostgreSQL global, set by the startup process before it replays anything.
    let in_crash_recovery = !unsafe { pg_sys::ArchiveRecoveryRequested };
    if let Some(reservation) = shmem::reservation() {
        let replayed = time_part_of_ceiling(ceiling_unix_ms);
        let floor = if in_crash_recovery { RECORDED_AT_START.load(Relaxed) } else { 0 };
        reservation.replay(replayed.max(floor));
    }
    if in_crash_recovery {
        return;
    }
    let now = std::time::Instant::now();
    let mut last = LAST_REPLAY_RECORD.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if last.is_some_and(|at| now.duration_since(at) < REPLAY_RECORD_INTERVAL) {
        return;
    }
    if let Err(error) = write_durably(ceiling_unix_ms) {
        pgrx::error!("could not record the snowflake_id reservation in \"{FILE}\" during replay: {error}");
    }
    *last = Some(now);
}

/// How often a standby records the ceilings it replays in its file.
const REPLAY_RECORD_INTERVAL: Duration = Duration::from_secs(1);
/// When the startup process last did (it alone replays WAL: the lock is never contended).
static LAST_REPLAY_RECORD: std::sync::Mutex<Option<std::time::Instant>> = std::sync::Mutex::new(None);

/// Whether WAL records under resource manager id 128 may still have to be replayed here:
/// versions up to 0.2.0 wrote their records under 128, PostgreSQL's id for extensions under
/// development, which other extensions may use too. So 128 is registered only while such
/// records may remain (`snowflake_id.legacy_wal_rmgr_id = -1`, the default): the record file
/// carries the flag (`Record::wal128`), set in every record written before 0.5.0, and
/// cleared once a checkpoint has completed after this server started with a version that
/// writes no record under 128 (crash recovery then starts after every such record). A fresh
/// cluster has no record and never registers 128.
///
/// Archives and standbys are not seen from here: a standby replaying a primary's old WAL
/// keeps the flag it read from its own file; an operator restoring old archives sets
/// `snowflake_id.legacy_wal_rmgr_id = 128` for that recovery.
mod legacy_wal {
    use super::*;

    /// The id versions up to 0.2.0 wrote under.
    pub const LEGACY_ID: u8 = 128;

    /// Whether the flag is set, in this process: the postmaster's reading of the file at
    /// start (inherited by every process), then the worker's own.
    static MAY_REMAIN: AtomicBool = AtomicBool::new(false);

    /// The flag as the record file holds it now, or this server writes records under 128
    /// itself. An unreadable file counts as set: start-up refuses it anyway.
    fn read_from_the_file() -> bool {
        let recorded = !matches!(reservation_record::read(), Ok(None | Some(Record { wal128: false, .. })));
        recorded || settings::wal_rmgr_id() == Some(LEGACY_ID)
    }

    /// Whether records under 128 may remain (in the postmaster, while preloading, before the
    /// resource managers are registered).
    pub fn at_start() -> bool {
        let may_remain = read_from_the_file();
        MAY_REMAIN.store(may_remain, Relaxed);
        may_remain
    }

    /// What the records this process writes say.
    pub fn may_remain() -> bool {
        MAY_REMAIN.load(Relaxed)
    }

    /// Where the WAL was when the worker started, and the redo point of the first checkpoint
    /// it saw starting after that (see `look_at_checkpoints`).
    static STARTED_AT: AtomicU64 = AtomicU64::new(0);
    static CHECKPOINT_SEEN: AtomicU64 = AtomicU64::new(0);

    /// The worker starts: it takes the flag from the file, which an earlier worker may have
    /// cleared since the postmaster read it.
    pub fn worker_started() {
        MAY_REMAIN.store(read_from_the_file(), Relaxed);
        // SAFETY: reads a WAL position in shared memory under PostgreSQL's own locking.
        STARTED_AT.store(unsafe { pg_sys::GetXLogInsertRecPtr() }, Relaxed);
    }

    /// Clears the flag once a checkpoint that started after the worker (and so after every
    /// record under 128) has completed: crash recovery starts at its redo point or later. A
    /// checkpoint is known complete when the next one starts (the checkpointer runs one at a
    /// time), so the redo point must be seen moving past the start twice.
    pub fn look_at_checkpoints() {
        if !MAY_REMAIN.load(Relaxed) || settings::wal_rmgr_id() == Some(LEGACY_ID) {
            return;
        }
        // SAFETY: as in `worker_started`.
        let redo = unsafe { pg_sys::GetRedoRecPtr() };
        let seen = CHECKPOINT_SEEN.load(Relaxed);
        if seen == 0 && redo > STARTED_AT.load(Relaxed) {
            CHECKPOINT_SEEN.store(redo, Relaxed);
        } else if seen != 0 && redo > seen {
            MAY_REMAIN.store(false, Relaxed);
            pgrx::log!(
                "snowflake_id: no WAL record of versions up to 0.2.0 is left to replay; the next start \
                 registers no resource manager under id {LEGACY_ID}"
            );
        }
    }
}

/// The custom WAL resource manager (custom resource managers exist since PostgreSQL 15).
mod wal {
    use super::*;
    use std::ffi::{c_char, CStr};

    /// The only record type: "the ceiling is now this Unix ms" (8 bytes, native order).
    const XLOG_CEILING: u8 = 0x10;

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

    pub fn log_ceiling(ceiling_unix_ms: i64) {
        let Some(id) = settings::wal_rmgr_id() else { return };
        let mut data = ceiling_unix_ms.to_ne_bytes();
        // SAFETY: the standard sequence for a WAL record without buffers, from a process
        // with WAL access (the worker starts after recovery); `data` outlives the insert.
        unsafe {
            pg_sys::XLogBeginInsert();
            // Not "activity": an idle server still skips checkpoints and segment switches.
            pg_sys::XLogSetRecordFlags(pg_sys::XLOG_MARK_UNIMPORTANT as u8);
            crate::postgres::compat::xlog_register_data(&mut data);
            let lsn = pg_sys::XLogInsert(id, XLOG_CEILING);
            // Flushed by the WAL writer shortly, as an asynchronous commit is: the worker
            // waits for no WAL fsync (see the top of this file).
            pg_sys::XLogSetAsyncXactLSN(lsn);
        }
    }

    /// The ceiling carried by one of our records.
    unsafe fn ceiling_of(record: *mut pg_sys::XLogReaderState) -> Option<i64> {
        // SAFETY: PostgreSQL passes a decoded record; its main data is main_data_len bytes,
        // and is read only when it has the size of ours (it may be NULL otherwise).
        unsafe {
            let decoded = (*record).record;
            if (*decoded).main_data_len as usize != size_of::<i64>() || (*decoded).main_data.is_null() {
                return None;
            }
            Some((*decoded).main_data.cast::<i64>().read_unaligned())
        }
    }

    #[pgrx::pg_guard]
    unsafe extern "C-unwind" fn redo(record: *mut pg_sys::XLogReaderState) {
        // SAFETY: called by PostgreSQL with a record of ours.
        match unsafe { ceiling_of(record) } {
            Some(ceiling_unix_ms) => replay_ceiling(ceiling_unix_ms),
            None => pgrx::error!("snowflake_id WAL record of unexpected size"),
        }
    }

    #[pgrx::pg_guard]
    unsafe extern "C-unwind" fn describe(buffer: pg_sys::StringInfo, record: *mut pg_sys::XLogReaderState) {
        // SAFETY: as in `redo`; appendStringInfoString copies the text into the buffer.
        unsafe {
            let text = match ceiling_of(record) {
                Some(ms) => format!("ceiling {ms} ({})", utc::format_utc_ms(ms)),
                None => "malformed".to_string(),
            };
            let text = std::ffi::CString::new(text).unwrap_or_default();
            pg_sys::appendStringInfoString(buffer, text.as_ptr());
        }
    }

    #[pgrx::pg_guard]
    unsafe extern "C-unwind" fn identify(info: u8) -> *const c_char {
        const CEILING: &CStr = c"CEILING";
        if info & !(pg_sys::XLR_INFO_MASK as u8) == XLOG_CEILING {
            CEILING.as_ptr()
        } else {
            std::ptr::null()
        }
    }
}

pub use wal::register as register_wal;
