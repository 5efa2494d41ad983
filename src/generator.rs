//! The generator's rules: how a shard's counter moves, and the clock policy.
//!
//! Pure Rust over one `AtomicU64` per shard (the counter of the last ID issued, see
//! `layout.rs`), so the rules are tested with a fake clock by plain `#[test]`s and the
//! same code runs on PostgreSQL shared memory.
//!
//! # Clock policy
//! * The next counter is `max(last + 1, first counter of the wall clock's millisecond)`:
//!   the time part is the wall clock, or the last time part when the clock is behind it.
//! * When a millisecond's sequence is used up, or the clock went backwards, the counter
//!   runs on into the following milliseconds ("borrows" time) while the time part of the
//!   last ID handed out stays at most `max_lead_ms` ahead of the wall clock.
//! * Past that bound the caller sleeps until the clock has caught up, for at most
//!   `max_wait_ms` in all; a wait that could not be long enough is refused at once.
//! * Nothing is issued unless the compare-and-swap that claims it succeeds, so a refused
//!   call issues nothing and no ID is ever issued twice or out of order.
//!
//! # Why compare-and-swap and not a lock
//! One word holds the whole state, so one CAS both checks and claims; no lock is held
//! across the clock read, and a backend that is descheduled mid-call blocks nobody.
//! Relaxed ordering suffices: every operation is on this one word, whose modification
//! order is total, and no other memory is published through it.

use crate::layout::{Layout, LayoutError, MAX_TIME_PART};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// The two reloadable limits of the clock policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClockPolicy {
    /// How far the time part of an ID may run ahead of the wall clock.
    pub max_lead_ms: u64,
    /// How long one call may sleep waiting for the clock before it gives up.
    pub max_wait_ms: u64,
}

/// Where the generator reads the time and how it sleeps.
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
    /// The wall clock is before the epoch or past the 41-bit range.
    Clock(LayoutError),
    /// Issuing would put the time part more than `max_lead_ms` ahead of the clock, and
    /// waiting `max_wait_ms` could not bring it within the bound.
    TooFarAhead { lead_ms: u64, policy: ClockPolicy },
    /// More IDs than fit in `max_lead_ms` of borrowed time.
    BatchTooLarge { count: u64, max_count: u64 },
    /// The time part would pass the last millisecond 41 bits can hold.
    Exhausted,
}

/// The largest batch one call may claim: whatever fits between the clock's millisecond and
/// the lead bound. Larger batches could never be issued without breaking the bound.
pub fn max_batch(layout: &Layout, policy: ClockPolicy) -> u64 {
    (policy.max_lead_ms + 1) * layout.ids_per_ms()
}

/// Claims `count` consecutive counters of one shard (`count >= 1`).
pub fn claim(
    slot: &AtomicU64,
    count: u64,
    layout: &Layout,
    policy: ClockPolicy,
    clock: &mut impl Clock,
) -> Result<Claim, Refusal> {
    debug_assert!(count >= 1);
    let max_count = max_batch(layout, policy);
    if count > max_count {
        return Err(Refusal::BatchTooLarge { count, max_count });
    }
    let mut waited_ms = 0;
    loop {
        let now = layout
            .time_part(clock.now_unix_ms())
            .map_err(Refusal::Clock)?;
        let mut last_issued = slot.load(Relaxed);
        let lead_ms = loop {
            let first = (last_issued + 1).max(layout.counter_at(now));
            let last = first + (count - 1);
            let last_time_part = layout.counter_time_part(last);
            if last_time_part > MAX_TIME_PART {
                return Err(Refusal::Exhausted);
            }
            // Never negative: `first` is at least the clock's own millisecond.
            let lead_ms = last_time_part - now;
            if lead_ms > policy.max_lead_ms {
                break lead_ms;
            }
            // On failure `now` is reused: it is still a valid lower bound, and contended
            // callers retry without another clock read.
            match slot.compare_exchange_weak(last_issued, last, Relaxed, Relaxed) {
                Ok(_) => {
                    return Ok(Claim {
                        first,
                        last,
                        waited_ms,
                    })
                }
                Err(newer) => last_issued = newer,
            }
        };
        let wait_ms = lead_ms - policy.max_lead_ms;
        if waited_ms + wait_ms > policy.max_wait_ms {
            return Err(Refusal::TooFarAhead { lead_ms, policy });
        }
        clock.sleep_ms(wait_ms);
        waited_ms += wait_ms;
    }
}

/// Makes every later claim on `slot` start at `first_allowed` or above (never moves the
/// counter back). Refused when that counter is further ahead of the clock than the lead
/// bound: the shard could issue nothing until the clock caught up.
pub fn advance(
    slot: &AtomicU64,
    first_allowed: u64,
    layout: &Layout,
    policy: ClockPolicy,
    now_unix_ms: i64,
) -> Result<(), Refusal> {
    let now = layout.time_part(now_unix_ms).map_err(Refusal::Clock)?;
    let time_part = layout.counter_time_part(first_allowed);
    if time_part > MAX_TIME_PART {
        return Err(Refusal::Exhausted);
    }
    let lead_ms = time_part.saturating_sub(now);
    if lead_ms > policy.max_lead_ms {
        return Err(Refusal::TooFarAhead { lead_ms, policy });
    }
    slot.fetch_max(first_allowed.saturating_sub(1), Relaxed);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{Parts, DEFAULT_EPOCH_UNIX_MS};

    const LAYOUT: Layout = Layout::new(DEFAULT_EPOCH_UNIX_MS, 10);
    const POLICY: ClockPolicy = ClockPolicy {
        max_lead_ms: 2000,
        max_wait_ms: 1000,
    };
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

    fn one(slot: &AtomicU64, clock: &mut FakeClock) -> Result<Parts, Refusal> {
        let claim = claim(slot, 1, &LAYOUT, POLICY, clock)?;
        assert_eq!(claim.first, claim.last);
        Ok(LAYOUT.decode(LAYOUT.id_of_counter(7, claim.first)).unwrap())
    }

    fn lead_of(slot: &AtomicU64, clock: &FakeClock) -> i64 {
        let time_part = LAYOUT.counter_time_part(slot.load(Relaxed)) as i64;
        time_part - LAYOUT.time_part(clock.now).unwrap() as i64
    }

    #[test]
    fn a_still_clock_fills_the_millisecond_then_borrows_the_next() {
        let slot = AtomicU64::new(0);
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
        let slot = AtomicU64::new(0);
        let mut clock = FakeClock::at(T0);
        one(&slot, &mut clock).unwrap();
        one(&slot, &mut clock).unwrap();
        clock.now += 5;
        let parts = one(&slot, &mut clock).unwrap();
        assert_eq!(
            (parts.time_part, parts.seq),
            (LAYOUT.time_part(T0).unwrap() + 5, 0)
        );
    }

    #[test]
    fn a_small_step_back_continues_ahead_without_waiting() {
        let slot = AtomicU64::new(0);
        let mut clock = FakeClock::at(T0);
        let before = one(&slot, &mut clock).unwrap();
        clock.now -= 1500; // within max_lead_ms
        let after = one(&slot, &mut clock).unwrap();
        assert_eq!(
            (after.time_part, after.seq),
            (before.time_part, before.seq + 1)
        );
        assert!(clock.slept.is_empty());
        assert_eq!(lead_of(&slot, &clock), 1500);
    }

    #[test]
    fn a_step_back_just_past_the_bound_waits_for_the_clock() {
        let slot = AtomicU64::new(0);
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
        let slot = AtomicU64::new(0);
        let mut clock = FakeClock::at(T0);
        one(&slot, &mut clock).unwrap();
        let counter_before = slot.load(Relaxed);
        clock.now -= 3_600_000;
        let refusal = one(&slot, &mut clock).unwrap_err();
        assert_eq!(
            refusal,
            Refusal::TooFarAhead {
                lead_ms: 3_600_000,
                policy: POLICY
            }
        );
        assert!(
            clock.slept.is_empty(),
            "a wait that cannot help must not be slept"
        );
        assert_eq!(slot.load(Relaxed), counter_before);
        // Once the clock is back, generation continues above the old IDs.
        clock.now += 3_600_000;
        assert!(one(&slot, &mut clock).unwrap().time_part > LAYOUT.time_part(T0 - 1).unwrap());
    }

    #[test]
    fn sequence_overflow_borrows_up_to_the_lead_bound_then_waits() {
        let slot = AtomicU64::new(0);
        let mut clock = FakeClock::at(T0);
        // Exactly fill the lead bound: milliseconds now..=now+2000.
        let full = max_batch(&LAYOUT, POLICY);
        let claim = claim(&slot, full, &LAYOUT, POLICY, &mut clock).unwrap();
        assert_eq!(claim.last - claim.first + 1, full);
        assert_eq!(lead_of(&slot, &clock), 2000);
        // The next ID needs one more millisecond of clock.
        let next = one(&slot, &mut clock).unwrap();
        assert_eq!(clock.slept, vec![1]);
        assert_eq!(next.seq, 0);
        assert_eq!(lead_of(&slot, &clock), 2000);
    }

    #[test]
    fn batches_are_consecutive_and_bounded() {
        let slot = AtomicU64::new(0);
        let mut clock = FakeClock::at(T0);
        let a = claim(&slot, 10_000, &LAYOUT, POLICY, &mut clock).unwrap();
        let b = claim(&slot, 10, &LAYOUT, POLICY, &mut clock).unwrap();
        assert_eq!(a.last - a.first + 1, 10_000);
        assert_eq!(b.first, a.last + 1);
        let too_many = max_batch(&LAYOUT, POLICY) + 1;
        assert_eq!(
            claim(&slot, too_many, &LAYOUT, POLICY, &mut clock),
            Err(Refusal::BatchTooLarge {
                count: too_many,
                max_count: too_many - 1
            })
        );
        assert_eq!(slot.load(Relaxed), b.last);
    }

    #[test]
    fn a_clock_before_the_epoch_is_refused() {
        let slot = AtomicU64::new(0);
        let mut clock = FakeClock::at(DEFAULT_EPOCH_UNIX_MS - 1);
        assert!(matches!(
            one(&slot, &mut clock),
            Err(Refusal::Clock(LayoutError::BeforeEpoch { .. }))
        ));
        assert_eq!(slot.load(Relaxed), 0);
    }

    #[test]
    fn the_end_of_the_41_bit_range_is_refused() {
        let slot = AtomicU64::new(LAYOUT.counter_at(MAX_TIME_PART) + LAYOUT.max_seq() as u64);
        let mut clock = FakeClock::at(LAYOUT.last_unix_ms());
        assert_eq!(one(&slot, &mut clock), Err(Refusal::Exhausted));
    }

    #[test]
    fn advance_moves_forward_only_and_respects_the_bound() {
        let slot = AtomicU64::new(0);
        let mut clock = FakeClock::at(T0);
        let now = LAYOUT.time_part(T0).unwrap();
        let ahead = LAYOUT.counter_at(now + 500);
        advance(&slot, ahead, &LAYOUT, POLICY, T0).unwrap();
        assert_eq!(one(&slot, &mut clock).unwrap().time_part, now + 500);
        // An older floor changes nothing.
        advance(&slot, LAYOUT.counter_at(now - 10), &LAYOUT, POLICY, T0).unwrap();
        assert_eq!(one(&slot, &mut clock).unwrap().seq, 1);
        let far = LAYOUT.counter_at(now + 2001);
        assert!(matches!(
            advance(&slot, far, &LAYOUT, POLICY, T0),
            Err(Refusal::TooFarAhead { lead_ms: 2001, .. })
        ));
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
        let slot = AtomicU64::new(0);
        let per_thread = 100_000;
        let all: Vec<Vec<u64>> = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..4)
                .map(|_| {
                    scope.spawn(|| {
                        (0..per_thread)
                            .map(|_| {
                                claim(&slot, 1, &LAYOUT, POLICY, &mut SystemClock)
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
}
