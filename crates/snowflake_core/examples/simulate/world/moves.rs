//! Shard moves (docs/several-servers.md, "Moving a shard"): one shard, `MOVED`, goes back and
//! forth between the pair (the primary with its standbys) and a second server, with the
//! procedure's steps in order: the source fenced off the shard, the target advanced above the
//! source's durable reservation (`snowflake_status().reserved_until`, finding F3) and waiting
//! for its worker to record past it (`snowflake_advance`), the rows copied, and the source's
//! copy dropped only once every standby of the target that could be promoted has received the
//! copy (F2, and F8 below).
//!
//! Each of the two fixes can be taken out (`--unfix f2`, `--unfix f3`): the procedure then
//! advances above the highest stored ID only (`max(id)` of the copied rows), or drops the
//! source's copy at once, as before the findings; the checks must then fail. `--unfix f8`
//! runs the fleet kit's wait as it was before F8 (found by this model; the kit now waits on
//! the target's slots too), which that finding shows short.

use super::{World, SHARDS, SKEW_BAND_US, START_UNIX_MS};
use crate::check::Violation;
use snowflake_core::generator::{self, ClockPolicy, Forward, LeadSettings, Reservation, ShardSlot};
use snowflake_core::resume;
use std::sync::atomic::Ordering::Relaxed;

/// The shard that moves.
pub const MOVED: u32 = SHARDS;
/// The server number the checker's messages give the second server.
const SECOND: usize = 9;

/// The fixes of findings the model can run without.
#[derive(Clone, Copy, Debug, Default)]
pub struct Unfix {
    /// F2: the source's copy dropped at once, not after the target's standbys replayed it.
    pub f2: bool,
    /// F3: the target advanced above the highest stored ID, not the source's reservation.
    pub f3: bool,
    /// F8 (the fleet kit before its fix): the drop waits only for the standbys streaming at that
    /// moment (`pg_stat_replication`), as `deploy/fleet.sh move-shard` did.
    pub f8: bool,
}

/// Who issues `MOVED`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Owner {
    Pair,
    Second,
    /// Fenced off on the pair; the second server not yet advanced above `first_allowed`.
    ToSecond {
        first_allowed: u64,
    },
    /// Fenced off on the second server; the pair's primary not yet recorded past it.
    ToPair {
        first_allowed: u64,
    },
}

/// The second server: one server of its own, no standby and no fault but the shared clock's
/// steps, its clock within the skew of the pair's; its worker renews at every tick, durably at
/// once.
pub struct Second {
    res: Reservation,
    slot: ShardSlot,
    skew_ms: i64,
}

impl Second {
    pub fn new(skew_ms: i64) -> Self {
        Second { res: Reservation::default(), slot: ShardSlot::default(), skew_ms }
    }
}

/// A move's copy of the rows, and whether the source still holds its own.
#[derive(Clone, Copy, Debug)]
pub struct MovedCopy {
    pub number: u32,
    pub dropped_at_source: bool,
}

impl World {
    fn second_clock(&self) -> i64 {
        self.t + self.shared_offset + self.second.skew_ms
    }

    fn second_policy(&self) -> ClockPolicy {
        ClockPolicy { max_lead_ms: self.cfg.primary_lead_ms, max_wait_ms: 0, max_reservation_wait_ms: 0 }
    }

    /// Whether the pair's primary runs, its promotion done: what a move's step on it needs.
    fn pair_ready(&self) -> bool {
        let p = self.primary;
        self.up(p)
            && !self.servers[p].disk.signal
            && self.pending_promotion.is_none()
            && self.servers[p].mem.as_ref().is_some_and(|mem| mem.worker_up && !mem.guard_pending)
    }

    /// The shards the pair's clients may take now: its own, and `MOVED` while it owns it.
    pub(super) fn pair_shards(&self) -> u64 {
        SHARDS as u64 + u64::from(self.owner == Owner::Pair)
    }

    /// Where the target advances a shard to: above the source's durable reservation, or (F3
    /// unfixed) above the highest ID of it that was stored.
    fn advance_point(&self, source_reserved_until: u64) -> u64 {
        if self.unfix.f3 {
            self.stored_max_moved.map_or(0, |counter| counter + 1)
        } else {
            self.layout.counter_at(source_reserved_until)
        }
    }

    /// `Kind::Move`: the shard starts moving to where it is not.
    pub(super) fn start_move(&mut self) {
        if !self.pair_ready() {
            return;
        }
        match self.owner {
            Owner::Pair => {
                let p = self.primary;
                let reserved_until = self.servers[p]
                    .disk
                    .record
                    .map_or(0, |record| resume::time_part_of_ceiling(&self.layout, record.ceiling_unix_ms));
                let first_allowed = self.advance_point(reserved_until);
                trace!(self, "move of shard {MOVED} to the second server, above counter {first_allowed}");
                self.owner = Owner::ToSecond { first_allowed };
                // The rows go with the shard: the pair's copy of them is no longer needed.
                self.copy = None;
            }
            Owner::Second => {
                let reserved_until = self.second.res.ceiling.load(Relaxed);
                let first_allowed = self.advance_point(reserved_until);
                trace!(self, "move of shard {MOVED} to the pair, above counter {first_allowed}");
                self.owner = Owner::ToPair { first_allowed };
            }
            Owner::ToSecond { .. } | Owner::ToPair { .. } => {}
        }
    }

    /// Each tick: the second server's worker and clients, the move's next step, the drop.
    pub(super) fn moves_tick(&mut self) {
        let now = self.layout.time_part(self.second_clock()).expect("in range");
        let lead = LeadSettings { max_lead_ms: self.cfg.primary_lead_ms, reserve_ms: self.cfg.reserve_ms };
        if let Some(ceiling) =
            generator::next_ceiling(now, &self.second.res, &self.layout, lead.reserve_ms, lead.max_lead_ms, 0)
        {
            self.second.res.publish_ceiling(ceiling);
        }
        match self.owner {
            Owner::Second => {
                for _ in 0..self.rng.below(self.cfg.claims_per_tick + 1) {
                    let count = 1 + self.rng.below(8);
                    let bare = self.rng.chance(self.cfg.bare_percent);
                    self.claim_on_second(count, bare);
                }
            }
            Owner::ToSecond { first_allowed } => {
                let policy = self.second_policy();
                if generator::check_advance(first_allowed, &self.layout, policy, self.second_clock()).is_ok()
                {
                    let second = &self.second;
                    match generator::advance_step(&second.slot, &second.res, first_allowed, &self.layout) {
                        Forward::Done => {
                            self.owner = Owner::Second;
                            self.stats.moves += 1;
                            trace!(self, "shard {MOVED} now on the second server");
                        }
                        // Its worker reserves past it at its next tick; the step is taken again.
                        Forward::WaitPast(time_part) => {
                            second.res.wanted.fetch_max(time_part + 1, Relaxed);
                        }
                    }
                }
            }
            Owner::ToPair { first_allowed } => self.advance_on_pair(first_allowed),
            Owner::Pair => {}
        }
        self.copy_again();
        self.drop_at_source();
    }

    /// The pair's primary advanced above `first_allowed` (again after a failover, which loses
    /// what was only in memory); once its durable record is past it, the rows are copied and
    /// the pair issues the shard.
    fn advance_on_pair(&mut self, first_allowed: u64) {
        if !self.pair_ready() {
            return;
        }
        let p = self.primary;
        let policy = ClockPolicy {
            max_lead_ms: self.servers[p].settings.max_lead_ms,
            max_wait_ms: 0,
            max_reservation_wait_ms: 0,
        };
        if generator::check_advance(first_allowed, &self.layout, policy, self.clock(p)).is_err() {
            return;
        }
        let mem = self.servers[p].mem.as_ref().expect("up");
        // `snowflake_advance` asks the worker to record past it, and returns once it has.
        if let Forward::WaitPast(time_part) =
            generator::advance_step(&mem.slots[MOVED as usize], &mem.res, first_allowed, &self.layout)
        {
            mem.res.wanted.fetch_max(time_part + 1, Relaxed);
            return;
        }
        self.moves_started += 1;
        let number = self.moves_started;
        self.copy_rows(p, number);
        self.copy = Some(MovedCopy { number, dropped_at_source: false });
        self.owner = Owner::Pair;
        self.stats.moves += 1;
        trace!(self, "shard {MOVED} now on the pair, its rows copied (copy {number})");
    }

    /// The copy's rows committed on the pair's primary: one record, flushed.
    fn copy_rows(&mut self, p: usize, number: u32) {
        let disk = &mut self.servers[p].disk;
        disk.wal.push(super::Rec::Copy(number));
        disk.flushed = disk.wal.len();
    }

    /// The source's copy dropped: at once without F2's fix, else once every standby of the
    /// pair that could be promoted has received the copy, streaming now or not (as a wait on
    /// each standby's replication slot would see it). The fleet kit waits on the standbys that
    /// stream at that moment (`pg_stat_replication`), which misses one cut off then: finding
    /// F8 of docs/reliability.md, which this model found.
    fn drop_at_source(&mut self) {
        let Some(copy) = self.copy.filter(|copy| !copy.dropped_at_source) else { return };
        let has_copy = |i: usize| self.servers[i].disk.wal.contains(&super::Rec::Copy(copy.number));
        let streaming = |i: usize| self.up(i) && self.servers[i].disk.signal && self.connected(i);
        let received_everywhere = has_copy(self.primary)
            && self
                .standbys()
                .iter()
                .all(|&i| self.servers[i].needs_reclone || has_copy(i) || (self.unfix.f8 && !streaming(i)));
        if self.unfix.f2 || received_everywhere {
            self.copy = Some(MovedCopy { dropped_at_source: true, ..copy });
            trace!(self, "the source's copy of shard {MOVED} dropped (copy {})", copy.number);
        }
    }

    /// At a promotion of `s` (after its last replay): once the source dropped its copy, the
    /// moved rows must be there. (Before that, a lost copy is made again from the source, by
    /// `copy_again`.)
    pub(super) fn check_copy(&mut self, s: usize) {
        let Some(copy) = self.copy.filter(|copy| copy.dropped_at_source) else { return };
        if !self.servers[s].disk.wal.contains(&super::Rec::Copy(copy.number)) {
            let message = format!(
                "shard {MOVED}: server {s} promoted without the rows of copy {}, which its source had dropped",
                copy.number
            );
            self.violation.get_or_insert(Violation { kind: "lost", message, at_ms: self.t - START_UNIX_MS });
        }
    }

    /// A copy a failover lost while the source still had its own: made again on the new
    /// primary, as the procedure's operator would.
    fn copy_again(&mut self) {
        let Some(copy) = self.copy.filter(|copy| !copy.dropped_at_source) else { return };
        let p = self.primary;
        if self.pair_ready() && !self.servers[p].disk.wal.contains(&super::Rec::Copy(copy.number)) {
            self.stats.copies_made_again += 1;
            self.copy_rows(p, copy.number);
        }
    }

    fn claim_on_second(&mut self, count: u64, bare: bool) {
        let now = self.second_clock();
        let (second, max_lead_ms) = (&self.second, self.cfg.primary_lead_ms);
        let result =
            super::claim_once(&second.slot, &second.res, MOVED, count, &self.layout, max_lead_ms, now);
        let Some(claim) = self.claimed(SECOND, MOVED, result) else { return };
        // Its IDs may move to the pair: counted as any server's.
        self.issued(MOVED, &claim, bare, now);
        self.checked(MOVED, &claim, SECOND);
    }
}

/// The second server's clock offset, drawn once per run within the skew band.
pub fn draw_second_skew(rng: &mut crate::rng::Rng) -> i64 {
    rng.range(-SKEW_BAND_US / 1_000, SKEW_BAND_US / 1_000)
}
