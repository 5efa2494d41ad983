//! Calls that wait (`snowflake_nextval`'s guarded path, src/api/issuing.rs): `generator::claim`
//! under the whole clock policy, `max_wait_ms` for the clock and `max_reservation_wait_ms` for
//! the worker, instead of the fast path's refusal at once. The call sleeps through `Clock::
//! sleep_ms`, and asks the worker for more through its keeper (`Reservation::ask_for`, which in
//! the extension sets the worker's latch).
//!
//! While it sleeps, virtual time passes, one millisecond at a time, and its server's worker
//! takes its turns as the real one does (`src/postgres/reservation/worker.rs`): woken by the
//! call's latch, or by its 50 ms timeout, it looks at the lease and renews (`worker_tick`, the
//! same recording steps, WAL record, file write and faults as at a tick); a recording whose
//! fdatasync has not returned blocks it until it does. The rest of the world goes on too: every
//! `TICK_MS` of the sleep is a tick (`tick_now`: replication, the HA managers, the other
//! clients, whose calls do not wait meanwhile), so that a call that sleeps seconds does not
//! hold the cluster still around it (the first try did: a paused primary's manager answered
//! the lease after its key had expired, since no promotion came while the call slept). The
//! schedule's next event waits for the call to return. A crash meanwhile (cut into a recording,
//! or a zombie stopped by its manager) ends the call with its process: its clock stands still,
//! it runs out its budget at once, and whatever it returns is dropped, as a backend killed
//! mid-call returns nothing.
//!
//! The check (`refused_without_waiting`): a call refused for the reservation (`NotReserved`,
//! 55000) must have waited `max_reservation_wait_ms` for it, as docs/operations.md promises,
//! whenever its worker could have recorded within that: running, its promotion's guard
//! recorded, its disks writable, no crash or stall drawn for its next recording, and its next
//! renewal one that raises the ceiling past what the call asked for.

use super::*;
use snowflake_core::generator::ReservationKeeper;
use std::cell::Cell;

/// The clock of a call that waits: its server's clock, and sleeps in which the world's time
/// passes and the server's worker runs.
struct WaitingClock<'a> {
    world: &'a mut World,
    p: usize,
    res: Rc<Reservation>,
    /// The worker's latch, set by the call (`Latch`).
    latch: &'a Cell<bool>,
    /// When the worker last took a turn without being woken, as its 50 ms timeout counts.
    last_turn: i64,
    /// The server crashed meanwhile: the call's process is gone, and its clock stands still.
    gone: bool,
    slept_ms: u64,
}

impl Clock for WaitingClock<'_> {
    fn now_unix_ms(&mut self) -> i64 {
        self.world.clock(self.p)
    }

    fn sleep_ms(&mut self, ms: u64) {
        for _ in 0..ms {
            if self.gone {
                return;
            }
            self.world.t += 1;
            self.slept_ms += 1;
            if self.world.t >= self.world.last_tick_at + TICK_MS {
                self.world.tick_now();
            }
            self.worker_turn();
        }
    }
}

impl WaitingClock<'_> {
    /// A millisecond of the worker's, if it has a turn in it.
    fn worker_turn(&mut self) {
        let (world, p) = (&mut *self.world, self.p);
        let Some(mem) = world.servers[p].mem.as_ref().filter(|mem| Rc::ptr_eq(&mem.res, &self.res)) else {
            self.gone = true;
            return;
        };
        match mem.recording {
            // Blocked in the fdatasync until it returns; then it finishes the recording.
            Some(flight) => {
                if world.t >= flight.done_at {
                    world.worker_tick(p);
                }
            }
            None => {
                let starts = !mem.worker_up && world.t >= mem.worker_start_at;
                if self.latch.get() || world.t - self.last_turn >= TICK_MS || starts {
                    self.latch.set(false);
                    self.last_turn = world.t;
                    world.lease_tick(p);
                    world.worker_tick(p);
                }
            }
        }
        if !world.up(p) {
            self.gone = true;
        }
    }
}

/// The call's keeper: the worker's latch (`reservation::Worker`).
struct Latch<'a>(&'a Cell<bool>);

impl ReservationKeeper for Latch<'_> {
    fn extend_soon(&mut self, _reservation: &Reservation, _now: u64) {
        self.0.set(true);
    }
}

/// What a call that may wait returned, and how long it slept.
pub(super) struct Waited {
    pub result: Result<Claim, Refusal>,
    pub slept_ms: u64,
    /// Its server crashed while it slept: the call died with it.
    pub gone: bool,
}

impl World {
    /// Whether this call of the primary's takes the guarded path and may wait.
    /// Not inside another call's sleep (its ticks' calls take the fast path), nor on a paused
    /// machine (where no process runs; the events' bursts still call there, as before).
    pub(super) fn call_waits(&mut self, p: usize) -> bool {
        self.cfg.waiting_percent > 0
            && !self.in_wait
            && !self.paused(p)
            && self.wait_rng.chance(self.cfg.waiting_percent)
    }

    /// One call of `generator::claim` that may wait, on server `p`, as `claim_once` but under
    /// the whole clock policy, with the worker as its keeper.
    pub(super) fn claim_waiting(&mut self, p: usize, shard: u32, count: u64) -> Waited {
        let mem = self.servers[p].mem.as_ref().expect("up");
        let (res, slots) = (Rc::clone(&mem.res), Rc::clone(&mem.slots));
        let policy = ClockPolicy {
            max_lead_ms: self.servers[p].settings.max_lead_ms,
            max_wait_ms: self.cfg.max_wait_ms,
            max_reservation_wait_ms: self.cfg.max_reservation_wait_ms,
        };
        let layout = self.layout;
        let (pending, bits) = (PendingSlot::default(), [AtomicU64::new(0)]);
        let holder = Holder::new(&pending, &bits);
        let count = count.clamp(1, generator::max_batch(&layout, policy));
        let latch = Cell::new(false);
        // The worker's last turn was this tick's (or is still to come in it): its timeout
        // counts from the tick.
        let last_turn = self.t;
        self.in_wait = true;
        let mut clock = WaitingClock {
            world: self,
            p,
            res: Rc::clone(&res),
            latch: &latch,
            last_turn,
            gone: false,
            slept_ms: 0,
        };
        let result = generator::claim(
            &slots[shard as usize],
            &res,
            holder.pending(shard),
            count,
            &layout,
            policy,
            &mut clock,
            &mut Latch(&latch),
        );
        let (slept_ms, gone) = (clock.slept_ms, clock.gone);
        self.in_wait = false;
        if slept_ms > 0 {
            self.stats.waits += 1;
            self.stats.wait_ms += slept_ms;
        }
        Waited { result, slept_ms, gone }
    }

    /// The check: a call refused for the reservation after waiting less than its
    /// `max_reservation_wait_ms`, while its worker could have recorded within that.
    pub(super) fn refused_without_waiting(&mut self, p: usize, shard: u32, waited: &Waited) {
        let Err(Refusal::NotReserved { time_part, ceiling, .. }) = waited.result else { return };
        let budget_ms = self.cfg.max_reservation_wait_ms;
        if waited.slept_ms >= budget_ms || !self.worker_could_record(p, budget_ms) {
            return;
        }
        let message = format!(
            "server {p}: shard {shard}: a call refused for the reservation (time part {time_part}, ceiling \
             {ceiling}) after waiting {} ms of its max_reservation_wait_ms = {budget_ms} ms, while its worker \
             could record within that",
            waited.slept_ms
        );
        self.violate("liveness", message);
    }

    /// Whether `p`'s worker would record a ceiling past what is wanted within `within_ms`: it
    /// runs, owes no promotion guard, no fault lies ahead of its next recording (a crash or a
    /// stall armed for it, a full disk for the file or the WAL), the recording in flight and the
    /// next one fit in the time at the disk's slowest, and its renewal (`resume::renewal`,
    /// looked at here without its side effect) would raise the ceiling past the wanted time part.
    fn worker_could_record(&self, p: usize, within_ms: u64) -> bool {
        let server = &self.servers[p];
        let Some(mem) = server.mem.as_ref() else { return false };
        if !mem.worker_up
            || mem.guard_pending
            || self.paused(p)
            || self.armed_step.is_some()
            || self.stall_next_ms.is_some()
            || self.t < server.enospc_until
            || self.wal_full(p)
        {
            return false;
        }
        let in_flight_ms = mem.recording.map_or(0, |flight| (flight.done_at - self.t).max(0));
        if in_flight_ms + 2 * self.cfg.max_disk_latency_ms + 2 * TICK_MS >= within_ms as i64 {
            return false;
        }
        let wanted = mem.res.wanted.load(Relaxed);
        if mem.recording.is_some_and(|flight| flight.ceiling >= wanted) {
            return true;
        }
        let Ok(now) = self.layout.time_part(self.clock(p)) else { return false };
        let lead = self.lead_in_force(p);
        let ceiling = mem.res.ceiling.load(Relaxed);
        // `lower_ceiling` looks first: past its threshold, the worker may lower instead.
        if ceiling > now + lead.bound_ms() + lead.reserve_ms {
            return false;
        }
        let target = generator::next_ceiling(
            now,
            &mem.res,
            &self.layout,
            lead.reserve_ms,
            lead.max_lead_ms,
            mem.last_recording_ms,
        );
        // `dated_right` (F13): below the last ceiling logged, the worker may wait for the clock.
        target.is_some_and(|target| target >= wanted && target >= mem.res.last_logged.load(Relaxed))
    }
}
