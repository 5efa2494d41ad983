//! The committed horizon: a time part below which every ID this server has issued, or will
//! ever issue, belongs to a transaction that has already ended.
//!
//! Readers that page by ID ("everything after the last ID I saw": outbox relays, change
//! feeds, keyset pagination) lose rows with any generator that hands out keys before commit:
//! a transaction takes ID 100, a later one takes 101 and commits first, the reader reads 101
//! and moves past 100, which commits a moment later. Read only below the horizon, no row is
//! skipped.
//!
//! # The rules
//! * Each backend has a `PendingSlot`. Before a claim, the backend lowers its slot's `since`
//!   to the time part the claim starts from (`PendingSlot::cover`): every ID of its open
//!   transaction lies at or above `since`. The transaction's end (commit, abort, prepare)
//!   resets it to `NONE`, *after* PostgreSQL has made the end visible to new snapshots.
//! * The horizon (`compute`) is `min(t, every since)`, where `t` is the clock's time part
//!   (but never above the ceiling, nor below the floor). Before it reads the slots it raises
//!   the reservation's floor to `t`: from then on no claim starts below `t`, whatever the clock
//!   says later (a clock stepped back no longer lets an unused shard issue below a horizon
//!   already given). Below the floor nothing more is issued anyway: that is what the floor
//!   means, whether a restart or a horizon set it.
//! * An idle server's horizon follows the clock; a transaction holding IDs holds it back only
//!   until it ends.
//!
//! # Why it holds (memory ordering)
//! Take a claim that issues an ID below the horizon `h`. Its backend stored `since` (SeqCst)
//! and then loaded the floor (SeqCst) before its compare-and-swap; the horizon raised the floor
//! (SeqCst) and then loaded every `since` (SeqCst). In the single total order of these SeqCst
//! accesses, either the horizon's load of the slot comes after the backend's store, and sees
//! it (or a lower value of the same transaction, or the reset after it ended: then it ended),
//! so `h <= since <=` the ID; or the load comes before the store, so the raise of the floor
//! comes before the backend's load of it, which sees `t` or more, and the claim starts at or
//! above `t >= h`. Either way the ID is not below `h` while its transaction runs. A store
//! buffer (x86) or a weakly ordered CPU (arm64) would break this with Release/Acquire: each
//! side writes one word and reads the other, the pattern only SeqCst orders. A call that finds
//! its slot already at or below its start stores nothing: the store that set it was followed by
//! its own SeqCst load of the floor, and floors only rise, so its later loads see no less.
//! `tests/loom.rs` model-checks it (`a_claim_racing_a_horizon_is_covered`).
//!
//! Transactions of several processes share one slot: a parallel worker lowers its leader's
//! (`fetch_min`), and the leader's transaction ends after its workers have finished.

use crate::reservation::Reservation;
use crate::sync::{
    AtomicU64,
    Ordering::{Relaxed, Release, SeqCst},
};

/// `PendingSlot::since` of a backend whose transaction holds no ID.
pub const NONE: u64 = u64::MAX;

/// One backend's lower bound of the IDs its open transaction holds. On its own cache line:
/// written by its backend alone (and its parallel workers), read only by `compute`.
#[repr(C, align(64))]
pub struct PendingSlot {
    /// The lowest time part a claim of the open transaction started from; `NONE`: none.
    pub since: AtomicU64,
}

impl Default for PendingSlot {
    fn default() -> Self {
        PendingSlot { since: AtomicU64::new(NONE) }
    }
}

impl PendingSlot {
    /// Covers a claim about to start at time part `start`, before it claims: returns where it
    /// starts now, at or above the floor any horizon has set since (see the top). Inlined into
    /// the claim: on the hot path, a load and a comparison, except for the first claim of a
    /// transaction (and one starting lower than those before it), which stores and reloads.
    #[inline(always)]
    pub fn cover(&self, start: u64, reservation: &Reservation) -> u64 {
        if start >= self.since.load(Relaxed) {
            return start;
        }
        self.since.fetch_min(start, SeqCst);
        start.max(reservation.floor.load(SeqCst))
    }

    /// The transaction ended, and PostgreSQL shows it ended to new snapshots: its IDs no
    /// longer hold the horizon. Release: a horizon that reads `NONE` sees that end too.
    #[inline]
    pub fn release(&self) {
        self.since.store(NONE, Release);
    }
}

/// The horizon as a time part, at clock time part `now`: every ID this server issued or will
/// issue below it belongs to a transaction that had ended when the slots were read, except
/// those `others` know of (prepared transactions, which no slot holds: the caller passes their
/// lowest `since`). Raises the reservation's floor first (see the top).
pub fn compute(now: u64, reservation: &Reservation, slots: &[PendingSlot]) -> u64 {
    // Never above the ceiling: nothing is issued there before the worker has recorded it, and
    // a restart resumes at the recorded ceiling, so a horizon up to it holds across restarts.
    let t = now.min(reservation.ceiling.load(SeqCst));
    // Below the floor nothing is issued: a horizon starts there at least.
    let t = reservation.floor.fetch_max(t, SeqCst).max(t);
    slots.iter().map(|slot| slot.since.load(SeqCst)).fold(t, u64::min)
}

// Under loom the atomics are loom's, made only inside a model: `tests/loom.rs` has the models.
#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn reservation(floor: u64, ceiling: u64) -> Reservation {
        let reservation = Reservation::default();
        reservation.resume_at(floor);
        reservation.publish_ceiling(ceiling);
        reservation
    }

    #[test]
    fn an_idle_server_follows_the_clock_and_raises_the_floor() {
        let reservation = reservation(0, 1000);
        let slots: Vec<PendingSlot> = (0..3).map(|_| PendingSlot::default()).collect();
        assert_eq!(compute(500, &reservation, &slots), 500);
        assert_eq!(reservation.floor.load(Relaxed), 500);
        // A clock stepped back: the horizon stays, and claims start at the floor.
        assert_eq!(compute(400, &reservation, &slots), 500);
        assert_eq!(slots[0].cover(400, &reservation), 500);
    }

    #[test]
    fn never_above_the_ceiling_nor_below_the_floor() {
        let reservation = reservation(0, 450);
        assert_eq!(compute(500, &reservation, &[]), 450);
        let reservation = reservation_after_restart();
        assert_eq!(compute(500, &reservation, &[]), 700);
    }

    fn reservation_after_restart() -> Reservation {
        reservation(700, 700)
    }

    #[test]
    fn an_open_transaction_holds_it_until_it_ends() {
        let reservation = reservation(0, 1000);
        let slots: Vec<PendingSlot> = (0..2).map(|_| PendingSlot::default()).collect();
        assert_eq!(slots[1].cover(300, &reservation), 300);
        // Later claims of the same transaction store nothing.
        assert_eq!(slots[1].cover(350, &reservation), 350);
        assert_eq!(slots[1].since.load(Relaxed), 300);
        assert_eq!(compute(500, &reservation, &slots), 300);
        slots[1].release();
        assert_eq!(compute(500, &reservation, &slots), 500);
    }

    #[test]
    fn a_claim_after_a_horizon_starts_at_its_floor() {
        let reservation = reservation(0, 1000);
        let slots = [PendingSlot::default()];
        assert_eq!(compute(500, &reservation, &slots), 500);
        // The claim read the clock before the horizon raised the floor.
        assert_eq!(slots[0].cover(480, &reservation), 500);
    }
}
