//! Clients that observe (`snowflake_observe`, src/api/causal.rs): a client hands the primary an
//! ID issued elsewhere, and every ID the pair issues after the call, on every shard, must lie
//! above it. Not only until the next crash: the call raises the floor only once the reservation
//! durably covers it, so every resume (a restart, crash recovery, a promotion, a switchover, an
//! upgrade) must come back above it too, and a promoted standby's bound must cover it (the ID
//! is at most the lead in force ahead of the primary's clock, `generator::check_observe`).
//!
//! The glue's steps, with the core's rules: the promotion guard not pending, `check_observe`,
//! then `generator::observe_step` (when it says to wait, the worker is asked, and the client
//! calls again later instead of waiting).

use super::{World, START_UNIX_MS};
use snowflake_core::generator::{self, Claim, ClockPolicy, Forward};
use std::sync::atomic::Ordering::Relaxed;

impl World {
    /// `snowflake_observe` on the pair's primary of an ID `ahead_ms` ahead of its clock.
    pub(super) fn observe(&mut self, ahead_ms: i64) {
        let p = self.primary;
        if !self.up(p) || self.servers[p].disk.signal || self.paused(p) {
            return;
        }
        let now_unix_ms = self.clock(p);
        let max_lead_ms = self.lead_in_force(p).max_lead_ms;
        let Ok(observed) = self.layout.time_part(now_unix_ms + ahead_ms) else { return };
        let policy = ClockPolicy { max_lead_ms, max_wait_ms: 0, max_reservation_wait_ms: 0 };
        let mem = self.servers[p].mem.as_ref().expect("up");
        let floor = match generator::check_observe(observed, &self.layout, policy, now_unix_ms) {
            // The guard may still move the floor (down too, after a clean switchover).
            Ok(floor) if !mem.guard_pending => floor,
            _ => {
                self.stats.observes_refused += 1;
                return;
            }
        };
        if let Forward::WaitPast(floor) = generator::observe_step(&mem.res, floor) {
            mem.res.wanted.fetch_max(floor + 1, Relaxed);
            self.stats.observes_refused += 1;
            return;
        }
        self.stats.observes += 1;
        self.observed_floor = self.observed_floor.max(floor);
        // Later IDs must lie above the floor, as above an ID issued there: confirming
        // pg_upgrade's estimate assumes of it what it assumes of every ID (`upgrade`).
        let now_tp = self.layout.time_part(now_unix_ms).expect("in range");
        self.note_ahead(now_unix_ms, floor as i64 - now_tp as i64);
        trace!(self, "server {p} observes time part {observed}: floor {floor}");
    }

    /// A claim of the pair's primary held to every observation before it; false when it broke
    /// it. An old primary left running is held to the lease's promise instead (`ha`), not to
    /// observations made on the new primary, which it cannot know of.
    pub(super) fn above_observed(&mut self, server: usize, shard: u32, claim: &Claim) -> bool {
        let first = self.layout.counter_time_part(claim.first);
        if server != self.primary || first >= self.observed_floor {
            return true;
        }
        let message = format!(
            "server {server}: shard {shard} issued time part {first}, below the floor {} a client observed before",
            self.observed_floor
        );
        self.violate("observed", message);
        false
    }
}
