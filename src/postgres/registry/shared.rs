//! What each shard's claim came to, in shared memory: written by the reservation worker
//! (`keeper`), read for the refusals' words, `snowflake_registry_claims()` and
//! `snowflake_status()`. The fence alone decides what is issued (`fence::shared`); nothing here
//! is read on the hot path.

use pgrx::pg_sys;
use std::ffi::CStr;
use std::sync::atomic::{
    AtomicU64,
    Ordering::{Acquire, Relaxed, Release},
};

/// What a shard's claim came to, as the worker last learnt it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClaimState {
    /// Not asked yet (the worker starting, or the registry not answered yet).
    NotYet,
    /// Held by this server: issued, up to the mark.
    Held,
    /// Held by another data directory (`HeldElsewhere`).
    HeldElsewhere,
    /// Held by another postmaster of this data directory and timeline (a copy, or this
    /// server before a crash restart), until its claim runs out.
    Waiting,
    /// This server was replaced by a promotion: a later timeline holds it, or marked it last.
    Replaced,
    /// Lost: a renewal found the claim gone or another's.
    Lost,
    /// Fenced because the registry does not answer (`registry_down = stop`).
    Unreachable,
}

impl ClaimState {
    const ALL: [ClaimState; 7] = [
        ClaimState::NotYet,
        ClaimState::Held,
        ClaimState::HeldElsewhere,
        ClaimState::Waiting,
        ClaimState::Replaced,
        ClaimState::Lost,
        ClaimState::Unreachable,
    ];

    /// The word `snowflake_status()` shows.
    pub fn name(self) -> &'static str {
        match self {
            ClaimState::NotYet => "not_yet",
            ClaimState::Held => "held",
            ClaimState::HeldElsewhere => "held_elsewhere",
            ClaimState::Waiting => "waiting",
            ClaimState::Replaced => "replaced",
            ClaimState::Lost => "lost",
            ClaimState::Unreachable => "unreachable",
        }
    }
}

/// A shard's claim in shared memory: written by the reservation worker only (the fields
/// Relaxed, then the state with Release), read for messages (the state with Acquire, then the
/// fields). A reader racing a second write may pair the new state with newer fields of a later
/// one: that only changes the words of a message; the fence alone decides what is issued.
#[repr(C)]
#[derive(Default)]
pub struct ShardClaim {
    state: AtomicU64,
    holder_system: AtomicU64,
    holder_timeline: AtomicU64,
    since_unix_ms: AtomicU64,
    mark_unix_ms: AtomicU64,
}

/// A shard's claim as read from shared memory.
#[derive(Clone, Copy, Debug)]
pub struct ClaimView {
    pub state: ClaimState,
    /// The holder, when another holds it (or this server, while held).
    pub holder: Option<(u64, u32)>,
    pub since_unix_ms: Option<u64>,
    pub mark_unix_ms: Option<u64>,
}

impl ShardClaim {
    /// The worker's part.
    pub fn set(
        &self,
        state: ClaimState,
        holder: Option<(u64, u32)>,
        since_unix_ms: Option<u64>,
        mark: Option<u64>,
    ) {
        let (system, timeline) = holder.unwrap_or((0, 0));
        self.holder_system.store(system, Relaxed);
        self.holder_timeline.store(u64::from(timeline), Relaxed);
        self.since_unix_ms.store(since_unix_ms.unwrap_or(0), Relaxed);
        self.mark_unix_ms.store(mark.unwrap_or(0), Relaxed);
        self.state.store(state as u64, Release);
    }

    pub fn view(&self) -> ClaimView {
        let state =
            ClaimState::ALL.get(self.state.load(Acquire) as usize).copied().unwrap_or(ClaimState::NotYet);
        let system = self.holder_system.load(Relaxed);
        let nonzero = |value: u64| (value != 0).then_some(value);
        ClaimView {
            state,
            holder: nonzero(system).map(|system| (system, self.holder_timeline.load(Relaxed) as u32)),
            since_unix_ms: nonzero(self.since_unix_ms.load(Relaxed)),
            mark_unix_ms: nonzero(self.mark_unix_ms.load(Relaxed)),
        }
    }
}

const SHMEM_NAME: &CStr = c"snowflake_id registry claims";

/// The registry's shared memory: when it last answered (Unix ms, 0 for never since the worker
/// started), then one `ShardClaim` per shard of the layout. The word and the claims are written
/// by the reservation worker only, and read for `snowflake_status()` and messages.
static mut LAST_ANSWER: *const AtomicU64 = std::ptr::null();
static mut CLAIMS: *const ShardClaim = std::ptr::null();
static mut CLAIM_COUNT: usize = 0;

fn claim_count() -> usize {
    crate::postgres::fixed_layout::get().shard_count() as usize
}

fn shmem_bytes(count: usize) -> usize {
    size_of::<AtomicU64>() + count * size_of::<ShardClaim>()
}

/// Requests the registry's shared memory: called from `shmem`'s request hook.
pub fn request() {
    // SAFETY: called by `shmem`'s hook, in the postmaster, when shared memory is requested.
    unsafe { pg_sys::RequestAddinShmemSpace(shmem_bytes(claim_count())) };
}

/// Maps the registry's shared memory, zeroed (never answered, every claim `NotYet`) when
/// created.
///
/// # Safety
/// Called by `shmem`'s startup hook, with AddinShmemInitLock held.
pub unsafe fn attach() {
    let count = claim_count();
    let bytes = shmem_bytes(count);
    let mut found = false;
    // SAFETY: as the caller promises; zeroed memory is a valid `AtomicU64` and `ShardClaim`.
    // The claims follow one word, so they keep its alignment (a `ShardClaim` is all words).
    unsafe {
        let base = pg_sys::ShmemInitStruct(SHMEM_NAME.as_ptr(), bytes, &mut found);
        if !found {
            std::ptr::write_bytes(base.cast::<u8>(), 0, bytes);
        }
        LAST_ANSWER = base.cast::<AtomicU64>();
        CLAIMS = LAST_ANSWER.add(1).cast::<ShardClaim>();
        CLAIM_COUNT = count;
    }
}

/// When the registry last answered the asking thread (Unix ms); `None` when it has not since
/// the worker started, or without preloading.
pub fn last_answer_unix_ms() -> Option<u64> {
    // SAFETY: written once per process before any SQL runs, then only read; null without preloading.
    let word = unsafe { LAST_ANSWER.as_ref() }?;
    Some(word.load(Relaxed)).filter(|&at| at != 0)
}

/// The worker's part: publishes when the registry last answered (`None`: not since it started).
/// Relaxed: a monitoring figure, read on its own.
pub fn set_last_answer_unix_ms(at: Option<u64>) {
    // SAFETY: as in `last_answer_unix_ms`.
    if let Some(word) = unsafe { LAST_ANSWER.as_ref() } {
        word.store(at.unwrap_or(0), Relaxed);
    }
}

/// A shard's claim in shared memory (`None` without preloading, or past the layout).
pub fn claim(shard: u32) -> Option<&'static ShardClaim> {
    // SAFETY: written once per process before any SQL runs; CLAIMS points at CLAIM_COUNT
    // claims in shared memory for the server's lifetime, only accessed through atomics.
    unsafe { (shard as usize) < CLAIM_COUNT && !CLAIMS.is_null() }
        .then(|| unsafe { &*CLAIMS.add(shard as usize) })
}
