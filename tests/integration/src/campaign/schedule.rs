//! One seed, one schedule of faults: drawn with weights from the seed alone, before anything
//! runs, so that it can be printed, saved, and run again. (When each fault lands relative to
//! the clients' statements still depends on the machine's speed; the faults and their order
//! do not.)

use crate::engine::Pick;
use std::fmt;
use std::time::Duration;

/// The two sides of the system under test: a primary with its streaming standby, and a second
/// server that issues other shards.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Group {
    Pair,
    Second,
}

impl Group {
    pub const ALL: [Group; 2] = [Group::Pair, Group::Second];

    pub fn index(self) -> usize {
        self as usize
    }

    pub fn other(self) -> Group {
        match self {
            Group::Pair => Group::Second,
            Group::Second => Group::Pair,
        }
    }
}

impl fmt::Display for Group {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(match self {
            Group::Pair => "the pair's primary",
            Group::Second => "the second server",
        })
    }
}

/// What happens to the standby just before it is promoted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BeforePromotion {
    Nothing,
    /// Stopped and started again (it then replays from its last restartpoint).
    RestartStandby,
    /// One of its backends killed with SIGKILL: the standby resets and recovers.
    KillStandbyBackend,
    /// The primary's HA manager dies (its stand-in stops answering) while the primary runs on,
    /// with the lease on (`system::LEASE_MS`): after the lease the standby is promoted, and for
    /// `system::SPLIT_BRAIN` both run, half of the pair's writers still on the old primary (a
    /// split brain, as when Patroni is killed alone), before the old primary is killed.
    ManagerDied,
    /// The standby loses power (every process killed, every write it had not fsynced lost:
    /// replayed WAL, its restartpoint's files) while the primary goes on, then the primary
    /// dies and the standby comes back with what was on its disk.
    StandbyLostPower,
    /// The pair's clock runs `ms` ahead for `hold` while the primary issues, and is set back;
    /// then the standby (which replayed those ceilings, reading its clock ahead too) is
    /// stopped for 2 s, the primary dies, and the standby starts again: its restart must keep
    /// what it had read at replay (finding F1, across a restart).
    AheadThenStandbyRestarted {
        ms: i64,
        hold: Duration,
    },
    /// The pair's clock runs `ms` ahead for `hold` while the primary issues, and is set back;
    /// at once the primary dies and the standby is promoted, its clock behind the last IDs:
    /// it must resume above them, from the ceilings it replayed (their WAL records, the
    /// clock readings of F1) and the promotion's bound. The moment the promotion guard
    /// exists for, which plain failovers meet only when a clock fault happens to precede them.
    AheadThenSetBack {
        ms: i64,
        hold: Duration,
    },
    /// A partition of the pair: the standby's WAL receiver cut off (`primary_conninfo`
    /// emptied, reloaded) for `hold` while it keeps running and the primary goes on issuing
    /// (committing, when replication is asynchronous; waiting for the standby, when
    /// synchronous); then the primary dies and the standby is promoted with the WAL it had.
    /// Its last replayed floor is `hold` old: only the promotion's own bound, read at the
    /// promotion, covers the IDs of the WAL it never received. With `power_lost_at_its_end`,
    /// the standby's machine loses power right after PostgreSQL removed `standby.signal`, before
    /// the worker could record that bound: the start after it is a crash recovery with no
    /// signal file left, which must still owe the guard (`snowflake_id.promotion_pending`).
    StandbyCutOff {
        hold: Duration,
        power_lost_at_its_end: bool,
    },
}

/// A start that must be refused, and is undone afterwards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BadStart {
    /// `snowflake_id.shard_bits` changed after IDs were issued.
    ChangedLayout,
    /// One digit of the reservation record changed (its checksum no longer matches).
    DamagedRecord,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Fault {
    KillPostmaster(Group),
    StopImmediate(Group),
    /// `pg_ctl stop -m fast` and a start: a shutdown checkpoint, so nothing is replayed and
    /// the reservation record alone says where the shards resume.
    CleanRestart(Group),
    /// A power loss of the group's primary: every process killed with SIGKILL, every write to
    /// its data directory not yet fsynced lost (LazyFS), then a start, with its group's clock
    /// `clock_behind_ms` behind the real time (a machine whose clock lost its time with the
    /// power) for `POWER_LOSS_CLOCK_HOLD`, until it is set right, when that is not 0.
    PowerLoss {
        group: Group,
        clock_behind_ms: i64,
    },
    /// SIGKILL of the reservation worker: the postmaster resets the whole server.
    KillWorker(Group),
    /// SIGTERM of the reservation worker: the postmaster starts another.
    TermWorker(Group),
    /// SIGKILL of one writer's backend: the postmaster resets the whole server.
    KillBackend(Group),
    /// The pair's primary killed, its standby promoted, the old primary rebuilt as the new
    /// standby from a base backup.
    Failover(BeforePromotion),
    RestartStandby,
    /// A shard moved to the other group by the documented procedure.
    MoveShard,
    /// The same, the target losing power right after `snowflake_advance` returned (before the
    /// clients come): what the advance reserved must be on its disk.
    MoveShardTargetLostPower,
    RefusedStart(Group, BadStart),
    /// The group's clock run `ms` ahead for `hold` while it issues, then set back: its IDs
    /// lie ahead of its clock for that long, for whatever the process lane does next.
    StepBackAfterAhead {
        group: Group,
        ms: i64,
        hold: Duration,
    },
    /// The clock of a group (both servers of the pair: their clocks agree, as promotion
    /// assumes) set `ms` off the real time for `hold`, then back.
    ClockBump {
        group: Group,
        ms: i64,
        hold: Duration,
    },
    /// The clock flipping between the real time and `ms` off it every `period`, for `hold`.
    ClockStrobe {
        group: Group,
        ms: i64,
        period: Duration,
        hold: Duration,
    },
    /// Every fsync of the reservation worker delayed by `delay`, for `hold`.
    SlowFsync {
        group: Group,
        delay: Duration,
        hold: Duration,
    },
    /// Every fsync of the reservation worker failing with EIO, for `hold`.
    FailingFsync {
        group: Group,
        hold: Duration,
    },
    /// Every fsync of the standby's startup process (its replay: restartpoints, the files of
    /// the ceilings it replays) failing with EIO, for `hold`: PostgreSQL stops the standby
    /// (PANIC), and it replays again from its last restartpoint.
    FailingReplayFsync {
        hold: Duration,
    },
    /// The second server moved to the next PostgreSQL major with pg_upgrade (once, in runs
    /// given one), by the documented procedure: the old server's reservation and layout files
    /// copied into the new cluster before it starts. With `forgotten`, the first start comes
    /// with the layout alone, the reservation record forgotten, and must be refused; then it
    /// is copied.
    Upgrade {
        forgotten: bool,
    },
    /// With the registry (`Schedule::registry`): etcd killed for `hold`, then started again on
    /// its data. Each holder issues up to the mark it recorded, and no further.
    RegistryDown {
        hold: Duration,
    },
    /// With the registry: a shard's claim written over by a holder of another data directory
    /// (as a server configured with the shard would, had the lease run out) for `hold`, then
    /// deleted. The shard's holder fences it at its next renewal, and takes it back, above the
    /// mark, once it is free.
    ClaimStolen {
        shard: i32,
        hold: Duration,
    },
    /// With the registry: a copy of the pair's primary's data directory (a base backup: the
    /// same system identifier and timeline, as a VM snapshot or a restored backup) started
    /// beside it as a primary for `hold`, half of the pair's statements sent to it, then
    /// killed. The registry tells the two apart by the postmaster's incarnation: the copy
    /// issues no shard its original renews, and one it takes (a claim the original let run out)
    /// it takes above the original's mark.
    Copy {
        hold: Duration,
    },
}

impl Fault {
    /// The kind, for the summary's count of faults.
    pub fn kind(&self) -> &'static str {
        match self {
            Fault::KillPostmaster(_) => "kill -9 postmaster",
            Fault::PowerLoss { clock_behind_ms: 0, .. } => "power loss",
            Fault::PowerLoss { .. } => "power loss, back with the clock behind",
            Fault::StopImmediate(_) => "immediate stop",
            Fault::CleanRestart(_) => "clean restart",
            Fault::KillWorker(_) => "kill -9 worker",
            Fault::TermWorker(_) => "worker terminated",
            Fault::KillBackend(_) => "kill -9 backend",
            Fault::Failover(BeforePromotion::Nothing) => "failover",
            Fault::Failover(BeforePromotion::RestartStandby) => "failover, standby restarted first",
            Fault::Failover(BeforePromotion::KillStandbyBackend) => "failover, standby backend killed first",
            Fault::Failover(BeforePromotion::StandbyLostPower) => "failover, standby lost power first",
            Fault::Failover(BeforePromotion::AheadThenStandbyRestarted { .. }) => {
                "failover, clock ahead and set back, standby restarted first"
            }
            Fault::Failover(BeforePromotion::AheadThenSetBack { .. }) => {
                "failover, clock ahead and set back first"
            }
            Fault::Failover(BeforePromotion::StandbyCutOff { power_lost_at_its_end: false, .. }) => {
                "failover, standby cut off first"
            }
            Fault::Failover(BeforePromotion::StandbyCutOff { power_lost_at_its_end: true, .. }) => {
                "failover, standby cut off first, power lost as its promotion ended"
            }
            Fault::Failover(BeforePromotion::ManagerDied) => {
                "failover, the old primary left running (HA manager died)"
            }
            Fault::RestartStandby => "standby restarted",
            Fault::MoveShard => "shard moved",
            Fault::MoveShardTargetLostPower => "shard moved, the target losing power after its advance",
            Fault::RefusedStart(_, BadStart::ChangedLayout) => "start with a changed layout",
            Fault::RefusedStart(_, BadStart::DamagedRecord) => "start with a damaged record",
            Fault::StepBackAfterAhead { .. } => "clock set back after issuing ahead",
            Fault::ClockBump { ms, .. } if *ms < 0 => "clock bumped back",
            Fault::ClockBump { .. } => "clock bumped forward",
            Fault::ClockStrobe { .. } => "clock strobed",
            Fault::SlowFsync { .. } => "slow fsync",
            Fault::FailingFsync { .. } => "failing fsync",
            Fault::FailingReplayFsync { .. } => "failing fsync of the standby's replay",
            Fault::Upgrade { forgotten: false } => "pg_upgrade",
            Fault::Upgrade { forgotten: true } => "pg_upgrade, the record forgotten first",
            Fault::RegistryDown { .. } => "registry down",
            Fault::ClaimStolen { .. } => "claim stolen",
            Fault::Copy { .. } => "copy of the pair's primary started beside it",
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Fault::KillPostmaster(g)
            | Fault::StopImmediate(g)
            | Fault::CleanRestart(g)
            | Fault::KillWorker(g)
            | Fault::TermWorker(g)
            | Fault::KillBackend(g)
            | Fault::RefusedStart(g, _) => write!(f, "{} of {g}", self.kind()),
            Fault::StepBackAfterAhead { group, ms, hold } => {
                write!(f, "clock of {group} {ms:+} ms for {} ms, then set back", hold.as_millis())
            }
            Fault::ClockBump { group, ms, hold } => {
                write!(f, "clock of {group} {ms:+} ms for {} ms", hold.as_millis())
            }
            Fault::ClockStrobe { group, ms, period, hold } => write!(
                f,
                "clock of {group} strobed 0/{ms:+} ms every {} ms for {} ms",
                period.as_millis(),
                hold.as_millis()
            ),
            Fault::SlowFsync { group, delay, hold } => write!(
                f,
                "fsync of {group}'s worker delayed {} ms for {} ms",
                delay.as_millis(),
                hold.as_millis()
            ),
            Fault::FailingFsync { group, hold } => {
                write!(f, "fsync of {group}'s worker failing for {} ms", hold.as_millis())
            }
            Fault::FailingReplayFsync { hold } => {
                write!(f, "fsync of the standby's replay failing for {} ms", hold.as_millis())
            }
            Fault::Upgrade { .. } => write!(f, "{} of {}", self.kind(), Group::Second),
            Fault::RegistryDown { hold } => write!(f, "registry down for {} ms", hold.as_millis()),
            Fault::ClaimStolen { shard, hold } => {
                write!(f, "claim of shard {shard} stolen for {} ms", hold.as_millis())
            }
            Fault::Copy { hold } => write!(f, "{} for {} ms", self.kind(), hold.as_millis()),
            Fault::PowerLoss { group, clock_behind_ms } => {
                write!(f, "{} of {group}", self.kind())?;
                if *clock_behind_ms != 0 {
                    write!(f, " ({clock_behind_ms} ms behind for {} ms)", POWER_LOSS_CLOCK_HOLD.as_millis())?;
                }
                Ok(())
            }
            Fault::Failover(
                BeforePromotion::AheadThenStandbyRestarted { ms, hold }
                | BeforePromotion::AheadThenSetBack { ms, hold },
            ) => write!(f, "{} (clock {ms:+} ms for {} ms)", self.kind(), hold.as_millis()),
            Fault::Failover(BeforePromotion::StandbyCutOff { hold, .. }) => {
                write!(f, "{} (for {} ms)", self.kind(), hold.as_millis())
            }
            _ => f.write_str(self.kind()),
        }
    }
}

/// A fault and when it starts, from the start of the clients' load.
#[derive(Clone, Debug)]
pub struct Step {
    pub at: Duration,
    pub fault: Fault,
}

/// Faults that restart, promote or reconfigure servers run one after another (the process
/// lane); the clock and the disk change beside them (the environment lane), overlapping.
pub struct Schedule {
    pub seed: u64,
    pub duration: Duration,
    /// When the last fault may start; the rest of the run is quiet.
    pub faults_until: Duration,
    /// Synchronous replication to the standby (`synchronous_commit = on`), or asynchronous.
    pub synchronous: bool,
    /// `snowflake_id.max_lead_ms` set larger with ALTER SYSTEM on this server only (the
    /// standby, so that the promotion's assumption of lead settings no smaller holds), if any.
    pub larger_lead_on_standby: bool,
    pub process: Vec<Step>,
    pub environment: Vec<Step>,
    /// The major the second server is moved to by pg_upgrade, if any.
    pub upgrade_to: Option<u32>,
    /// The second server writes no WAL records of its reservation (`snowflake_id.wal_rmgr_id
    /// = 0`, as a server without standbys may): its crash recovery rests on the reservation
    /// file alone, whose fsync a power loss tests.
    pub second_without_wal_records: bool,
    /// How far the pair's standby's clock is from its primary's, in ms (positive: ahead), as
    /// two machines' clocks disagree; within `snowflake_id.max_clock_skew_ms` (the default,
    /// `MAX_CLOCK_SKEW_MS`), the disagreement the promotion is documented to absorb. 0 in half
    /// the seeds.
    pub pair_skew_ms: i64,
    /// Every server claims its shards from a registry (an etcd of the run's own,
    /// `snowflake_id.registry_url`), whose faults join the environment lane.
    pub registry: bool,
}

/// The extension's default `snowflake_id.max_clock_skew_ms`, which the campaign keeps.
pub const MAX_CLOCK_SKEW_MS: u64 = 250;

/// The extension's default `snowflake_id.reserve_ms`, which the campaign keeps.
pub const DEFAULT_RESERVE_MS: u64 = 500;

/// How long a server's clock stays behind after a power loss, before it is set right.
pub const POWER_LOSS_CLOCK_HOLD: Duration = Duration::from_secs(4);

/// The default lead bound, and the larger one a seed may set on the standby.
pub const DEFAULT_LEAD_MS: i64 = 2_000;
pub const LARGER_LEAD_MS: i64 = 5_000;

impl Schedule {
    /// With `upgrade_to` (a next major whose PostgreSQL has the extension), one process step
    /// near the middle of the faulty phase becomes the second server's pg_upgrade; the other
    /// steps are those of the seed without it.
    pub fn new(seed: u64, duration: Duration, upgrade_to: Option<u32>, registry: bool) -> Schedule {
        let mut pick = Pick::new(seed);
        // A quiet end of at least 30 s (a quarter of long runs), in which every writer must
        // issue again and the readers catch up.
        let quiet = Duration::from_secs(30).max(duration / 4);
        let faults_until = duration.saturating_sub(quiet);
        // A clock step back costs that much unavailability to the group that issued ahead:
        // minutes only in long runs.
        let longest_step_ms = (faults_until.as_millis() as i64 / 8).clamp(1_000, 120_000);
        let process = lane(&mut pick, faults_until, (4_000, 10_000), process_fault);
        let environment =
            lane(&mut pick, faults_until, (2_000, 7_000), |pick| environment_fault(pick, longest_step_ms));
        let mut schedule = Schedule {
            seed,
            duration,
            faults_until,
            synchronous: pick.chance(50),
            larger_lead_on_standby: pick.chance(50),
            process,
            environment,
            upgrade_to,
            second_without_wal_records: false,
            pair_skew_ms: 0,
            registry,
        };
        // Drawn last, so that the rest of the schedule is the seed's with or without it.
        let forgotten = pick.chance(50);
        // The same for the HA manager's death: three seeds in four turn their first plain
        // failover into one (drawn after the upgrade's, so that the seeds' upgrades stay).
        if pick.chance(75) {
            if let Some(step) = schedule
                .process
                .iter_mut()
                .find(|step| step.fault == Fault::Failover(BeforePromotion::Nothing))
            {
                step.fault = Fault::Failover(BeforePromotion::ManagerDied);
            }
        }
        // And the same for the faults of the disk and of the moment before a promotion (drawn
        // after the HA manager's death): half the crashes of a primary become power losses,
        // most of them coming back with the clock behind; of the failovers whose standby is
        // restarted first, a third has it lose power instead, a third runs the clock ahead
        // before; and the second server goes without WAL records of its reservation in half the
        // seeds.
        for step in schedule.process.iter_mut() {
            match step.fault {
                Fault::KillPostmaster(group) | Fault::StopImmediate(group) if pick.chance(50) => {
                    let clock_behind_ms =
                        if pick.chance(70) { between(&mut pick, 3_000, 12_000) as i64 } else { 0 };
                    step.fault = Fault::PowerLoss { group, clock_behind_ms };
                }
                Fault::Failover(BeforePromotion::RestartStandby) => match pick.below(3) {
                    0 => {}
                    1 => step.fault = Fault::Failover(BeforePromotion::StandbyLostPower),
                    _ => {
                        let (ms, hold) = ahead(&mut pick);
                        step.fault = Fault::Failover(BeforePromotion::AheadThenStandbyRestarted { ms, hold });
                    }
                },
                _ => {}
            }
        }
        // Half the failing fsyncs of the pair hit its standby's replay instead of the worker.
        for step in schedule.environment.iter_mut() {
            if let Fault::FailingFsync { group: Group::Pair, hold } = step.fault {
                if pick.chance(50) {
                    step.fault = Fault::FailingReplayFsync { hold };
                }
            }
        }
        schedule.second_without_wal_records = pick.chance(50);
        // A third of the moves have their target lose power once it has advanced the shard.
        // (Each conversion is drawn after those before it: adding one leaves their draws.)
        for step in schedule.process.iter_mut() {
            if step.fault == Fault::MoveShard && pick.chance(33) {
                step.fault = Fault::MoveShardTargetLostPower;
            }
        }
        // Half the seeds skew the pair's two clocks apart, by up to the skew the promotion
        // allows, one way or the other.
        if pick.chance(50) {
            let ms = between(&mut pick, 20, MAX_CLOCK_SKEW_MS) as i64;
            schedule.pair_skew_ms = if pick.chance(50) { ms } else { -ms };
        }
        // Weighted by the guard table's rates (docs/reliability.md): the guards of a promotion
        // (its bound, the renewed ceilings' WAL records) were caught by 1 or 2 of 5 drawn
        // seeds, only where a clock fault happened to come just before a failover, or the
        // standby happened to lag. So of the plain failovers left, and those that kill a
        // standby's backend first, a third run the pair's clock ahead and set it back just
        // before, and a third cut the standby off first; in asynchronous seeds half cut it off.
        // The promotion's bound acts only for IDs the primary issued past what the standby
        // last replayed: a synchronous primary's commits wait for the cut-off standby, so
        // there it has little to cover (1 of 5 drawn seeds caught its removal, not at a
        // cut-off: docs/reliability.md).
        let kinds = if schedule.synchronous { 3 } else { 4 };
        for step in schedule.process.iter_mut() {
            if let Fault::Failover(BeforePromotion::Nothing | BeforePromotion::KillStandbyBackend) =
                step.fault
            {
                match pick.below(kinds) {
                    0 => {}
                    1 => {
                        let (ms, hold) = ahead(&mut pick);
                        step.fault = Fault::Failover(BeforePromotion::AheadThenSetBack { ms, hold });
                    }
                    _ => {
                        // Longer than the promotion's bound on the standby (its lead, 1 ms,
                        // the default reserve_ms and max_clock_skew_ms): the floor it last
                        // replayed covers IDs of its clock up to that far ahead, so a shorter
                        // cut-off leaves the promotion's own bound nothing to do.
                        let lead_ms =
                            if schedule.larger_lead_on_standby { LARGER_LEAD_MS } else { DEFAULT_LEAD_MS };
                        let bound_ms = lead_ms as u64 + 1 + DEFAULT_RESERVE_MS + MAX_CLOCK_SKEW_MS;
                        let hold =
                            Duration::from_millis(between(&mut pick, bound_ms + 1_000, bound_ms + 3_000));
                        step.fault = Fault::Failover(BeforePromotion::StandbyCutOff {
                            hold,
                            power_lost_at_its_end: false,
                        });
                    }
                }
            }
        }
        let middle = schedule.faults_until / 2;
        if let Some(step) =
            upgrade_to.and_then(|_| schedule.process.iter_mut().min_by_key(|step| step.at.abs_diff(middle)))
        {
            step.fault = Fault::Upgrade { forgotten };
        }
        // Half the cut-off standbys lose power as their promotion ends (drawn last, so that
        // the rest of each seed's schedule is what it was before this fault existed).
        for step in schedule.process.iter_mut() {
            if let Fault::Failover(BeforePromotion::StandbyCutOff { power_lost_at_its_end, .. }) =
                &mut step.fault
            {
                *power_lost_at_its_end = pick.chance(50);
            }
        }
        // The registry's faults, drawn after everything else: a seed's schedule without the
        // registry is the same with it, these steps added.
        if registry {
            schedule.environment.extend(lane(&mut pick, faults_until, (4_000, 12_000), registry_fault));
            schedule.environment.sort_by_key(|step| step.at);
        }
        schedule
    }

    /// The largest clock step of the schedule, in ms: a group that issued ahead of a clock
    /// that then stepped back refuses (55000) until the clock has caught up that much.
    pub fn largest_step_ms(&self) -> i64 {
        self.environment
            .iter()
            .chain(&self.process)
            .map(|step| match step.fault {
                Fault::ClockBump { ms, .. }
                | Fault::ClockStrobe { ms, .. }
                | Fault::StepBackAfterAhead { ms, .. }
                | Fault::PowerLoss { clock_behind_ms: ms, .. }
                | Fault::Failover(
                    BeforePromotion::AheadThenStandbyRestarted { ms, .. }
                    | BeforePromotion::AheadThenSetBack { ms, .. },
                ) => ms.abs(),
                _ => 0,
            })
            .max()
            .unwrap_or(0)
    }

    /// The schedule as printed and saved.
    pub fn text(&self) -> String {
        let mut out = format!(
            "seed {} for {} s, faults until {} s; replication {}; max_lead_ms {}{}{}{}{}\n",
            self.seed,
            self.duration.as_secs(),
            self.faults_until.as_secs(),
            if self.synchronous { "synchronous" } else { "asynchronous" },
            if self.larger_lead_on_standby {
                format!("{LARGER_LEAD_MS} on the standby (ALTER SYSTEM), {DEFAULT_LEAD_MS} elsewhere")
            } else {
                format!("{DEFAULT_LEAD_MS} everywhere")
            },
            self.upgrade_to
                .map(|major| format!("; the second server upgraded to PostgreSQL {major}"))
                .unwrap_or_default(),
            if self.second_without_wal_records {
                "; the second server without WAL records (wal_rmgr_id = 0)"
            } else {
                ""
            },
            match self.pair_skew_ms {
                0 => String::new(),
                ms => format!("; the pair's standby's clock {ms:+} ms from its primary's"),
            },
            if self.registry { "; every server claims its shards from a registry (etcd)" } else { "" }
        );
        let mut steps: Vec<(&str, &Step)> = self.process.iter().map(|step| ("process", step)).collect();
        steps.extend(self.environment.iter().map(|step| ("environment", step)));
        steps.sort_by_key(|(_, step)| step.at);
        for (lane, step) in steps {
            out.push_str(&format!("{:8.1} s  {lane:<11}  {}\n", step.at.as_secs_f64(), step.fault));
        }
        out
    }
}

/// Steps at random gaps within `gap_ms` until `until`.
fn lane(
    pick: &mut Pick,
    until: Duration,
    gap_ms: (u64, u64),
    mut fault: impl FnMut(&mut Pick) -> Fault,
) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut at = Duration::from_millis(between(pick, gap_ms.0, gap_ms.1));
    while at < until {
        steps.push(Step { at, fault: fault(pick) });
        at += Duration::from_millis(between(pick, gap_ms.0, gap_ms.1));
    }
    steps
}

fn between(pick: &mut Pick, low: u64, high: u64) -> u64 {
    low + pick.below((high - low + 1) as usize) as u64
}

fn group(pick: &mut Pick) -> Group {
    // The pair more often: it has the standby, the promotion and most writers.
    if pick.chance(65) {
        Group::Pair
    } else {
        Group::Second
    }
}

/// How far and how long a failover runs the pair's clock ahead before it is set back.
fn ahead(pick: &mut Pick) -> (i64, Duration) {
    let ms = between(pick, 3_000, 12_000) as i64;
    (ms, Duration::from_millis(between(pick, 1_500, 4_000)))
}

/// One of `choices`, each with its weight (also the campaign writers' kinds of statement).
pub(super) fn weighted<T: Copy>(pick: &mut Pick, choices: &[(usize, T)]) -> T {
    let mut at = pick.below(choices.iter().map(|(weight, _)| weight).sum());
    for &(weight, choice) in choices {
        if at < weight {
            return choice;
        }
        at -= weight;
    }
    unreachable!()
}

fn process_fault(pick: &mut Pick) -> Fault {
    let which =
        weighted(pick, &[(3, 0), (2, 1), (2, 2), (1, 3), (4, 4), (1, 5), (2, 6), (1, 7), (2, 8), (2, 9)]);
    let g = group(pick);
    match which {
        0 => Fault::KillPostmaster(g),
        1 => Fault::StopImmediate(g),
        2 => Fault::KillWorker(g),
        3 => Fault::TermWorker(g),
        4 => Fault::Failover(weighted(
            pick,
            &[
                (2, BeforePromotion::Nothing),
                (1, BeforePromotion::RestartStandby),
                (1, BeforePromotion::KillStandbyBackend),
            ],
        )),
        5 => Fault::RestartStandby,
        6 => Fault::MoveShard,
        7 => Fault::RefusedStart(
            g,
            if pick.chance(50) { BadStart::ChangedLayout } else { BadStart::DamagedRecord },
        ),
        9 => Fault::CleanRestart(g),
        _ => Fault::StepBackAfterAhead {
            group: g,
            ms: between(pick, 3_000, 15_000) as i64,
            hold: Duration::from_millis(between(pick, 1_500, 4_000)),
        },
    }
}

/// A fault of the registry: etcd down for up to 8 s (past the marks of the campaign's
/// `registry_reserve_ms`, `system::REGISTRY_RESERVE_MS`), a claim stolen for up to 5 s, or a
/// copy of the pair's primary running beside it for up to 8 s (past the claims' lease, so that
/// a claim its original lets run out meanwhile, killed or cut off, can go to the copy).
fn registry_fault(pick: &mut Pick) -> Fault {
    let hold = Duration::from_millis(between(pick, 1_000, 8_000));
    match weighted(pick, &[(2, 0), (2, 1), (1, 2)]) {
        0 => Fault::RegistryDown { hold },
        1 => {
            let shards = [super::PAIR_SHARDS.as_slice(), super::SECOND_SHARDS.as_slice()].concat();
            let shard = shards[pick.below(shards.len())];
            Fault::ClaimStolen { shard, hold: hold.min(Duration::from_secs(5)) }
        }
        _ => Fault::Copy { hold: hold.max(Duration::from_secs(3)) },
    }
}

fn environment_fault(pick: &mut Pick, longest_step_ms: i64) -> Fault {
    let g = group(pick);
    let hold = Duration::from_millis(between(pick, 1_000, 5_000));
    match weighted(pick, &[(4, 0), (2, 1), (2, 2), (1, 3), (2, 4)]) {
        0 => {
            // From 4 ms to the longest step, evenly over the orders of magnitude.
            let magnitude = (longest_step_ms as f64 / 4.0).ln();
            let ms = (4.0 * (magnitude * pick.below(1_001) as f64 / 1_000.0).exp()) as i64;
            Fault::ClockBump { group: g, ms: if pick.chance(50) { -ms } else { ms }, hold }
        }
        1 => Fault::ClockStrobe {
            group: g,
            ms: between(pick, 5, 3_000) as i64 * if pick.chance(50) { -1 } else { 1 },
            period: Duration::from_millis(between(pick, 50, 500)),
            hold,
        },
        2 => Fault::SlowFsync { group: g, delay: Duration::from_millis(between(pick, 100, 2_500)), hold },
        3 => Fault::FailingFsync { group: g, hold: hold / 2 },
        _ => Fault::KillBackend(g),
    }
}
