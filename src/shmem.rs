//! The generator state in PostgreSQL shared memory: one slot per shard, shared by all
//! backends of the server.
//!
//! Allocated only while the library is preloaded (`shared_preload_libraries`): shared
//! memory can only be requested then. Without it `shard_slot` answers `None` and callers
//! raise an error naming the fix; there is deliberately no per-backend fallback, which is
//! how other in-database generators end up issuing duplicates.

use pgrx::pg_sys;
use std::sync::atomic::AtomicU64;

/// One shard's state, alone on its cache line so that backends working on different shards
/// never contend for a line.
#[repr(C, align(64))]
pub struct ShardSlot {
    /// The counter (time part and sequence, see `layout.rs`) of the last ID issued.
    /// Zero means none yet; the all-zero state is the valid initial state.
    pub last_issued: AtomicU64,
}

const SHMEM_NAME: &std::ffi::CStr = c"snowflake_id generator state";

/// Base of the slot array, set in every process by the startup hook (inherited by forked
/// backends). Null while the library is not preloaded.
static mut SLOTS: *const ShardSlot = std::ptr::null();
/// Number of slots: `2^shard_bits`, fixed at server start.
static mut SLOT_COUNT: usize = 0;

#[cfg(not(any(feature = "pg13", feature = "pg14")))]
static mut PREV_SHMEM_REQUEST_HOOK: pg_sys::shmem_request_hook_type = None;
static mut PREV_SHMEM_STARTUP_HOOK: pg_sys::shmem_startup_hook_type = None;

fn bytes_needed() -> usize {
    crate::gucs::layout().shard_count() as usize * size_of::<ShardSlot>()
}

/// Requests the shared memory and installs the hook that maps it. Called from `_PG_init`
/// while shared_preload_libraries is being processed, after the GUCs are defined.
pub fn init() {
    // SAFETY: `_PG_init` runs single-threaded in the postmaster; chaining the previous hooks
    // is the documented protocol.
    unsafe {
        #[cfg(any(feature = "pg13", feature = "pg14"))]
        pg_sys::RequestAddinShmemSpace(bytes_needed());
        #[cfg(not(any(feature = "pg13", feature = "pg14")))]
        {
            PREV_SHMEM_REQUEST_HOOK = pg_sys::shmem_request_hook;
            pg_sys::shmem_request_hook = Some(request_shmem);
        }
        PREV_SHMEM_STARTUP_HOOK = pg_sys::shmem_startup_hook;
        pg_sys::shmem_startup_hook = Some(startup_shmem);
    }
}

#[cfg(not(any(feature = "pg13", feature = "pg14")))]
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn request_shmem() {
    // SAFETY: called by PostgreSQL in the postmaster at the time to request shared memory.
    unsafe {
        if let Some(previous) = PREV_SHMEM_REQUEST_HOOK {
            previous();
        }
        pg_sys::RequestAddinShmemSpace(bytes_needed());
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn startup_shmem() {
    // SAFETY: called by PostgreSQL once shared memory exists; AddinShmemInitLock makes the
    // find-or-create atomic, and zeroed memory is the valid initial state of every slot.
    unsafe {
        if let Some(previous) = PREV_SHMEM_STARTUP_HOOK {
            previous();
        }
        let size = bytes_needed();
        let lock = &raw mut (*pg_sys::MainLWLockArray.add(21)).lock; // AddinShmemInitLock
        pg_sys::LWLockAcquire(lock, pg_sys::LWLockMode::LW_EXCLUSIVE);
        let mut found = false;
        let base =
            pg_sys::ShmemInitStruct(SHMEM_NAME.as_ptr(), size, &mut found).cast::<ShardSlot>();
        if !found {
            std::ptr::write_bytes(base.cast::<u8>(), 0, size);
        }
        assert!(
            base.is_aligned(),
            "shared memory is not aligned for ShardSlot"
        );
        SLOTS = base;
        SLOT_COUNT = size / size_of::<ShardSlot>();
        pg_sys::LWLockRelease(lock);
    }
}

/// Whether the shared state exists, that is, the library was preloaded.
#[inline]
pub fn attached() -> bool {
    // SAFETY: written once per process before any SQL runs.
    unsafe { !SLOTS.is_null() }
}

/// The slot of a shard already checked against the layout, or `None` when the library
/// was not preloaded.
#[inline]
pub fn shard_slot(shard: u32) -> Option<&'static ShardSlot> {
    // SAFETY: SLOTS/SLOT_COUNT are written once per process before any SQL runs; the slots
    // live as long as the server and are only accessed through atomics.
    unsafe {
        let base = SLOTS;
        if base.is_null() || shard as usize >= SLOT_COUNT {
            return None;
        }
        Some(&*base.add(shard as usize))
    }
}
