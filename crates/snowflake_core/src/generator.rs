//! The generator's rules: how a shard's counter moves, the clock policy, and the durable
//! reservation it must stay under.
//!
//! Pure Rust over a `ShardSlot` per shard (above all the counter of the last ID issued,
//! see `layout.rs`) and one `Reservation` per server, so the rules are tested with a fake
//! clock by plain `#[test]`s and the same code runs on PostgreSQL shared memory.
//!
//! # Clock policy
//! * The next counter is `max(last + 1, first counter of the wall clock's millisecond)`:
//!   the time part is the wall clock, or the last time part when the clock is behind it.
//! * When a millisecond's sequence is used up, or the clock went backwards, the counter
//!   runs on into the following milliseconds ("borrows" time) while the time part of the
//!   last ID handed out stays at most `max_lead_ms` ahead of the wall clock.
//! * Past that bound the caller sleeps until the clock has caught up, for at most
//!   `max_wait_ms` in all; a wait that could not be long enough is refused at once.
//! * The bound is the setting, or a larger lead the server keeps while IDs it must stay above
//!   lie further ahead than the setting allows (`lead_in_force`): a setting lowered, or a
//!   promotion from a primary with a larger one, never stops writes by itself.
//! * Nothing is issued unless the compare-and-swap that claims it succeeds, so a refused
//!   call issues nothing and no ID is ever issued twice or out of order.
//!
//! # Durable reservation
//! Shared memory is lost on a restart, so every time part handed out must lie inside a
//! window already recorded on disk: `floor <= time part < ceiling`. The reservation worker
//! (the extension's `postgres/reservation`) keeps the ceiling a short way ahead of the clock,
//! writing it durably *before* publishing it here; after a restart both bounds start at the
//! recorded ceiling, so every shard resumes strictly above anything issued before. A call that would reach the
//! ceiling (a shard borrowing time, or every call when the disk is slow) asks the worker for
//! more and waits for it, within `max_reservation_wait_ms`. The window is kept short because
//! a restart resumes at its end: the shorter it is, the less IDs lead the clock after a
//! restart. When recording is slow, the worker reserves further ahead (see `next_ceiling`),
//! up to the same bound that calls borrowing time can reach anyway (`max_ceiling_lead_ms`).
//!
//! # Why compare-and-swap and not a lock
//! One word holds the whole state, so one CAS both checks and claims; no lock is held
//! across the clock read, and a backend that is descheduled mid-call blocks nobody.
//! Relaxed ordering suffices for most of it: each counter is one word, whose modification
//! order is total, and no other memory is published through it; what a raised ceiling
//! promises is on disk before it is stored (the fsync has returned), which no memory
//! ordering adds to. The exceptions are where two words must be seen together; `tests/loom.rs`
//! model-checks them with loom (whose weaker model of SeqCst accesses `sync.rs` makes up for):
//! * Floor and ceiling. A promotion moves the floor up to its guard, then the ceiling
//!   (`Reservation::resume_at`), and the worker raises the ceiling above the guard later
//!   (`Reservation::publish_ceiling`). A claim that saw the raised ceiling with the old floor
//!   would issue inside the window the floor is there to skip. So the ceiling is written with
//!   Release, after the floor, and `claim` loads the ceiling with Acquire *before* it loads
//!   the floor: a claim that sees a ceiling sees the floor published before it. (Loaded the
//!   other way round, the floor can be read before the promotion and the ceiling after it, on
//!   any CPU; Relaxed, the two can be seen out of order on a weakly ordered one, arm64.) On
//!   x86-64 an Acquire load is a plain load; the floor's load stays Relaxed, ordered by it.
//!   A standby's replayed ceilings (`Reservation::replay`) are written the same way round.
//! * Lowering the ceiling (`lower_ceiling`, after the clock jumped ahead and came back) is a
//!   handshake between two words: the worker stores the lower ceiling, then reads every
//!   counter; a claim moves its counter, then reads the ceiling again. Both sides use SeqCst,
//!   so in their single total order either the worker sees the claim's counter (and keeps the
//!   ceiling) or the claim sees the lower ceiling (and does not hand out what it claimed).
//!   Acquire and Release would not do: each side reads a word the other writes, and neither
//!   write need be visible to the other side's read. On x86-64 a SeqCst load is a plain load
//!   and the compare-and-swap is the same locked instruction either way, so the hot path pays
//!   one load and one comparison. `advance` (`snowflake_advance`, which moves a counter without
//!   a claim) takes the claim's side: it moves the counter with SeqCst, then reads the ceiling
//!   again with SeqCst, and reports the move uncovered if the ceiling fell to it meanwhile.
//!   `observe` (`snowflake_observe`, which raises the floor of every shard) does the same with
//!   the floor, which the worker reads again, SeqCst, after its lowering.
//! * `Reservation::worker`, the address of the worker's latch, publishes memory: stored
//!   with Release after the latch is set up, loaded with Acquire before it is used.

use crate::horizon::Pending;
use crate::layout::{Layout, LayoutError};
pub use crate::reservation::{NoKeeper, Reservation, ReservationKeeper};
use crate::sync::{
    AtomicU64,
    Ordering::{Acquire, Relaxed, SeqCst},
};

/// One shard's state, alone on its cache line so that backends working on different
/// shards never contend for a line. All-zero is the valid initial state.
#[repr(C, align(64))]
#[derive(Default)]
pub struct ShardSlot {
    /// The counter (time part and sequence, see `layout.rs`) of the last ID issued; 0: none.
    pub last_issued: AtomicU64,
    /// IDs issued since the server started.
    pub issued: AtomicU64,
    /// Calls that slept waiting for the clock or the reservation, and for how long.
    pub waits: AtomicU64,
    pub wait_ms: AtomicU64,
    /// Backward steps of the wall clock seen by backends issuing IDs of this shard.
    pub clock_regressions: AtomicU64,
}

/// The reloadable limits of the clock policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClockPolicy {
    /// How far the time part of an ID may run ahead of the wall clock.
    pub max_lead_ms: u64,
    /// How long one call may sleep waiting for the clock before it gives up.
    pub max_wait_ms: u64,
    /// How long one call may wait for the reservation worker to record a new ceiling (the
    /// time of a slow disk's fsync) before it gives up. Separate from `max_wait_ms`: a clock
    /// step and a slow disk are different faults, and a disk that takes a second or two
    /// should slow issue down, not fail it.
    pub max_reservation_wait_ms: u64,
}

/// Where the generator reads the time, and how it sleeps.
pub trait Clock {
    /// Wall-clock time in Unix milliseconds.
    fn now_unix_ms(&mut self) -> i64;
    /// Sleeps for about `ms` milliseconds (the caller may be cancelled meanwhile).
    fn sleep_ms(&mut self, ms: u64);
}

/// A run of counters claimed by one call, `first..=last`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Claim {
    pub first: u64,
    pub last: u64,
    /// Milliseconds the call slept waiting for the clock.
    pub waited_ms: u64,
}

/// Why nothing was issued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The wall clock is before the epoch or past the range of the layout's time bits.
    Clock(LayoutError),
    /// Issuing would put the time part more than `max_lead_ms` ahead of the clock, and
    /// waiting `max_wait_ms` could not bring it within the bound.
    /// `first_time_part` is the time part the call's first ID would have had: above the
    /// clock only when the shard issued IDs up there, or the server resumed there after a
    /// restart (its recorded reservation).
    TooFarAhead { lead_ms: u64, first_time_part: u64, policy: ClockPolicy },
    /// More IDs than fit in `max_lead_ms` of borrowed time.
    BatchTooLarge { count: u64, max_count: u64 },
    /// The time part would reach the durable reservation, and the worker did not extend
    /// it within `max_reservation_wait_ms`.
    NotReserved { time_part: u64, ceiling: u64, policy: ClockPolicy },
    /// The time part would pass the last millisecond the layout's time bits can hold.
    Exhausted,
}

/// The largest batch one call may claim: whatever fits between the clock's millisecond and
/// the lead bound. Larger batches could never be issued without breaking the bound.
#[inline]
pub fn max_batch(layout: &Layout, policy: ClockPolicy) -> u64 {
    (policy.max_lead_ms + 1) * layout.ids_per_ms()
}

/// Claims `count` consecutive counters of one shard (`count >= 1`), and counts them in
/// the shard's statistics. Always inlined: in the fast path of `snowflake_nextval` the
/// compiler then drops every waiting branch (its policy waits 0 ms), and a call less is
/// about 40 instructions less per ID (`scripts/profile.sh`); left to itself it stopped
/// inlining once the function grew.
// Each argument has another owner (shard, server, backend, call, fleet, settings, process,
// worker): bundling them would only move the list into a struct built on the hot path.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub fn claim<K: ReservationKeeper>(
    slot: &ShardSlot,
    reservation: &Reservation,
    pending: Pending<'_>,
    count: u64,
    layout: &Layout,
    policy: ClockPolicy,
    clock: &mut impl Clock,
    keeper: &mut K,
) -> Result<Claim, Refusal> {
    debug_assert!(count >= 1);
    let max_count = max_batch(layout, policy);
    if count > max_count {
        return Err(Refusal::BatchTooLarge { count, max_count });
    }
    let mut waited_ms = 0;
    // Milliseconds waited for the clock, and for the reservation.
    let mut waited_for = [0u64; 2];
    const WAITING_FOR_CLOCK: usize = 0;
    const WAITING_FOR_RESERVATION: usize = 1;
    let result = 'claim: loop {
        let now = match layout.time_part(clock.now_unix_ms()) {
            Ok(now) => now,
            Err(error) => break Err(Refusal::Clock(error)),
        };
        // The ceiling first, with Acquire: a ceiling raised above a new floor is published
        // after it (Release), so a claim that sees the ceiling sees that floor too (see the top).
        let ceiling = reservation.ceiling.load(Acquire);
        // Covered for the horizon before anything is claimed (see `horizon.rs`).
        let start = pending.cover(now.max(reservation.floor.load(Relaxed)), reservation);
        let mut last_issued = slot.last_issued.load(Relaxed);
        // Each blocked case says how long to wait, for what, how long it may wait for that in
        // all, and what to report if that is too long.
        let (wait_ms, waiting_for, max_wait_ms, refusal) = loop {
            let first = (last_issued + 1).max(layout.counter_at(start));
            let last = first + (count - 1);
            let last_time_part = layout.counter_time_part(last);
            if last_time_part > layout.max_time_part() {
                break 'claim Err(Refusal::Exhausted);
            }
            // Never negative: `first` is at least the clock's own millisecond.
            let lead_ms = last_time_part - now;
            if lead_ms > policy.max_lead_ms {
                // Past the setting, a lead the server keeps for a while may still allow it
                // (read only here, so the hot path never loads it).
                let max_lead_ms = lead_in_force(policy.max_lead_ms, reservation);
                if lead_ms > max_lead_ms {
                    let first_time_part = layout.counter_time_part(first);
                    break (
                        lead_ms - max_lead_ms,
                        WAITING_FOR_CLOCK,
                        policy.max_wait_ms,
                        Refusal::TooFarAhead { lead_ms, first_time_part, policy },
                    );
                }
            }
            // Ask the worker to reserve this far (it does within a few milliseconds, the
            // time of one fsync) and look again shortly.
            let wait_for_reservation = |ceiling, keeper: &mut K| {
                reservation.ask_for(last_time_part, keeper, now);
                let refusal = Refusal::NotReserved { time_part: last_time_part, ceiling, policy };
                (1, WAITING_FOR_RESERVATION, policy.max_reservation_wait_ms, refusal)
            };
            if last_time_part >= ceiling {
                break wait_for_reservation(ceiling, keeper);
            }
            // On failure `now` is reused: it is still a valid lower bound, and contended
            // callers retry without another clock read.
            match slot.last_issued.compare_exchange_weak(last_issued, last, SeqCst, Relaxed) {
                // The ceiling again, after the claim (see `lower_ceiling`): lowered meanwhile
                // below what was claimed, the claim is dropped (a gap in the shard, as a
                // rolled-back sequence leaves), and the call waits for the worker as above.
                Ok(_) if last_time_part >= reservation.ceiling.load(SeqCst) => {
                    break wait_for_reservation(reservation.ceiling.load(Relaxed), keeper);
                }
                Ok(_) => return Ok(count_claim(slot, Claim { first, last, waited_ms })),
                Err(newer) => last_issued = newer,
            }
        };
        // Each budget counts only its own waits: a call that first waited for the clock (after
        // a restart ahead of it) still has all of max_reservation_wait_ms for the worker.
        if waited_for[waiting_for] + wait_ms > max_wait_ms {
            break Err(refusal);
        }
        clock.sleep_ms(wait_ms);
        waited_for[waiting_for] += wait_ms;
        waited_ms += wait_ms;
    };
    if waited_ms > 0 {
        count_wait(slot, waited_ms);
    }
    result
}

/// Adds a successful claim to the shard's statistics.
#[inline]
fn count_claim(slot: &ShardSlot, claim: Claim) -> Claim {
    slot.issued.fetch_add(claim.last - claim.first + 1, Relaxed);
    if claim.waited_ms > 0 {
        count_wait(slot, claim.waited_ms);
    }
    claim
}

#[cold]
fn count_wait(slot: &ShardSlot, waited_ms: u64) {
    slot.waits.fetch_add(1, Relaxed);
    slot.wait_ms.fetch_add(waited_ms, Relaxed);
}

/// Whether a shard may be moved so that its claims start at counter `first_allowed`:
/// refused when that counter is further ahead of the clock than the lead bound (the shard
/// could issue nothing until the clock caught up). Returns the counter's time part, which
/// the reservation must pass before the move (see `advance`).
pub fn check_advance(
    first_allowed: u64,
    layout: &Layout,
    policy: ClockPolicy,
    now_unix_ms: i64,
) -> Result<u64, Refusal> {
    let now = layout.time_part(now_unix_ms).map_err(Refusal::Clock)?;
    let time_part = layout.counter_time_part(first_allowed);
    if time_part > layout.max_time_part() {
        return Err(Refusal::Exhausted);
    }
    let lead_ms = time_part.saturating_sub(now);
    if lead_ms > policy.max_lead_ms {
        return Err(Refusal::TooFarAhead { lead_ms, first_time_part: time_part, policy });
    }
    Ok(time_part)
}

/// Makes every later claim on `shard` start at `first_allowed` or above (never moves the
/// counter back), and says whether the reservation still covers it: whether the ceiling lies
/// above the time part of `first_allowed` once the counter has moved. Checked first by
/// `check_advance`, and the reservation moved past it.
///
/// `false` when the worker lowered the ceiling meanwhile (`lower_ceiling`) without seeing the
/// move: it may record the lower ceiling, and a restart would resume below `first_allowed`.
/// The caller then waits for the worker to pass it again, as before the first try, and tries
/// again. The counter stays moved either way: that issues nothing, and claims above the
/// ceiling wait for the worker. The same handshake as a claim's (see the top): the counter
/// moved with SeqCst, then the ceiling read again with SeqCst.
#[must_use]
pub fn advance(slot: &ShardSlot, reservation: &Reservation, first_allowed: u64, layout: &Layout) -> bool {
    slot.last_issued.fetch_max(first_allowed.saturating_sub(1), SeqCst);
    layout.counter_time_part(first_allowed) < reservation.ceiling.load(SeqCst)
}

/// What a call that moves a shard or the floor forward (`snowflake_advance`, a move's
/// advance, `snowflake_observe`) does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Forward {
    /// Moved, and the reservation covers it: a restart from here resumes above it.
    Done,
    /// Not yet covered: ask the worker to record a ceiling past this time part, wait for it,
    /// and take the step again.
    WaitPast(u64),
}

/// One step of `snowflake_advance`: the shard moves above `first_allowed - 1` (`advance`) only
/// once the reservation covers `first_allowed`, and the call may return only then. Why the
/// order matters: a call that returned before the worker recorded past the new position could
/// be followed by a restart that resumes below it (the counter lives in memory), and a shard
/// moved here from another server would then hand out IDs that server issued (the guard
/// `advance-durable-wait`). Checked first by `check_advance`.
pub fn advance_step(
    slot: &ShardSlot,
    reservation: &Reservation,
    first_allowed: u64,
    layout: &Layout,
) -> Forward {
    let time_part = layout.counter_time_part(first_allowed);
    if reservation.ceiling.load(Relaxed) > time_part && advance(slot, reservation, first_allowed, layout) {
        return Forward::Done;
    }
    Forward::WaitPast(time_part)
}

/// One step of `snowflake_observe`: the floor raised to `floor` (`observe`) once the
/// reservation covers it, as `advance_step` moves a shard, and for the same reason.
pub fn observe_step(reservation: &Reservation, floor: u64) -> Forward {
    if reservation.ceiling.load(Relaxed) > floor && observe(reservation, floor) {
        return Forward::Done;
    }
    Forward::WaitPast(floor)
}

/// Whether every shard may be held above an ID of time part `observed` (`snowflake_observe`):
/// refused when the first time part above it is further ahead of the clock than the lead
/// bound, as `check_advance` refuses a shard moved that far. Returns that time part, the floor
/// to raise, which the reservation must pass first (see `observe`).
pub fn check_observe(
    observed: u64,
    layout: &Layout,
    policy: ClockPolicy,
    now_unix_ms: i64,
) -> Result<u64, Refusal> {
    check_advance(layout.counter_at(observed.saturating_add(1)), layout, policy, now_unix_ms)
}

/// Makes every claim that starts after this call, on every shard, start at time part `floor`
/// or above (never lowers the floor), and says whether the reservation still covers it: the
/// ceiling above `floor` once the floor is raised, so that a restart resumes at or above it
/// too. Checked first by `check_observe`, and the reservation moved past it.
///
/// The floor is what every claim already reads (`claim`), so the hot path pays nothing. "After
/// this call" is a causal after: a claim whose backend learned of the call (through the
/// client that made it, over sockets, whose system calls are full barriers) reads the floor
/// after the SeqCst raise here. `false` when the worker lowered the ceiling meanwhile without
/// seeing the raise: as for `advance`, the caller waits for the worker to pass it again and
/// calls again. The same handshake as `advance`'s, with the floor for the counter: raised with
/// SeqCst, then the ceiling read again with SeqCst; `lower_ceiling` stores the lower ceiling,
/// then reads the floor with SeqCst.
#[must_use]
pub fn observe(reservation: &Reservation, floor: u64) -> bool {
    reservation.floor.fetch_max(floor, SeqCst);
    floor < reservation.ceiling.load(SeqCst)
}

/// The `max_lead_ms` in force: the setting, or a larger one this server keeps while IDs it
/// must stay above lie further ahead of the clock than the setting allows
/// (`Reservation::inherited_max_lead_ms`): after the setting was lowered under shards already
/// running further ahead, or a promotion from a primary that ran with a larger one. Without it
/// a setting alone would stop writes until the clock caught up, tens of seconds with a long
/// lead. Claims past the setting, the worker's reservation and the WAL records it writes (which
/// a standby's promotion bound reads) all use it, so the bound every guard relies on,
/// `max_ceiling_lead_ms` of the lead in force, still holds.
#[inline]
pub fn lead_in_force(setting_max_lead_ms: u64, reservation: &Reservation) -> u64 {
    setting_max_lead_ms.max(reservation.inherited_max_lead_ms.load(Relaxed))
}

/// Whether an inherited lead (`lead_in_force`) has done its work, or is not needed at all: the
/// ceiling (the reservation's, or one about to be recorded), above every ID issued and every
/// floor, is within the bound the setting alone puts it at. The worker then drops it, or does
/// not keep it; from there the setting holds as if it had never been larger.
pub fn inherited_lead_spent(now: u64, ceiling: u64, reserve_ms: u64, setting_max_lead_ms: u64) -> bool {
    ceiling <= now + max_ceiling_lead_ms(reserve_ms, setting_max_lead_ms)
}

/// How far ahead of the clock `next_ceiling` can put the ceiling: calls wait for at most
/// `max_lead_ms + 1` ahead, and the worker adds `reserve_ms` beyond that. So no ID of a
/// server with these settings lies further ahead of its clock than this: the bound the
/// resume guards (after pg_upgrade, after a promotion) and `lower_ceiling` rely on.
pub fn max_ceiling_lead_ms(reserve_ms: u64, max_lead_ms: u64) -> u64 {
    max_lead_ms + 1 + reserve_ms
}

/// The lead settings a ceiling is reserved under: the `max_lead_ms` in force (`lead_in_force`)
/// and `reserve_ms`. With them, how far ahead of its own clock a server can have issued IDs
/// (`bound_ms`). A primary writes them into the WAL record of every ceiling, so that a promoted
/// standby's bound covers a primary that ran with larger ones than its own (settings drift);
/// a server's record file keeps them with its ceiling when they exceed its own settings
/// (`lead_to_record`), so that a restart does not forget them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeadSettings {
    pub max_lead_ms: u64,
    pub reserve_ms: u64,
}

impl LeadSettings {
    /// How far ahead of its own clock a server with these settings can have issued IDs
    /// (`max_ceiling_lead_ms`).
    pub fn bound_ms(self) -> u64 {
        max_ceiling_lead_ms(self.reserve_ms, self.max_lead_ms)
    }

    /// Whether a server with `own` settings, going by its own alone, would fall short of
    /// these: a smaller bound (a promotion guard too low) or a smaller `max_lead_ms` (calls
    /// refused until the clock catches up with a ceiling reserved under these).
    pub fn exceed(self, own: LeadSettings) -> bool {
        self.max_lead_ms > own.max_lead_ms || self.bound_ms() > own.bound_ms()
    }
}

/// What a server's record file keeps with a ceiling: the lead settings it was reserved under
/// (on a standby, those its primary wrote into the record replayed; on a primary, those in
/// force) when they exceed the server's own, `None` otherwise. A restart (or a crash) of a
/// standby loses what it replayed into shared memory, and its recovery starts at the last
/// restartpoint, which may lie past the last ceiling's WAL record: the record file is then the
/// only place left that says how far ahead the primary ran. Only when they exceed: a record
/// without them reads as before, also to the versions before this rule.
pub fn lead_to_record(reserved_under: Option<LeadSettings>, own: LeadSettings) -> Option<LeadSettings> {
    reserved_under.filter(|lead| lead.exceed(own))
}

/// The reservation worker's rule: the ceiling to make durable next, or `None` while the
/// current one will do. The ceiling is kept a headroom ahead of the clock and renewed once
/// it is half that close, so the disk is written a few times a second; it also covers, with
/// the same headroom, what callers are waiting for, as far as the lead bound lets them issue.
///
/// The headroom is `reserve_ms`, plus twice `recording_ms`, the time the worker's last
/// recording took: a ceiling is published only once recorded, so with a slow disk one
/// `reserve_ms` ahead would already lie behind the clock when it arrives, and calls would
/// stall until they fail. Twice, because the next recording starts only when this one ends.
/// It never passes `max_ceiling_lead_ms`, which calls borrowing time can reach anyway: the
/// resume guards' bound holds whatever the disk does.
///
/// The floor plays no part: after a restart with the clock behind it, no ceiling is written
/// until a call needs one, so restarts in quick succession do not push the IDs further and
/// further ahead.
pub fn next_ceiling(
    now: u64,
    reservation: &Reservation,
    layout: &Layout,
    reserve_ms: u64,
    max_lead_ms: u64,
    recording_ms: u64,
) -> Option<u64> {
    let bound = max_ceiling_lead_ms(reserve_ms, max_lead_ms);
    let headroom = reserve_ms.saturating_add(recording_ms.saturating_mul(2)).min(bound);
    let ceiling = reservation.ceiling.load(Relaxed);
    let wanted = reservation.wanted.load(Relaxed).min(now + max_lead_ms + 1);
    let renew_below = (now + headroom / 2).max(now + 1).max(wanted);
    // What is wanted gets the same headroom as the clock: a waiting call moves on with
    // the clock while the worker records, and must not find the new ceiling short again.
    let target = (now.max(wanted) + headroom).min(now + bound).min(layout.max_time_part() + 1);
    (ceiling < renew_below && ceiling < target).then_some(target)
}

/// After the clock jumped ahead and came back, the ceiling the worker recorded at the jump
/// lies far ahead of the clock, and a restart would resume there: nothing could be issued
/// until the clock caught up. When no shard has issued up there, the worker lowers it: it
/// publishes the lower ceiling, then reads every shard's counter (see the ordering notes at
/// the top). Returns the lower ceiling, for the worker to record; `None` when the ceiling is
/// where normal work puts it, or a counter lies at or above the lower one (then IDs really
/// were issued at the jump, and the ceiling stays), or the floor still lies more than
/// `reserve_ms` ahead of the clock (then it waits for the clock, see below).
pub fn lower_ceiling(
    now: u64,
    reservation: &Reservation,
    slots: &[ShardSlot],
    layout: &Layout,
    reserve_ms: u64,
    max_lead_ms: u64,
) -> Option<u64> {
    let ceiling = reservation.ceiling.load(SeqCst);
    // Up to `max_ceiling_lead_ms` ahead is normal work; another `reserve_ms` of slack keeps
    // the two rules from alternating.
    if ceiling <= now + max_ceiling_lead_ms(reserve_ms, max_lead_ms) + reserve_ms {
        return None;
    }
    // Never below the floor: what the server issued before its start is unknown up to there.
    // And not while the floor lies more than `reserve_ms` ahead of the clock (a restart or a
    // promotion resumed there): a standby dates a lowering by its ceiling, `reserve_ms` ahead
    // of the primary's clock when it was written (`resume`'s standby floor), and one held at
    // the floor would date itself later than that; replayed late, it would drop a reading the
    // standby took after it was written (finding F13). Once the clock is within `reserve_ms` of
    // the floor, the lowering is dated right; until then a restart resumes at the higher ceiling.
    let floor = reservation.floor.load(Relaxed);
    if floor > now + reserve_ms {
        return None;
    }
    let lower = now + reserve_ms;
    if lower >= ceiling || reservation.ceiling.compare_exchange(ceiling, lower, SeqCst, Relaxed).is_err() {
        return None;
    }
    let highest = slots.iter().map(|slot| layout.counter_time_part(slot.last_issued.load(SeqCst))).max();
    // A floor raised meanwhile above the lower ceiling (`observe`) must survive a restart too.
    if highest.is_some_and(|highest| highest >= lower) || reservation.floor.load(SeqCst) > lower {
        reservation.ceiling.fetch_max(ceiling, SeqCst);
        return None;
    }
    Some(lower)
}

// Under loom the atomics are loom's, made only inside a model: `tests/loom.rs` has the models.
#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::horizon::{Holder, PendingSlot};
    use crate::layout::{Parts, DEFAULT_EPOCH_UNIX_MS};

    /// `claim` with a pending slot of its own: the horizon has its own tests (`horizon.rs`).
    fn claim(
        slot: &ShardSlot,
        reservation: &Reservation,
        count: u64,
        layout: &Layout,
        policy: ClockPolicy,
        clock: &mut impl Clock,
        keeper: &mut impl ReservationKeeper,
    ) -> Result<Claim, Refusal> {
        let (pending, bits) = (PendingSlot::default(), [AtomicU64::new(0)]);
        let pending = Holder::new(&pending, &bits);
        super::claim(slot, reservation, pending.pending(0), count, layout, policy, clock, keeper)
    }

    const LAYOUT: Layout = Layout::new(DEFAULT_EPOCH_UNIX_MS, 10, 12);
    const POLICY: ClockPolicy =
        ClockPolicy { max_lead_ms: 2000, max_wait_ms: 1000, max_reservation_wait_ms: 5000 };
    const T0: i64 = DEFAULT_EPOCH_UNIX_MS + 100 * 86_400_000;

    /// A clock that stands still until moved, and whose sleeps move it forward.
    struct FakeClock {
        now: i64,
        slept: Vec<u64>,
    }
    impl FakeClock {
        fn at(now: i64) -> Self {
            FakeClock { now, slept: vec![] }
        }
    }
    impl Clock for FakeClock {
        fn now_unix_ms(&mut self) -> i64 {
            self.now
        }
        fn sleep_ms(&mut self, ms: u64) {
            self.slept.push(ms);
            self.now += ms as i64;
        }
    }

    /// A worker that applies the worker's rule at once when told.
    struct InstantWorker;
    impl ReservationKeeper for InstantWorker {
        fn extend_soon(&mut self, reservation: &Reservation, now: u64) {
            if let Some(ceiling) = next_ceiling(now, reservation, &LAYOUT, 500, POLICY.max_lead_ms, 0) {
                reservation.publish_ceiling(ceiling);
            }
        }
    }

    /// A reservation that never gets in the way, for the clock-policy tests.
    static OPEN: Reservation = Reservation {
        ceiling: AtomicU64::new(u64::MAX),
        floor: AtomicU64::new(0),
        wanted: AtomicU64::new(0),
        worker: crate::sync::AtomicUsize::new(0),
        inherited_max_lead_ms: AtomicU64::new(0),
        last_logged: AtomicU64::new(0),
    };

    fn one(slot: &ShardSlot, clock: &mut FakeClock) -> Result<Parts, Refusal> {
        let claim = claim(slot, &OPEN, 1, &LAYOUT, POLICY, clock, &mut NoKeeper)?;
        assert_eq!(claim.first, claim.last);
        Ok(LAYOUT.decode(LAYOUT.id_of_counter(7, claim.first)).unwrap())
    }

    fn lead_of(slot: &ShardSlot, clock: &FakeClock) -> i64 {
        let time_part = LAYOUT.counter_time_part(slot.last_issued.load(Relaxed)) as i64;
        time_part - LAYOUT.time_part(clock.now).unwrap() as i64
    }

    #[test]
    fn a_still_clock_fills_the_millisecond_then_borrows_the_next() {
        let slot = ShardSlot::default();
        let mut clock = FakeClock::at(T0);
        let now = LAYOUT.time_part(T0).unwrap();
        let mut previous = None;
        for i in 0..LAYOUT.ids_per_ms() * 3 {
            let parts = one(&slot, &mut clock).unwrap();
            assert_eq!(parts.time_part, now + i / LAYOUT.ids_per_ms());
            assert_eq!(parts.seq as u64, i % LAYOUT.ids_per_ms());
            assert!(previous < Some(parts.time_part << 12 | parts.seq as u64));
            previous = Some(parts.time_part << 12 | parts.seq as u64);
        }
        assert!(clock.slept.is_empty());
        assert_eq!(lead_of(&slot, &clock), 2);
    }

    #[test]
    fn a_moving_clock_restarts_the_sequence_at_zero() {
        let slot = ShardSlot::default();
        let mut clock = FakeClock::at(T0);
        one(&slot, &mut clock).unwrap();
        one(&slot, &mut clock).unwrap();
        clock.now += 5;
        let parts = one(&slot, &mut clock).unwrap();
        assert_eq!((parts.time_part, parts.seq), (LAYOUT.time_part(T0).unwrap() + 5, 0));
    }

    #[test]
    fn a_small_step_back_continues_ahead_without_waiting() {
        let slot = ShardSlot::default();
        let mut clock = FakeClock::at(T0);
        let before = one(&slot, &mut clock).unwrap();
        clock.now -= 1500; // within max_lead_ms
        let after = one(&slot, &mut clock).unwrap();
        assert_eq!((after.time_part, after.seq), (before.time_part, before.seq + 1));
        assert!(clock.slept.is_empty());
        assert_eq!(lead_of(&slot, &clock), 1500);
    }

    #[test]
    fn a_step_back_just_past_the_bound_waits_for_the_clock() {
        let slot = ShardSlot::default();
        let mut clock = FakeClock::at(T0);
        let before = one(&slot, &mut clock).unwrap();
        clock.now -= 2300; // 300 ms past the lead bound, within max_wait_ms
        let after = one(&slot, &mut clock).unwrap();
        assert_eq!(clock.slept, vec![300]);
        assert!((after.time_part, after.seq) > (before.time_part, before.seq));
        assert!(lead_of(&slot, &clock) <= POLICY.max_lead_ms as i64);
    }

    #[test]
    fn a_large_step_back_is_refused_at_once_and_issues_nothing() {
        let slot = ShardSlot::default();
        let mut clock = FakeClock::at(T0);
        one(&slot, &mut clock).unwrap();
        let counter_before = slot.last_issued.load(Relaxed);
        clock.now -= 3_600_000;
        let refusal = one(&slot, &mut clock).unwrap_err();
        let first_time_part = LAYOUT.counter_time_part(counter_before + 1);
        assert_eq!(refusal, Refusal::TooFarAhead { lead_ms: 3_600_000, first_time_part, policy: POLICY });
        assert!(clock.slept.is_empty(), "a wait that cannot help must not be slept");
        assert_eq!(slot.last_issued.load(Relaxed), counter_before);
        // Once the clock is back, generation continues above the old IDs.
        clock.now += 3_600_000;
        assert!(one(&slot, &mut clock).unwrap().time_part > LAYOUT.time_part(T0 - 1).unwrap());
    }

    #[test]
    fn sequence_overflow_borrows_up_to_the_lead_bound_then_waits() {
        let slot = ShardSlot::default();
        let mut clock = FakeClock::at(T0);
        // Exactly fill the lead bound: milliseconds now..=now+2000.
        let full = max_batch(&LAYOUT, POLICY);
        let claim = claim(&slot, &OPEN, full, &LAYOUT, POLICY, &mut clock, &mut NoKeeper).unwrap();
        assert_eq!(claim.last - claim.first + 1, full);
        assert_eq!(lead_of(&slot, &clock), 2000);
        // The next ID needs one more millisecond of clock.
        let next = one(&slot, &mut clock).unwrap();
        assert_eq!(clock.slept, vec![1]);
        assert_eq!(next.seq, 0);
        assert_eq!(lead_of(&slot, &clock), 2000);
    }

    #[test]
    fn a_shard_ahead_of_a_lowered_setting_issues_under_the_inherited_lead() {
        // A shard 30 s ahead, reserved up to there, under a setting of 2 s.
        let now = LAYOUT.time_part(T0).unwrap();
        let reservation = Reservation::default();
        reservation.publish_ceiling(now + 31_000);
        let slot = ShardSlot::default();
        slot.last_issued.store(LAYOUT.counter_at(now + 30_000), Relaxed);
        let mut clock = FakeClock::at(T0);
        let next =
            |clock: &mut FakeClock| claim(&slot, &reservation, 1, &LAYOUT, POLICY, clock, &mut NoKeeper);
        // The setting alone: refused at once, the clock is 28 s short of it.
        assert!(matches!(next(&mut clock), Err(Refusal::TooFarAhead { lead_ms: 30_000, .. })));
        // An inherited lead too short changes nothing.
        reservation.inherited_max_lead_ms.store(20_000, Relaxed);
        assert!(matches!(next(&mut clock), Err(Refusal::TooFarAhead { lead_ms: 30_000, .. })));
        // One as long as the shard's lead: it goes on where it was, without waiting.
        reservation.inherited_max_lead_ms.store(60_000, Relaxed);
        let claimed = next(&mut clock).unwrap();
        assert_eq!(claimed.first, LAYOUT.counter_at(now + 30_000) + 1);
        assert!(clock.slept.is_empty());
        // Spent only once the ceiling is back within the setting's bound (2,001 + 250 ms).
        let ceiling = || reservation.ceiling.load(Relaxed);
        assert!(!inherited_lead_spent(now, ceiling(), 250, POLICY.max_lead_ms));
        assert!(!inherited_lead_spent(now + 31_000 - 2_252, ceiling(), 250, POLICY.max_lead_ms));
        assert!(inherited_lead_spent(now + 31_000 - 2_251, ceiling(), 250, POLICY.max_lead_ms));
        assert_eq!(lead_in_force(POLICY.max_lead_ms, &reservation), 60_000);
        reservation.inherited_max_lead_ms.store(0, Relaxed);
        assert_eq!(lead_in_force(POLICY.max_lead_ms, &reservation), POLICY.max_lead_ms);
    }

    #[test]
    fn batches_are_consecutive_and_bounded() {
        let slot = ShardSlot::default();
        let mut clock = FakeClock::at(T0);
        let a = claim(&slot, &OPEN, 10_000, &LAYOUT, POLICY, &mut clock, &mut NoKeeper).unwrap();
        let b = claim(&slot, &OPEN, 10, &LAYOUT, POLICY, &mut clock, &mut NoKeeper).unwrap();
        assert_eq!(a.last - a.first + 1, 10_000);
        assert_eq!(b.first, a.last + 1);
        let too_many = max_batch(&LAYOUT, POLICY) + 1;
        assert_eq!(
            claim(&slot, &OPEN, too_many, &LAYOUT, POLICY, &mut clock, &mut NoKeeper),
            Err(Refusal::BatchTooLarge { count: too_many, max_count: too_many - 1 })
        );
        assert_eq!(slot.last_issued.load(Relaxed), b.last);
    }

    #[test]
    fn a_clock_before_the_epoch_is_refused() {
        let slot = ShardSlot::default();
        let mut clock = FakeClock::at(DEFAULT_EPOCH_UNIX_MS - 1);
        assert!(matches!(one(&slot, &mut clock), Err(Refusal::Clock(LayoutError::BeforeEpoch { .. }))));
        assert_eq!(slot.last_issued.load(Relaxed), 0);
    }

    #[test]
    fn the_end_of_the_time_range_is_refused() {
        let slot = ShardSlot::default();
        slot.last_issued.store(LAYOUT.counter_at(LAYOUT.max_time_part()) + LAYOUT.max_seq() as u64, Relaxed);
        let mut clock = FakeClock::at(LAYOUT.last_unix_ms());
        assert_eq!(one(&slot, &mut clock), Err(Refusal::Exhausted));
    }

    #[test]
    fn observe_holds_every_shard_above_the_id_within_the_bound() {
        // A reservation of this test's own: the floor it raises must not reach the others'.
        let open = Reservation::default();
        open.resume_at(0);
        open.publish_ceiling(u64::MAX);
        let (a, b) = (ShardSlot::default(), ShardSlot::default());
        let mut clock = FakeClock::at(T0);
        let now = LAYOUT.time_part(T0).unwrap();
        // An ID of another server whose clock is 150 ms ahead of this one.
        let observed = now + 150;
        let floor = check_observe(observed, &LAYOUT, POLICY, T0).unwrap();
        assert_eq!(floor, observed + 1);
        assert!(observe(&open, floor));
        for slot in [&a, &b] {
            let claimed = claim(slot, &open, 1, &LAYOUT, POLICY, &mut clock, &mut NoKeeper).unwrap();
            let time_part = LAYOUT.counter_time_part(claimed.first);
            assert!(time_part > observed, "{time_part} not above {observed}");
        }
        // An older ID changes nothing: the floor never goes down.
        assert!(observe(&open, check_observe(now - 10, &LAYOUT, POLICY, T0).unwrap()));
        assert_eq!(open.floor.load(Relaxed), floor);
        // An ID further ahead than the lead bound is refused, and nothing moves.
        let refused = check_observe(now + 2000, &LAYOUT, POLICY, T0);
        assert!(matches!(refused, Err(Refusal::TooFarAhead { lead_ms: 2001, .. })), "{refused:?}");
        assert_eq!(open.floor.load(Relaxed), floor);
        // Not yet covered by the reservation: reported, for the caller to wait for the worker.
        let reserved = Reservation::default();
        reserved.resume_at(now);
        assert!(!observe(&reserved, floor));
        assert_eq!(reserved.floor.load(Relaxed), floor);
    }

    #[test]
    fn advance_moves_forward_only_and_respects_the_bound() {
        let slot = ShardSlot::default();
        let mut clock = FakeClock::at(T0);
        let now = LAYOUT.time_part(T0).unwrap();
        let checked_advance = |first_allowed| {
            check_advance(first_allowed, &LAYOUT, POLICY, T0)
                .map(|_| assert!(advance(&slot, &OPEN, first_allowed, &LAYOUT)))
        };
        let ahead = LAYOUT.counter_at(now + 500);
        assert_eq!(check_advance(ahead, &LAYOUT, POLICY, T0), Ok(now + 500));
        checked_advance(ahead).unwrap();
        assert_eq!(one(&slot, &mut clock).unwrap().time_part, now + 500);
        // An older floor changes nothing.
        checked_advance(LAYOUT.counter_at(now - 10)).unwrap();
        assert_eq!(one(&slot, &mut clock).unwrap().seq, 1);
        let far = LAYOUT.counter_at(now + 2001);
        assert!(matches!(checked_advance(far), Err(Refusal::TooFarAhead { lead_ms: 2001, .. })));
        assert_eq!(one(&slot, &mut clock).unwrap().seq, 2);
    }

    #[test]
    fn an_advance_is_covered_unless_the_ceiling_was_lowered_under_it_first() {
        let shards = [ShardSlot::default()];
        let reservation = Reservation::default();
        let now = LAYOUT.time_part(T0).unwrap();
        let jumped = now + 3_600_000 + 500;
        let first_allowed = LAYOUT.counter_at(now + 1000);
        assert_eq!(check_advance(first_allowed, &LAYOUT, POLICY, T0), Ok(now + 1000));
        // The worker lowers the ceiling first: the advance sees it, and is not covered (the
        // counter moved all the same: the caller waits for the worker and advances again).
        reservation.ceiling.store(jumped, Relaxed);
        assert_eq!(lower_ceiling(now, &reservation, &shards, &LAYOUT, 500, 2000), Some(now + 500));
        assert!(!advance(&shards[0], &reservation, first_allowed, &LAYOUT));
        assert_eq!(shards[0].last_issued.load(Relaxed), first_allowed - 1);
        reservation.publish_ceiling(now + 1500);
        assert!(advance(&shards[0], &reservation, first_allowed, &LAYOUT));
        // The advance first: the worker sees the moved counter and keeps the ceiling.
        reservation.ceiling.store(jumped, Relaxed);
        let further = LAYOUT.counter_at(now + 2000);
        assert!(advance(&shards[0], &reservation, further, &LAYOUT));
        assert_eq!(lower_ceiling(now, &reservation, &shards, &LAYOUT, 500, 2000), None);
        assert_eq!(reservation.ceiling.load(Relaxed), jumped);
    }

    /// `snowflake_advance` and `snowflake_observe` return only once the reservation covers
    /// what they moved: until then the step says to wait past it, and the shard (or the floor)
    /// has not moved.
    #[test]
    fn an_advance_or_an_observation_is_done_only_once_the_reservation_covers_it() {
        let shard = ShardSlot::default();
        let reservation = Reservation::default();
        let now = LAYOUT.time_part(T0).unwrap();
        reservation.publish_ceiling(now + 500);
        let first_allowed = LAYOUT.counter_at(now + 1000);
        assert_eq!(advance_step(&shard, &reservation, first_allowed, &LAYOUT), Forward::WaitPast(now + 1000));
        assert_eq!(shard.last_issued.load(Relaxed), 0, "moved before the reservation covered it");
        assert_eq!(observe_step(&reservation, now + 1000), Forward::WaitPast(now + 1000));
        assert_eq!(reservation.floor.load(Relaxed), 0, "raised before the reservation covered it");
        reservation.publish_ceiling(now + 1001);
        assert_eq!(advance_step(&shard, &reservation, first_allowed, &LAYOUT), Forward::Done);
        assert_eq!(shard.last_issued.load(Relaxed), first_allowed - 1);
        assert_eq!(observe_step(&reservation, now + 1000), Forward::Done);
        assert_eq!(reservation.floor.load(Relaxed), now + 1000);
    }

    #[test]
    fn concurrent_threads_never_share_an_id_and_each_sees_increasing_ids() {
        struct SystemClock;
        impl Clock for SystemClock {
            fn now_unix_ms(&mut self) -> i64 {
                let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
                since.unwrap().as_millis() as i64
            }
            fn sleep_ms(&mut self, ms: u64) {
                std::thread::sleep(std::time::Duration::from_millis(ms));
            }
        }
        let slot = ShardSlot::default();
        let per_thread = 100_000;
        let all: Vec<Vec<u64>> = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..4)
                .map(|_| {
                    scope.spawn(|| {
                        (0..per_thread)
                            .map(|_| {
                                claim(&slot, &OPEN, 1, &LAYOUT, POLICY, &mut SystemClock, &mut NoKeeper)
                                    .unwrap()
                                    .first
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        for ids in &all {
            assert!(ids.windows(2).all(|w| w[0] < w[1]));
        }
        let mut merged: Vec<u64> = all.concat();
        merged.sort_unstable();
        merged.dedup();
        assert_eq!(merged.len(), 4 * per_thread);
    }

    #[test]
    fn the_worker_keeps_the_ceiling_ahead_of_the_clock_and_of_waiting_calls() {
        let reservation = Reservation::default();
        assert_eq!(next_ceiling(1000, &reservation, &LAYOUT, 500, 2000, 0), Some(1500));
        reservation.ceiling.store(1500, Relaxed);
        // Still more than half the window ahead: no write.
        assert_eq!(next_ceiling(1200, &reservation, &LAYOUT, 500, 2000, 0), None);
        assert_eq!(next_ceiling(1300, &reservation, &LAYOUT, 500, 2000, 0), Some(1800));
        // A call waits to issue up to 2500: reserved at once with headroom, as far as the
        // lead bound allows.
        reservation.wanted.store(2501, Relaxed);
        assert_eq!(next_ceiling(1200, &reservation, &LAYOUT, 500, 2000, 0), Some(3001));
        reservation.wanted.store(9000, Relaxed);
        assert_eq!(next_ceiling(1200, &reservation, &LAYOUT, 500, 2000, 0), Some(3701));
        // Never past the last time part.
        reservation.wanted.store(0, Relaxed);
        assert_eq!(
            next_ceiling(LAYOUT.max_time_part(), &reservation, &LAYOUT, 500, 2000, 0),
            Some(LAYOUT.max_time_part() + 1)
        );
    }

    #[test]
    fn a_slow_recording_widens_the_headroom_up_to_the_lead_bound() {
        let reservation = Reservation::default();
        // The last recording took 100 ms: 500 + 2 x 100 ahead, renewed at half of that.
        assert_eq!(next_ceiling(1000, &reservation, &LAYOUT, 500, 2000, 100), Some(1700));
        reservation.ceiling.store(1700, Relaxed);
        assert_eq!(next_ceiling(1300, &reservation, &LAYOUT, 500, 2000, 100), None);
        assert_eq!(next_ceiling(1400, &reservation, &LAYOUT, 500, 2000, 100), Some(2100));
        // Seconds: never further than calls borrowing time could reach (2000 + 1 + 500).
        assert_eq!(next_ceiling(1400, &reservation, &LAYOUT, 500, 2000, 5000), Some(1400 + 2501));
        // Nor with a call waiting far ahead.
        reservation.wanted.store(3401, Relaxed);
        assert_eq!(next_ceiling(1400, &reservation, &LAYOUT, 500, 2000, 5000), Some(1400 + 2501));
    }

    /// The longest time a call waits for the reservation, millisecond by millisecond, while
    /// every recording of the worker takes `recording_ms` (its renewal rule as above, looked
    /// at every 50 ms, and calls issuing all the time at the clock).
    fn longest_wait_with_recordings_of(recording_ms: u64, adapts: bool) -> u64 {
        let reservation = Reservation::default();
        reservation.ceiling.store(1500, Relaxed);
        let (mut recording, mut next_look, mut measured) = (None::<(u64, u64)>, 1000, 0);
        let (mut waiting_since, mut longest) = (None::<u64>, 0);
        for now in 1000..60_000 {
            if let Some((done_at, ceiling)) = recording {
                if now >= done_at {
                    reservation.publish_ceiling(ceiling);
                    (recording, measured, next_look) = (None, recording_ms, now);
                }
            }
            if recording.is_none() && now >= next_look {
                let slowness = if adapts { measured } else { 0 };
                match next_ceiling(now, &reservation, &LAYOUT, 500, 2000, slowness) {
                    Some(ceiling) => recording = Some((now + recording_ms, ceiling)),
                    None => next_look = now + 50,
                }
            }
            if now < reservation.ceiling.load(Relaxed) {
                waiting_since = None;
            } else {
                let since = *waiting_since.get_or_insert(now);
                longest = longest.max(now - since);
            }
        }
        longest
    }

    #[test]
    fn with_the_default_settings_a_disk_taking_2_s_slows_calls_and_one_taking_5_s_fails_them() {
        let defaults = ClockPolicy { max_lead_ms: 2000, max_wait_ms: 1000, max_reservation_wait_ms: 5000 };
        let fast = longest_wait_with_recordings_of(5, true);
        assert_eq!(fast, 0, "a fast disk never makes a call wait");
        let slow = longest_wait_with_recordings_of(2000, true);
        // The longest wait is the first slow recording's: it was sized for a fast disk, and
        // the next one starts only when it ends. Then the headroom is wide.
        assert!(slow + 1000 < defaults.max_reservation_wait_ms, "2 s recordings: calls wait {slow} ms");
        let stuck = longest_wait_with_recordings_of(5000, true);
        assert!(stuck > defaults.max_reservation_wait_ms, "5 s recordings: calls wait {stuck} ms");
        // Past max_lead_ms + reserve_ms (2.5 s), the widest headroom: each new ceiling is
        // behind the clock when it is published, and no wait is long enough.
        let past_headroom = longest_wait_with_recordings_of(2600, true);
        assert!(past_headroom > 50_000, "2.6 s recordings: calls wait {past_headroom} ms");
        // Without the wider headroom, each new ceiling would be behind the clock on arrival.
        let fixed = longest_wait_with_recordings_of(2000, false);
        assert!(fixed > defaults.max_reservation_wait_ms, "fixed headroom: calls wait {fixed} ms");
    }

    #[test]
    fn after_a_restart_ahead_of_the_clock_nothing_is_reserved_until_wanted() {
        let reservation = Reservation::default();
        reservation.resume_at(5000);
        // The clock is behind the recorded ceiling: writing more would only push IDs ahead.
        assert_eq!(next_ceiling(1000, &reservation, &LAYOUT, 500, 2000, 0), None);
        assert_eq!(next_ceiling(4700, &reservation, &LAYOUT, 500, 2000, 0), None);
        assert_eq!(next_ceiling(4800, &reservation, &LAYOUT, 500, 2000, 0), Some(5300));
        // A call (allowed a long lead) waits to issue at the floor.
        reservation.wanted.store(5001, Relaxed);
        assert_eq!(next_ceiling(1000, &reservation, &LAYOUT, 500, 3_600_000, 0), Some(5501));
    }

    #[test]
    fn a_ceiling_left_ahead_by_a_clock_jump_is_lowered_unless_ids_were_issued_up_there() {
        let shards = [ShardSlot::default(), ShardSlot::default()];
        let reservation = Reservation::default();
        let now = LAYOUT.time_part(T0).unwrap();
        // The clock read an hour ahead while the server was idle; the worker reserved there.
        reservation.resume_at(0);
        reservation.ceiling.store(now + 3_600_000 + 500, Relaxed);
        shards[0].last_issued.store(LAYOUT.counter_at(now - 10), Relaxed);
        // Back to normal: lowered to the usual headroom above the clock.
        assert_eq!(lower_ceiling(now, &reservation, &shards, &LAYOUT, 500, 2000), Some(now + 500));
        assert_eq!(reservation.ceiling.load(Relaxed), now + 500);
        // Where normal work puts it (a call borrowing up to the lead bound), it stays.
        reservation.ceiling.store(now + 2000 + 1 + 500, Relaxed);
        assert_eq!(lower_ceiling(now, &reservation, &shards, &LAYOUT, 500, 2000), None);

        // A shard issued an ID at the jump: the ceiling stays where it was.
        let high = now + 3_600_000 + 500;
        reservation.ceiling.store(high, Relaxed);
        shards[1].last_issued.store(LAYOUT.counter_at(now + 3_600_000), Relaxed);
        assert_eq!(lower_ceiling(now, &reservation, &shards, &LAYOUT, 500, 2000), None);
        assert_eq!(reservation.ceiling.load(Relaxed), high);

        // Never below the floor (what ran before the start is unknown up to there), and not
        // while the floor lies further ahead of the clock than `reserve_ms`: held there, the
        // lowering would date its writing too late for the standbys (F13). Lowered once the
        // clock comes within `reserve_ms` of it.
        shards[1].last_issued.store(0, Relaxed);
        reservation.floor.store(now + 100_000, Relaxed);
        assert_eq!(lower_ceiling(now, &reservation, &shards, &LAYOUT, 500, 2000), None);
        assert_eq!(reservation.ceiling.load(Relaxed), high);
        let later = now + 100_000 - 500;
        assert_eq!(lower_ceiling(later, &reservation, &shards, &LAYOUT, 500, 2000), Some(now + 100_000));
    }

    #[test]
    fn statistics_count_ids_and_waits() {
        let slot = ShardSlot::default();
        let mut clock = FakeClock::at(T0);
        claim(&slot, &OPEN, 10, &LAYOUT, POLICY, &mut clock, &mut NoKeeper).unwrap();
        one(&slot, &mut clock).unwrap();
        assert_eq!(slot.issued.load(Relaxed), 11);
        clock.now -= 2300;
        one(&slot, &mut clock).unwrap();
        assert_eq!((slot.waits.load(Relaxed), slot.wait_ms.load(Relaxed)), (1, 300));
        clock.now -= 3_600_000;
        one(&slot, &mut clock).unwrap_err();
        assert_eq!(slot.issued.load(Relaxed), 12, "a refusal counts no ID");
    }

    #[test]
    fn nothing_is_issued_until_a_ceiling_is_reserved_and_never_below_the_floor() {
        let slot = ShardSlot::default();
        let reservation = Reservation::default();
        let now = LAYOUT.time_part(T0).unwrap();
        // After a restart whose recorded ceiling is 1.5 s ahead of the clock.
        reservation.resume_at(now + 1500);
        let mut clock = FakeClock::at(T0);
        let refusal = claim(&slot, &reservation, 1, &LAYOUT, POLICY, &mut clock, &mut NoKeeper).unwrap_err();
        assert!(matches!(refusal, Refusal::NotReserved { ceiling, .. } if ceiling == now + 1500));
        assert_eq!(slot.last_issued.load(Relaxed), 0);
        // The worker extends the ceiling: IDs resume at the floor, above all earlier ones.
        // (The refused call waited on the fake clock; the next one starts at the same time.)
        clock.now = T0;
        reservation.ceiling.store(now + 3000, Relaxed);
        let first = claim(&slot, &reservation, 1, &LAYOUT, POLICY, &mut clock, &mut NoKeeper).unwrap().first;
        assert_eq!(LAYOUT.counter_time_part(first), now + 1500);
    }

    #[test]
    fn a_published_ceiling_only_rises_and_a_promotion_resumes_at_its_guard() {
        let slot = ShardSlot::default();
        let reservation = Reservation::default();
        let now = LAYOUT.time_part(T0).unwrap();
        reservation.resume_at(now - 100);
        reservation.publish_ceiling(now + 500);
        // A late publication of an older ceiling changes nothing.
        reservation.publish_ceiling(now + 400);
        assert_eq!(reservation.ceiling.load(Relaxed), now + 500);
        let mut clock = FakeClock::at(T0);
        assert_eq!(
            claim(&slot, &reservation, 1, &LAYOUT, POLICY, &mut clock, &mut NoKeeper).unwrap().first,
            LAYOUT.counter_at(now)
        );
        // A promotion's guard, a second ahead: nothing is issued until a ceiling above it is
        // published, and then nothing below it.
        reservation.resume_at(now + 1000);
        assert_eq!(
            (reservation.floor.load(Relaxed), reservation.ceiling.load(Relaxed)),
            (now + 1000, now + 1000)
        );
        let no_wait = ClockPolicy { max_reservation_wait_ms: 0, ..POLICY };
        let refusal = claim(&slot, &reservation, 1, &LAYOUT, no_wait, &mut clock, &mut NoKeeper);
        assert!(matches!(refusal, Err(Refusal::NotReserved { time_part, .. }) if time_part == now + 1000));
        reservation.publish_ceiling(now + 1500);
        let mut clock = FakeClock::at(T0);
        let first = claim(&slot, &reservation, 1, &LAYOUT, POLICY, &mut clock, &mut NoKeeper).unwrap().first;
        assert_eq!(first, LAYOUT.counter_at(now + 1000));
    }

    #[test]
    fn a_claim_waits_for_the_ceiling_to_pass_and_never_reaches_it() {
        let slot = ShardSlot::default();
        let reservation = Reservation::default();
        let now = LAYOUT.time_part(T0).unwrap();
        reservation.ceiling.store(now + 10, Relaxed);
        let mut clock = FakeClock::at(T0);
        // 12 ms of IDs: the last would be at now + 11, past the ceiling.
        let refusal = claim(&slot, &reservation, 12 * 4096, &LAYOUT, POLICY, &mut clock, &mut NoKeeper);
        // No worker moves the ceiling, so the wait runs out; the call said what it wanted.
        assert!(matches!(refusal, Err(Refusal::NotReserved { ceiling, .. }) if ceiling == now + 10));
        assert_eq!(slot.last_issued.load(Relaxed), 0);
        assert!(reservation.wanted.load(Relaxed) > now + 11);
        // What fits below the ceiling is issued without waiting.
        let mut clock = FakeClock::at(T0);
        let claimed = claim(&slot, &reservation, 4096, &LAYOUT, POLICY, &mut clock, &mut NoKeeper).unwrap();
        assert!(LAYOUT.counter_time_part(claimed.last) < now + 10);
        assert!(clock.slept.is_empty());
    }

    #[test]
    fn a_call_that_waited_for_the_clock_still_has_its_whole_reservation_wait() {
        // After a restart 8 s ahead of the clock, nothing reserved beyond: a call allowed 10 s
        // for the clock waits 6 s for it, then asks the worker, with its 5 s still whole.
        let slot = ShardSlot::default();
        let reservation = Reservation::default();
        let now = LAYOUT.time_part(T0).unwrap();
        reservation.resume_at(now + 8000);
        let policy = ClockPolicy { max_lead_ms: 2000, max_wait_ms: 10_000, max_reservation_wait_ms: 5000 };
        let mut clock = FakeClock::at(T0);
        let claimed = claim(&slot, &reservation, 1, &LAYOUT, policy, &mut clock, &mut InstantWorker).unwrap();
        assert_eq!(LAYOUT.counter_time_part(claimed.first), now + 8000);
        assert_eq!(clock.slept, vec![6000, 1]);
    }

    #[test]
    fn a_borrowing_claim_gets_its_reservation_from_the_worker() {
        let slot = ShardSlot::default();
        let reservation = Reservation::default();
        let now = LAYOUT.time_part(T0).unwrap();
        reservation.ceiling.store(now + 10, Relaxed);
        let mut clock = FakeClock::at(T0);
        let claimed =
            claim(&slot, &reservation, 100 * 4096, &LAYOUT, POLICY, &mut clock, &mut InstantWorker).unwrap();
        // One millisecond of waiting for the worker, then 100 ms of IDs from there.
        assert_eq!(LAYOUT.counter_time_part(claimed.last), now + 100);
        assert!(reservation.ceiling.load(Relaxed) > now + 100);
        assert_eq!(clock.slept, vec![1]);
    }

    #[test]
    fn a_record_keeps_only_lead_settings_that_exceed_the_servers_own() {
        let own = LeadSettings { max_lead_ms: 2_000, reserve_ms: 250 };
        let primary = LeadSettings { max_lead_ms: 60_000, reserve_ms: 250 };
        assert_eq!(own.bound_ms(), 2_251);
        assert_eq!(lead_to_record(Some(primary), own), Some(primary));
        // Nothing to keep: none replayed (records before 0.8.0), the same, or smaller ones.
        assert_eq!(lead_to_record(None, own), None);
        assert_eq!(lead_to_record(Some(own), own), None);
        assert_eq!(lead_to_record(Some(LeadSettings { max_lead_ms: 1_000, reserve_ms: 100 }), own), None);
        // A longer reserve alone makes a longer bound: the promotion guard needs it.
        let longer_reserve = LeadSettings { max_lead_ms: 2_000, reserve_ms: 1_000 };
        assert_eq!(lead_to_record(Some(longer_reserve), own), Some(longer_reserve));
        // A larger max_lead_ms with a bound no longer: claims still need the lead kept.
        let larger_lead = LeadSettings { max_lead_ms: 2_200, reserve_ms: 0 };
        assert!(larger_lead.bound_ms() < own.bound_ms());
        assert_eq!(lead_to_record(Some(larger_lead), own), Some(larger_lead));
    }
}
