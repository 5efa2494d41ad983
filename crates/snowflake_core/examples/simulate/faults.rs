//! A seed's configuration and its schedule of events. Both are drawn from the seed alone, on
//! streams of their own, so that a shrunk schedule runs under the same configuration.

mod composites;

use crate::rng::Rng;
use composites::{
    borrow_to_the_lead_bound, clock_readings_failover, failover_at_the_edge, floor_ahead_lowering,
    guard_run_again, lagging_readings_failover, lead_lost_at_restart, renewal_below_logged,
    restart_in_flight, worker_restart_in_flight, Dating,
};

/// The worker's tick, and the step of virtual time: a schedule's gaps and holds are counted in
/// it. (Here, below the world that runs schedules, so that the composites and the world both
/// take it from where schedules are made.)
pub const TICK_MS: i64 = 50;
/// How far apart any two servers' clocks may be (`max_clock_skew_ms`, the disagreement a
/// promotion is documented to absorb): the world keeps every clock within it, and composites
/// time their promotions by it.
pub const MAX_CLOCK_SKEW_MS: u64 = 500;

/// Where a recording of the worker's renewal may be cut (`resume::RECORDING`'s steps).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
// Named by what has happened when the crash strikes: every one is "after" a step.
#[allow(clippy::enum_variant_names)]
pub enum RecStep {
    /// The WAL record appended (not flushed): in this version's order the file is durable by
    /// then, and shared memory not yet raised.
    AfterLogWal,
    /// As a server of 0.8.x or older met it, whose renewals logged the WAL record before
    /// writing the file (F15's fix turned that round): the WAL record of a renewal appended,
    /// the file not written. The server then starts on this version, over the file and WAL
    /// that version left: what the guards of a start after such a crash are for (F9's, F10's
    /// and F12's). The rest of the run is this version's.
    OlderVersionAfterLogWal,
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
/// place the moments the rarest guards cover: each says which. Seven more, `restart_in_flight`,
/// `guard_run_again`, `lead_lost_at_restart`, `floor_ahead_lowering` (dated, and undated),
/// `worker_restart_in_flight` and `renewal_below_logged`, are drawn by a share of the seeds
/// after everything else, each on a stream of its own, so that the seeds that draw none keep
/// their schedules; so is the older version's crash (`RecStep::OlderVersionAfterLogWal`).
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
    // Half the crashes after a WAL record strike a renewal as 0.8.x recorded it, on a stream of
    // its own, so that the other draws keep their schedules.
    let mut older = Rng::new(seed, 15);
    for event in &mut out {
        if let Kind::CrashAtStep { step: step @ RecStep::AfterLogWal, .. } = &mut event.kind {
            if older.chance(50) {
                *step = RecStep::OlderVersionAfterLogWal;
            }
        }
    }
    // The composites drawn after everything else: (stream, percent of seeds, composite). Some
    // time their events by the seed's configuration.
    let config = Config::draw(seed);
    splice_drawn(seed, 6, 25, &mut out, restart_in_flight);
    splice_drawn(seed, 8, 20, &mut out, |rng, gap_ticks, out| guard_run_again(rng, gap_ticks, &config, out));
    splice_drawn(seed, 9, 25, &mut out, |rng, gap_ticks, out| {
        lead_lost_at_restart(rng, gap_ticks, &config, out)
    });
    splice_drawn(seed, 12, 20, &mut out, |rng, gap_ticks, out| {
        floor_ahead_lowering(rng, gap_ticks, &config, Dating::Dated, out)
    });
    splice_drawn(seed, 11, 20, &mut out, |rng, gap_ticks, out| {
        worker_restart_in_flight(rng, gap_ticks, &config, out)
    });
    splice_drawn(seed, 13, 20, &mut out, |rng, gap_ticks, out| {
        floor_ahead_lowering(rng, gap_ticks, &config, Dating::Undated, out)
    });
    splice_drawn(seed, 14, 20, &mut out, |rng, gap_ticks, out| {
        renewal_below_logged(rng, gap_ticks, &config, out)
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
