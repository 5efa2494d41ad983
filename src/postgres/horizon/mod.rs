//! The committed horizon inside a server (the rules are `snowflake_core::horizon`): one
//! pending slot per backend in shared memory, the transaction callback that releases it, the
//! prepared transactions that hold IDs after their backend has moved on (`prepared`), and the
//! horizons given so far, so that each call answers for the snapshot it runs in.
//!
//! # Which snapshot a horizon holds for
//! A horizon `h` computed at time `T` holds for any snapshot taken after `T`. A statement that
//! calls `snowflake_horizon()` and reads rows with it (`WHERE id < snowflake_horizon()`) reads
//! them in a snapshot `S` taken *before*: a transaction that ended between `S` and `T` is
//! invisible to `S`, and its rows below `h` would be skipped. So each call answers for its
//! own statement's snapshot, from what the snapshot says (only transactions with an xid wrote
//! rows, and a snapshot knows which of those it sees as running):
//! * `h` computed now holds for `S` when no transaction with an xid ended since `S`: the newest
//!   one that ended is older than `S.xmax`, and every xid `S` saw running still runs
//!   (`holds_since`). A quiet server, or a statement that has just begun.
//! * A horizon computed at `T` when the next xid to assign was `N` holds for `S` when
//!   `N < S.xmax`: then an xid assigned after `T` had ended before `S`, so `S` came after `T`.
//!   The last `HISTORY` horizons are kept with their `N`, and a call on a busy server returns
//!   the newest that holds: one computed before its snapshot, by this reader's previous poll or
//!   another reader's. A reader's horizon so lags one poll.
//! * A snapshot older than every one kept (the first call on a busy server after a start, or a
//!   long repeatable-read transaction) gets the horizon of the server's start (`started`):
//!   every transaction of an earlier run had ended before any snapshot of this one.

pub mod prepared;

use super::compat;
use pgrx::pg_sys;
use snowflake_core::generator::Reservation;
use snowflake_core::horizon::{self, PendingSlot};
use std::ffi::CStr;

const SHMEM_NAME: &CStr = c"snowflake_id horizon";
const TRANCHE_NAME: &CStr = c"snowflake_id horizon";

/// How many horizons are kept with the next xid when they were computed.
const HISTORY: usize = 256;

/// The horizons given, newest last, and the lock that serializes computing them. Only
/// readers taking a horizon take the lock: writers never do. Cache-line aligned, so that its
/// size is too and the pending slots after it start on a line of their own.
#[repr(C, align(64))]
struct Shared {
    /// The horizon of the server's start, for snapshots older than every entry: where the
    /// shards resumed (nothing below was issued in this run), or a prepared transaction's
    /// lowest ID, when lower.
    started: u64,
    /// Entries written so far; the newest is at `(written - 1) % HISTORY`.
    written: u64,
    /// `(next xid when computed, horizon as a time part)`, each horizon at least the one before.
    entries: [(pg_sys::TransactionId, u64); HISTORY],
}

static mut SHARED: *mut Shared = std::ptr::null_mut();
static mut LOCK: *mut pg_sys::LWLock = std::ptr::null_mut();
/// One pending slot per process that can run SQL (PGPROC numbers below `MaxBackends`).
static mut SLOTS: *const PendingSlot = std::ptr::null();
static mut SLOT_COUNT: usize = 0;
/// This process's slot (its parallel leader's, in a parallel worker), found at its first claim
/// or transaction end.
static mut MY_SLOT: *const PendingSlot = std::ptr::null();

fn slot_count() -> usize {
    // SAFETY: set before shared memory is requested (PostgreSQL 15+), read in the postmaster.
    unsafe { pg_sys::MaxBackends as usize }
}

fn bytes_needed() -> usize {
    size_of::<Shared>() + slot_count() * size_of::<PendingSlot>()
}

/// Requests the shared memory and the lock: called from `shmem`'s request hook.
pub fn request() {
    // SAFETY: called by `shmem`'s hook, in the postmaster, when shared memory is requested.
    unsafe {
        pg_sys::RequestAddinShmemSpace(bytes_needed() + prepared::bytes_needed());
        pg_sys::RequestNamedLWLockTranche(TRANCHE_NAME.as_ptr(), 1);
    }
}

/// Maps the shared state; creating it, every slot starts released, the prepared transactions
/// are read back from their file (`prepared::attach`), and the horizon of the start is where
/// the shards resume (`resumed_at`, the recorded ceiling), or lower for a prepared one.
///
/// # Safety
/// Called by `shmem`'s startup hook, with AddinShmemInitLock held.
pub unsafe fn attach(resumed_at: u64) {
    let size = bytes_needed();
    let mut found = false;
    // SAFETY: as the caller promises.
    unsafe {
        let base = pg_sys::ShmemInitStruct(SHMEM_NAME.as_ptr(), size, &mut found).cast::<u8>();
        SHARED = base.cast::<Shared>();
        SLOTS = base.add(size_of::<Shared>()).cast::<PendingSlot>();
        assert!(SLOTS.is_aligned(), "shared memory is not cache-line aligned");
        SLOT_COUNT = slot_count();
        if !found {
            std::ptr::write_bytes(base, 0, size_of::<Shared>());
            for index in 0..SLOT_COUNT {
                SLOTS.add(index).cast_mut().write(PendingSlot::default());
            }
        }
        LOCK = &raw mut (*pg_sys::GetNamedLWLockTranche(TRANCHE_NAME.as_ptr())).lock;
        prepared::attach(!found);
        if !found {
            (*SHARED).started = resumed_at.min(prepared::lowest_since());
        }
    }
}

fn slots() -> &'static [PendingSlot] {
    // SAFETY: written once per process before any SQL runs; SLOTS points at SLOT_COUNT slots
    // that live as long as the server, only accessed through atomics.
    unsafe {
        if SLOTS.is_null() {
            &[]
        } else {
            std::slice::from_raw_parts(SLOTS, SLOT_COUNT)
        }
    }
}

/// The pending slot of this process's transactions: its own, or its parallel leader's, whose
/// transaction its IDs belong to. `None` when not preloaded, or for a process without one.
/// Found once, then read from a static on the hot path: the lookup reads only memory.
#[inline(always)]
pub fn my_slot() -> Option<&'static PendingSlot> {
    // SAFETY: MY_SLOT is this process's own, written only here, in its one thread.
    unsafe {
        if MY_SLOT.is_null() {
            MY_SLOT = find_my_slot();
        }
        MY_SLOT.as_ref()
    }
}

#[cold]
fn find_my_slot() -> *const PendingSlot {
    compat::transaction_proc_number()
        .and_then(|number| slots().get(number))
        .map_or(std::ptr::null(), std::ptr::from_ref)
}

/// Registers the transaction callback; called from `_PG_init` while preloading, so every
/// process forked afterwards has it.
pub fn register() {
    // SAFETY: the documented way for a library to watch transaction ends.
    unsafe { pg_sys::RegisterXactCallback(Some(on_transaction_event), std::ptr::null_mut()) };
}

/// Releases this backend's slot when its transaction has ended: PostgreSQL calls
/// `XACT_EVENT_COMMIT` and `XACT_EVENT_ABORT` after it has made the end visible to new
/// snapshots (`ProcArrayEndTransaction`), and `XACT_EVENT_PREPARE` once the prepared
/// transaction has taken over (`prepared` holds its IDs from `XACT_EVENT_PRE_PREPARE` on). A
/// parallel worker's transaction ends before its leader's: the leader's slot stays held.
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn on_transaction_event(
    event: pg_sys::XactEvent::Type,
    _argument: *mut std::ffi::c_void,
) {
    // SAFETY: a PostgreSQL global of this process.
    if unsafe { pg_sys::ParallelWorkerNumber } >= 0 {
        return;
    }
    // Found here too, not only at a claim: a leader whose parallel workers issued every ID of
    // its transaction has claimed nothing itself, and its slot is held all the same.
    let Some(slot) = my_slot() else { return };
    match event {
        pg_sys::XactEvent::XACT_EVENT_PRE_PREPARE => prepared::remember(slot),
        pg_sys::XactEvent::XACT_EVENT_COMMIT
        | pg_sys::XactEvent::XACT_EVENT_ABORT
        | pg_sys::XactEvent::XACT_EVENT_PREPARE => slot.release(),
        _ => {}
    }
}

/// The horizon (a time part) that holds for the active snapshot and every later one, with the
/// clock at `now`.
pub fn for_active_snapshot(now: u64, reservation: &Reservation) -> u64 {
    // SAFETY: the active snapshot of the running statement (every SQL call has one).
    let snapshot = unsafe { pg_sys::GetActiveSnapshot().as_ref() }.expect("a statement has a snapshot");
    // SAFETY: the lock lives in shared memory for the server's lifetime; an error raised
    // while it is held releases it (LWLockReleaseAll at abort).
    unsafe { pg_sys::LWLockAcquire(LOCK, pg_sys::LWLockMode::LW_EXCLUSIVE) };
    // The slots first, then the prepared transactions: a backend records its prepared
    // transaction before it releases its slot, so one of the two is seen.
    let computed = horizon::compute(now, reservation, slots()).min(prepared::lowest_since());
    let (_, next_xid) = compat::completed_and_next_xid();
    // SAFETY: SHARED lives as long as the server; written only under the lock, held here.
    let history = unsafe { &mut *SHARED };
    // A horizon given before still holds for every later snapshot: never go back.
    let given = history.newest(0).map_or(history.started, |(_, given)| given).max(computed);
    history.entries[history.written as usize % HISTORY] = (next_xid, given);
    history.written += 1;
    let answer = if holds_since(snapshot) {
        given
    } else {
        (0..HISTORY as u64)
            .map_while(|age| history.newest(age))
            // SAFETY: compares two xids, as PostgreSQL does (modulo 2^32).
            .find(|(next, _)| unsafe { pg_sys::TransactionIdPrecedes(*next, snapshot.xmax) })
            .map_or(history.started, |(_, horizon)| horizon)
    };
    // SAFETY: acquired above.
    unsafe { pg_sys::LWLockRelease(LOCK) };
    answer
}

/// Whether no transaction with an xid has ended since `snapshot` was taken (see the top): read
/// after the horizon was computed, so a horizon computed before holds for the snapshot.
fn holds_since(snapshot: &pg_sys::SnapshotData) -> bool {
    let (completed, _) = compat::completed_and_next_xid();
    // SAFETY: compares two xids, as PostgreSQL does (modulo 2^32).
    if !unsafe { pg_sys::TransactionIdPrecedes(completed, snapshot.xmax) } {
        return false;
    }
    let running: &[pg_sys::TransactionId] = if snapshot.xip.is_null() {
        &[]
    } else {
        // SAFETY: a snapshot's `xip` holds `xcnt` xids.
        unsafe { std::slice::from_raw_parts(snapshot.xip, snapshot.xcnt as usize) }
    };
    // SAFETY: asks PostgreSQL under its own locking.
    running.iter().all(|&xid| unsafe { pg_sys::TransactionIdIsInProgress(xid) })
}

impl Shared {
    /// The entry written `age` entries before the newest, while it is kept.
    fn newest(&self, age: u64) -> Option<(pg_sys::TransactionId, u64)> {
        let kept = self.written.min(HISTORY as u64);
        (age < kept).then(|| self.entries[((self.written - 1 - age) % HISTORY as u64) as usize])
    }
}
