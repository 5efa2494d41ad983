//! The shard fence in force on the whole server: one bit per shard of the layout, in shared
//! memory, set when the server may issue that shard.
//!
//! `snowflake_id.shards` is a reloadable setting, and a backend reads its settings again only
//! between statements: a fence kept in each backend alone would not reach a statement already
//! running (a long `INSERT ... SELECT`, a PL/pgSQL loop, a COPY), which would go on issuing a
//! shard after the fence moved it away. So every call also reads the fence here, which moves
//! for all of them at once.
//!
//! One writer at a time: the postmaster fills it when it creates shared memory (at start, and
//! again after a backend crash), from its own current setting; afterwards only the reservation
//! worker writes it, when it starts and after every reload it applies. A reload's SIGHUP sets
//! the worker's latch, so it applies the reload at once: the fence moves for every call as
//! soon as the worker has read the new configuration, and says so in the server log
//! (`apply_setting`). While the worker is restarting it moves when the worker is back.
//!
//! A call also obeys its session's own setting (`fence::session_allows`), which refuses a
//! shard as soon as the session has applied the reload that took it away, worker or not; a
//! session that has a shard the worker has not given yet waits for it (`api::issuing`).
//!
//! Ordering: a call tests its bit before it claims (`allows`, Relaxed: a refused call then
//! normally claims nothing) and again after the claim's compare-and-swap, which is SeqCst
//! (`generator::claim`), with a SeqCst load (`still_allows`); the worker stores with SeqCst.
//! In the single total order of those operations, a claim that comes after the worker's store
//! is followed by a load that sees it, so such a claim never hands out an ID of a shard the
//! new fence refuses.

use super::{session_fence, setting_text};
use crate::postgres::{clock, fixed_layout};
use pgrx::pg_sys;
use snowflake_core::fence::ShardFence;
use snowflake_core::lease;
use std::sync::atomic::{
    AtomicU64,
    Ordering::{Relaxed, SeqCst},
};

const SHMEM_NAME: &std::ffi::CStr = c"snowflake_id shard fence";

/// The words of the fence, set in every process by the startup hook (inherited by forked
/// backends). Null while the library is not preloaded.
static mut WORDS: *const AtomicU64 = std::ptr::null();
static mut WORD_COUNT: usize = 0;
/// After the words, one more: since when (Unix ms) the lease is lost and the fence closed for
/// it (`lease`), 0 while it holds or is off. Stored before the closed fence is published and
/// cleared before it reopens, all SeqCst, so a call that sees its shard fenced by a SeqCst load
/// (`still_allows`) and then reads this word sees the lease that closed it. After the Relaxed
/// load of `allows` it may not yet: the call then takes the fence for a reload the worker has
/// not applied, waits, and looks again (`api::issuing`), which only delays the message.
static mut LEASE_LOST_AT: *const AtomicU64 = std::ptr::null();
/// And one more: when (Unix ms) the request of the lease's last 200 was sent, 0 when none since
/// the worker started or while the lease is off; for `snowflake_status()` only (Relaxed).
static mut LEASE_LAST_YES_AT: *const AtomicU64 = std::ptr::null();
/// And one more: the lease's deadline on the boot clock (`lease::LeaseJudge::deadline_ms`), which
/// every call checks after its claim, beside the fence (`lease_deadline_holds`, finding F11):
/// `lease::NO_DEADLINE` while the lease is off, 0 (passed) until its first 200. Written by the
/// worker at each look at the lease and by its asking thread at each 200, Relaxed, and read
/// Relaxed: what it guards against is a process paused past the deadline, which reads, when it
/// wakes, a value stored long before; a read that comes a moment late sees an earlier
/// deadline, and refuses sooner. It is stored before the fence opens (`regain_lease`'s SeqCst
/// swap), so a call that sees the fence open (`still_allows`, SeqCst) sees it too.
static mut LEASE_DEADLINE: *const AtomicU64 = std::ptr::null();
/// The words after the fence's: `LEASE_LOST_AT`, `LEASE_LAST_YES_AT`, `LEASE_DEADLINE`.
const LEASE_WORDS: usize = 3;
/// After those, as many words as the fence's: the shards this server holds a claim on in the
/// registry (`registry`), every bit set while the registry is off. The fence published is the
/// setting's and these (`publish`). Written by the worker only (SeqCst, before the fence it
/// publishes from them); read only by `publish`, in the worker and in the postmaster.
static mut CLAIMS: *const AtomicU64 = std::ptr::null();

/// 64 shards per word.
fn words_needed() -> usize {
    (fixed_layout::get().shard_count() as usize).div_ceil(64)
}

fn words() -> &'static [AtomicU64] {
    // SAFETY: written once per process before any SQL runs; WORDS points at WORD_COUNT words
    // of shared memory that live as long as the server, only accessed through atomics.
    unsafe {
        if WORDS.is_null() {
            &[]
        } else {
            std::slice::from_raw_parts(WORDS, WORD_COUNT)
        }
    }
}

/// Requests the fence's shared memory: called from `shmem`'s request hook.
pub fn request() {
    // SAFETY: called by `shmem`'s hook, in the postmaster, when shared memory is requested.
    unsafe { pg_sys::RequestAddinShmemSpace((2 * words_needed() + LEASE_WORDS) * size_of::<AtomicU64>()) };
}

/// Maps the fence, filling it from this process's `snowflake_id.shards` when it is created
/// (by the postmaster, whose setting follows every reload), or closing it when `lease_on` (the
/// lease's setting, which the caller reads: the lease builds on this file, not this on it).
/// With `registry_on`, no shard is claimed yet: the fence stays closed for each until the
/// worker has claimed it (`set_claimed`).
///
/// # Safety
/// Called by `shmem`'s startup hook, with AddinShmemInitLock held.
pub unsafe fn attach(lease_on: bool, registry_on: bool) {
    let count = words_needed();
    let mut found = false;
    // SAFETY: as the caller promises; zeroed memory is a valid fence (no shard) and lease word.
    unsafe {
        let bytes = (2 * count + LEASE_WORDS) * size_of::<AtomicU64>();
        let base = pg_sys::ShmemInitStruct(SHMEM_NAME.as_ptr(), bytes, &mut found);
        if !found {
            std::ptr::write_bytes(base.cast::<u8>(), 0, bytes);
        }
        WORDS = base.cast::<AtomicU64>();
        WORD_COUNT = count;
        LEASE_LOST_AT = WORDS.add(count);
        LEASE_LAST_YES_AT = WORDS.add(count + 1);
        LEASE_DEADLINE = WORDS.add(count + 2);
        CLAIMS = WORDS.add(count + LEASE_WORDS);
    }
    if !found {
        for word in claims() {
            word.store(if registry_on { 0 } else { u64::MAX }, SeqCst);
        }
        // Until the worker has asked, a lease that is on counts as lost (see `lease`), its
        // deadline passed (0, as zeroed); off, it has none.
        set_lease_deadline(if lease_on { 0 } else { lease::NO_DEADLINE });
        if lease_on {
            lose_lease(clock::wall_clock_unix_ms().max(0) as u64);
        } else {
            publish(&session_fence());
        }
    }
}

/// Whether the server-wide fence lets this server issue `shard` (a shard of the layout): the
/// test before a claim.
#[inline(always)]
pub fn allows(shard: u32) -> bool {
    words().get(shard as usize / 64).is_some_and(|word| word.load(Relaxed) & (1 << (shard % 64)) != 0)
}

/// `allows` again, after a claim: SeqCst, so that it sees any fence the worker stored before
/// the claim's SeqCst compare-and-swap (see the top of this file).
#[inline(always)]
pub fn still_allows(shard: u32) -> bool {
    words().get(shard as usize / 64).is_some_and(|word| word.load(SeqCst) & (1 << (shard % 64)) != 0)
}

/// Whether the lease lets a call hand out what it has just claimed: its deadline not passed on
/// the boot clock (`lease::deadline_holds`). One load while the lease is off; with it on, a
/// read of the boot clock too. Checked after the claim, as `still_allows` is.
#[inline(always)]
pub fn lease_deadline_holds() -> bool {
    // SAFETY: as in `lease_lost_since`.
    let Some(word) = (unsafe { LEASE_DEADLINE.as_ref() }) else { return true };
    let deadline = word.load(Relaxed);
    deadline == lease::NO_DEADLINE || lease::deadline_holds(deadline, lease::boot_clock_ms())
}

/// Since when (Unix ms) the lease's deadline has passed, before the worker has closed the fence
/// for it (a worker paused or slow); `None` while it holds or is off. For the refusal's words.
fn lease_deadline_passed_since() -> Option<u64> {
    // SAFETY: as in `lease_lost_since`.
    let deadline = unsafe { LEASE_DEADLINE.as_ref() }?.load(Relaxed);
    let now = lease::boot_clock_ms();
    if deadline == lease::NO_DEADLINE || lease::deadline_holds(deadline, now) {
        return None;
    }
    let wall_now = clock::wall_clock_unix_ms().max(0) as u64;
    // 0: no 200 yet for this URL, a moment before the worker closes the fence: since now.
    Some(if deadline == 0 { wall_now } else { wall_now.saturating_sub(now - deadline) })
}

/// Since when (Unix ms) the lease refuses calls: lost, the fence closed for it, or its deadline
/// passed before the worker could close it; `None` while it holds or is off. For the refusal's
/// words and `snowflake_status()`.
pub fn lease_refused_since() -> Option<u64> {
    lease_lost_since().or_else(lease_deadline_passed_since)
}

/// The worker's part (and its asking thread's): publishes the lease's deadline.
pub fn set_lease_deadline(deadline: u64) {
    // SAFETY: as in `lease_lost_since`.
    if let Some(word) = unsafe { LEASE_DEADLINE.as_ref() } {
        word.store(deadline, Relaxed);
    }
}

fn claims() -> &'static [AtomicU64] {
    // SAFETY: as in `words`: CLAIMS points at WORD_COUNT words, set with WORDS.
    unsafe {
        if CLAIMS.is_null() {
            &[]
        } else {
            std::slice::from_raw_parts(CLAIMS, WORD_COUNT)
        }
    }
}

/// The worker's part when the registry gave or took a claim on `shard`: the fence of every
/// call moves at once (unless the lease keeps it closed). A claim given is published only after
/// the shard was moved above the registry's mark (`reservation::worker`), so a call that sees
/// the shard open claims above it: its compare-and-swap on the shard comes after the move's.
pub fn set_claimed(shard: u32, claimed: bool) {
    let Some(word) = claims().get(shard as usize / 64) else { return };
    let bit = 1 << (shard % 64);
    if claimed {
        word.fetch_or(bit, SeqCst);
    } else {
        word.fetch_and(!bit, SeqCst);
    }
    if lease_lost_since().is_none() {
        publish(&session_fence());
    }
}

/// Makes `fence` the fence of every call, within the shards claimed in the registry; returns
/// whether it changed.
fn publish(fence: &ShardFence) -> bool {
    let shard_count = fixed_layout::get().shard_count() as u64;
    let mut changed = false;
    for (index, word) in words().iter().enumerate() {
        let first = index as u64 * 64;
        let in_layout = if shard_count - first >= 64 { u64::MAX } else { (1 << (shard_count - first)) - 1 };
        let claimed = claims().get(index).map_or(u64::MAX, |word| word.load(SeqCst));
        let value = claimed
            & match fence {
                ShardFence::Open => in_layout,
                ShardFence::Only(bits) => bits.get(index).copied().unwrap_or(0) & in_layout,
            };
        changed |= word.swap(value, SeqCst) != value;
    }
    changed
}

/// Since when (Unix ms) the lease is lost and every shard fenced for it; `None` while it holds,
/// or is off. Read on a refusal only, to say why.
pub fn lease_lost_since() -> Option<u64> {
    // SAFETY: written once per process before any SQL runs, then only read; null without preloading.
    let word = unsafe { LEASE_LOST_AT.as_ref() }?;
    Some(word.load(SeqCst)).filter(|&since| since != 0)
}

/// When (Unix ms) the request of the lease's last 200 was sent; `None` when none since the
/// worker started, or while the lease is off.
pub fn lease_last_yes() -> Option<u64> {
    // SAFETY: as in `lease_lost_since`.
    let word = unsafe { LEASE_LAST_YES_AT.as_ref() }?;
    Some(word.load(Relaxed)).filter(|&at| at != 0)
}

/// The worker's part: publishes `lease_last_yes` (0 for none).
pub fn set_lease_last_yes(at_ms: u64) {
    // SAFETY: as in `lease_lost_since`.
    if let Some(word) = unsafe { LEASE_LAST_YES_AT.as_ref() } {
        word.store(at_ms, Relaxed);
    }
}

/// The worker's part when the lease is lost (at `now_ms`): every shard fenced, the lease named
/// first (see `LEASE_LOST_AT`). Nothing while it is lost already.
pub fn lose_lease(now_ms: u64) {
    // SAFETY: as in `lease_lost_since`.
    let Some(word) = (unsafe { LEASE_LOST_AT.as_ref() }) else { return };
    if word.compare_exchange(0, now_ms.max(1), SeqCst, SeqCst).is_ok() {
        publish(&ShardFence::Only(Vec::new()));
    }
}

/// The worker's part when the lease holds again (or was turned off): the fence is the
/// setting's again. Returns whether it was lost.
pub fn regain_lease() -> bool {
    // SAFETY: as in `lease_lost_since`.
    let Some(word) = (unsafe { LEASE_LOST_AT.as_ref() }) else { return false };
    if word.swap(0, SeqCst) == 0 {
        return false;
    }
    publish(&session_fence());
    true
}

/// The setting as the worker last logged it (this process's memory: a restarted worker logs
/// its fence again at its start).
static LOGGED_SETTING: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

/// The reservation worker's part: makes its `snowflake_id.shards` the fence of every call,
/// when it starts and after each reload it applies, and logs it when it changed (at start,
/// when it is not open), so that an operator sees from when it holds. While the lease is lost
/// the fence stays closed; it opens on the setting when the lease holds again. The setting
/// counts as changed when its text did, even where the words published did not: with the
/// registry on, a shard added opens only once claimed (`set_claimed`), and the reload is
/// still applied, and logged, at once.
pub fn apply_setting(starting: bool) {
    // Noted also while the lease keeps the fence closed (a worker starts with it closed), so
    // that the next reload is compared with the setting in force, not with none.
    let text_changed = {
        let text = setting_text();
        let mut logged = LOGGED_SETTING.lock().unwrap_or_else(|e| e.into_inner());
        let changed = logged.as_ref().is_some_and(|before| *before != text);
        *logged = Some(text);
        changed
    };
    if lease_lost_since().is_some() {
        return;
    }
    let fence = session_fence();
    if publish(&fence) || text_changed || (starting && fence != ShardFence::Open) {
        let text = setting_text();
        match fence {
            ShardFence::Open => pgrx::log!(
                "snowflake_id: the shard fence is lifted (snowflake_id.shards = '{text}'): every shard may be \
                 issued"
            ),
            ShardFence::Only(_) => pgrx::log!(
                "snowflake_id: the shard fence is now snowflake_id.shards = '{text}', for every call, \
                 statements already running included"
            ),
        }
    }
}

/// The fence in force, as a setting's text (ranges merged, `none` for none), for messages.
pub fn text() -> String {
    ShardFence::Only(words().iter().map(|word| word.load(Relaxed)).collect()).to_string()
}
