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
//!   to the time part the claim starts from (`Pending::cover`): every ID of its open
//!   transaction lies at or above `since`. The transaction's end (commit, abort, prepare)
//!   resets it to `NONE`, *after* PostgreSQL has made the end visible to new snapshots.
//! * The horizon (`compute`) is `min(t, every since that holds it)`, where `t` is the clock's
//!   time part (but never above the ceiling, nor below the floor). Before it reads the slots it raises
//!   the reservation's floor to `t`: from then on no claim starts below `t`, whatever the clock
//!   says later (a clock stepped back no longer lets an unused shard issue below a horizon
//!   already given). Below the floor nothing more is issued anyway: that is what the floor
//!   means, whether a restart or a horizon set it.
//! * An idle server's horizon follows the clock; a transaction holding IDs holds it back only
//!   until it ends.
//! * Each slot also says which shards the open transaction took IDs from (`PendingSlot::mark`):
//!   the one shard of a transaction that took one (the common case: a tenant's transaction),
//!   or `SEVERAL`, and then a bit per shard of the layout in the slot's bit words, which say
//!   exactly which (`PendingSlots`: 8 bytes per 64 shards per backend, 128 bytes for 1,024). The horizon of a shard (`compute` with `Some(shard)`) is held only by the
//!   slots that name that shard: a transaction never holds the horizon of a shard it took no
//!   ID of. The horizon of every shard (`None`) is held by every open transaction that took
//!   an ID. Where a transaction took several shards, each of them is held from its lowest
//!   `since` over all of them (one `since` per slot): lower than needed, never higher.
//!
//! # Why it holds (memory ordering)
//! Take a claim of shard `s` that issues an ID below the horizon `h` of `s` (or of every
//! shard). Before its floor load, the claim marked its slot: the mark names `s` (stored, or
//! seen by a load, with SeqCst: `s`, or `SEVERAL` after `s`'s bit was set) and `since` is at
//! or below its start (fetch_min, SeqCst); then it loads the floor (SeqCst) before its
//! compare-and-swap. The horizon raised the floor (SeqCst) and then loads every slot's
//! `since`, mark and bit (SeqCst). In the single total order of these SeqCst accesses, either
//! the horizon's first load of the slot comes after the claim's last mark, and it sees all of
//! them (or later values of the same transaction: a lower `since`, `SEVERAL` with `s`'s bit
//! set, which the store of `SEVERAL` publishes to a SeqCst load that reads it; or the reset
//! after the transaction ended: then it ended), so `h <= since <=` the ID; or that load comes
//! before the marks, so the raise of the floor comes before the claim's load of it, which sees
//! `t` or more, and the claim starts at or above `t >= h`. Either way the ID is not below `h`
//! while its transaction runs. The order in which the horizon loads a slot's words does not
//! matter: in the second case it may see any of them, and stale words of an ended
//! transaction only hold a horizon lower, never higher. A store buffer (x86) or a weakly
//! ordered CPU (arm64) would break this with Release/Acquire: each side writes one word and
//! reads another, the pattern only SeqCst orders.
//!
//! The hot path reads no shared word: each process remembers in its own memory (`Covered`)
//! the shard it marked last and the lowest start it marked, and a later claim of that shard
//! that starts no lower stores nothing and loads only those two words. That is sound because
//! this process's own marks were followed by its own SeqCst load of the floor, and floors only
//! rise, so its later (Relaxed) loads of the floor see no less. Reading the shared slot
//! instead would not be: a parallel worker shares its leader's slot, and could see a mark its
//! leader stored after a horizon read the slot while its own floor load was older than that
//! horizon's raise. A claim of another shard (a transaction taking several) marks again: it
//! loads the mark, the bit and `since` and stores only what is missing, then loads the floor.
//! `tests/loom.rs` model-checks it (`a_claim_racing_a_horizon_is_covered`,
//! `a_claim_holds_only_the_horizon_of_its_shard`).
//!
//! Transactions of several processes share one slot: a parallel worker marks its leader's
//! (compare-and-swap of the mark, `fetch_or` of the bits, `fetch_min` of `since`), and the
//! leader's transaction ends after its workers have finished, so only the leader releases it.

use crate::reservation::Reservation;
use crate::sync::{
    AtomicU64,
    Ordering::{Relaxed, Release, SeqCst},
};
use std::cell::Cell;

/// `PendingSlot::since` of a backend whose transaction holds no ID.
pub const NONE: u64 = u64::MAX;
/// `PendingSlot::mark` of a transaction that took no ID.
pub const NO_SHARD: u64 = u64::MAX;
/// `PendingSlot::mark` of a transaction that took IDs of several shards: its `ShardBits` say which.
pub const SEVERAL: u64 = u64::MAX - 1;

/// One backend's hold on the horizon: the lower bound of the IDs its open transaction holds,
/// and of which shards. On its own cache line: written by its backend alone (and its parallel
/// workers), read only by the horizon and `snowflake_horizon_holders()`.
#[repr(C, align(64))]
pub struct PendingSlot {
    /// The lowest time part a claim of the open transaction started from; `NONE`: none.
    pub since: AtomicU64,
    /// The one shard the open transaction took IDs of, `SEVERAL` or `NO_SHARD`.
    pub mark: AtomicU64,
    /// The process id of the backend this slot is for (0 until it has one), for reports only.
    pub pid: AtomicU64,
}

impl Default for PendingSlot {
    fn default() -> Self {
        PendingSlot { since: AtomicU64::new(NONE), mark: AtomicU64::new(NO_SHARD), pid: AtomicU64::new(0) }
    }
}

/// The words of bits a slot needs for `shard_count` shards: one bit per shard.
pub const fn bit_words(shard_count: u32) -> usize {
    shard_count.div_ceil(u64::BITS) as usize
}

/// Where shard `shard`'s bit is: its word, and the bit in it.
pub const fn bit_of(shard: u32) -> (usize, u64) {
    ((shard / u64::BITS) as usize, 1 << (shard % u64::BITS))
}

/// Whether a transaction whose mark is `mark` took IDs of `shard`, `word` giving its bit words.
#[inline]
pub fn holds(mark: u64, shard: u32, word: impl Fn(usize) -> u64) -> bool {
    let (index, bit) = bit_of(shard);
    mark == u64::from(shard) || (mark == SEVERAL && word(index) & bit != 0)
}

/// The shards a transaction whose mark is `mark`, with bit words `words`, took IDs of.
pub fn shards_of(mark: u64, words: &[u64]) -> Vec<u32> {
    match mark {
        NO_SHARD => vec![],
        SEVERAL => {
            (0..words.len() as u32 * u64::BITS).filter(|&shard| holds(mark, shard, |i| words[i])).collect()
        }
        shard => vec![shard as u32],
    }
}

/// What one process has marked in its open transaction, in its own memory (never shared):
/// the shard of its last mark and the lowest start it marked. The fast path's test.
#[derive(Debug)]
struct Covered {
    shard: Cell<u64>,
    since: Cell<u64>,
}

impl Covered {
    const fn new() -> Self {
        Covered { shard: Cell::new(NO_SHARD), since: Cell::new(NONE) }
    }

    fn reset(&self) {
        self.shard.set(NO_SHARD);
        self.since.set(NONE);
    }
}

/// Every backend's slot and bit words, as the horizon reads them.
#[derive(Clone, Copy)]
pub struct PendingSlots<'a> {
    slots: &'a [PendingSlot],
    /// `words` per slot, slot after slot.
    bits: &'a [AtomicU64],
    words: usize,
}

impl<'a> PendingSlots<'a> {
    /// The slots, with `bit_words(shard_count)` words of `bits` for each, in their order.
    pub fn new(slots: &'a [PendingSlot], bits: &'a [AtomicU64], shard_count: u32) -> Self {
        let words = bit_words(shard_count);
        assert_eq!(bits.len(), slots.len() * words, "a slot's bit words for {shard_count} shards");
        PendingSlots { slots, bits, words }
    }

    pub fn slots(&self) -> &'a [PendingSlot] {
        self.slots
    }

    /// The bit words of slot `index`.
    pub fn bits(&self, index: usize) -> &'a [AtomicU64] {
        &self.bits[index * self.words..(index + 1) * self.words]
    }

    /// A holder of slot `index`, for a process whose transaction's IDs it holds (the backend's
    /// own, or one of its parallel workers). `None` past the last slot.
    pub fn holder(&self, index: usize) -> Option<Holder<'a>> {
        Some(Holder::new(self.slots.get(index)?, self.bits(index)))
    }

    /// The open transaction of slot `index`: its lowest time part, and the shards it took
    /// IDs of; `None` when it holds no ID. Relaxed: a report, not a horizon.
    pub fn held(&self, index: usize) -> Option<(u64, Vec<u32>)> {
        let since = self.slots[index].since.load(Relaxed);
        let mark = self.slots[index].mark.load(Relaxed);
        let words: Vec<u64> = self.bits(index).iter().map(|word| word.load(Relaxed)).collect();
        let shards = shards_of(mark, &words);
        (since != NONE && !shards.is_empty()).then_some((since, shards))
    }

    /// The transaction of slot `index` ended, and PostgreSQL shows it ended to new snapshots:
    /// its IDs no longer hold a horizon. Called by the slot's backend, after its parallel
    /// workers have finished. Relaxed resets before the Release of `since`: a horizon that
    /// reads a later transaction's SeqCst mark sees them (the mark's store publishes them).
    pub fn release(&self, index: usize) {
        let slot = &self.slots[index];
        if slot.mark.load(Relaxed) == SEVERAL {
            for word in self.bits(index) {
                word.store(0, Relaxed);
            }
        }
        slot.mark.store(NO_SHARD, Relaxed);
        slot.since.store(NONE, Release);
    }
}

/// A process's hold on the horizon: its slot (its parallel leader's, in a worker), the slot's
/// bit words, and its own record of what it marked (`Covered`, in its own memory).
pub struct Holder<'a> {
    slot: &'a PendingSlot,
    bits: &'a [AtomicU64],
    covered: Covered,
}

impl<'a> Holder<'a> {
    pub fn new(slot: &'a PendingSlot, bits: &'a [AtomicU64]) -> Self {
        Holder { slot, bits, covered: Covered::new() }
    }

    /// The hold for a claim of `shard`: the holder's address and the shard, which a claim
    /// inlined into the caller keeps in registers.
    #[inline(always)]
    pub fn pending(&self, shard: u32) -> Pending<'_> {
        Pending { holder: self, shard }
    }

    /// This process's part of its transaction ended: its next claim marks again. Every process
    /// that claims calls it at its transaction's end (a parallel worker at its own); the slot
    /// itself is released by its backend (`PendingSlots::release`).
    #[inline]
    pub fn forget(&self) {
        self.covered.reset();
    }
}

/// A claim's hold on the horizon: its process's `Holder`, and the shard claimed.
#[derive(Clone, Copy)]
pub struct Pending<'a> {
    holder: &'a Holder<'a>,
    shard: u32,
}

impl Pending<'_> {
    /// Covers a claim about to start at time part `start`, before it claims: returns where it
    /// starts now, at or above the floor any horizon has set since (see the top). Inlined into
    /// the claim: on the hot path (a later claim of the shard this process marked last) two
    /// loads of its own memory and two comparisons; else it marks (`mark`).
    #[inline(always)]
    pub fn cover(&self, start: u64, reservation: &Reservation) -> u64 {
        let covered = &self.holder.covered;
        if covered.shard.get() == u64::from(self.shard) && start >= covered.since.get() {
            return start;
        }
        self.mark(start, reservation)
    }

    /// Marks the slot for this claim's shard and start, then loads the floor (see the top).
    #[cold]
    #[inline(never)]
    fn mark(&self, start: u64, reservation: &Reservation) -> u64 {
        let shard = u64::from(self.shard);
        let mut mark = self.holder.slot.mark.load(SeqCst);
        if mark == NO_SHARD {
            // The first shard of the transaction; a parallel worker may mark another at once.
            mark = match self.holder.slot.mark.compare_exchange(NO_SHARD, shard, SeqCst, SeqCst) {
                Ok(_) => shard,
                Err(other) => other,
            };
        }
        if mark != shard {
            // Several shards: the bits first, then `SEVERAL`, whose store publishes them. The
            // one shard marked before gets its bit too (once `SEVERAL`, the mark names none).
            if mark != SEVERAL {
                self.set_bit(mark as u32);
            }
            self.set_bit(self.shard);
            if mark != SEVERAL {
                self.holder.slot.mark.store(SEVERAL, SeqCst);
            }
        }
        if self.holder.slot.since.load(SeqCst) > start {
            self.holder.slot.since.fetch_min(start, SeqCst);
        }
        let floor = reservation.floor.load(SeqCst);
        let covered = &self.holder.covered;
        covered.shard.set(shard);
        covered.since.set(covered.since.get().min(start));
        start.max(floor)
    }

    fn set_bit(&self, shard: u32) {
        let (index, bit) = bit_of(shard);
        if self.holder.bits[index].load(SeqCst) & bit == 0 {
            self.holder.bits[index].fetch_or(bit, SeqCst);
        }
    }
}

/// A horizon as time parts: of every shard, and of the shard asked for (the same when none was).
/// `NONE` for each when nothing holds it (what prepared transactions give when there are none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Horizons {
    pub every_shard: u64,
    pub of_shard: u64,
}

/// The horizon at clock time part `now`, of every shard and of `shard` (if given): every ID
/// this server issued or will issue below `every_shard` (of `shard`, below `of_shard`) belongs
/// to a transaction that had ended when the slots were read, except those the caller knows of
/// otherwise (prepared transactions, which no slot holds). Raises the reservation's floor
/// first (see the top).
pub fn compute(now: u64, reservation: &Reservation, slots: &PendingSlots, shard: Option<u32>) -> Horizons {
    // Never above the ceiling: nothing is issued there before the worker has recorded it, and
    // a restart resumes at the recorded ceiling, so a horizon up to it holds across restarts.
    let t = now.min(reservation.ceiling.load(SeqCst));
    // Below the floor nothing is issued: a horizon starts there at least.
    let t = reservation.floor.fetch_max(t, SeqCst).max(t);
    let mut horizons = Horizons { every_shard: t, of_shard: t };
    for (index, slot) in slots.slots.iter().enumerate() {
        let since = slot.since.load(SeqCst);
        if since == NONE {
            continue;
        }
        horizons.every_shard = horizons.every_shard.min(since);
        let held = match shard {
            None => true,
            Some(shard) => {
                let bits = slots.bits(index);
                holds(slot.mark.load(SeqCst), shard, |word| bits[word].load(SeqCst))
            }
        };
        if held {
            horizons.of_shard = horizons.of_shard.min(since);
        }
    }
    horizons
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

    /// The slots of `backends` backends for a layout of 1,024 shards.
    struct Backends {
        slots: Vec<PendingSlot>,
        bits: Vec<AtomicU64>,
    }

    const SHARDS: u32 = 1024;

    impl Backends {
        fn new(backends: usize) -> Self {
            Backends {
                slots: (0..backends).map(|_| PendingSlot::default()).collect(),
                bits: (0..backends * bit_words(SHARDS)).map(|_| AtomicU64::new(0)).collect(),
            }
        }

        fn all(&self) -> PendingSlots<'_> {
            PendingSlots::new(&self.slots, &self.bits, SHARDS)
        }

        /// Each backend's own holder.
        fn holders(&self) -> Vec<Holder<'_>> {
            (0..self.slots.len()).map(|index| self.all().holder(index).unwrap()).collect()
        }

        /// The end of backend `index`'s transaction.
        fn end(&self, index: usize, holder: &Holder) {
            self.all().release(index);
            holder.forget();
        }

        fn horizon(&self, now: u64, reservation: &Reservation, shard: Option<u32>) -> u64 {
            let horizons = compute(now, reservation, &self.all(), shard);
            if shard.is_none() {
                assert_eq!(horizons.of_shard, horizons.every_shard);
            }
            horizons.of_shard
        }
    }

    /// A claim of `shard` starting at `start` by `holder`'s process: where it starts.
    fn cover(holder: &Holder, shard: u32, start: u64, reservation: &Reservation) -> u64 {
        holder.pending(shard).cover(start, reservation)
    }

    #[test]
    fn an_idle_server_follows_the_clock_and_raises_the_floor() {
        let reservation = reservation(0, 1000);
        let backends = Backends::new(3);
        let holders = backends.holders();
        assert_eq!(backends.horizon(500, &reservation, None), 500);
        assert_eq!(reservation.floor.load(Relaxed), 500);
        // A clock stepped back: the horizon stays, and claims start at the floor.
        assert_eq!(backends.horizon(400, &reservation, Some(7)), 500);
        assert_eq!(cover(&holders[0], 7, 400, &reservation), 500);
    }

    #[test]
    fn never_above_the_ceiling_nor_below_the_floor() {
        let backends = Backends::new(0);
        let reservation = reservation(0, 450);
        assert_eq!(backends.horizon(500, &reservation, None), 450);
        let reservation = reservation_after_restart();
        assert_eq!(backends.horizon(500, &reservation, Some(3)), 700);
    }

    fn reservation_after_restart() -> Reservation {
        reservation(700, 700)
    }

    #[test]
    fn an_open_transaction_holds_it_until_it_ends() {
        let reservation = reservation(0, 1000);
        let backends = Backends::new(2);
        let holders = backends.holders();
        assert_eq!(cover(&holders[1], 5, 300, &reservation), 300);
        // Later claims of the same shard store nothing.
        assert_eq!(cover(&holders[1], 5, 350, &reservation), 350);
        assert_eq!(backends.slots[1].since.load(Relaxed), 300);
        assert_eq!(backends.horizon(500, &reservation, None), 300);
        assert_eq!(backends.horizon(500, &reservation, Some(5)), 300);
        backends.end(1, &holders[1]);
        assert_eq!(backends.horizon(500, &reservation, None), 500);
        assert_eq!(backends.horizon(500, &reservation, Some(5)), 500);
    }

    #[test]
    fn a_transaction_holds_only_the_shards_it_took() {
        let reservation = reservation(0, 1000);
        let backends = Backends::new(2);
        let holders = backends.holders();
        cover(&holders[0], 5, 300, &reservation);
        assert_eq!(backends.horizon(500, &reservation, Some(3)), 500);
        assert_eq!(backends.horizon(510, &reservation, Some(5)), 300);
        assert_eq!(backends.horizon(520, &reservation, None), 300);
        assert_eq!(backends.all().held(0), Some((300, vec![5])));
        assert_eq!(backends.all().held(1), None);
    }

    #[test]
    fn a_transaction_of_several_shards_holds_exactly_those() {
        let reservation = reservation(0, 1000);
        let backends = Backends::new(2);
        let holders = backends.holders();
        cover(&holders[0], 5, 300, &reservation);
        cover(&holders[0], 700, 320, &reservation);
        cover(&holders[0], 5, 330, &reservation);
        assert_eq!(backends.slots[0].mark.load(Relaxed), SEVERAL);
        for (shard, held) in [(5, 300), (700, 300), (3, 500), (4, 500), (6, 500), (69, 500), (1023, 500)] {
            assert_eq!(backends.horizon(500, &reservation, Some(shard)), held, "shard {shard}");
        }
        assert_eq!(backends.all().held(0), Some((300, vec![5, 700])));
        // Its end clears the bits: the next transaction of the backend holds its one shard.
        backends.end(0, &holders[0]);
        cover(&holders[0], 9, 600, &reservation);
        assert_eq!(backends.horizon(650, &reservation, Some(700)), 650);
        assert_eq!(backends.all().held(0), Some((600, vec![9])));
    }

    #[test]
    fn processes_sharing_a_slot_mark_their_own_shards() {
        // A parallel worker marks its leader's slot with a holder of its own.
        let reservation = reservation(0, 1000);
        let backends = Backends::new(1);
        let holders = backends.holders();
        let worker = backends.all().holder(0).unwrap();
        cover(&holders[0], 5, 300, &reservation);
        assert_eq!(cover(&worker, 8, 310, &reservation), 310);
        assert_eq!(backends.all().held(0), Some((300, vec![5, 8])));
        // The worker's own record: its later claims of shard 8 store nothing.
        assert_eq!(cover(&worker, 8, 320, &reservation), 320);
        assert_eq!(backends.horizon(500, &reservation, Some(8)), 300);
    }

    #[test]
    fn a_claim_after_a_horizon_starts_at_its_floor() {
        let reservation = reservation(0, 1000);
        let backends = Backends::new(1);
        let holders = backends.holders();
        assert_eq!(backends.horizon(500, &reservation, Some(1)), 500);
        // The claim read the clock before the horizon raised the floor.
        assert_eq!(cover(&holders[0], 1, 480, &reservation), 500);
    }

    #[test]
    fn shards_of_a_mark() {
        assert_eq!(shards_of(NO_SHARD, &[0]), Vec::<u32>::new());
        assert_eq!(shards_of(7, &[0]), vec![7]);
        assert_eq!(shards_of(SEVERAL, &[0b1010, 1]), vec![1, 3, 64]);
        assert_eq!(bit_words(1), 1);
        assert_eq!(bit_words(1024), 16);
        assert_eq!(bit_words(1 << 16), 1024);
    }
}
