//! The committed horizon inside a server (the rules are `snowflake_core::horizon`): one
//! pending slot per backend in shared memory with a bit per shard, each process's own record
//! of what it marked, the transaction callback that releases them, the prepared transactions
//! that hold IDs after their backend has moved on (`prepared`), the horizons given so far
//! (`given`), so that each call answers for the snapshot it runs in, and who holds them (`holders`).
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
//!   Horizons are kept with their `N`, and a call on a busy server returns the highest that
//!   holds: one computed before its snapshot, by this reader's previous poll or another
//!   reader's. A reader's horizon so lags one poll. Each entry keeps the horizon of every shard
//!   and that of the shard its call asked for: it answers for that shard with the latter, for
//!   every other shard with the former (lower, and true for every shard).
//! * A snapshot older than every one kept (the first call on a busy server after a start, or a
//!   long repeatable-read transaction) gets the horizon of the server's start (`started`):
//!   every transaction of an earlier run had ended before any snapshot of this one.
//!
//! # Who can push a reader's horizons out
//! No caller may push the horizons another reader needs out of what is kept: see `given`.

mod given;
pub mod holders;
pub mod prepared;

use super::{compat, fixed_layout};
use given::{Given, History, Own, EVERY_SHARD};
use pgrx::pg_sys;
use snowflake_core::generator::Reservation;
use snowflake_core::horizon::{self, Holder, Pending, PendingSlot, PendingSlots};
use snowflake_core::sync::AtomicU64;
use std::ffi::CStr;
use std::sync::atomic::Ordering::Relaxed;

const SHMEM_NAME: &CStr = c"snowflake_id horizon";
const TRANCHE_NAME: &CStr = c"snowflake_id horizon";

/// How many horizons are kept in shared memory, one per next xid (`given::History`).
const HISTORY: usize = 256;

/// The horizons given, and the lock that serializes computing them. Only readers taking a
/// horizon take the lock: writers never do. Cache-line aligned, so that its size is too and the
/// pending slots after it start on a line of their own.
#[repr(C, align(64))]
struct Shared {
    /// The horizon of the server's start, for snapshots older than every entry: where the
    /// shards resumed (nothing below was issued in this run), or a prepared transaction's
    /// lowest ID, when lower.
    started: u64,
    given: History<HISTORY>,
}

static mut SHARED: *mut Shared = std::ptr::null_mut();
static mut LOCK: *mut pg_sys::LWLock = std::ptr::null_mut();
/// One pending slot per process that can run SQL (PGPROC numbers below `MaxBackends`), then
/// each one's bit words (`horizon::bit_words` of the layout's shards).
static mut SLOTS: *const PendingSlot = std::ptr::null();
static mut SLOT_COUNT: usize = 0;
static mut BITS: *const AtomicU64 = std::ptr::null();
/// This process's holder: its slot (its parallel leader's, in a parallel worker), the slot's bit
/// words and its own record of what it marked; found at its first claim or transaction end,
/// with the slot's index. In a static, so that a claim refers to it by a constant address.
static mut MINE: Option<Holder<'static>> = None;
static mut MY_SLOT_INDEX: usize = usize::MAX;
/// The horizons this process was given, which no other caller can push out (see the top).
static mut OWN: Own = Own::EMPTY;

fn slot_count() -> usize {
    // SAFETY: set before shared memory is requested (PostgreSQL 15+), read in the postmaster.
    unsafe { pg_sys::MaxBackends as usize }
}

/// The bit words of every slot: 8 bytes per 64 shards of the layout, per backend.
fn bit_words() -> usize {
    slot_count() * horizon::bit_words(fixed_layout::get().shard_count())
}

fn bytes_needed() -> usize {
    size_of::<Shared>() + slot_count() * size_of::<PendingSlot>() + bit_words() * size_of::<AtomicU64>()
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
        BITS = SLOTS.add(SLOT_COUNT).cast::<AtomicU64>();
        if !found {
            std::ptr::write_bytes(base, 0, size_of::<Shared>());
            for index in 0..SLOT_COUNT {
                SLOTS.add(index).cast_mut().write(PendingSlot::default());
            }
            // All-zero bit words: no shard marked.
            std::ptr::write_bytes(BITS.cast_mut(), 0, bit_words());
        }
        LOCK = &raw mut (*pg_sys::GetNamedLWLockTranche(TRANCHE_NAME.as_ptr())).lock;
        prepared::attach(!found);
        if !found {
            (*SHARED).started = resumed_at.min(prepared::lowest_since(None).every_shard);
        }
    }
}

fn slots() -> PendingSlots<'static> {
    // SAFETY: written once per process before any SQL runs; SLOTS points at SLOT_COUNT slots
    // and BITS at their bit words, which live as long as the server, only accessed through
    // atomics.
    unsafe {
        if SLOTS.is_null() {
            PendingSlots::new(&[], &[], 0)
        } else {
            let slots = std::slice::from_raw_parts(SLOTS, SLOT_COUNT);
            let shard_count = fixed_layout::get().shard_count();
            let bits = std::slice::from_raw_parts(BITS, SLOT_COUNT * horizon::bit_words(shard_count));
            PendingSlots::new(slots, bits, shard_count)
        }
    }
}

/// The hold of this process's claims of `shard` on the horizon (see `MINE`): its slot, or its
/// parallel leader's, whose transaction its IDs belong to. `None` when not preloaded, or for a
/// process without one. Found once, then read from a static on the hot path: the lookup reads
/// only memory.
#[inline(always)]
pub fn pending(shard: u32) -> Option<Pending<'static>> {
    mine().map(|holder| holder.pending(shard))
}

#[inline(always)]
fn mine() -> Option<&'static Holder<'static>> {
    // SAFETY: MINE is this process's own, written only by `find_my_slot`, in its one thread,
    // before any reference to it is handed out; never written again.
    unsafe {
        let mine = &raw const MINE;
        if (*mine).is_none() {
            find_my_slot();
        }
        (*mine).as_ref()
    }
}

/// The index of this process's slot (see `MINE`), found once.
fn my_slot_index() -> Option<usize> {
    mine()?;
    // SAFETY: this process's own static, written once by `find_my_slot`.
    Some(unsafe { MY_SLOT_INDEX })
}

#[cold]
fn find_my_slot() {
    let Some(index) = compat::transaction_proc_number().filter(|&number| number < slots().slots().len())
    else {
        return;
    };
    let slots = slots();
    // SAFETY: a PostgreSQL global of this process.
    if unsafe { pg_sys::ParallelWorkerNumber } < 0 {
        // Its own slot (a worker's is its leader's): who holds it, for `holders`.
        // SAFETY: a PostgreSQL global of this process.
        slots.slots()[index].pid.store(unsafe { pg_sys::MyProcPid } as u64, Relaxed);
    }
    // SAFETY: this process's own statics, written only here, once (MINE was None, so no
    // reference to it exists), in its one thread.
    unsafe {
        MINE = slots.holder(index);
        MY_SLOT_INDEX = index;
    }
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
/// parallel worker's transaction ends before its leader's: the leader's slot stays held, and
/// the worker forgets only its own record.
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn on_transaction_event(
    event: pg_sys::XactEvent::Type,
    _argument: *mut std::ffi::c_void,
) {
    use pg_sys::XactEvent::*;
    // SAFETY: a PostgreSQL global of this process.
    if unsafe { pg_sys::ParallelWorkerNumber } >= 0 {
        if matches!(event, XACT_EVENT_PARALLEL_COMMIT | XACT_EVENT_PARALLEL_ABORT) {
            mine().inspect(|holder| holder.forget());
        }
        return;
    }
    // Found here too, not only at a claim: a leader whose parallel workers issued every ID of
    // its transaction has claimed nothing itself, and its slot is held all the same.
    let Some(index) = my_slot_index() else { return };
    match event {
        XACT_EVENT_PRE_PREPARE => prepared::remember(&slots(), index),
        XACT_EVENT_COMMIT | XACT_EVENT_ABORT | XACT_EVENT_PREPARE => {
            slots().release(index);
            mine().inspect(|holder| holder.forget());
        }
        _ => {}
    }
}

/// The horizon (a time part) of `shard` (`None`: of every shard) that holds for the active
/// snapshot and every later one, with the clock at `now`.
pub fn for_active_snapshot(now: u64, reservation: &Reservation, shard: Option<u32>) -> u64 {
    // SAFETY: the active snapshot of the running statement (every SQL call has one).
    let snapshot = unsafe { pg_sys::GetActiveSnapshot().as_ref() }.expect("a statement has a snapshot");
    // SAFETY: the lock lives in shared memory for the server's lifetime; an error raised
    // while it is held releases it (LWLockReleaseAll at abort).
    unsafe { pg_sys::LWLockAcquire(LOCK, pg_sys::LWLockMode::LW_EXCLUSIVE) };
    // The slots first, then the prepared transactions: a backend records its prepared
    // transaction before it releases its slot, so one of the two is seen.
    let computed = horizon::compute(now, reservation, &slots(), shard);
    let prepared = prepared::lowest_since(shard);
    let (completed, next_xid) = compat::completed_and_next_xid();
    // SAFETY: SHARED lives as long as the server; written only under the lock, held here.
    let shared = unsafe { &mut *SHARED };
    // A horizon given before still holds for every later snapshot: never go back. That of
    // every shard holds for each shard.
    let every_shard = shared
        .given
        .newest(0)
        .map_or(shared.started, |given| given.every_shard)
        .max(computed.every_shard.min(prepared.every_shard));
    let given = Given {
        next_xid,
        shard: shard.unwrap_or(EVERY_SHARD),
        every_shard,
        of_shard: computed.of_shard.min(prepared.of_shard).max(every_shard),
    };
    shared.given.keep(given);
    let fresh = holds_since(snapshot);
    let answer = if fresh { Some(given.of(shard)) } else { shared.given.highest_before(snapshot, shard) };
    let started = shared.started;
    // SAFETY: acquired above.
    unsafe { pg_sys::LWLockRelease(LOCK) };
    let own = &raw mut OWN;
    // SAFETY: this process's own static, used only here, in its one thread; no reference to it
    // outlives this call.
    unsafe {
        let answer = if fresh { answer } else { answer.max((*own).highest_before(snapshot, shard)) };
        (*own).keep(given, completed);
        answer.unwrap_or(started)
    }
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
