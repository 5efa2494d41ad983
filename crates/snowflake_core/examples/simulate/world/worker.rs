//! The reservation worker: its recordings in `resume::RECORDING`'s steps (a crash cut into any
//! of them), its start (a kept lead, or the promotion's guard, `resume::promotion`), and its tick
//! (`resume::renewal`: renew, or lower after a clock jump came back).

use super::*;

/// The order 0.8.x and older recorded a renewal in: the WAL record, then the file, then shared
/// memory (`resume::RECORDING` before F15's fix). A crash between the first two left the file
/// below WAL, and this version's start must deal with it (`RecStep::OlderVersionAfterLogWal`).
const OLDER_VERSION_RECORDING: &[Step] = &[Step::LogWal, Step::WriteFile, Step::Publish];

impl World {
    /// A crash armed at a recording step strikes here.
    pub(super) fn crash_point(&mut self, p: usize, step: RecStep) -> bool {
        match self.armed_step {
            Some((armed, power)) if armed == step => {
                self.armed_step = None;
                self.stats.crashes_at_step += 1;
                trace!(self, "crash at {step:?}");
                self.crash(p, power);
                self.servers[p].restart_at = Some(self.t + TICK_MS);
                true
            }
            _ => false,
        }
    }

    /// The `steps` of a recording from `from` on, for a raised ceiling or the one a start
    /// resumed at, its WAL record carrying `logged_lead` (`resume::start_record_lead`) or else
    /// the lead in force. `WriteFile` writes the file, and the fdatasync returns after the
    /// disk's latency (a later tick).
    pub(super) fn record_steps(
        &mut self,
        p: usize,
        steps: &'static [Step],
        ceiling: u64,
        from: usize,
        logged_lead: Option<LeadSettings>,
    ) {
        let unix_ms = self.layout.unix_ms(ceiling);
        // A crash armed as a server of 0.8.x or older meets it: its renewal, WAL record first.
        let steps = if from == 0
            && steps == RECORDING
            && matches!(self.armed_step, Some((RecStep::OlderVersionAfterLogWal, _)))
        {
            OLDER_VERSION_RECORDING
        } else {
            steps
        };
        for (index, &step) in steps.iter().enumerate().skip(from) {
            match step {
                Step::LogWal => {
                    let lead = logged_lead.unwrap_or_else(|| self.lead_in_force(p));
                    self.log_ceiling(p, ceiling, lead);
                    trace!(
                        self,
                        "server {p} logs ceiling {unix_ms} at {} (clock {})",
                        self.servers[p].disk.wal.len(),
                        self.clock(p)
                    );
                    if self.crash_point(p, RecStep::AfterLogWal)
                        || self.crash_point(p, RecStep::OlderVersionAfterLogWal)
                    {
                        return;
                    }
                }
                Step::WriteFile => {
                    if self.enospc(p) {
                        // `renew` returns the error: nothing published, retried next tick.
                        self.stats.enospc_failures += 1;
                        return;
                    }
                    let record = self.record_of(p, unix_ms, self.lead_in_force(p));
                    self.servers[p].disk.record_unsynced = Some(record);
                    if self.crash_point(p, RecStep::AfterWrite) {
                        return;
                    }
                    let latency = match self.stall_next_ms.take() {
                        Some(stall_ms) => stall_ms,
                        None => self.rng.range(0, self.cfg.max_disk_latency_ms),
                    };
                    let flight = InFlight {
                        ceiling,
                        steps,
                        next_step: index + 1,
                        done_at: self.t + latency,
                        started: self.t,
                    };
                    if latency >= TICK_MS {
                        self.servers[p].mem.as_mut().expect("up").recording = Some(flight);
                        return;
                    }
                    self.sync_record(p);
                    if self.crash_point(p, RecStep::AfterSync) {
                        return;
                    }
                }
                Step::Publish | Step::ResumeAt => self.publish_in_shared_memory(p, step, ceiling),
            }
        }
    }

    /// The last step of a recording: shared memory.
    pub(super) fn publish_in_shared_memory(&mut self, p: usize, step: Step, ceiling: u64) {
        let res = &self.servers[p].mem.as_ref().expect("up").res;
        match step {
            Step::Publish => res.publish_ceiling(ceiling),
            Step::ResumeAt => res.resume_at(ceiling),
            Step::LogWal | Step::WriteFile => unreachable!("not a step of shared memory"),
        }
    }

    pub(super) fn sync_record(&mut self, p: usize) {
        let disk = &mut self.servers[p].disk;
        if let Some(written) = disk.record_unsynced.take() {
            disk.record = Some(written);
        }
    }

    /// The worker's start: the promotion guard once owed, else a lead the record kept.
    pub(super) fn worker_start(&mut self, p: usize) {
        let now_unix_ms = self.clock(p);
        let settings = self.servers[p].settings;
        let mem = self.servers[p].mem.as_mut().expect("up");
        mem.worker_start_at = i64::MAX;
        if !mem.guard_pending {
            if let Some(kept) =
                resume::lead_kept_at_restart(mem.lead_kept, mem.crash_written_lead, mem.crash_replayed_lead)
            {
                let lead = Lead {
                    now_unix_ms,
                    setting_ms: settings.max_lead_ms,
                    in_force_ms: generator::lead_in_force(settings.max_lead_ms, &mem.res),
                };
                if let Some(keep) = lead.to_keep(
                    kept.max_lead_ms,
                    mem.res.ceiling.load(Relaxed),
                    settings.reserve_ms,
                    &self.layout,
                ) {
                    mem.res.inherited_max_lead_ms.fetch_max(keep.max_lead_ms, Relaxed);
                    self.stats.leads_kept += 1;
                }
            }
            mem.worker_up = true;
            // F5, F10 and F16: the ceiling resumed at, into WAL again with the file's lead when
            // longer, and into the file with the lead in force (none on a server that never
            // issued).
            let ceiling = resume::ceiling_at_start(&mem.res);
            let (recorded_at_start, written_by_recovery) = (mem.lead_kept, mem.crash_written_lead);
            self.servers[p].ran_since_clean_stop = true;
            if ceiling > 0 {
                let in_force = self.lead_in_force(p);
                let logged = resume::start_record_lead(in_force, recorded_at_start, written_by_recovery);
                self.record_steps(p, RECORDING_AT_START, ceiling, 0, Some(logged));
            }
            return;
        }
        let facts = self.promotion_facts(p, now_unix_ms);
        let plan = resume::promotion(&facts, settings, &self.layout);
        trace!(self, "server {p} promotion: {facts:?} -> {plan:?}");
        let mem = self.servers[p].mem.as_mut().expect("up");
        match plan {
            PromotionPlan::CleanStop { floor, keep_lead, .. } => {
                self.stats.clean_stops += 1;
                mem.res.resume_after_clean_stop(floor);
                if let Some(keep) = keep_lead {
                    mem.res.inherited_max_lead_ms.fetch_max(keep.max_lead_ms, Relaxed);
                    self.stats.leads_kept += 1;
                }
            }
            PromotionPlan::Guard { ceiling, keep_lead, .. } => {
                self.stats.guards += 1;
                if let Some(keep) = keep_lead {
                    mem.res.inherited_max_lead_ms.fetch_max(keep.max_lead_ms, Relaxed);
                    self.stats.leads_kept += 1;
                }
                if self.promo_crash(p, PromoStep::KeptLead) {
                    return;
                }
                let unix_ms = self.layout.unix_ms(ceiling);
                for &step in RECORDING_GUARD {
                    match step {
                        Step::LogWal => {
                            let lead = self.lead_in_force(p);
                            self.log_ceiling(p, ceiling, lead);
                            if self.promo_crash(p, PromoStep::LoggedWal) {
                                return;
                            }
                        }
                        Step::WriteFile => {
                            let record = self.record_of(p, unix_ms, self.lead_in_force(p));
                            if self.write_record(p, record).is_err() {
                                // `durable_file::not_recorded`: an ERROR, the worker exits and
                                // is restarted a second later, still owing the guard.
                                trace!(self, "server {p}: the guard could not be recorded; worker exits");
                                self.servers[p].mem.as_mut().expect("up").worker_start_at = self.t + RETRY_MS;
                                return;
                            }
                            if self.promo_crash(p, PromoStep::WroteFile) {
                                return;
                            }
                        }
                        Step::Publish | Step::ResumeAt => {
                            self.publish_in_shared_memory(p, step, ceiling);
                            if self.promo_crash(p, PromoStep::Published) {
                                return;
                            }
                        }
                    }
                }
            }
        }
        // Settled only once the guard is durable.
        self.servers[p].disk.pending = false;
        let mem = self.servers[p].mem.as_mut().expect("up");
        mem.guard_pending = false;
        mem.worker_up = true;
    }

    /// `record_promotion_guard`: the facts of a promotion of `p` as the worker gathers them.
    pub(super) fn promotion_facts(&self, p: usize, now_unix_ms: i64) -> PromotionFacts {
        let server = &self.servers[p];
        let mem = server.mem.as_ref().expect("up");
        // `switchover`: the replay ended on a shutdown checkpoint after the last ceiling's
        // record replayed since shared memory was created.
        let replay_end = mem.replayed;
        let ends_on_shutdown = replay_end > 0 && server.disk.wal[replay_end - 1] == Rec::ShutdownCheckpoint;
        PromotionFacts {
            now_unix_ms,
            replayed_floor: mem.res.floor.load(Relaxed),
            last_replayed: mem
                .last_ceiling
                .map(|(ceiling_unix_ms, lead, _)| ReplayedCeiling { ceiling_unix_ms, lead }),
            lead_recorded_at_start: mem.lead_kept,
            ended_on_shutdown_checkpoint: ends_on_shutdown
                && mem.last_ceiling.is_some_and(|(_, _, end)| end < replay_end),
            max_lead_in_force_ms: generator::lead_in_force(server.settings.max_lead_ms, &mem.res),
            guard_logged: mem.res.last_logged.load(Relaxed),
        }
    }

    pub(super) fn promo_crash(&mut self, p: usize, step: PromoStep) -> bool {
        match self.armed_promo {
            Some((armed, power)) if armed == step => {
                self.armed_promo = None;
                self.stats.crashes_in_promotion += 1;
                trace!(self, "crash inside the promotion at {step:?}");
                self.crash(p, power);
                // The HA manager (or the operator) starts it again at once.
                self.try_start(p);
                true
            }
            _ => false,
        }
    }

    /// One tick of the worker (`worker::renew`).
    pub(super) fn worker_tick(&mut self, p: usize) {
        let Some(mem) = self.servers[p].mem.as_ref() else { return };
        if !mem.worker_up {
            if self.t >= mem.worker_start_at {
                self.worker_start(p);
            }
            return;
        }
        if let Some(flight) = mem.recording {
            if self.t < flight.done_at {
                return;
            }
            self.servers[p].mem.as_mut().expect("up").recording = None;
            self.sync_record(p);
            if self.crash_point(p, RecStep::AfterSync) {
                return;
            }
            self.servers[p].mem.as_mut().expect("up").last_recording_ms = (self.t - flight.started) as u64;
            self.record_steps(p, flight.steps, flight.ceiling, flight.next_step, None);
            return;
        }
        let Ok(now) = self.layout.time_part(self.clock(p)) else { return };
        let settings = self.servers[p].settings;
        let mem = self.servers[p].mem.as_ref().expect("up");
        let kept = mem.res.inherited_max_lead_ms.load(Relaxed);
        let ceiling = mem.res.ceiling.load(Relaxed);
        if let KeptLead::Drop { .. } =
            resume::forget_kept_lead(now, kept, ceiling, settings.max_lead_ms, settings.reserve_ms)
        {
            mem.res.inherited_max_lead_ms.store(0, Relaxed);
        }
        let lead = self.lead_in_force(p);
        let mem = self.servers[p].mem.as_ref().expect("up");
        match resume::renewal(now, &mem.res, &mem.slots, &self.layout, lead, mem.last_recording_ms) {
            None => {}
            Some(Renewal::Lowered(lower)) => {
                // Already published by `lower_ceiling`: until it is recorded, the higher
                // record on disk still holds.
                self.stats.lowered_ceilings += 1;
                let unix_ms = self.layout.unix_ms(lower);
                trace!(self, "server {p} lowers its ceiling to {lower}");
                for &step in RECORDING_LOWERED {
                    match step {
                        Step::LogWal => self.log_ceiling(p, lower, lead),
                        Step::WriteFile => {
                            let record = self.record_of(p, unix_ms, lead);
                            if self.write_record(p, record).is_err() {
                                break;
                            }
                        }
                        Step::Publish | Step::ResumeAt => self.publish_in_shared_memory(p, step, lower),
                    }
                }
            }
            Some(Renewal::Raised(ceiling)) => {
                // The reservation's documented bound: a renewal never reserves further ahead of
                // the clock than calls may borrow (`max_lead_ms + 1 + reserve_ms`), however slow
                // the last recording was; the resume guards and `lower_ceiling` rely on it.
                if ceiling > now + lead.bound_ms() {
                    let message = format!(
                        "server {p} renews to {ceiling}, {} ms ahead of its clock, past its bound of {} ms",
                        ceiling - now,
                        lead.bound_ms()
                    );
                    return self.violate("ahead", message);
                }
                self.record_steps(p, RECORDING, ceiling, 0, None)
            }
        }
    }
}
