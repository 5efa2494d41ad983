//! A seed's configuration and its schedule of events. Both are drawn from the seed alone, on
//! streams of their own, so that a shrunk schedule runs under the same configuration.

use crate::rng::Rng;
use crate::world::TICK_MS;

/// Where a recording of the worker's renewal may be cut (`resume::RECORDING`'s steps).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
// Named by what has happened when the crash strikes: every one is "after" a step.
#[allow(clippy::enum_variant_names)]
pub enum RecStep {
    /// The WAL record appended (not flushed), the file not written.
    AfterLogWal,
    /// The file written, not yet fdatasync'ed (a power loss loses it, a kill -9 keeps it).
    AfterWrite,
    /// The file durable, the ceiling not yet published.
    AfterSync,
}

/// Where a promotion may be cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PromoStep {
    /// `standby.signal` removed (durably), before the end of recovery (F4's moment).
    SignalRemoved,
    /// Recovery ended, the worker not yet started.
    EndOfRecovery,
    /// The guard's lead kept, nothing recorded.
    KeptLead,
    /// The guard's WAL record appended.
    LoggedWal,
    /// The guard's record file written durably, the guard not yet published.
    WroteFile,
    /// The guard published, the debt's file not yet removed.
    Published,
}

#[derive(Clone, Copy, Debug)]
pub enum Target {
    Primary,
    /// The k-th standby (modulo their number), in server order.
    Standby(u8),
}

#[derive(Clone, Copy, Debug)]
pub enum Kind {
    /// Clients claim `claims` times at once, batches up to `max_batch` milliseconds' worth.
    Burst {
        claims: u32,
        max_batch_ms: u32,
    },
    /// Clients take `claims` IDs with no WAL at all (a `SELECT snowflake_nextval()`, a rolled
    /// back transaction): nothing flushes the ceiling's record they were issued under.
    BareIds {
        claims: u32,
    },
    /// Every server's clock steps (a negative step only where the docs allow it, see `World`).
    ClockStep {
        delta_ms: i64,
    },
    /// The shared clock set back (`delta_ms` negative) while the primary, just promoted, owes
    /// its guard: logged once, its file write failed, its worker not yet started again. Allowed
    /// where `ClockStep`'s set-back is (every standby up, streaming and replaying: README
    /// guarantee 3), but before the promotion is done. Drawn only by `guard_run_again`.
    SetBackOwingGuard {
        delta_ms: i64,
    },
    /// One server's clock offset set within +-max_clock_skew_ms/2 of the shared clock.
    Skew {
        server: u8,
        skew_ms: i64,
    },
    /// The primary's clock at the top of the skew band and the standby's at its bottom, neither
    /// slewing: the two exactly `max_clock_skew_ms` apart, the edge every bound allows for.
    SkewApart {
        standby: u8,
    },
    /// One server's clock runs fast or slow, within the same band.
    Slew {
        server: u8,
        ppm: i64,
    },
    Kill {
        target: Target,
        power: bool,
        restart_after_ticks: u32,
    },
    /// A backend crash: the postmaster re-creates shared memory at once.
    BackendCrash {
        target: Target,
    },
    CleanRestart {
        target: Target,
    },
    Partition {
        standby: u8,
        ticks: u32,
    },
    /// A standby's replay falls behind what it receives for a while (a slow disk, a query that
    /// conflicts with replay, `recovery_min_apply_delay`): a record now and then. Its WAL
    /// receiver, writing to the same slow disk, receives at most two records a tick. It still
    /// replays, and reads its clock as it does: a clock set back meanwhile is within the docs'
    /// assumption. A promotion replays everything received, as PostgreSQL's does.
    SlowReplay {
        standby: u8,
        ticks: u32,
    },
    /// The primary killed (or powered off), a standby promoted, possibly cut by a crash.
    Failover {
        standby: u8,
        power: bool,
        crash: Option<(PromoStep, bool)>,
    },
    /// The primary stopped cleanly, the standby caught up and promoted.
    Switchover {
        standby: u8,
        crash: Option<(PromoStep, bool)>,
    },
    /// pg_upgrade of the primary: the old record copied before pg_upgrade's starts, or after
    /// the first real start refused the estimate; or, with `confirm`, the estimate confirmed
    /// where docs/operations.md allows it (the old server's clock never read ahead of the
    /// clock at the upgrade), else the old record copied.
    Upgrade {
        copy_before: bool,
        binary_starts: u8,
        confirm: bool,
    },
    /// The primary's max_lead_ms lowered, by a reload or a restart.
    LowerLead {
        new_ms: u64,
        restart: bool,
    },
    /// A standby's max_lead_ms raised (a larger lead only on the standby, as the docs allow).
    RaiseStandbyLead {
        standby: u8,
        new_ms: u64,
    },
    /// The reservation worker alone exits (terminated by `pg_terminate_backend`, or an ERROR)
    /// and the postmaster starts it again a second later, without a crash: shared memory stays.
    WorkerExit {
        target: Target,
    },
    /// Writes of the record file (and the debt's file) fail with ENOSPC for a while.
    Enospc {
        target: Target,
        ticks: u32,
    },
    /// The WAL's disk full (ENOSPC at `pg_wal`) for a while: a primary PANICs at its next WAL
    /// write and starts again only once there is room; a standby's WAL receiver stops.
    WalFull {
        target: Target,
        ticks: u32,
    },
    /// A client hands the primary an ID issued elsewhere, `ahead_ms` ahead of its clock
    /// (behind when negative): `snowflake_observe` (`world::observers`).
    Observe {
        ahead_ms: i64,
    },
    /// The primary's next fdatasync of its record file stalls for `ms`, longer than the lead
    /// bound: what the renewal's cap on its headroom is for (`next-ceiling-cap`).
    DiskStall {
        ms: i64,
    },
    /// The movable shard moved between the pair and the second server, by the documented
    /// procedure (`world::moves`).
    Move,
    /// The primary's next recording is cut at `step`, by a kill -9 or a power loss.
    CrashAtStep {
        step: RecStep,
        power: bool,
    },
    /// The primary's HA manager dies alone (killed, no watchdog): PostgreSQL runs on, and once
    /// its leader key expires the managers promote `standby` (`world::ha`).
    ManagerDies {
        standby: u8,
    },
    /// The primary's whole machine paused for `ms` (SIGSTOP of every process, a frozen VM), its
    /// manager too: past the key's expiry, `standby` is promoted meanwhile (`world::ha`).
    Pause {
        standby: u8,
        ms: i64,
    },
}

#[derive(Clone, Copy, Debug)]
pub struct Event {
    /// Ticks of virtual time (50 ms each) before the event.
    pub gap_ticks: u32,
    pub kind: Kind,
}

/// What a seed runs: the cluster, its settings, the clients' pace.
#[derive(Clone, Debug)]
pub struct Config {
    /// 2 or 3 servers: a primary and one or two standbys.
    pub servers: usize,
    /// Percent of standbys re-cloned to stream from another standby.
    pub cascade_percent: u64,
    /// Synchronous replication: commits wait for the first standby to have received them.
    pub sync: bool,
    pub seq_bits: u32,
    pub reserve_ms: u64,
    pub primary_lead_ms: u64,
    /// Each standby's max_lead_ms (never below the primary's: the docs' assumption).
    pub standby_lead_ms: u64,
    /// How long a fdatasync of the record file takes, at most (0: at once).
    pub max_disk_latency_ms: i64,
    pub claims_per_tick: u64,
    /// Percent of claims that are bare calls: the ID handed out with no WAL at all.
    pub bare_percent: u64,
    /// Percent chance that a power loss tears a record file being written.
    pub torn_percent: u64,
    /// `snowflake_id.lease_ms` (0: the lease off), and the HA manager's `loop_wait` and `ttl`,
    /// within the docs' rule `lease_ms + 1 s < ttl - loop_wait` when the lease is on.
    pub lease_ms: u64,
    pub loop_wait_ms: i64,
    pub ttl_ms: i64,
    /// How long the HA manager takes to answer the lease's request, at most (past the request's
    /// 250 ms deadline, no answer).
    pub max_answer_ms: i64,
    /// Percent of the primary's calls that take `snowflake_nextval`'s guarded path and may wait
    /// (0: none, every call refused at once at a bound, as the fast path is): for the clock up
    /// to `max_wait_ms`, for the worker up to `max_reservation_wait_ms` (`world::waits`).
    pub waiting_percent: u64,
    pub max_wait_ms: u64,
    pub max_reservation_wait_ms: u64,
}

impl Config {
    pub fn draw(seed: u64) -> Self {
        let mut rng = Rng::new(seed, 1);
        let primary_lead_ms = [1_000, 2_000, 2_000, 5_000][rng.below(4) as usize];
        let mut config = Config {
            servers: if rng.chance(50) { 2 } else { 3 },
            cascade_percent: if rng.chance(50) { 0 } else { 40 },
            sync: rng.chance(40),
            // With 10 shard bits, 6 to 12 keep the time part within 38..=47 bits; few IDs per ms
            // make claims borrow time, which is what reaches the lead bounds.
            seq_bits: [6, 6, 8, 12][rng.below(4) as usize],
            reserve_ms: [100, 250, 250, 500][rng.below(4) as usize],
            primary_lead_ms,
            standby_lead_ms: primary_lead_ms + [0, 0, 1_000, 8_000][rng.below(4) as usize],
            max_disk_latency_ms: [0, 20, 120, 400][rng.below(4) as usize],
            claims_per_tick: 1 + rng.below(4),
            bare_percent: [0, 20, 50][rng.below(3) as usize],
            torn_percent: [0, 0, 10][rng.below(3) as usize],
            lease_ms: 0,
            loop_wait_ms: 0,
            ttl_ms: 0,
            max_answer_ms: 0,
            waiting_percent: 0,
            max_wait_ms: 0,
            max_reservation_wait_ms: 0,
        };
        config.draw_ha(&mut rng);
        config.draw_waits(&mut rng);
        config
    }

    /// The calls that wait, drawn after everything else, so that the rest stays what a seed
    /// drew before. Three seeds in four have none and run as they did: calls that wait are
    /// healthier (they ride out what refuses the fast path), which hides the symptoms by which
    /// other guards are caught (`claim-durable-ceiling`'s counter running away from its ceiling
    /// was caught in 3 of 8 budgets of 60 s with half the seeds waiting, 8 of 8 without).
    fn draw_waits(&mut self, rng: &mut Rng) {
        self.waiting_percent = [0, 0, 0, 0, 0, 0, 30, 100][rng.below(8) as usize];
        self.max_wait_ms = [0, 100, 1_000][rng.below(3) as usize];
        self.max_reservation_wait_ms = [200, 1_000, 5_000][rng.below(3) as usize];
        if self.waiting_percent == 0 {
            (self.max_wait_ms, self.max_reservation_wait_ms) = (0, 0);
        }
    }

    /// The HA settings, drawn after the others so that those stay what a seed drew before.
    fn draw_ha(&mut self, rng: &mut Rng) {
        self.lease_ms = [0, 2_000, 5_000][rng.below(3) as usize];
        self.loop_wait_ms = [1_000, 2_000, 10_000][rng.below(3) as usize];
        self.ttl_ms = if self.lease_ms == 0 {
            30_000
        } else {
            // Within the docs' rule, half the time at its very edge.
            let margin = if rng.chance(50) { 1 } else { rng.range(1, 5_000) };
            self.lease_ms as i64 + 1_000 + self.loop_wait_ms + margin
        };
        self.max_answer_ms = [0, 50, 400][rng.below(3) as usize];
    }
}

/// The faults a schedule draws from, by weight (`schedule`'s match arms, in order).
const WEIGHTS: [u64; 30] =
    [18, 5, 5, 4, 3, 8, 5, 3, 3, 5, 8, 5, 1, 3, 2, 4, 5, 3, 3, 2, 2, 2, 3, 3, 3, 2, 4, 3, 2, 2];

/// The schedule: `events` events drawn by weight, so that a run of a couple of hundred covers
/// failovers, switchovers and crashes at every step many times.
///
/// Half the seeds are swarm runs (Groce et al., "Swarm Testing", ISSTA 2012): each fault is left
/// out with even odds, so that a run spends its events on a few faults and their rare
/// combinations (a clock step with no restart to hide it, a skew with no slew to move it)
/// instead of averaging over all of them. Arms 17 to 19, 21 and 27 are composite faults that
/// place the moments the rarest guards cover: each says which. Five more, `restart_in_flight`,
/// `guard_run_again`, `lead_lost_at_restart`, `floor_ahead_lowering` and
/// `worker_restart_in_flight`, are drawn by a share of the seeds after everything else, each on
/// a stream of its own, so that the seeds that draw none keep their schedules.
pub fn schedule(seed: u64, events: usize) -> Vec<Event> {
    let mut rng = Rng::new(seed, 2);
    let mut weights = WEIGHTS;
    if rng.chance(50) {
        // Bursts always stay: without claims no fault has anything to break.
        for weight in weights.iter_mut().skip(1) {
            if rng.chance(50) {
                *weight = 0;
            }
        }
    }
    let mut out = Vec::with_capacity(events + events / 4);
    while out.len() < events {
        let gap_ticks = if rng.chance(30) { rng.below(3) } else { rng.below(30) } as u32;
        let target = |rng: &mut Rng| {
            if rng.chance(50) {
                Target::Primary
            } else {
                Target::Standby(rng.below(2) as u8)
            }
        };
        let promo_crash = |rng: &mut Rng| {
            const STEPS: [PromoStep; 6] = [
                PromoStep::SignalRemoved,
                PromoStep::EndOfRecovery,
                PromoStep::KeptLead,
                PromoStep::LoggedWal,
                PromoStep::WroteFile,
                PromoStep::Published,
            ];
            rng.chance(35).then(|| (STEPS[rng.below(6) as usize], rng.chance(50)))
        };
        let kind = match rng.weighted(&weights) {
            0 => Kind::Burst { claims: 1 + rng.below(40) as u32, max_batch_ms: 1 + rng.below(200) as u32 },
            1 => Kind::ClockStep { delta_ms: rng.range(100, 30_000) },
            2 => Kind::ClockStep { delta_ms: -rng.range(100, 30_000) },
            3 => Kind::Skew { server: rng.below(3) as u8, skew_ms: rng.range(-250, 250) },
            4 => Kind::Slew { server: rng.below(3) as u8, ppm: rng.range(-20_000, 20_000) },
            5 => Kind::Kill {
                target: target(&mut rng),
                power: rng.chance(50),
                restart_after_ticks: rng.below(60) as u32,
            },
            6 => Kind::BackendCrash { target: target(&mut rng) },
            7 => Kind::CleanRestart { target: target(&mut rng) },
            8 | 9 => Kind::Partition { standby: rng.below(2) as u8, ticks: 1 + rng.below(200) as u32 },
            10 => {
                let standby = rng.below(2) as u8;
                // Half the failovers cut the standby off first: the primary issues on under
                // records the standby never receives (what the guard is for).
                if rng.chance(50) {
                    let ticks = 10 + rng.below(100) as u32;
                    out.push(Event { gap_ticks, kind: Kind::Partition { standby, ticks } });
                    out.push(Event {
                        gap_ticks: rng.below(ticks as u64) as u32,
                        kind: Kind::Failover { standby, power: rng.chance(50), crash: promo_crash(&mut rng) },
                    });
                    continue;
                }
                Kind::Failover { standby, power: rng.chance(50), crash: promo_crash(&mut rng) }
            }
            11 => Kind::Switchover { standby: rng.below(2) as u8, crash: promo_crash(&mut rng) },
            12 => Kind::Upgrade {
                copy_before: rng.chance(50),
                binary_starts: 1 + rng.below(3) as u8,
                confirm: rng.chance(30),
            },
            13 => {
                Kind::LowerLead { new_ms: [200, 500, 1_000][rng.below(3) as usize], restart: rng.chance(50) }
            }
            14 => Kind::RaiseStandbyLead {
                standby: rng.below(2) as u8,
                new_ms: [3_000, 10_000, 30_000][rng.below(3) as usize],
            },
            15 => Kind::Enospc { target: target(&mut rng), ticks: 1 + rng.below(80) as u32 },
            16 => {
                const STEPS: [RecStep; 3] = [RecStep::AfterLogWal, RecStep::AfterWrite, RecStep::AfterSync];
                Kind::CrashAtStep { step: STEPS[rng.below(3) as usize], power: rng.chance(50) }
            }
            17 => {
                clock_readings_failover(&mut rng, gap_ticks, &mut out);
                continue;
            }
            18 => {
                failover_at_the_edge(&mut rng, gap_ticks, &mut out);
                continue;
            }
            19 => {
                // The pg_upgrade guard's bound (`upgrade-guard-bound`): the old server issues to
                // its lead bound, then is upgraded at once, its record not copied, and the
                // estimate confirmed.
                out.extend(borrow_to_the_lead_bound(&mut rng, gap_ticks));
                Kind::Upgrade { copy_before: false, binary_starts: 1 + rng.below(3) as u8, confirm: true }
            }
            20 => Kind::DiskStall { ms: rng.range(2_000, 8_000) },
            22 => Kind::Move,
            23 => Kind::ManagerDies { standby: rng.below(2) as u8 },
            24 => {
                // Half the pauses come right after calls borrowed to the lead bound, and last
                // just past the shortest key expiry: the old primary wakes with IDs still
                // reserved ahead of its clock, the moment the lease must already cover.
                let standby = rng.below(2) as u8;
                if rng.chance(50) {
                    out.extend(borrow_to_the_lead_bound(&mut rng, gap_ticks));
                    out.push(Event {
                        gap_ticks: 0,
                        kind: Kind::Pause { standby, ms: rng.range(3_000, 9_000) },
                    });
                    continue;
                }
                Kind::Pause { standby, ms: rng.range(500, 45_000) }
            }
            25 => Kind::WalFull { target: target(&mut rng), ticks: 1 + rng.below(80) as u32 },
            26 => Kind::Observe { ahead_ms: rng.range(-2_000, 6_000) },
            27 => {
                lagging_readings_failover(&mut rng, gap_ticks, &mut out);
                continue;
            }
            28 => Kind::SlowReplay { standby: rng.below(2) as u8, ticks: 1 + rng.below(200) as u32 },
            29 => Kind::WorkerExit { target: target(&mut rng) },
            21 => {
                // F5 (`worker-start-wal-record`): IDs issued under a ceiling whose WAL record a
                // power loss then takes (the file keeps it), the primary restarted, and a clean
                // switchover soon after its worker's start, before its next renewal.
                out.extend(borrow_to_the_lead_bound(&mut rng, gap_ticks));
                // A tick later: the worker has recorded a new ceiling for the waiting calls.
                out.push(Event { gap_ticks: 1, kind: Kind::BareIds { claims: 1 + rng.below(20) as u32 } });
                out.push(Event {
                    gap_ticks: 0,
                    kind: Kind::Kill { target: Target::Primary, power: true, restart_after_ticks: 0 },
                });
                // Once the restarted primary's worker runs (a tick or two).
                let switchover = Kind::Switchover { standby: rng.below(2) as u8, crash: None };
                out.push(Event { gap_ticks: 2 + rng.below(4) as u32, kind: switchover });
                continue;
            }
            _ => unreachable!("an arm for every weight"),
        };
        out.push(Event { gap_ticks, kind });
    }
    // The composites drawn after everything else: (stream, percent of seeds, composite).
    splice_drawn(seed, 6, 25, &mut out, restart_in_flight);
    let lead_ms = Config::draw(seed).standby_lead_ms as i64;
    splice_drawn(seed, 8, 20, &mut out, |rng, gap_ticks, out| guard_run_again(rng, gap_ticks, lead_ms, out));
    let config = Config::draw(seed);
    splice_drawn(seed, 9, 25, &mut out, |rng, gap_ticks, out| {
        lead_lost_at_restart(rng, &config, gap_ticks, out)
    });
    splice_drawn(seed, 12, 20, &mut out, |rng, gap_ticks, out| {
        floor_ahead_lowering(rng, gap_ticks, &config, out)
    });
    splice_drawn(seed, 11, 20, &mut out, |rng, gap_ticks, out| {
        worker_restart_in_flight(rng, gap_ticks, &config, out)
    });
    out
}

/// Draws a composite into a schedule already drawn, by `percent` of the seeds, on random
/// stream `stream` of its own, at a place drawn in the schedule: after every other draw, so
/// that a seed that does not draw it keeps the schedule it had.
fn splice_drawn(
    seed: u64,
    stream: u64,
    percent: u64,
    out: &mut Vec<Event>,
    composite: impl FnOnce(&mut Rng, u32, &mut Vec<Event>),
) {
    let mut rng = Rng::new(seed, stream);
    if !rng.chance(percent) {
        return;
    }
    let at = rng.below(out.len() as u64 + 1) as usize;
    let gap_ticks = rng.below(30) as u32;
    let mut events = Vec::new();
    composite(&mut rng, gap_ticks, &mut events);
    out.splice(at..at, events);
}

/// F7's other half at a restart (`standby-readings-undated`): calls borrow to the lead bound,
/// so that the record file holds a ceiling far ahead of the clock; the clock jumps while the
/// file is full, the jump's ceilings logged and never written to it, and is set back; the
/// primary restarts cleanly (shared memory new, no crash recovery): its start record is the
/// file's ceiling, below the jump's, and dated by a standby more than `max_clock_skew_ms`
/// ahead of its clock. A standby whose replay, and WAL receiver, lag behind reads the clock
/// of a second jump while that start record is still on its way; it is cut off and promoted
/// once the reading is older than the skew, before the clock reaches the start record's
/// date: the promotion replays the start record, which must not drop that reading.
fn restart_in_flight(rng: &mut Rng, gap_ticks: u32, out: &mut Vec<Event>) {
    let standby = rng.below(2) as u8;
    out.extend(borrow_to_the_lead_bound(rng, gap_ticks));
    // The standby catches up with the bursts' commits, then falls behind.
    out.push(Event { gap_ticks: 2 + rng.below(6) as u32, kind: Kind::SlowReplay { standby, ticks: 200 } });
    let ahead = rng.range(3_000, 15_000);
    let lasts = 1 + rng.below(4) as u32;
    out.push(Event { gap_ticks: 0, kind: Kind::Enospc { target: Target::Primary, ticks: lasts + 1 } });
    out.push(Event { gap_ticks: 0, kind: Kind::ClockStep { delta_ms: ahead } });
    out.push(Event { gap_ticks: lasts, kind: Kind::ClockStep { delta_ms: -ahead } });
    // Once the file can be written again.
    out.push(Event {
        gap_ticks: 2 + rng.below(2) as u32,
        kind: Kind::CleanRestart { target: Target::Primary },
    });
    let ahead = rng.range(3_000, 15_000);
    out.push(Event { gap_ticks: 1 + rng.below(3) as u32, kind: Kind::ClockStep { delta_ms: ahead } });
    let bare = Kind::BareIds { claims: 1 + rng.below(20) as u32 };
    out.push(Event { gap_ticks: rng.below(2) as u32, kind: bare });
    out.push(Event { gap_ticks: 0, kind: Kind::ClockStep { delta_ms: -ahead } });
    out.push(Event { gap_ticks: rng.below(6) as u32, kind: Kind::Partition { standby, ticks: 100 } });
    out.push(Event {
        gap_ticks: 11 + rng.below(10) as u32,
        kind: Kind::Failover { standby, power: rng.chance(50), crash: None },
    });
}

/// F13's class at a promotion (`promotion-guard-logged`): a failover cut by a kill -9 at the
/// end of recovery, and the promoted server's record file full from its worker's first run:
/// each run of the promotion logs its guard, fails to write it, exits, and runs again a second
/// later. The old primary comes back as its standby (re-cloned within 3 s) and lags; the clock
/// jumps while two runs log their guards, the standby cut off meanwhile, and is set back before
/// the next run (every standby replaying: the standby reads the jump as it replays the first of
/// the two); the file can be written again, and the next run's guard, from the clock set back,
/// is the one published. The standby, cut off again at once, still lacks it when the clock
/// jumps a second time while the new primary issues: set back, the standby reads that jump as
/// it replays the second guard of the first jump, and is cut off again until the guard run
/// again, were it below the one logged before, would be dated (the promotion's bound less
/// `reserve_ms` after it was written); then it receives that guard, not the second jump's
/// ceilings, and is promoted, the primary lost. The promotion replays the guard run again,
/// which must not drop the reading of the second jump.
fn guard_run_again(rng: &mut Rng, gap_ticks: u32, lead_ms: i64, out: &mut Vec<Event>) {
    let standby = rng.below(2) as u8;
    let crash = Some((PromoStep::EndOfRecovery, false));
    out.push(Event { gap_ticks, kind: Kind::Failover { standby, power: rng.chance(50), crash } });
    // Its worker runs the promotion at the next tick, then every 20 ticks: runs 5 and 6 (ticks
    // 81 and 101) still fail, run 7 (tick 121) writes its guard.
    let full = 102 + rng.below(19) as u32;
    out.push(Event { gap_ticks: 0, kind: Kind::Enospc { target: Target::Primary, ticks: full } });
    // Tick 62: the old primary re-cloned and streaming (it restarts within 3 s).
    out.push(Event { gap_ticks: 62, kind: Kind::SlowReplay { standby, ticks: 600 } });
    let ahead = rng.range(3_000, 15_000);
    out.push(Event { gap_ticks: 0, kind: Kind::ClockStep { delta_ms: ahead } });
    // Cut off from tick 80 to 102: runs 5 and 6 log their guards during the jump.
    out.push(Event { gap_ticks: 18, kind: Kind::Partition { standby, ticks: 22 } });
    out.push(Event { gap_ticks: 22, kind: Kind::SetBackOwingGuard { delta_ms: -ahead } });
    // Cut off again until the second set-back. Run 7 (tick 121) writes its guard; a second
    // later the new primary's calls issue (commits the standby will receive after the guard).
    let burst_gap = 39 + rng.below(3) as u32;
    let bare_gap = 1 + rng.below(2) as u32;
    let cut = burst_gap + 1 + bare_gap;
    out.push(Event { gap_ticks: 0, kind: Kind::Partition { standby, ticks: cut } });
    let burst = Kind::Burst { claims: 20 + rng.below(30) as u32, max_batch_ms: 1 + rng.below(100) as u32 };
    out.push(Event { gap_ticks: burst_gap, kind: burst });
    // The guard run again (tick 121) is dated `lead_ms + 1` plus the skew (500 ms) after it was
    // written; replayed sooner it is undated, and drops nothing. The second set-back comes 22
    // ticks or so after it; the standby is cut off until the rest has passed. The second jump
    // lies above what the promoted standby's clock will read then, plus its bound.
    let wait_ticks = ((lead_ms + 1 + 500 + 300 - 22 * TICK_MS).max(TICK_MS) / TICK_MS) as u32;
    let ahead = 2 * lead_ms + TICK_MS * i64::from(wait_ticks) + rng.range(3_000, 15_000);
    out.push(Event { gap_ticks: 1, kind: Kind::ClockStep { delta_ms: ahead } });
    let bare = Kind::BareIds { claims: 1 + rng.below(20) as u32 };
    out.push(Event { gap_ticks: bare_gap, kind: bare });
    out.push(Event { gap_ticks: 0, kind: Kind::ClockStep { delta_ms: -ahead } });
    out.push(Event { gap_ticks: 0, kind: Kind::Partition { standby, ticks: wait_ticks } });
    // Connected again for a tick or two: it receives the guard run again and the commits
    // after it, not yet the jump's ceilings.
    out.push(Event {
        gap_ticks: wait_ticks + rng.below(2) as u32,
        kind: Kind::Failover { standby, power: rng.chance(50), crash: None },
    });
}

/// F10's second form and F12 (`worker-start-file-lead`, `recovery-written-lead`): a record file
/// left with a larger lead than the last WAL record and the standby know of, and a restart that
/// takes it. The standby's own `max_lead_ms` must be the smaller one too, so first a history:
/// the primary's setting lowered by a reload, a switchover, and the old primary held down (its
/// WAL disk full) until it is re-cloned, as a standby with that smaller setting, from a new
/// primary whose larger lead is no longer in force. The new primary borrows to its lead bound,
/// and a reload lowers its setting while the ceiling is far ahead (the lead kept). Half the
/// time (F12) the first renewal after it is cut by a kill -9 between its WAL record and its
/// file write: crash recovery writes that record, with the kept lead, to the file; the restart
/// keeps that lead, and its start record's fdatasync stalls while the old primary is re-cloned
/// from it, cut off, and the power lost. Else (F10) calls borrow under the kept lead, so that
/// the file carries it; the clock jumps to within the smaller bound of the ceiling (the kept
/// lead spent, no renewal yet) and the old primary is re-cloned; a kill -9, whose restart keeps
/// no lead and logs its start record with the smaller one, and whose file write stalls; the
/// clock set back while the standby replays that record, the standby cut off, and a clean
/// restart, which must not find the larger lead in the file. Then calls borrow, and the
/// standby is promoted.
fn lead_lost_at_restart(rng: &mut Rng, cfg: &Config, gap_ticks: u32, out: &mut Vec<Event>) {
    let standby = rng.below(2) as u8;
    let small = 500;
    out.push(Event { gap_ticks, kind: Kind::LowerLead { new_ms: small, restart: false } });
    out.push(Event { gap_ticks: 1 + rng.below(3) as u32, kind: Kind::Switchover { standby, crash: None } });
    let hold_at = out.len();
    out.push(Event { gap_ticks: 0, kind: Kind::WalFull { target: Target::Standby(standby), ticks: 0 } });
    let mut elapsed = 0u32;
    fn push(out: &mut Vec<Event>, elapsed: &mut u32, gap_ticks: u32, kind: Kind) {
        *elapsed += gap_ticks;
        out.push(Event { gap_ticks, kind });
    }
    // Past the old primary's restart (within 3 s of the switchover), so that it waits for room.
    for event in borrow_to_the_lead_bound(rng, 61) {
        push(out, &mut elapsed, event.gap_ticks, event.kind);
    }
    push(out, &mut elapsed, 0, Kind::LowerLead { new_ms: small, restart: false });
    let stall = Kind::DiskStall { ms: rng.range(3_000, 8_000) };
    if rng.chance(50) {
        // F12
        push(out, &mut elapsed, 0, Kind::CrashAtStep { step: RecStep::AfterLogWal, power: false });
        push(out, &mut elapsed, 0, stall);
        let burst =
            Kind::Burst { claims: 20 + rng.below(30) as u32, max_batch_ms: 1_000 + rng.below(3_000) as u32 };
        push(out, &mut elapsed, 1, burst);
        // The renewal at the next tick, the restart a tick later; the old primary re-cloned after.
        let hold = elapsed + 3 + rng.below(3) as u32;
        out[hold_at].kind = Kind::WalFull { target: Target::Standby(standby), ticks: hold };
        let gap = hold - elapsed + 1 + rng.below(3) as u32;
        push(out, &mut elapsed, gap, Kind::Partition { standby, ticks: 100 });
        push(
            out,
            &mut elapsed,
            rng.below(2) as u32,
            Kind::Kill { target: Target::Primary, power: true, restart_after_ticks: 0 },
        );
    } else {
        for event in borrow_to_the_lead_bound(rng, 1) {
            push(out, &mut elapsed, event.gap_ticks, event.kind);
        }
        let lead = cfg.standby_lead_ms as i64;
        let reserve = cfg.reserve_ms as i64;
        let rem = rng.range(reserve / 2 + 250, small as i64 + reserve);
        let jump = (lead + 1 + reserve - rem).max(100);
        push(out, &mut elapsed, 0, Kind::ClockStep { delta_ms: jump });
        push(out, &mut elapsed, 0, stall);
        // The worker drops its kept lead at its next tick; the old primary re-cloned after.
        let hold = elapsed + 2;
        out[hold_at].kind = Kind::WalFull { target: Target::Standby(standby), ticks: hold };
        push(
            out,
            &mut elapsed,
            2,
            Kind::Kill { target: Target::Primary, power: false, restart_after_ticks: 0 },
        );
        let back = rng.range(
            small as i64 + reserve - rem + 300,
            (lead - small as i64 - 600).max(small as i64 + reserve - rem + 400),
        );
        push(out, &mut elapsed, 1, Kind::ClockStep { delta_ms: -back });
        push(out, &mut elapsed, 0, Kind::Partition { standby, ticks: 100 });
        push(out, &mut elapsed, rng.below(2) as u32, Kind::CleanRestart { target: Target::Primary });
    }
    for event in borrow_to_the_lead_bound(rng, 2) {
        push(out, &mut elapsed, event.gap_ticks, event.kind);
    }
    push(
        out,
        &mut elapsed,
        1 + rng.below(4) as u32,
        Kind::Failover { standby, power: rng.chance(50), crash: None },
    );
}

/// F13's first form at a restart (`lower-ceiling-floor-wait`): a standby's replay falls
/// behind; the clock jumps while the primary issues bare IDs, and is set back, the jump's
/// ceiling kept (IDs were issued up there), more than `max_lead_ms` ahead of the clock. The
/// primary restarts cleanly: its floor lies there, and calls are refused until the clock comes
/// within `max_lead_ms` of it. The clock jumps a second time for a tick, its renewal's fdatasync
/// stalled past the set-back (no call issues up there), and the standby is cut off at once: the
/// worker's next tick finds a ceiling far ahead of the clock and nothing issued since the
/// restart, and a lowering held at the floor would date itself (its ceiling less `reserve_ms`)
/// up to the floor's lead later than it was written. Calls issue again at the floor; the clock
/// jumps a third time while the primary issues, and is set back as the standby, connected
/// again, reads it as it replays a record older than the lowering. It receives the lowering and
/// the commits after it, not the third jump's ceilings, is cut off, and is promoted, the
/// primary lost, once the clock has reached the lowering's date less the skew (sooner, it is
/// undated and drops nothing not yet received), while the reading still lies more than the skew
/// before that date: the promotion must keep it.
fn floor_ahead_lowering(rng: &mut Rng, gap_ticks: u32, cfg: &Config, out: &mut Vec<Event>) {
    let standby = rng.below(2) as u8;
    // The primary's lead at most the standbys' (a primary promoted from one has theirs).
    let lead_ms = cfg.standby_lead_ms as i64;
    let latency_ticks = (cfg.max_disk_latency_ms / TICK_MS) as u32 + 1;
    out.push(Event { gap_ticks, kind: Kind::SlowReplay { standby, ticks: 800 } });
    // Bare IDs once the jump's renewal is published: its ceiling stays.
    let first = lead_ms + rng.range(1_500, 4_000);
    out.push(Event { gap_ticks: rng.below(2) as u32, kind: Kind::ClockStep { delta_ms: first } });
    let bare = Kind::BareIds { claims: 5 + rng.below(15) as u32 };
    out.push(Event { gap_ticks: 1 + latency_ticks, kind: bare });
    out.push(Event { gap_ticks: 1, kind: bare });
    out.push(Event { gap_ticks: 0, kind: Kind::ClockStep { delta_ms: -first } });
    let restart_gap = 2 + rng.below(2) as u32;
    out.push(Event { gap_ticks: restart_gap, kind: Kind::CleanRestart { target: Target::Primary } });
    // Once its start record is written: the second jump, one tick, its renewal stalled.
    let stall_ms = rng.range(60, 250);
    out.push(Event { gap_ticks: 10, kind: Kind::DiskStall { ms: stall_ms } });
    let second = first + rng.range(1_500, 6_000);
    out.push(Event { gap_ticks: 0, kind: Kind::ClockStep { delta_ms: second } });
    out.push(Event { gap_ticks: 1, kind: Kind::ClockStep { delta_ms: -second } });
    let since = restart_gap + 11;
    // Ticks after the first set-back: the lowering's date lies about `first` after it (less
    // the jump's wait, plus twice a recording's latency); the third set-back more than the
    // skew before it, the failover after it.
    let jump_ticks = 3 + latency_ticks;
    let reading_ticks = ((first - 1_000 - rng.range(0, 300)) / TICK_MS) as u32;
    let failover_ticks = ((first + 2 * cfg.max_disk_latency_ms + 100) / TICK_MS) as u32;
    let burst_gap = reading_ticks.saturating_sub(since + jump_ticks + 1).max(1);
    let cut = burst_gap + 1 + jump_ticks;
    out.push(Event { gap_ticks: 0, kind: Kind::Partition { standby, ticks: cut } });
    // Commits after the lowering, so that the standby can receive it without what follows.
    let burst = Kind::Burst { claims: 20 + rng.below(30) as u32, max_batch_ms: 1 + rng.below(20) as u32 };
    out.push(Event { gap_ticks: burst_gap, kind: burst });
    // The third jump lies above what the promoted standby's clock will read, plus its bound.
    let wait_ms = TICK_MS * i64::from(failover_ticks.saturating_sub(since + cut) + jump_ticks);
    let third = lead_ms + wait_ms + rng.range(3_000, 10_000);
    out.push(Event { gap_ticks: 1, kind: Kind::ClockStep { delta_ms: third } });
    let bare = Kind::BareIds { claims: 1 + rng.below(20) as u32 };
    out.push(Event { gap_ticks: jump_ticks, kind: bare });
    out.push(Event { gap_ticks: 0, kind: Kind::ClockStep { delta_ms: -third } });
    let receive = 6 + rng.below(10) as u32;
    out.push(Event { gap_ticks: receive, kind: Kind::Partition { standby, ticks: 400 } });
    let left = failover_ticks.saturating_sub(since + cut + receive).max(1);
    out.push(Event { gap_ticks: left, kind: Kind::Failover { standby, power: rng.chance(50), crash: None } });
}

/// F13's class at a worker's start (`worker-start-logged`): the reservation worker restarted with
/// shared memory kept, after renewals whose file write failed. The two clocks as far apart as the
/// skew allows (the standby's behind), a standby replaying slowly, a call wants IDs up to the lead
/// bound: the worker's next tick records the ceiling there. The clock then jumps while the
/// primary's record file is full, for two to four ticks (and the disk's latency): the jump's
/// ceilings are logged and never published, and the standby, replaying behind, has not replayed
/// them all when the clock is set back (every standby replaying, each reads the jump as it replays
/// its next ceiling's record). The worker exits at that moment and is started again a second later:
/// its start record is the higher of the ceiling published before the jump and the last one logged,
/// and the published one would be a lowering on a standby, dated later than it was written, by
/// nearly the lead bound less that second. The standby, cut off just before that start record,
/// reads the clock of a second jump (the primary issuing up there on every shard) as it replays one
/// of the first jump's ceilings, with the start record not yet received; it receives it, and some
/// of the commits after it but not the second jump's ceiling, for a while after the set-back, and
/// is cut off until the start record would be dated (its ceiling less `reserve_ms`, within the skew
/// of the standby's clock); then it is promoted, the primary lost. The promotion replays the start
/// record, which must not drop the reading of the second jump. Its times come from the seed's
/// configuration (the lead, the disk's latency): with a lead of one second the start comes too late
/// to be misdated.
fn worker_restart_in_flight(rng: &mut Rng, gap_ticks: u32, cfg: &Config, out: &mut Vec<Event>) {
    let standby = rng.below(2) as u8;
    // Ticks a recording's fdatasync may take.
    let sync_ticks = ((cfg.max_disk_latency_ms + TICK_MS - 1) / TICK_MS) as u32;
    out.push(Event { gap_ticks, kind: Kind::SkewApart { standby } });
    out.push(Event { gap_ticks: 0, kind: Kind::SlowReplay { standby, ticks: 600 } });
    // Calls ask for up to the lead bound: the worker's next tick records the ceiling there.
    let wants = Kind::Burst { claims: 12 + rng.below(10) as u32, max_batch_ms: cfg.primary_lead_ms as u32 };
    out.push(Event { gap_ticks: 0, kind: wants });
    let jump_ticks = sync_ticks + 2 + rng.below(3) as u32;
    out.push(Event { gap_ticks: 1, kind: Kind::Enospc { target: Target::Primary, ticks: jump_ticks + 1 } });
    let ahead = rng.range(3_000, 15_000);
    out.push(Event { gap_ticks: 0, kind: Kind::ClockStep { delta_ms: ahead } });
    out.push(Event { gap_ticks: jump_ticks, kind: Kind::ClockStep { delta_ms: -ahead } });
    out.push(Event { gap_ticks: 0, kind: Kind::WorkerExit { target: Target::Primary } });
    // Started again 20 ticks later, it records at its start (then, for the calls, a renewal).
    // The standby is cut off a few ticks before, until the second set-back.
    let before = 2 + rng.below(3) as u32;
    let cut = before + 2 + 3 * sync_ticks;
    out.push(Event { gap_ticks: 20 - before, kind: Kind::Partition { standby, ticks: cut } });
    // Commits after the start record (and the renewal): what the standby may receive with it.
    let burst = Kind::Burst { claims: 20 + rng.below(30) as u32, max_batch_ms: 1 + rng.below(50) as u32 };
    out.push(Event { gap_ticks: before + 1 + 2 * sync_ticks, kind: burst });
    // Connected again after the second set-back for `connected` ticks, then cut off until the
    // start record would be dated: the ceiling published before the jump, `max_lead_ms + 1`
    // ahead of the clock with `reserve_ms` taken off, the clocks the skew apart.
    let connected = 8 + rng.below(17) as u32;
    let set_back_at = jump_ticks + 20 + 2 + 3 * sync_ticks;
    let dated_at = ((cfg.primary_lead_ms as i64 + 1) / TICK_MS) as u32 + 1;
    let cut_off = dated_at.saturating_sub(set_back_at + connected).max(1) + rng.below(4) as u32;
    // The second jump lies above what the promoted standby's clock will read then, plus its
    // bound.
    let ahead =
        2 * cfg.standby_lead_ms as i64 + TICK_MS * i64::from(connected + cut_off) + rng.range(3_000, 15_000);
    out.push(Event { gap_ticks: 0, kind: Kind::ClockStep { delta_ms: ahead } });
    // Once the jump's ceiling is published, calls issue up there on every shard (no shard
    // commits after the set-back, so nothing flushes past what the standby may receive).
    let burst = Kind::Burst { claims: 20 + rng.below(30) as u32, max_batch_ms: 1 + rng.below(50) as u32 };
    out.push(Event { gap_ticks: sync_ticks + 1, kind: burst });
    out.push(Event { gap_ticks: 0, kind: Kind::ClockStep { delta_ms: -ahead } });
    out.push(Event { gap_ticks: connected, kind: Kind::Partition { standby, ticks: 200 } });
    out.push(Event {
        gap_ticks: cut_off,
        kind: Kind::Failover { standby, power: rng.chance(50), crash: None },
    });
}

/// Bursts of claims, batches large enough that calls borrow time up to the lead bound: the
/// first waits at the ceiling, the worker's next tick records up to `max_lead_ms + 1 +
/// reserve_ms` ahead for it, and the bursts of the ticks after issue up to the lead bound.
fn borrow_to_the_lead_bound(rng: &mut Rng, gap_ticks: u32) -> Vec<Event> {
    // Batches of up to seconds each: a claim waits at the ceiling with its whole batch, and
    // the worker records past it at its next tick, so each tick takes the IDs up by a batch.
    let burst =
        Kind::Burst { claims: 20 + rng.below(30) as u32, max_batch_ms: 1_000 + rng.below(3_000) as u32 };
    (0..3 + rng.below(4))
        .map(|k| Event { gap_ticks: if k == 0 { gap_ticks } else { 1 }, kind: burst })
        .collect()
}

/// F1's failover: the clock runs ahead while the primary issues and the standby replays behind
/// it, is set back (the standby reads its clock as it replays), then the standby is cut off and
/// the primary lost before the newest records reach it. Only its clock readings cover the IDs
/// issued under them. Half the time the two clocks are as far apart as the skew allows (the
/// readings' skew term, `standby-floor-skew`), and half the time the standby restarts between
/// the set-back and the failover (its readings from its file, `standby-readings-restart`).
fn clock_readings_failover(rng: &mut Rng, gap_ticks: u32, out: &mut Vec<Event>) {
    let ahead = rng.range(3_000, 15_000);
    let standby = rng.below(2) as u8;
    let burst = Kind::Burst { claims: 10 + rng.below(30) as u32, max_batch_ms: 1 + rng.below(100) as u32 };
    if rng.chance(50) {
        // The last IDs before the set-back at the lead bound, the standby's clock the skew behind.
        out.push(Event { gap_ticks, kind: Kind::SkewApart { standby } });
        out.push(Event { gap_ticks: 0, kind: Kind::ClockStep { delta_ms: ahead } });
        let gap_ticks = rng.below(4) as u32;
        out.extend(borrow_to_the_lead_bound(rng, gap_ticks));
    } else {
        out.push(Event { gap_ticks, kind: Kind::ClockStep { delta_ms: ahead } });
        for _ in 0..1 + rng.below(4) {
            out.push(Event { gap_ticks: rng.below(4) as u32, kind: burst });
        }
    }
    out.push(Event { gap_ticks: 0, kind: Kind::ClockStep { delta_ms: -ahead } });
    cut_off_then_failover(rng, standby, (2, 20), out);
}

/// The standby cut off at once, restarted half the time (its readings then from its file),
/// and promoted `min + below(spread)` ticks later, the primary lost.
fn cut_off_then_failover(rng: &mut Rng, standby: u8, (min, spread): (u32, u64), out: &mut Vec<Event>) {
    out.push(Event { gap_ticks: 0, kind: Kind::Partition { standby, ticks: 100 } });
    if rng.chance(50) {
        let kind =
            Kind::Kill { target: Target::Standby(standby), power: rng.chance(50), restart_after_ticks: 0 };
        out.push(Event { gap_ticks: rng.below(3) as u32, kind });
    }
    out.push(Event {
        gap_ticks: min + rng.below(spread) as u32,
        kind: Kind::Failover { standby, power: rng.chance(50), crash: None },
    });
}

/// F7's failover (`standby-readings-received`): the clock runs ahead while the primary issues,
/// and the standby's replay falls behind; the clock is set back, the primary lowers its
/// ceiling, and the standby receives that lowering without replaying it; the clock runs ahead
/// again while the primary issues, and is set back (the standby, still behind, reads the fast
/// clock as it replays a record older than the lowering); the standby is cut off at once and
/// the primary lost: the promotion replays the lowering, and must not drop that reading. Half
/// the time the standby restarts before the failover (the reading then in its file's floor).
/// Half the composites are the other half's instead (`lowering_in_flight`).
fn lagging_readings_failover(rng: &mut Rng, gap_ticks: u32, out: &mut Vec<Event>) {
    let standby = rng.below(2) as u8;
    let burst = Kind::Burst { claims: 10 + rng.below(30) as u32, max_batch_ms: 1 + rng.below(100) as u32 };
    out.push(Event { gap_ticks, kind: Kind::SlowReplay { standby, ticks: 200 } });
    if rng.chance(50) {
        lowering_in_flight(rng, standby, burst, out);
        return;
    }
    jump_and_back(rng, 0, burst, out);
    // The primary's worker lowers its ceiling at its next ticks; the standby receives it.
    let gap_ticks = 2 + rng.below(6) as u32;
    jump_and_back(rng, gap_ticks, burst, out);
    cut_off_then_failover(rng, standby, (1, 10), out);
}

/// A clock jump of 3 to 15 s ahead, one to four `burst`s while it lasts, and the clock set
/// back: F7's composites' jumps.
fn jump_and_back(rng: &mut Rng, gap_ticks: u32, burst: Kind, out: &mut Vec<Event>) {
    let ahead = rng.range(3_000, 15_000);
    out.push(Event { gap_ticks, kind: Kind::ClockStep { delta_ms: ahead } });
    for _ in 0..1 + rng.below(4) {
        out.push(Event { gap_ticks: rng.below(4) as u32, kind: burst });
    }
    out.push(Event { gap_ticks: 0, kind: Kind::ClockStep { delta_ms: -ahead } });
}

/// F7's other half (`standby-readings-in-flight`): as `lagging_readings_failover`, but the
/// second jump comes right after the primary lowered its ceiling and issues only bare IDs (no
/// commit flushes the lowering), and its set-back reads the standby's clock while the lowering
/// is still on its way to it: its slow WAL receiver gets it a tick or more later, perhaps
/// without the jump's records after it, before it is cut off. The promotion comes once the
/// reading is more than `max_clock_skew_ms` old, and replays the lowering. Half the time the
/// primary's record file is full while the first jump lasts (F13's second form,
/// `renewal-below-logged-held`): the jump's ceilings are logged and never published, and the
/// "lowering" is the first renewal after the set-back, below them, with the headroom the
/// jump's waiting calls asked for. Half of those, calls borrow to the lead bound before the
/// jump, and the worker exits as the clock is set back (`worker-start-logged`): the record
/// below is the restarted worker's start record, at the ceiling published before the jump, and
/// the second jump comes after it.
fn lowering_in_flight(rng: &mut Rng, standby: u8, burst: Kind, out: &mut Vec<Event>) {
    let full = rng.chance(50);
    let exits = full && rng.chance(50);
    if exits {
        out.extend(borrow_to_the_lead_bound(rng, 0));
    }
    let mut first = Vec::new();
    jump_and_back(rng, 0, burst, &mut first);
    if full {
        let ticks = first.iter().map(|event| event.gap_ticks).sum::<u32>() + 1 + rng.below(3) as u32;
        out.push(Event { gap_ticks: 0, kind: Kind::Enospc { target: Target::Primary, ticks } });
    }
    out.extend(first);
    let mut gap_ticks = 2 + rng.below(5) as u32;
    if exits {
        out.push(Event { gap_ticks: 0, kind: Kind::WorkerExit { target: Target::Primary } });
        // Started again a second later (20 ticks), it records at its start.
        gap_ticks += 20;
    }
    // The worker lowers (or renews) at one of its next ticks (it may be recording).
    let ahead = rng.range(3_000, 15_000);
    out.push(Event { gap_ticks, kind: Kind::ClockStep { delta_ms: ahead } });
    let bare = Kind::BareIds { claims: 1 + rng.below(20) as u32 };
    out.push(Event { gap_ticks: rng.below(2) as u32, kind: bare });
    out.push(Event { gap_ticks: 0, kind: Kind::ClockStep { delta_ms: -ahead } });
    out.push(Event { gap_ticks: 1 + rng.below(8) as u32, kind: Kind::Partition { standby, ticks: 100 } });
    out.push(Event {
        gap_ticks: 6 + rng.below(10) as u32,
        kind: Kind::Failover { standby, power: rng.chance(50), crash: None },
    });
}

/// The promotion's bound at its edge (`promotion-bound-off-by-one`, `promotion-primary-lead`):
/// the two clocks exactly the skew apart, the primary issuing up to its lead bound, the standby
/// cut off, and the failover in that same millisecond. Half the time a failover comes first,
/// so that the standby with the larger `max_lead_ms` (the seeds whose standbys have one) is the
/// primary, and the old primary, back as its standby with the smaller, is the one promoted.
fn failover_at_the_edge(rng: &mut Rng, gap_ticks: u32, out: &mut Vec<Event>) {
    let standby = rng.below(2) as u8;
    let gap_ticks = if rng.chance(50) {
        out.push(Event { gap_ticks, kind: Kind::Failover { standby, power: false, crash: None } });
        // The old primary re-cloned and streaming again (it restarts within 3 s).
        80
    } else {
        gap_ticks
    };
    out.push(Event { gap_ticks, kind: Kind::SkewApart { standby } });
    out.push(Event { gap_ticks: 0, kind: Kind::Partition { standby, ticks: 100 } });
    let gap_ticks = 1 + rng.below(3) as u32;
    out.extend(borrow_to_the_lead_bound(rng, gap_ticks));
    out.push(Event { gap_ticks: 0, kind: Kind::Failover { standby, power: rng.chance(50), crash: None } });
}
