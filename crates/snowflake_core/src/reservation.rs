//! The durable reservation's shared state: the window of time parts a server may issue
//! (`floor <= t < ceiling`), the time part a waiting call wants reserved, and the handle that
//! wakes its keeper. The rules that move it are the generator's (`generator.rs`: claims,
//! `next_ceiling`, `lower_ceiling`) and the horizon's (`horizon.rs` raises the floor); the
//! orderings of its words are argued at the top of `generator.rs`.

use crate::sync::{
    AtomicU64, AtomicUsize,
    Ordering::{Relaxed, Release, SeqCst},
};

/// The durable window of time parts this server may hand out: `floor <= t < ceiling`.
/// Read on every call, written a few times a second, so it has its own cache line.
#[repr(C, align(64))]
#[derive(Default)]
pub struct Reservation {
    /// Nothing at or above `ceiling` is issued before `ceiling` is on disk.
    pub ceiling: AtomicU64,
    /// Nothing below `floor` is issued: the ceiling recorded before this server started
    /// (or replayed from a primary's WAL, on a promoted standby).
    pub floor: AtomicU64,
    /// The highest time part + 1 a call is waiting to issue: the worker reserves up to it.
    pub wanted: AtomicU64,
    /// Opaque handle the worker leaves for callers to wake it (its latch); 0: none.
    pub worker: AtomicUsize,
    /// A `max_lead_ms` larger than the setting, kept while IDs this server must stay above
    /// lie further ahead of the clock than the setting allows (0: none, the setting holds).
    /// Set by the worker when the setting is lowered under shards already running further
    /// ahead, and at a promotion from a primary that ran with a larger one; dropped by it once
    /// the ceiling is back within what the setting allows (`generator::lead_in_force`). Read by
    /// claims only once past the setting, so the hot path never loads it. Relaxed: it bounds how
    /// far a claim may borrow, never what is reserved; a claim that reads a stale value waits
    /// (or is refused) as under the setting, or issues below a ceiling already recorded.
    pub inherited_max_lead_ms: AtomicU64,
    /// The ceiling of the last record the worker logged in WAL since shared memory was created
    /// (0: none yet), published or not: a ceiling logged whose file write failed is never
    /// published, and a standby reads the next record below it as a lowering
    /// (`resume::renewal`, finding F13). A primary's worker logs one at its start (once the
    /// server has issued), so it is known before any renewal. Only the worker writes and reads
    /// it, one process at a time (a restarted worker starts after the one before it exited):
    /// Relaxed.
    pub last_logged: AtomicU64,
}

impl Reservation {
    /// Starts both bounds at a recorded ceiling: nothing can be issued until the worker
    /// has made a new ceiling durable.
    ///
    /// The floor is published before the ceiling, which is stored with Release: a claim that
    /// sees this ceiling, or one raised after it (`publish_ceiling`, whichever thread raises
    /// it: each raise is a read-modify-write, which continues the release), sees the floor.
    pub fn resume_at(&self, recorded_ceiling: u64) {
        self.floor.fetch_max(recorded_ceiling, Relaxed);
        self.ceiling.fetch_max(recorded_ceiling, Release);
    }

    /// After a promotion whose replay ended on the old primary's clean stop (a planned
    /// switchover): claims may start at `stopped_at`, the last ceiling the old primary
    /// recorded, above every ID it issued, where the replay left the floor higher (raised to a
    /// bound for WAL that might not have arrived, which here all did). Lowers the floor only,
    /// and only from the value the replay left. The ceiling, recorded durably, stays, so
    /// whichever floor a racing claim reads, it issues above the old primary's IDs and below a
    /// recorded ceiling. An observation (`observe`) must not race it (it could be lowered
    /// under a no-op raise): the extension's waits for the promotion's guard to be recorded.
    pub fn resume_after_clean_stop(&self, stopped_at: u64) {
        let replayed = self.floor.load(SeqCst);
        if stopped_at < replayed {
            let _ = self.floor.compare_exchange(replayed, stopped_at, SeqCst, Relaxed);
        }
    }

    /// Publishes a ceiling the worker has recorded durably: claims may issue below it from
    /// now on. Never lowers the ceiling (`lower_ceiling` does that). Release, so that a claim
    /// seeing it also sees the floor published before it (`resume_at`, at a promotion), by
    /// itself: not only while every write since `resume_at` was a read-modify-write.
    pub fn publish_ceiling(&self, recorded_ceiling: u64) {
        self.ceiling.fetch_max(recorded_ceiling, Release);
    }

    /// Asks the keeper to reserve past `time_part`: raises `wanted` to it (never lowers it)
    /// and wakes the keeper. The one way anything asks for more reservation: claims that
    /// reach the ceiling (`claim`), and the extension's `snowflake_advance`. Relaxed: the
    /// keeper only reads `wanted` to decide how far to reserve, and is woken again by the
    /// next call that still finds the ceiling too close.
    #[inline(always)]
    pub fn ask_for(&self, time_part: u64, keeper: &mut impl ReservationKeeper, now: u64) {
        self.wanted.fetch_max(time_part + 1, Relaxed);
        keeper.extend_soon(self, now);
    }

    /// Sets both bounds to a ceiling replayed from WAL, higher or lower than before: records
    /// are replayed in the order they were decided, so the last one read is the one that
    /// holds (a lower one was written only once nothing had been issued above it).
    /// The floor first, then the ceiling, both SeqCst (so the ceiling with Release): a call on
    /// a hot standby that sees a higher ceiling replayed sees its floor, and issues nothing.
    pub fn replay(&self, recorded_ceiling: u64) {
        self.floor.store(recorded_ceiling, SeqCst);
        self.ceiling.store(recorded_ceiling, SeqCst);
    }
}

/// Whoever keeps the durable reservation (in the extension, its background worker). A claim
/// that finds the ceiling too close asks it for more (`Reservation::ask_for`), then waits for
/// the new ceiling.
pub trait ReservationKeeper {
    /// `Reservation::wanted` went up; `now` is the clock's time part as the claim read it.
    fn extend_soon(&mut self, reservation: &Reservation, now: u64);
}

/// For claims that never wait for the reservation (`max_wait_ms = 0`: they are refused
/// instead, and the caller takes a path that tells the keeper).
pub struct NoKeeper;

impl ReservationKeeper for NoKeeper {
    #[inline(always)]
    fn extend_soon(&mut self, _reservation: &Reservation, _now: u64) {}
}
