//! Handovers and clock set-backs: a failover (cut by a crash or not), a clean switchover, a
//! promotion and the standbys that follow it, pg_upgrade, and the shared clock set back where
//! the docs allow it.

use super::*;

impl World {
    /// The shared clock set back. Allowed only where the docs allow it (README guarantee 3,
    /// reliability.md "What it assumes"): while the primary runs with its promotion done and
    /// every standby up, streaming and replaying, so that each reads its clock, as it replays
    /// a ceiling, after the last one the primary decided ahead of it. A clock run ahead only
    /// while a standby was down or cut off, set back before its promotion, is excluded by
    /// design: the promotion would resume short, as documented. With `owing_guard`, instead
    /// while the primary's worker is between two runs of its promotion (its guard logged, the
    /// file write failed, the worker exited): the standbys replay all the same.
    pub(super) fn set_back(&mut self, delta_ms: i64, owing_guard: bool) {
        let p = self.primary;
        let primary_ready = self.up(p)
            && !self.servers[p].disk.signal
            && self.servers[p].mem.as_ref().is_some_and(|mem| {
                if owing_guard {
                    mem.guard_pending && !mem.worker_up && mem.res.last_logged.load(Relaxed) > 0
                } else {
                    mem.worker_up && !mem.guard_pending
                }
            });
        let standbys = self.standbys();
        let chains_up = standbys.iter().all(|&i| {
            let mut j = i;
            for _ in 0..self.servers.len() {
                if j == p {
                    return true;
                }
                if !self.connected(j) {
                    return false;
                }
                j = self.servers[j].upstream;
            }
            false
        });
        // A standby whose record cannot be written stops at its next replay: not replaying;
        // a primary whose WAL cannot be flushed PANICs (`wal_panic`) before they receive it.
        let writable = self.standbys().iter().all(|&i| !self.enospc(i)) && !self.wal_full(p);
        if !primary_ready || !chains_up || !writable || self.pending_promotion.is_some() {
            self.stats.set_backs_excluded += 1;
            trace!(self, "clock set back excluded (a standby is not replaying)");
            return;
        }
        // Each standby reads its clock now: it replays its next ceiling's record (received
        // now if it had not yet), or it has every one the primary wrote.
        self.flush(p);
        let mut order = standbys;
        order.sort_by_key(|&i| self.servers[i].upstream != p);
        for i in order {
            let from = self.servers[i].mem.as_ref().expect("up").replayed;
            let wal = &self.servers[p].disk.wal;
            let Some(next) = (from..wal.len()).find(|&k| matches!(wal[k], Rec::Ceiling { .. })) else {
                continue;
            };
            // The chain from the primary gets at least that far.
            let mut j = i;
            let mut chain = vec![];
            while j != p {
                chain.push(j);
                j = self.servers[j].upstream;
            }
            for &k in chain.iter().rev() {
                let have = self.servers[k].disk.wal.len();
                if have < next + 1 {
                    let records = self.servers[p].disk.wal[have..next + 1].to_vec();
                    self.servers[k].disk.wal.extend_from_slice(&records);
                    self.servers[k].disk.flushed = self.servers[k].disk.wal.len();
                }
            }
            if !self.replay_to(i, next + 1) {
                self.stats.set_backs_excluded += 1;
                return;
            }
        }
        self.shared_offset += delta_ms;
        self.stats.clock_set_backs += 1;
    }

    pub(super) fn failover(&mut self, standby: u8, power: bool, crash: Option<(PromoStep, bool)>) {
        self.promote_standby(standby, Some(power), crash);
    }

    /// A failover by the HA managers once the old primary's leader key expired, the old
    /// primary left running (`ha`); false when excluded or not possible.
    pub(super) fn failover_leaving_running(&mut self, standby: u8) -> bool {
        self.promote_standby(standby, None, None)
    }

    /// A standby promoted, the old primary killed (`Some(power)`) or left running (`None`);
    /// false when the failover was not made.
    pub(super) fn promote_standby(
        &mut self,
        standby: u8,
        kill: Option<bool>,
        crash: Option<(PromoStep, bool)>,
    ) -> bool {
        let p = self.primary;
        let s = self.resolve(Target::Standby(standby));
        if !self.up(s)
            || !self.servers[s].disk.signal
            || self.servers[s].needs_reclone
            || self.pending_promotion.is_some()
        {
            return false;
        }
        // Excluded by design (switchover.rs): the standby's replay would end on a clean stop
        // after which the old primary ran as a primary again without its WAL reaching it.
        let received = self.servers[s].disk.wal.len();
        let ends_clean = self.servers[s].disk.wal.last() == Some(&Rec::ShutdownCheckpoint);
        // What it ran counts, not what its WAL kept: a power loss may have taken every record
        // written since (F6 of docs/reliability.md, found when only the WAL was looked at).
        let ran_again = self.servers[p].disk.wal.len() > received || self.servers[p].ran_since_clean_stop;
        // The promotion replays what the standby received first: done here, before the
        // decision, since that replay can stop the standby.
        if !self.replay_to(s, received) || !self.up(s) {
            return false;
        }
        // Excluded as an open finding (F14, docs/reliability.md): a lowering this standby
        // dated later than it was written, its clock set back in between, may have dropped a
        // clock reading it took after the writing.
        if self.servers[s].disk.misdated_lowering {
            self.stats.failovers_excluded += 1;
            trace!(self, "failover excluded: the standby dated a lowering later than it was written (F14)");
            return false;
        }
        if ends_clean && ran_again && !self.servers[p].disk.signal {
            self.stats.failovers_excluded += 1;
            trace!(
                self,
                "failover excluded: the old primary ran again after the clean stop its standby ends on"
            );
            return false;
        }
        self.servers[p].needs_reclone = true;
        match kill {
            Some(power) => {
                if self.up(p) {
                    self.crash(p, power);
                }
                self.servers[p].restart_at = Some(self.t + self.rng.range(0, 3_000));
            }
            // Left running: `follow` leaves it be until its manager stops it (`ha_tick`).
            None => self.ha.zombie = Some((p, i64::MAX)),
        }
        self.stats.promotions += 1;
        self.primary = s;
        self.armed_promo = crash;
        self.promote(s);
        true
    }

    pub(super) fn switchover(&mut self, standby: u8, crash: Option<(PromoStep, bool)>) {
        let p = self.primary;
        let s = self.resolve(Target::Standby(standby));
        let primary_ready = self.up(p) && !self.servers[p].disk.signal;
        if !primary_ready
            || !self.up(s)
            || !self.servers[s].disk.signal
            || self.servers[s].needs_reclone
            || self.pending_promotion.is_some()
        {
            return;
        }
        // A switchover stops a primary that is up and running, its worker started: stopped in
        // the moment between the end of a crash recovery and the worker's start, the ceiling
        // its file kept is not yet in WAL again (F5, `resume::RECORDING_AT_START`), and docs
        // /reliability.md says so; an HA manager switches over from a running primary.
        if !self.servers[p].mem.as_ref().is_some_and(|mem| mem.worker_up) {
            self.stats.switchovers_excluded += 1;
            return;
        }
        // A switchover waits for the standby to catch up: every server between it and the
        // primary must be up (an HA manager does not switch over to one that cannot).
        let mut chain = vec![];
        let mut j = s;
        while j != p && chain.len() < self.servers.len() {
            chain.push(j);
            j = self.servers[j].upstream;
        }
        if j != p || !chain.iter().all(|&k| self.up(k) && self.servers[k].disk.signal) {
            return;
        }
        self.clean_stop(p);
        // The standby catches up: the chain healed, every record received through it.
        let flushed = self.servers[p].disk.flushed;
        for &k in chain.iter().rev() {
            self.servers[k].partitioned_until = self.t;
            let have = self.servers[k].disk.wal.len();
            if have < flushed {
                let records = self.servers[p].disk.wal[have..flushed].to_vec();
                self.servers[k].disk.wal.extend_from_slice(&records);
                self.servers[k].disk.flushed = self.servers[k].disk.wal.len();
            }
        }
        self.stats.switchovers += 1;
        self.stats.promotions += 1;
        self.servers[p].needs_reclone = true;
        self.servers[p].restart_at = Some(self.t + self.rng.range(0, 3_000));
        self.primary = s;
        self.armed_promo = crash;
        self.promote(s);
    }

    /// PostgreSQL's promotion: the WAL received replayed, `standby.signal` removed (durably),
    /// recovery ended, the worker started (the guard). Then the other servers follow it.
    pub(super) fn promote(&mut self, s: usize) {
        self.pending_promotion = None;
        let to = self.servers[s].disk.wal.len();
        if !self.replay_to(s, to) {
            self.pending_promotion = Some(s);
            return;
        }
        self.check_copy(s);
        self.servers[s].disk.signal = false;
        self.servers[s].partitioned_until = self.t;
        trace!(self, "server {s}: standby.signal removed");
        if self.promo_crash(s, PromoStep::SignalRemoved) {
            self.armed_promo = None;
            return self.follow(s);
        }
        self.servers[s].upstream = s;
        self.servers[s].disk.flushed = to;
        if self.promo_crash(s, PromoStep::EndOfRecovery) {
            self.armed_promo = None;
            return self.follow(s);
        }
        self.worker_start(s);
        self.armed_promo = None;
        self.follow(s);
    }

    /// Every other server re-cloned from the new primary (their WAL may have gone further on
    /// the old timeline, or another history).
    pub(super) fn follow(&mut self, s: usize) {
        self.servers[s].upstream = s;
        for j in 0..self.servers.len() {
            if j == s {
                continue;
            }
            if self.up(j) && self.zombie() != Some(j) {
                self.clean_stop(j);
            }
            self.servers[j].needs_reclone = true;
            if self.servers[j].restart_at.is_none() {
                self.servers[j].restart_at = Some(self.t + self.rng.range(0, 2_000));
            }
        }
    }

    /// pg_upgrade of the primary (docs/operations.md): the old cluster stopped cleanly and
    /// started under `-b`, the new one's starts under `-b`, its first real start.
    pub(super) fn upgrade(&mut self, copy_before: bool, binary_starts: u8, confirm: bool) {
        let p = self.primary;
        let ready = self.up(p)
            && !self.servers[p].disk.signal
            && self.servers[p].mem.as_ref().is_some_and(|mem| !mem.guard_pending);
        if !ready || self.pending_promotion.is_some() {
            return;
        }
        self.clean_stop(p);
        let settings = self.servers[p].settings;
        let binary_start = |world: &mut World, disk_record: Result<Option<RecordRead>, String>| {
            let facts = StartFacts { record: disk_record, binary_upgrade: true, now_unix_ms: world.clock(p) };
            match resume::at_start(&facts, settings, &world.layout) {
                StartPlan::Resume { write, .. } => Ok(write),
                StartPlan::Refuse(refusal) => Err(refusal),
            }
        };
        // The old cluster, started by pg_upgrade to read its schema: its record raised.
        let read = self.servers[p].disk.record_read();
        match binary_start(self, read) {
            Ok(Some(write)) => {
                let record = record_of_write(write);
                if self.write_record(p, record).is_err() {
                    // pg_upgrade stops; the old cluster is started again.
                    self.servers[p].restart_at = Some(self.t + RETRY_MS);
                    return;
                }
            }
            Ok(None) => {}
            Err(_) => {
                self.servers[p].restart_at = Some(self.t + RETRY_MS);
                return;
            }
        }
        let old_record = self.servers[p].disk.record;
        let mut new_disk = Disk::default();
        if copy_before {
            new_disk.record = old_record;
        }
        // A moved shard's rows are table data, which pg_upgrade carries over (its WAL does not).
        if let Some(copy) =
            self.copy.filter(|copy| self.servers[p].disk.wal.contains(&Rec::Copy(copy.number)))
        {
            new_disk.wal.push(Rec::Copy(copy.number));
            new_disk.flushed = new_disk.wal.len();
        }
        self.servers[p].disk = new_disk;
        for _ in 0..binary_starts {
            let read = self.servers[p].disk.record_read();
            match binary_start(self, read) {
                Ok(Some(write)) => {
                    let record = record_of_write(write);
                    // ENOSPC here stops pg_upgrade; an operator runs it again: modelled as
                    // written (the retry writes the same guard).
                    self.servers[p].disk.record = Some(record);
                }
                Ok(None) => {}
                Err(refusal) => {
                    return self.violate("upgrade", format!("a start under pg_upgrade refused: {refusal:?}"));
                }
            }
        }
        self.stats.upgrades += 1;
        self.servers[p].old_record = old_record;
        self.servers[p].expect_unconfirmed =
            !copy_before || old_record.is_none_or(|record| record.unconfirmed);
        // The operator may keep the estimate only if the old server's clock, whenever it
        // issued, never read ahead of the clock now, and it issued no further ahead of it than
        // the new settings' bound (docs/operations.md, "The reservation").
        // Of any server: the new cluster's shards carry every ID the old one's history issued.
        let within = self.furthest_ahead_ms < settings.old_server_lead_bound_ms() as i64;
        self.servers[p].confirm_estimate = confirm && within && self.highest_issuing_clock <= self.clock(p);
        trace!(
            self,
            "server {p} upgraded ({})",
            if copy_before {
                "old record copied before"
            } else if self.servers[p].confirm_estimate {
                "the estimate to be confirmed"
            } else {
                "old record copied after the refusal"
            }
        );
        self.try_start(p);
        self.follow(p);
    }
}
