//! Replication and replay: what a standby receives of its upstream's WAL, and each ceiling's
//! record replayed (`resume::replay`), in crash recovery or on a standby.

use super::*;

impl World {
    /// One ceiling's record replayed (`wal::replay_ceiling`). Returns false if the server
    /// crashed (its file could not be written: an ERROR in the startup process).
    pub(super) fn replay_ceiling(
        &mut self,
        i: usize,
        unix_ms: i64,
        lead: Option<LeadSettings>,
        logged: Logged,
        end: usize,
        recovery: Recovery,
    ) -> bool {
        let now_unix_ms = self.clock(i);
        let settings = self.servers[i].settings;
        if recovery == Recovery::Archive {
            self.note_misdated_lowering(i, unix_ms, lead, logged);
        }
        let received = self.servers[i].disk.wal.len() as u64;
        let mem = self.servers[i].mem.as_mut().expect("up");
        match recovery {
            Recovery::Archive => mem.last_ceiling = Some((unix_ms, lead, end)),
            Recovery::Crash => mem.crash_replayed_lead = lead.or(mem.crash_replayed_lead),
        }
        let facts = ReplayFacts {
            ceiling_unix_ms: unix_ms,
            lead,
            recovery,
            recorded_at_start: mem.recorded_at_start,
            now_unix_ms,
            record_end: end as u64,
            // All it has received is on its disk (`receive` flushes at once).
            received: if mem.streamed { received } else { u64::MAX },
            // Virtual time: no clock step moves it.
            boot_ms: self.t as u64,
        };
        let plan = resume::replay(&facts, &mut mem.readings, settings, &self.layout);
        mem.res.replay(plan.bounds);
        trace!(
            self,
            "server {i} replays ceiling {unix_ms} ({recovery:?}, end {end}) at clock {now_unix_ms}: {plan:?}"
        );
        if let Some(write) = plan.write {
            let record = record_of_write(write);
            if self.write_record(i, record).is_err() {
                trace!(self, "server {i}: replay could not write its record: down");
                self.servers[i].mem = None;
                self.servers[i].restart_at = Some(self.t + RETRY_MS);
                return false;
            }
            if recovery == Recovery::Crash {
                self.servers[i].mem.as_mut().expect("up").crash_written_lead = Some(write.lead);
            }
        }
        true
    }

    /// Marks the standby when it dates a lowering later than the lowering was written because
    /// its clock was set back since (F14, open; docs/reliability.md), whose failovers are
    /// excluded: a standby dates a lowering by its own wall clock (its ceiling less
    /// `reserve_ms`, aged by the clock now), and a clock set back between the writing and the
    /// replay makes it look younger than it is, so that readings taken after the writing may
    /// go. Marked when the date lies later than the writing (by the virtual time that passed)
    /// by more than the skew, and would not with the set-back since the writing given back.
    ///
    /// A lowering dated late only because it lies further ahead of its primary's clock than
    /// `reserve_ms` (F13's forms, fixed) is the core's to get right: its failovers go ahead, so
    /// that the mutants of those fixes are caught. The date is worked out here again, not by
    /// `resume`'s code: a checker that called the code it checks would move with a mutation of
    /// that code (`standby-readings-undated`), and its exclusion would hide the mutant.
    fn note_misdated_lowering(&mut self, i: usize, unix_ms: i64, lead: Option<LeadSettings>, logged: Logged) {
        let settings = self.servers[i].settings;
        let Some(mem) = self.servers[i].mem.as_ref() else { return };
        if !mem.readings.last_replayed_unix_ms.is_some_and(|previous| unix_ms < previous) {
            return;
        }
        let now_unix_ms = self.clock(i);
        let skew_ms = settings.max_clock_skew_ms as i64;
        let dated = unix_ms - lead.map_or(settings.reserve_ms, |lead| lead.reserve_ms) as i64;
        let misdated = |now_unix_ms: i64| {
            // Dated ahead of the clock by more than the skew: undated, nothing not yet received
            // goes.
            if dated > now_unix_ms + skew_ms {
                return false;
            }
            let aged_by_clock = (now_unix_ms - dated).max(0);
            self.t - logged.at - aged_by_clock > skew_ms
        };
        let set_back_ms = (logged.clock_offset - self.shared_offset).max(0);
        if misdated(now_unix_ms) && !misdated(now_unix_ms + set_back_ms) {
            self.servers[i].disk.misdated_lowering = true;
        }
    }

    /// Replays a standby's received WAL up to `to`.
    pub(super) fn replay_to(&mut self, i: usize, to: usize) -> bool {
        loop {
            let Some(mem) = self.servers[i].mem.as_ref() else { return false };
            let index = mem.replayed;
            if index >= to {
                return true;
            }
            match self.servers[i].disk.wal[index] {
                Rec::Ceiling { unix_ms, lead, logged } => {
                    if !self.replay_ceiling(i, unix_ms, lead, logged, index + 1, Recovery::Archive) {
                        return false;
                    }
                }
                // A restartpoint.
                Rec::Checkpoint | Rec::ShutdownCheckpoint => self.servers[i].disk.redo = index,
                Rec::Commit | Rec::Copy(_) => {}
            }
            self.servers[i].mem.as_mut().expect("up").replayed = index + 1;
        }
    }

    pub(super) fn connected(&self, i: usize) -> bool {
        let server = &self.servers[i];
        let u = server.upstream;
        u != i
            && self.up(i)
            && server.disk.signal
            && !server.needs_reclone
            && self.t >= server.partitioned_until
            && self.up(u)
            && !self.paused(u)
    }

    /// WAL its upstream can send: a primary's flushed WAL, a standby's received WAL.
    pub(super) fn sendable(&self, u: usize) -> usize {
        let disk = &self.servers[u].disk;
        if disk.signal {
            disk.wal.len()
        } else {
            disk.flushed
        }
    }

    /// Receives up to `limit` records past what it has.
    pub(super) fn receive(&mut self, i: usize, limit: usize) {
        if !self.connected(i) {
            return;
        }
        self.servers[i].mem.as_mut().expect("up").streamed = true;
        let u = self.servers[i].upstream;
        let have = self.servers[i].disk.wal.len();
        let to = self.sendable(u).min(have.saturating_add(limit));
        if to <= have {
            return;
        }
        let records = self.servers[u].disk.wal[have..to].to_vec();
        let disk = &mut self.servers[i].disk;
        disk.wal.extend_from_slice(&records);
        disk.flushed = disk.wal.len();
    }

    pub(super) fn sync_standby(&self) -> Option<usize> {
        if !self.cfg.sync {
            return None;
        }
        (0..self.servers.len()).find(|&j| {
            j != self.primary && self.servers[j].upstream == self.primary && !self.servers[j].needs_reclone
        })
    }
}
