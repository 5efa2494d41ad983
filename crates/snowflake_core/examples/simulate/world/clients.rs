//! The primary's clients: claims through `generator::claim`, each held to the checks every
//! run keeps (the lead bound, the durable record, the checker's order), and their commits.

use super::*;

impl World {
    pub(super) fn claim(&mut self, p: usize, shard: u32, count: u64, bare: bool) {
        if self.lease_fenced(p) {
            self.stats.lease_refusals += 1;
            return;
        }
        if !self.up(p) {
            return;
        }
        let layout = self.layout;
        let result = if self.call_waits(p) {
            let waited = self.claim_waiting(p, shard, count);
            if waited.gone {
                // Its server crashed while it slept: the call died with it.
                self.stats.claims += 1;
                return;
            }
            self.refused_without_waiting(p, shard, &waited);
            waited.result
        } else {
            let server = &self.servers[p];
            let mem = server.mem.as_ref().expect("up");
            let now = self.clock(p);
            let slot = &mem.slots[shard as usize];
            let before = slot.last_issued.load(Relaxed);
            let result = claim_once(slot, &mem.res, shard, count, &layout, server.settings.max_lead_ms, now);
            // A refused call consumes no counter (`generator`'s top: nothing is claimed past the
            // ceiling). Only a lowering between its compare-and-swap and its second look at the
            // ceiling could make it drop what it claimed, and nothing runs in between here.
            let after = slot.last_issued.load(Relaxed);
            if result.is_err() && after != before {
                let message = format!(
                    "server {p}: shard {shard}: a refused call ({result:?}) moved the counter from {before} to {after}"
                );
                return self.violate("consumed", message);
            }
            result
        };
        // The clock when the claim returned (after its sleeps, for a call that waited).
        let now = self.clock(p);
        let server = &self.servers[p];
        let mem = server.mem.as_ref().expect("up");
        // Read right after the claim: nothing else runs in between (the model has no threads).
        let in_force = generator::lead_in_force(server.settings.max_lead_ms, &mem.res);
        let bound = generator::max_ceiling_lead_ms(server.settings.reserve_ms, in_force);
        let durable =
            server.disk.record.map(|record| resume::time_part_of_ceiling(&layout, record.ceiling_unix_ms));
        // The lease's deadline, which every call checks after its claim (`api::issuing`, F11):
        // past it, the claimed IDs are dropped.
        if result.is_ok() && !self.lease_deadline_holds(p) {
            self.stats.lease_refusals += 1;
            return;
        }
        let Some(claim) = self.claimed(p, shard, result) else { return };
        // (3) Not beyond the clock plus the bound of the lead in force, and below the record
        // on disk (what a restart resumes at).
        let now_tp = layout.time_part(now).expect("in range");
        let last_tp = layout.counter_time_part(claim.last);
        if last_tp > now_tp + bound {
            let message = format!(
                "server {p}: shard {shard} issued time part {last_tp}, {} ms ahead of its clock (bound {bound})",
                last_tp - now_tp
            );
            return self.violate("ahead", message);
        }
        if durable.is_none_or(|durable| last_tp >= durable) {
            let message =
                format!("server {p}: shard {shard} issued time part {last_tp}, not below its durable record {durable:?}");
            return self.violate("durable", message);
        }
        self.issued(shard, &claim, bare, now);
        self.lease_promise_kept(p);
        if !self.checked(shard, &claim, p) || !self.above_observed(p, shard, &claim) {
            return;
        }
        self.check_horizon(p, shard, claim.first);
        if bare {
            self.stats.acked += 1;
            return;
        }
        // synchronous_commit = on: the commit flushes the WAL up to its record (and every
        // ceiling's record before it).
        if self.wal_full(p) {
            return self.wal_panic(p);
        }
        let disk = &mut self.servers[p].disk;
        disk.wal.push(Rec::Commit);
        disk.flushed = disk.wal.len();
        let end = disk.wal.len();
        match self.sync_standby() {
            None => self.stats.acked += 1,
            Some(s) => {
                self.receive(s, usize::MAX);
                if self.servers[s].disk.wal.len() >= end && self.connected(s) {
                    self.stats.acked += 1;
                } else {
                    self.waiting_acks.push((end, 1));
                }
            }
        }
    }

    /// What a claim of `server` (a number of the pair, or the second server's) returned: the
    /// claim, or nothing, counting the refusal; a refusal for the clock is a violation, since
    /// the model's clocks never leave the layout's range.
    pub(super) fn claimed(
        &mut self,
        server: usize,
        shard: u32,
        result: Result<Claim, Refusal>,
    ) -> Option<Claim> {
        self.stats.claims += 1;
        match result {
            Ok(claim) => Some(claim),
            Err(Refusal::Clock(_)) | Err(Refusal::Exhausted) => {
                self.violate(
                    "refusal",
                    format!("server {server}: a claim refused for its clock: {result:?}"),
                );
                None
            }
            Err(refusal) => {
                trace!(self, "server {server}: shard {shard}: claim refused: {refusal:?}");
                self.stats.refusals += 1;
                None
            }
        }
    }

    /// Counts a claim issued at clock `now` (Unix ms), on any server: the IDs, the highest
    /// stored of the moving shard, and what confirming pg_upgrade's estimate assumes.
    pub(super) fn issued(&mut self, shard: u32, claim: &Claim, bare: bool, now: i64) {
        self.stats.ids += claim.last - claim.first + 1;
        if shard == MOVED && !bare {
            self.stored_max_moved = self.stored_max_moved.max(Some(claim.last));
        }
        let now_tp = self.layout.time_part(now).expect("in range");
        self.note_ahead(now, self.layout.counter_time_part(claim.last) as i64 - now_tp as i64);
    }

    /// A clock that issued IDs or gave a horizon, and how far ahead of it they stood: what
    /// confirming pg_upgrade's estimate assumes of every one (`upgrade`).
    pub(super) fn note_ahead(&mut self, now: i64, ahead_ms: i64) {
        self.highest_issuing_clock = self.highest_issuing_clock.max(now);
        self.furthest_ahead_ms = self.furthest_ahead_ms.max(ahead_ms);
    }

    /// A turn of a primary's worker (the lease first, as `worker::run` looks at it before it
    /// renews) and of its clients, in either order.
    pub(super) fn serve(&mut self, p: usize) {
        if self.rng.chance(50) {
            self.lease_tick(p);
            self.worker_tick(p);
            self.clients(p);
        } else {
            self.clients(p);
            self.lease_tick(p);
            self.worker_tick(p);
        }
    }

    pub(super) fn clients(&mut self, p: usize) {
        let n = self.rng.below(self.cfg.claims_per_tick + 1);
        let ids_per_ms = self.layout.ids_per_ms();
        for _ in 0..n {
            let shard = self.rng.below(self.pair_shards()) as u32;
            let count =
                if self.rng.chance(80) { 1 + self.rng.below(8) } else { 1 + self.rng.below(ids_per_ms * 4) };
            let bare = self.rng.chance(self.cfg.bare_percent);
            self.claim(p, shard, count, bare);
        }
    }
}
