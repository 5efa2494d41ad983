//! Crashes and starts: a kill -9, a power loss, a PANIC at a full WAL disk, a clean stop, a
//! re-clone from the primary, and a start (`resume::at_start`, then crash recovery over the
//! server's own WAL).

use super::*;

impl World {
    pub(super) fn crash(&mut self, i: usize, power: bool) {
        if power {
            self.stats.power_losses += 1;
            let tear = self.rng.chance(self.cfg.torn_percent);
            self.servers[i].disk.power_loss(tear);
        } else {
            self.stats.kills += 1;
            self.servers[i].disk.kill9();
        }
        self.memory_lost(i);
        trace!(self, "server {i} {}", if power { "lost power" } else { "killed" });
    }

    /// The server's processes are gone, and its shared memory with them.
    pub(super) fn memory_lost(&mut self, i: usize) {
        self.servers[i].mem = None;
        if i == self.primary {
            self.waiting_acks.clear();
        }
        self.process_gone(i);
    }

    pub(super) fn wal_full(&self, i: usize) -> bool {
        self.t < self.servers[i].wal_full_until
    }

    /// A write of WAL failed with ENOSPC: PostgreSQL PANICs (`XLogWrite` runs in a critical
    /// section), the postmaster ends every process and its crash recovery cannot finish until
    /// there is room again (the operator frees it). The machine runs on: what the WAL writer
    /// had written before reaches the disk, and so does the record file's last write; the WAL
    /// buffers not yet written are lost with the memory, a prefix of them drawn.
    pub(super) fn wal_panic(&mut self, i: usize) {
        self.stats.wal_panics += 1;
        let written = self.servers[i].disk.flushed;
        let buffered = self.servers[i].disk.wal.len() - written;
        let kept = written + self.rng.below(buffered as u64 + 1) as usize;
        let disk = &mut self.servers[i].disk;
        disk.wal.truncate(kept);
        disk.kill9();
        self.memory_lost(i);
        self.servers[i].restart_at = Some(self.servers[i].wal_full_until.max(self.t + TICK_MS));
        trace!(self, "server {i} PANIC: no space left for WAL; {kept} records kept");
    }

    /// A clean stop: the worker finishes what it records, then the shutdown checkpoint.
    pub(super) fn clean_stop(&mut self, i: usize) {
        if i == self.primary && !self.servers[i].disk.signal {
            // The worker finishes the recording it is in before it looks at SIGTERM: its
            // fdatasync returns, and the steps after it run (`resume::RECORDING`: the WAL
            // record, before the shutdown checkpoint); what it would publish dies with the
            // memory.
            self.sync_record(i);
            if let Some(flight) = self.servers[i].mem.as_mut().and_then(|mem| mem.recording.take()) {
                for &step in &flight.steps[flight.next_step..] {
                    if step == Step::LogWal {
                        let lead = self.lead_in_force(i);
                        self.log_ceiling(i, flight.ceiling, lead);
                    }
                }
            }
            let disk = &mut self.servers[i].disk;
            disk.redo = disk.wal.len();
            disk.wal.push(Rec::ShutdownCheckpoint);
            disk.flushed = disk.wal.len();
            self.servers[i].ran_since_clean_stop = false;
            self.waiting_acks.clear();
        } else {
            let disk = &mut self.servers[i].disk;
            if let Some(written) = disk.record_unsynced.take() {
                disk.record = Some(written);
            }
        }
        self.servers[i].mem = None;
        self.process_gone(i);
        trace!(self, "server {i} stopped cleanly");
    }

    /// A base backup of the primary (`pg_basebackup`, or pg_rewind, which copies the file too).
    pub(super) fn reclone(&mut self, i: usize) -> bool {
        let p = self.primary;
        if !self.up(p) || self.servers[p].disk.signal {
            return false;
        }
        let source = &self.servers[p];
        let wal = source.disk.wal[..source.disk.flushed].to_vec();
        let record = source.disk.record_read().unwrap_or(source.disk.record);
        let lead_ms = self.lead_in_force(p).max_lead_ms.max(self.servers[p].settings.max_lead_ms);
        let len = wal.len();
        let cascade = (0..self.servers.len()).find(|&j| {
            j != i && j != p && self.up(j) && self.servers[j].upstream == p && !self.servers[j].needs_reclone
        });
        let upstream = match cascade {
            Some(j) if self.rng.chance(self.cfg.cascade_percent) => j,
            _ => p,
        };
        let server = &mut self.servers[i];
        server.disk = Disk {
            record,
            record_unsynced: None,
            torn: false,
            misdated_lowering: false,
            pending: false,
            signal: true,
            wal,
            flushed: len,
            redo: len,
        };
        server.upstream = upstream;
        // The docs' assumption: a larger max_lead_ms only on the standby.
        server.settings.max_lead_ms = server.settings.max_lead_ms.max(lead_ms);
        server.needs_reclone = false;
        server.slow_replay_until = 0;
        server.horizon_given = None;
        trace!(self, "server {i} re-cloned from {p}, streaming from {upstream}");
        true
    }

    /// The postmaster creating shared memory (`restore::recorded_ceiling`,
    /// `promotion_pending::owed_at_start`), then recovery's start.
    pub(super) fn try_start(&mut self, i: usize) {
        self.servers[i].restart_at = None;
        if self.up(i) {
            return;
        }
        if self.wal_full(i) {
            // The startup process's WAL writes (the end of recovery) fail: the start fails.
            self.servers[i].restart_at = Some(self.servers[i].wal_full_until);
            return;
        }
        if self.servers[i].needs_reclone && !self.reclone(i) {
            self.servers[i].restart_at = Some(self.t + RETRY_MS);
            return;
        }
        let facts = StartFacts {
            record: self.servers[i].disk.record_read(),
            binary_upgrade: false,
            now_unix_ms: self.clock(i),
        };
        let plan = resume::at_start(&facts, self.servers[i].settings, &self.layout);
        trace!(self, "server {i} starts: {plan:?}");
        let (ceiling, write, lead_kept) = match plan {
            StartPlan::Refuse(StartRefusal::Unreadable(reason)) => {
                if !self.servers[i].disk.torn {
                    return self.violate(
                        "start",
                        format!("server {i} refused to start on a readable record: {reason}"),
                    );
                }
                // Documented: the operator restores the record. The torn write was of a
                // ceiling not yet published, so the value before it is above every ID.
                self.stats.torn_restores += 1;
                self.servers[i].disk.torn = false;
                return self.try_start(i);
            }
            StartPlan::Refuse(StartRefusal::Unconfirmed { .. }) => {
                if !self.servers[i].expect_unconfirmed {
                    return self.violate(
                        "start",
                        format!("server {i} refused a record it never marked unconfirmed"),
                    );
                }
                // The documented step: the old server's record copied over the estimate. An old
                // server that never issued had none (pg_upgrade's start of it marked one too):
                // the operator confirms the estimate, deleting the mark.
                self.stats.unconfirmed_refusals += 1;
                let server = &mut self.servers[i];
                server.expect_unconfirmed = false;
                let old = if std::mem::take(&mut server.confirm_estimate) {
                    server.old_record = None;
                    server.disk.record
                } else {
                    server.old_record.take().or(server.disk.record)
                };
                server.disk.record = old.map(|record| RecordRead { unconfirmed: false, ..record });
                server.disk.record_unsynced = None;
                return self.try_start(i);
            }
            StartPlan::Resume { ceiling, write, lead_kept, .. } => (ceiling, write, lead_kept),
        };
        if self.servers[i].expect_unconfirmed {
            self.servers[i].expect_unconfirmed = false;
            return self.violate(
                "upgrade",
                format!("server {i}'s first real start after pg_upgrade resumed on the unconfirmed estimate"),
            );
        }
        if let Some(write) = write {
            let record = record_of_write(write);
            if self.write_record(i, record).is_err() {
                self.servers[i].restart_at = Some(self.t + RETRY_MS);
                return;
            }
        }
        let debt = resume::promotion_owed(self.servers[i].disk.signal, self.servers[i].disk.pending);
        if debt.record_it {
            if self.enospc(i) {
                // Documented (58030): the start stops; retried.
                self.stats.enospc_failures += 1;
                self.servers[i].restart_at = Some(self.t + RETRY_MS);
                return;
            }
            self.servers[i].disk.pending = true;
        }
        if debt.owed && !self.servers[i].disk.signal {
            self.stats.debts_found += 1;
        }
        let mut mem = Mem::new();
        mem.res.resume_at(ceiling);
        mem.recorded_at_start = ceiling;
        mem.lead_kept = lead_kept;
        mem.guard_pending = debt.owed;
        mem.replayed = self.servers[i].disk.redo;
        let standby = self.servers[i].disk.signal;
        self.servers[i].mem = Some(mem);
        if !standby {
            // Crash recovery: this server's own WAL from the last checkpoint.
            let (from, to) = (self.servers[i].disk.redo, self.servers[i].disk.wal.len());
            for index in from..to {
                if let Rec::Ceiling { unix_ms, lead, logged } = self.servers[i].disk.wal[index] {
                    // A record above the file is written to it (F9); a full disk stops the
                    // recovery, and the server is started again later.
                    if !self.replay_ceiling(i, unix_ms, lead, logged, index + 1, Recovery::Crash) {
                        return;
                    }
                }
            }
            let mem = self.servers[i].mem.as_mut().expect("up");
            mem.replayed = to;
            mem.worker_start_at = self.t;
            self.servers[i].disk.flushed = to;
        }
    }
}
