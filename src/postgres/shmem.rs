//! The generator state in PostgreSQL shared memory, shared by all backends of the server:
//! the durable reservation, what the postmaster found at start, then one slot (`ShardSlot`)
//! per shard of the layout.
//!
//! Allocated only while the library is preloaded (`shared_preload_libraries`): shared
//! memory can only be requested then. Without it `attached()` is false and every SQL
//! function raises an error naming the fix; there is deliberately no per-backend fallback,
//! which is how other in-database generators end up issuing duplicates.
//!
//! Creating the state restores the recorded reservation into it (`reservation::restore`,
//! after the layout's check); the reservation's worker and WAL replay, which run on it, import
//! this module and never the other way round.

use super::reservation::{promotion_pending, restore};
use super::{fence, fixed_layout, horizon, registry};
use pgrx::pg_sys;
use snowflake_core::generator::{Reservation, ShardSlot};
use std::sync::atomic::{
    AtomicBool, AtomicI64, AtomicU64,
    Ordering::{Relaxed, Release},
};

const SHMEM_NAME: &std::ffi::CStr = c"snowflake_id generator state";

/// The reservation, set in every process by the startup hook (inherited by forked
/// backends). Null while the library is not preloaded.
static mut RESERVATION: *const Reservation = std::ptr::null();
/// What the postmaster found when it created the state, after the reservation.
static mut START_STATE: *const StartState = std::ptr::null();
/// The shard slots that follow it, `2^shard_bits` of them, fixed at server start.
static mut SLOTS: *const ShardSlot = std::ptr::null();
static mut SLOT_COUNT: usize = 0;

static mut PREV_SHMEM_REQUEST_HOOK: pg_sys::shmem_request_hook_type = None;
static mut PREV_SHMEM_STARTUP_HOOK: pg_sys::shmem_startup_hook_type = None;

/// What the postmaster found when it created shared memory, for the reservation worker.
/// On its own cache line, so that the shard slots after it stay aligned.
#[repr(C, align(64))]
pub struct StartState {
    /// A promotion guard is owed (`reservation::promotion_pending`): the server was in
    /// recovery (a standby, or archive recovery) when shared memory was created, or an earlier
    /// start in recovery never recorded its guard (a crash at the end of the recovery, before
    /// the worker ran). The worker's first start after the recovery ends records the guard
    /// (`reservation::worker::record_promotion_guard`), settles the debt on disk, then clears
    /// this, so that a worker restarted later does not run it again.
    pub promotion_guard_pending: AtomicBool,
    /// On a standby, the last ceiling record replayed since shared memory was made: its ceiling
    /// as the old primary wrote it (Unix ms; not raised to any bound), and where the record ends
    /// in WAL (0: none). Written by the startup process as it replays (the ceiling first, then
    /// the end, Release), read by the worker at the promotion (the end, Acquire, then the
    /// ceiling), for a clean switchover (`reservation::switchover`).
    pub last_replayed_ceiling_unix_ms: AtomicI64,
    pub last_replayed_ceiling_end: AtomicU64,
    /// On a standby, the lead settings of the last ceiling record replayed, as the primary wrote
    /// them (`reservation::wal::PackedLead`; 0: none, or records of versions before 0.8.0 that
    /// carry none). Written by the startup process before the record's end above, read by the
    /// worker at the promotion after it, for the promotion bound and the lead it keeps. Lost
    /// with shared memory: the replay also writes them into the record file when they exceed
    /// this server's own (`reservation::record`), where a promotion that replayed no ceiling
    /// since the standby restarted finds them (`resume::PromotionFacts::primary_lead`).
    pub last_replayed_lead: AtomicU64,
    /// In crash recovery, the lead settings of the last ceiling record replayed that carried
    /// them (`reservation::wal::PackedLead`; 0: none replayed). Written by the startup process,
    /// read by the worker when it starts after the recovery, which keeps no larger lead than
    /// these (`resume::lead_kept_at_restart`, finding F10).
    pub crash_replayed_lead: AtomicU64,
    /// In crash recovery, whether the startup process wrote a replayed record to the record
    /// file (one above it, F9), and that record's lead settings as written (`PackedLead`; 0:
    /// none beyond this server's own): the file as the recovery left it, whose lead the restart
    /// keeps (`resume::lead_kept_at_restart`, finding F12). The lead first, then the flag
    /// (Release); the worker reads the flag (Acquire), then the lead.
    pub crash_wrote_file: AtomicBool,
    pub crash_written_lead: AtomicU64,
}

/// Bytes before the first shard slot.
const HEADER_BYTES: usize = size_of::<Reservation>() + size_of::<StartState>();

fn bytes_needed() -> usize {
    HEADER_BYTES + fixed_layout::get().shard_count() as usize * size_of::<ShardSlot>()
}

/// Requests the shared memory and installs the hook that maps it. Called from `_PG_init`
/// while shared_preload_libraries is being processed, after the GUCs are defined.
pub fn init() {
    // SAFETY: `_PG_init` runs single-threaded in the postmaster; chaining the previous hooks
    // is the documented protocol.
    unsafe {
        PREV_SHMEM_REQUEST_HOOK = pg_sys::shmem_request_hook;
        pg_sys::shmem_request_hook = Some(request_shmem);
        PREV_SHMEM_STARTUP_HOOK = pg_sys::shmem_startup_hook;
        pg_sys::shmem_startup_hook = Some(startup_shmem);
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn request_shmem() {
    // SAFETY: called by PostgreSQL in the postmaster at the time to request shared memory.
    unsafe {
        if let Some(previous) = PREV_SHMEM_REQUEST_HOOK {
            previous();
        }
        pg_sys::RequestAddinShmemSpace(bytes_needed());
        fence::shared::request();
        registry::shared::request();
        horizon::request();
    }
}

/// Maps the state, creating it when the postmaster starts or re-creates shared memory
/// (after a backend crash): then every shard resumes above the ceiling recorded on disk.
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn startup_shmem() {
    // SAFETY: called by PostgreSQL once shared memory exists; AddinShmemInitLock makes the
    // find-or-create atomic, and zeroed memory is the valid initial state of every field.
    unsafe {
        if let Some(previous) = PREV_SHMEM_STARTUP_HOOK {
            previous();
        }
        let size = bytes_needed();
        let lock = &raw mut (*pg_sys::MainLWLockArray.add(21)).lock; // AddinShmemInitLock
        pg_sys::LWLockAcquire(lock, pg_sys::LWLockMode::LW_EXCLUSIVE);
        let mut found = false;
        let base = pg_sys::ShmemInitStruct(SHMEM_NAME.as_ptr(), size, &mut found).cast::<u8>();
        if !found {
            std::ptr::write_bytes(base, 0, size);
        }
        assert!(base.cast::<Reservation>().is_aligned(), "shared memory is not cache-line aligned");
        RESERVATION = base.cast::<Reservation>();
        START_STATE = base.add(size_of::<Reservation>()).cast::<StartState>();
        SLOTS = base.add(HEADER_BYTES).cast::<ShardSlot>();
        SLOT_COUNT = (size - HEADER_BYTES) / size_of::<ShardSlot>();
        if !found {
            // Owed from a start in recovery until the worker has recorded it, across crashes.
            (*START_STATE).promotion_guard_pending.store(promotion_pending::owed_at_start(), Release);
            // The layout first: a ceiling read under another layout would mean other IDs.
            fixed_layout::record::check_or_record();
            (*RESERVATION).resume_at(restore::recorded_ceiling());
        }
        fence::shared::attach(fence::lease::configured().is_some(), registry::configured().is_some());
        registry::shared::attach();
        horizon::attach((*RESERVATION).floor.load(Relaxed));
        pg_sys::LWLockRelease(lock);
    }
}

/// Whether the shared state exists, that is, the library was preloaded.
#[inline]
pub fn attached() -> bool {
    // SAFETY: written once per process before any SQL runs.
    unsafe { !RESERVATION.is_null() }
}

/// The durable reservation, when preloaded.
#[inline]
pub fn reservation() -> Option<&'static Reservation> {
    // SAFETY: as in `attached`; the state lives as long as the server and is only
    // accessed through atomics.
    unsafe { RESERVATION.as_ref() }
}

/// What the postmaster found at start, when preloaded.
pub fn start_state() -> Option<&'static StartState> {
    // SAFETY: as in `reservation`.
    unsafe { START_STATE.as_ref() }
}

/// All shard slots, one per shard of the layout (empty when not preloaded).
pub fn slots() -> &'static [ShardSlot] {
    // SAFETY: as in `reservation`; SLOTS points at SLOT_COUNT initialized slots.
    unsafe {
        if SLOTS.is_null() {
            &[]
        } else {
            std::slice::from_raw_parts(SLOTS, SLOT_COUNT)
        }
    }
}

/// The slot of a shard already checked against the layout, or `None` when the library
/// was not preloaded.
#[inline]
pub fn slot(shard: u32) -> Option<&'static ShardSlot> {
    slots().get(shard as usize)
}
