//! The simulated cluster: servers with their clocks, process memory and disks, and the glue
//! that carries out the plans of `snowflake_core::resume` as `src/postgres/reservation/` does.
//! Every decision is the core's: claims (`generator::claim`), renewals (`resume::renewal`, over
//! `next_ceiling` and `lower_ceiling`), starts, replays, promotions, kept leads. What lives here
//! is only what PostgreSQL and the machine do around them: WAL, files, fsyncs, crashes, clocks.
//!
//! Here: the servers' state (disk, process memory, settings), the run's loop (`tick`, the
//! events' dispatch `apply`, the quiet end). By concern, each an `impl World` of its own:
//! `starts` (crashes, stops, re-clones, starts with crash recovery), `replication` (what a
//! standby receives and replays), `worker` (the reservation worker's recordings, start and
//! tick), `clients` (claims and their checks), `handovers` (failover, switchover, promotion,
//! pg_upgrade, the clock set back), and the parts the model grew later: `moves`, `readers`,
//! `ha` (HA managers and the lease), `observers`, `waits` (calls that sleep for the clock or
//! the worker); `stats` counts what a run reached.

use crate::check::{Checker, Issued, Violation};
use crate::faults::{Config, Event, Kind, PromoStep, RecStep, Target, MAX_CLOCK_SKEW_MS, TICK_MS};
use crate::rng::Rng;
use snowflake_core::generator::{
    self, Claim, Clock, ClockPolicy, LeadSettings, NoKeeper, Refusal, Reservation, ShardSlot,
};
use snowflake_core::horizon::{Holder, PendingSlot};
use snowflake_core::layout::{Layout, DEFAULT_EPOCH_UNIX_MS};
use snowflake_core::resume::{
    self, KeptLead, Lead, PromotionFacts, PromotionPlan, RecordRead, Recovery, Renewal, ReplayFacts,
    ReplayedCeiling, Settings, StandbyReadings, StartFacts, StartPlan, StartRefusal, Step, RECORDING,
    RECORDING_AT_START, RECORDING_GUARD, RECORDING_LOWERED,
};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

const SHARDS: u32 = 3;
/// Where true time starts: a fixed date, so that a run never depends on the machine's clock.
const START_UNIX_MS: i64 = DEFAULT_EPOCH_UNIX_MS + 400 * 86_400_000;
/// Each clock stays within half the skew of the shared clock, so any two within the skew.
const SKEW_BAND_US: i64 = (MAX_CLOCK_SKEW_MS as i64 / 2) * 1_000;
/// How long an HA manager or an operator takes to start a server that failed to start.
const RETRY_MS: i64 = 1_000;

/// A WAL record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rec {
    Ceiling {
        unix_ms: i64,
        lead: Option<LeadSettings>,
        /// The model's bookkeeping, not in the real record: when it was logged, to tell when a
        /// standby dates it later than that, and why (F14: `replication`).
        logged: Logged,
    },
    Commit,
    /// A shard move's copy of the rows, committed on the pair (`moves`).
    Copy(u32),
    Checkpoint,
    ShutdownCheckpoint,
}

/// When a ceiling's record was logged: virtual time, and the shared clock's offset then (a
/// set-back since lowers it). The model's bookkeeping, not in the real record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Logged {
    pub at: i64,
    pub clock_offset: i64,
}

/// What survives the process: the record file, the debt's file, the signal file, the WAL.
#[derive(Clone, Default)]
pub struct Disk {
    /// The record file's durable content (`None`: no file).
    record: Option<RecordRead>,
    /// Written over it, not yet fdatasync'ed: read back by the server (the page cache), kept
    /// by a kill -9, lost by a power loss.
    record_unsynced: Option<RecordRead>,
    /// Torn by a power loss during a write: its checksum fails.
    torn: bool,
    /// The model's bookkeeping: this standby replayed a lowering whose date lay later than the
    /// writing by more than `max_clock_skew_ms`, because its clock was set back since the
    /// writing (F14, open): failovers onto it are excluded (`handovers`).
    misdated_lowering: bool,
    /// `snowflake_id.promotion_pending`, made durable by write, rename, folder fsync.
    pending: bool,
    /// `standby.signal`.
    signal: bool,
    wal: Vec<Rec>,
    /// WAL up to here is flushed (a power loss keeps only this much).
    flushed: usize,
    /// Recovery starts here: the last checkpoint's redo point (a restartpoint on a standby).
    redo: usize,
}

impl Disk {
    fn record_read(&self) -> Result<Option<RecordRead>, String> {
        if self.torn {
            return Err("checksum mismatch (torn write)".into());
        }
        Ok(self.record_unsynced.or(self.record))
    }

    fn kill9(&mut self) {
        // The page cache survives the process: whatever was written reaches the disk.
        if let Some(written) = self.record_unsynced.take() {
            self.record = Some(written);
        }
        self.flushed = self.wal.len();
    }

    fn power_loss(&mut self, tear: bool) {
        if self.record_unsynced.take().is_some() && tear {
            self.torn = true;
        }
        self.wal.truncate(self.flushed);
        self.redo = self.redo.min(self.flushed);
    }
}

/// A recording whose fdatasync has not returned yet.
#[derive(Clone, Copy)]
struct InFlight {
    ceiling: u64,
    /// The recording's steps (`RECORDING`, or `RECORDING_AT_START`), and the index in them of
    /// the step after `WriteFile`.
    steps: &'static [Step],
    next_step: usize,
    done_at: i64,
    started: i64,
}

/// A server's process memory: gone at any crash.
pub struct Mem {
    /// Shared with a call that waits (`waits`), which holds them while it sleeps and its
    /// server's worker records; a crash meanwhile makes new ones, and the call's are dropped.
    res: Rc<Reservation>,
    slots: Rc<[ShardSlot]>,
    readings: StandbyReadings,
    recorded_at_start: u64,
    lead_kept: Option<LeadSettings>,
    /// The last ceiling replayed from a primary's WAL since shared memory was created: Unix
    /// ms, its lead, the end of its record.
    last_ceiling: Option<(i64, Option<LeadSettings>, usize)>,
    /// The lead of the last ceiling's record crash recovery replayed (F10).
    crash_replayed_lead: Option<LeadSettings>,
    /// Crash recovery wrote a replayed record to the file (F9): the lead it wrote (F12).
    crash_written_lead: Option<Option<LeadSettings>>,
    /// The lease, as the worker keeps it (`ha`).
    lease: LeaseKeeper,
    replayed: usize,
    guard_pending: bool,
    worker_up: bool,
    worker_start_at: i64,
    recording: Option<InFlight>,
    last_recording_ms: u64,
    /// Its WAL receiver has streamed since shared memory was created, so its replay knows how
    /// much WAL it has received; before, a restarted standby replays what it had, and does
    /// not know (`ReplayFacts::received`).
    streamed: bool,
}

impl Mem {
    fn new() -> Self {
        Mem {
            res: Rc::new(Reservation::default()),
            slots: (0..=MOVED).map(|_| ShardSlot::default()).collect(),
            readings: StandbyReadings::default(),
            recorded_at_start: 0,
            lead_kept: None,
            last_ceiling: None,
            crash_replayed_lead: None,
            crash_written_lead: None,
            lease: LeaseKeeper::default(),
            replayed: 0,
            guard_pending: false,
            worker_up: false,
            worker_start_at: i64::MAX,
            recording: None,
            last_recording_ms: 0,
            streamed: false,
        }
    }
}

pub struct Server {
    disk: Disk,
    mem: Option<Mem>,
    settings: Settings,
    upstream: usize,
    skew_us: i64,
    slew_ppm: i64,
    enospc_until: i64,
    /// Until then its WAL cannot be written (ENOSPC at `pg_wal`): a primary PANICs at its next
    /// WAL write and cannot start again, a standby's WAL receiver stops.
    wal_full_until: i64,
    partitioned_until: i64,
    /// Until then its replay falls behind what it receives (`Kind::SlowReplay`).
    slow_replay_until: i64,
    restart_at: Option<i64>,
    needs_reclone: bool,
    /// After pg_upgrade without the old record: the first real start must refuse.
    expect_unconfirmed: bool,
    /// The old cluster's record, which the operator copies over the new one's.
    old_record: Option<RecordRead>,
    /// The highest horizon this server gave a reader (`readers`), and when; a re-clone is
    /// another server.
    horizon_given: Option<(u64, i64)>,
    /// After pg_upgrade: the operator confirms the estimate instead of copying the old record.
    confirm_estimate: bool,
    /// It ran as a primary (its worker started) since its last shutdown checkpoint: what
    /// happened, whatever its WAL kept of it (a power loss may have taken every record since).
    ran_since_clean_stop: bool,
}

/// A clock the generator reads: the server's reading, frozen for the call (`claim_once`'s
/// claims never sleep: `max_wait_ms` is 0; a sleep would only move this copy). Calls that wait
/// have a clock of their own (`waits`).
struct SimClock(i64);

/// One call of `generator::claim` as the model makes it, on the pair or the second server:
/// no transaction held open, the batch clamped to what one call may claim, no wait.
fn claim_once(
    slot: &ShardSlot,
    reservation: &Reservation,
    shard: u32,
    count: u64,
    layout: &Layout,
    max_lead_ms: u64,
    now: i64,
) -> Result<Claim, Refusal> {
    let policy = ClockPolicy { max_lead_ms, max_wait_ms: 0, max_reservation_wait_ms: 0 };
    let (pending, bits) = (PendingSlot::default(), [AtomicU64::new(0)]);
    let holder = Holder::new(&pending, &bits);
    let count = count.clamp(1, generator::max_batch(layout, policy));
    generator::claim(
        slot,
        reservation,
        holder.pending(shard),
        count,
        layout,
        policy,
        &mut SimClock(now),
        &mut NoKeeper,
    )
}

impl Clock for SimClock {
    fn now_unix_ms(&mut self) -> i64 {
        self.0
    }
    fn sleep_ms(&mut self, ms: u64) {
        self.0 += ms as i64;
    }
}

pub struct World {
    cfg: Config,
    layout: Layout,
    /// True time, Unix ms.
    t: i64,
    /// The shared clock's offset from true time (a step moves every server's clock).
    shared_offset: i64,
    servers: Vec<Server>,
    primary: usize,
    /// A promotion that could not finish (its replay failed): retried once the server is up.
    pending_promotion: Option<usize>,
    rng: Rng,
    checker: Checker,
    pub stats: Stats,
    armed_step: Option<(RecStep, bool)>,
    /// The highest any clock read when its server issued IDs, and the furthest ahead of its
    /// clock any server issued: what confirming pg_upgrade's estimate assumes of them.
    highest_issuing_clock: i64,
    furthest_ahead_ms: i64,
    /// How long the primary's next fdatasync of its record file takes, if a stall is drawn.
    stall_next_ms: Option<i64>,
    armed_promo: Option<(PromoStep, bool)>,
    /// Commits waiting for the synchronous standby: their end in the WAL, IDs.
    waiting_acks: Vec<(usize, u64)>,
    violation: Option<Violation>,
    verbose: bool,
    // Shard moves (`moves`).
    owner: Owner,
    second: Second,
    /// The highest counter of `MOVED` stored in a table by any server (a commit, not a bare ID).
    stored_max_moved: Option<u64>,
    copy: Option<MovedCopy>,
    moves_started: u32,
    unfix: Unfix,
    // HA managers and the lease (`ha`).
    ha: Ha,
    /// Every ID the pair issues from now on lies at or above this time part: the highest floor
    /// a client's `snowflake_observe` raised on the pair (`observers`).
    observed_floor: u64,
    /// Which of the primary's calls wait (`waits`): a stream of its own, so that a seed whose
    /// calls never wait draws everything else as before.
    wait_rng: Rng,
    /// A call that waits is sleeping (`waits`): the ticks inside its sleep make no call wait.
    in_wait: bool,
    last_tick_at: i64,
}

macro_rules! trace {
    ($w:expr, $($arg:tt)*) => {
        if $w.verbose {
            println!("  t={:>7} {}", $w.t - START_UNIX_MS, format!($($arg)*));
        }
    };
}

mod clients;
mod ha;
mod handovers;
mod moves;
mod observers;
mod readers;
mod replication;
mod starts;
mod stats;
mod waits;
mod worker;

pub use stats::Stats;

use ha::{Ha, LeaseKeeper};
pub use moves::Unfix;
use moves::{MovedCopy, Owner, Second, MOVED};

impl World {
    pub fn new(seed: u64, verbose: bool, unfix: Unfix) -> Self {
        let cfg = Config::draw(seed);
        let ha = Ha::new(cfg.servers);
        let layout = Layout::new(DEFAULT_EPOCH_UNIX_MS, 10, cfg.seq_bits);
        let settings = |max_lead_ms| Settings {
            max_lead_ms,
            reserve_ms: cfg.reserve_ms,
            max_clock_skew_ms: MAX_CLOCK_SKEW_MS,
        };
        let mut servers: Vec<Server> = (0..cfg.servers)
            .map(|i| Server {
                disk: Disk { signal: i != 0, ..Disk::default() },
                mem: None,
                settings: settings(if i == 0 { cfg.primary_lead_ms } else { cfg.standby_lead_ms }),
                upstream: 0,
                skew_us: 0,
                slew_ppm: 0,
                enospc_until: 0,
                wal_full_until: 0,
                partitioned_until: 0,
                slow_replay_until: 0,
                restart_at: Some(START_UNIX_MS),
                needs_reclone: false,
                expect_unconfirmed: false,
                old_record: None,
                horizon_given: None,
                confirm_estimate: false,
                ran_since_clean_stop: false,
            })
            .collect();
        if cfg.servers == 3 && cfg.cascade_percent > 0 {
            servers[2].upstream = 1;
        }
        let mut world = World {
            rng: Rng::new(seed, 3),
            cfg,
            layout,
            t: START_UNIX_MS,
            shared_offset: 0,
            servers,
            primary: 0,
            pending_promotion: None,
            checker: Checker::new(MOVED + 1),
            stats: Stats::default(),
            armed_step: None,
            highest_issuing_clock: i64::MIN,
            furthest_ahead_ms: i64::MIN,
            stall_next_ms: None,
            armed_promo: None,
            waiting_acks: Vec::new(),
            violation: None,
            verbose,
            owner: Owner::Pair,
            second: Second::new(moves::draw_second_skew(&mut Rng::new(seed, 4))),
            stored_max_moved: None,
            copy: None,
            moves_started: 0,
            unfix,
            ha,
            observed_floor: 0,
            wait_rng: Rng::new(seed, 5),
            in_wait: false,
            last_tick_at: START_UNIX_MS,
        };
        trace!(world, "config {:?}", world.cfg);
        for i in 0..world.servers.len() {
            world.try_start(i);
        }
        world
    }

    /// Runs the schedule, then a quiet end (every fault healed) in which the primary must
    /// issue again within the documented bound.
    pub fn run(&mut self, events: &[Event]) -> Result<(), Violation> {
        self.failed()?;
        for event in events {
            for _ in 0..event.gap_ticks {
                self.tick();
                self.failed()?;
            }
            trace!(self, "EVENT {:?}", event.kind);
            self.apply(event.kind);
            self.failed()?;
        }
        self.quiet_end()
    }

    fn failed(&mut self) -> Result<(), Violation> {
        match self.violation.take() {
            Some(violation) => Err(violation),
            None => Ok(()),
        }
    }

    fn violate(&mut self, kind: &'static str, message: String) {
        self.note_violation(Violation { kind, message, at_ms: self.t - START_UNIX_MS });
    }

    /// The run's first violation is the one it fails with.
    fn note_violation(&mut self, violation: Violation) {
        trace!(self, "VIOLATION {}: {}", violation.kind, violation.message);
        self.violation.get_or_insert(violation);
    }

    /// A claim of `server` held to the checker (`Checker::issue`); false when it broke it.
    fn checked(&mut self, shard: u32, claim: &Claim, server: usize) -> bool {
        let issued = Issued { first: claim.first, last: claim.last, server, at_ms: self.t - START_UNIX_MS };
        match self.checker.issue(&self.layout, shard, issued) {
            Ok(()) => true,
            Err(violation) => {
                self.note_violation(violation);
                false
            }
        }
    }

    // ---- clocks -------------------------------------------------------------------------

    fn clock(&self, i: usize) -> i64 {
        self.t + self.shared_offset + self.servers[i].skew_us.div_euclid(1_000)
    }

    fn own_lead(&self, i: usize) -> LeadSettings {
        self.servers[i].settings.lead()
    }

    fn lead_in_force(&self, i: usize) -> LeadSettings {
        let server = &self.servers[i];
        let res = &server.mem.as_ref().expect("up").res;
        LeadSettings {
            max_lead_ms: generator::lead_in_force(server.settings.max_lead_ms, res),
            reserve_ms: server.settings.reserve_ms,
        }
    }

    fn up(&self, i: usize) -> bool {
        self.servers[i].mem.is_some()
    }

    fn enospc(&self, i: usize) -> bool {
        self.t < self.servers[i].enospc_until
    }

    fn standbys(&self) -> Vec<usize> {
        (0..self.servers.len()).filter(|&i| i != self.primary).collect()
    }

    fn resolve(&self, target: Target) -> usize {
        match target {
            Target::Primary => self.primary,
            Target::Standby(k) => {
                let standbys = self.standbys();
                standbys[k as usize % standbys.len()]
            }
        }
    }

    // ---- disk ---------------------------------------------------------------------------

    /// Writes the record file and fdatasyncs it (`durable_file::overwrite`).
    fn write_record(&mut self, i: usize, record: RecordRead) -> Result<(), ()> {
        if self.enospc(i) {
            self.stats.enospc_failures += 1;
            return Err(());
        }
        let disk = &mut self.servers[i].disk;
        disk.record_unsynced = None;
        disk.record = Some(record);
        Ok(())
    }

    fn record_of(&self, i: usize, unix_ms: i64, reserved_under: LeadSettings) -> RecordRead {
        let lead = generator::lead_to_record(Some(reserved_under), self.own_lead(i));
        RecordRead { ceiling_unix_ms: unix_ms, lead, unconfirmed: false }
    }

    /// Appends a ceiling's record to the primary's WAL; its worker notes it as the last logged
    /// (`Reservation::last_logged`, read by `resume::renewal`).
    pub(super) fn log_ceiling(&mut self, p: usize, ceiling: u64, lead: LeadSettings) {
        let unix_ms = self.layout.unix_ms(ceiling);
        let server = &mut self.servers[p];
        let logged = Logged { at: self.t, clock_offset: self.shared_offset };
        server.disk.wal.push(Rec::Ceiling { unix_ms, lead: Some(lead), logged });
        server.mem.as_ref().expect("up").res.last_logged.store(ceiling, Relaxed);
    }

    fn flush(&mut self, i: usize) {
        let disk = &mut self.servers[i].disk;
        disk.flushed = disk.wal.len();
    }

    // ---- crashes and starts -------------------------------------------------------------

    // ---- replay -------------------------------------------------------------------------

    // ---- the primary: clients and the worker --------------------------------------------

    // ---- time ---------------------------------------------------------------------------

    fn tick(&mut self) {
        self.t += TICK_MS;
        self.tick_now();
    }

    /// A tick's turn of every process at the present time: at `tick`, and inside a call that
    /// waits, every `TICK_MS` of its sleep (`waits`).
    fn tick_now(&mut self) {
        self.last_tick_at = self.t;
        for server in &mut self.servers {
            server.skew_us =
                (server.skew_us + server.slew_ppm * TICK_MS / 1_000).clamp(-SKEW_BAND_US, SKEW_BAND_US);
        }
        for i in 0..self.servers.len() {
            if self.servers[i].restart_at.is_some_and(|at| at <= self.t) {
                self.try_start(i);
            }
        }
        if let Some(s) = self.pending_promotion {
            if self.up(s) && self.servers[s].disk.signal {
                self.promote(s);
            }
        }
        self.ha_tick();
        // An old primary left running (`ha`): its worker and its clients go on, in either
        // order, as the primary's do.
        if let Some(z) = self.zombie().filter(|&z| !self.paused(z)) {
            self.serve(z);
        }
        let p = self.primary;
        if self.up(p) && !self.servers[p].disk.signal && !self.paused(p) {
            self.serve(p);
            if self.up(p) && self.rng.chance(30) {
                self.ask_horizon(p);
            }
            // The WAL writer flushes what was written (`XLogSetAsyncXactLSN`), within 200 ms.
            if self.up(p) && self.rng.chance(25) {
                if self.wal_full(p) && self.servers[p].disk.flushed < self.servers[p].disk.wal.len() {
                    self.wal_panic(p);
                } else {
                    self.flush(p);
                }
            }
            if self.up(p) && self.wal_full(p) && self.rng.chance(2) {
                // The checkpointer's record cannot be written either.
                self.wal_panic(p);
            } else if self.up(p) && self.rng.chance(2) {
                let disk = &mut self.servers[p].disk;
                disk.flushed = disk.wal.len();
                disk.redo = disk.wal.len();
                disk.wal.push(Rec::Checkpoint);
                disk.flushed = disk.wal.len();
            }
        }
        // Streaming: direct standbys first, then any cascading from them.
        let mut order = self.standbys();
        order.sort_by_key(|&i| self.servers[i].upstream != self.primary);
        for i in order {
            let limit = if self.t < self.servers[i].slow_replay_until {
                // Its slow disk holds up its WAL receiver's writes too: at most two a tick,
                // so that a record may stay on its way while it replays older ones.
                self.rng.below(3) as usize
            } else if Some(i) == self.sync_standby() || self.rng.chance(50) {
                usize::MAX
            } else {
                self.rng.below(4) as usize
            };
            self.receive(i, limit);
            if self.up(i) && self.servers[i].disk.signal {
                let have = self.servers[i].disk.wal.len();
                let replayed = self.servers[i].mem.as_ref().expect("up").replayed;
                let to = if self.t < self.servers[i].slow_replay_until {
                    (replayed + usize::from(self.rng.chance(10))).min(have)
                } else if self.rng.chance(60) {
                    have
                } else {
                    (replayed + self.rng.below(4) as usize).min(have)
                };
                self.replay_to(i, to);
            }
        }
        if let Some(s) = self.sync_standby() {
            let have = if self.connected(s) { self.servers[s].disk.wal.len() } else { 0 };
            let before = self.waiting_acks.len();
            self.waiting_acks.retain(|&(end, _)| end > have);
            self.stats.acked += (before - self.waiting_acks.len()) as u64;
        }
        self.moves_tick();
    }

    // ---- events -------------------------------------------------------------------------

    fn apply(&mut self, kind: Kind) {
        // A primary whose WAL cannot be written cannot stop cleanly (its shutdown checkpoint
        // PANICs): the operations that begin with a clean stop wait until there is room.
        let clean_stop_first = matches!(
            kind,
            Kind::Switchover { .. }
                | Kind::CleanRestart { target: Target::Primary }
                | Kind::LowerLead { restart: true, .. }
                | Kind::Upgrade { .. }
                | Kind::Move
        );
        if clean_stop_first && self.wal_full(self.primary) {
            trace!(self, "skipped: the primary's WAL disk is full");
            return;
        }
        match kind {
            Kind::Burst { claims, max_batch_ms } => {
                let p = self.primary;
                if self.up(p) && !self.servers[p].disk.signal {
                    for _ in 0..claims {
                        let shard = self.rng.below(self.pair_shards()) as u32;
                        let count = 1 + self.rng.below(self.layout.ids_per_ms() * max_batch_ms as u64);
                        let bare = self.rng.chance(self.cfg.bare_percent);
                        self.claim(p, shard, count, bare);
                    }
                }
            }
            Kind::BareIds { claims } => {
                let p = self.primary;
                if self.up(p) && !self.servers[p].disk.signal {
                    for _ in 0..claims {
                        let shard = self.rng.below(self.pair_shards()) as u32;
                        let count = 1 + self.rng.below(self.layout.ids_per_ms() * 50);
                        self.claim(p, shard, count, true);
                    }
                }
            }
            Kind::ClockStep { delta_ms } if delta_ms >= 0 => self.shared_offset += delta_ms,
            Kind::ClockStep { delta_ms } => self.set_back(delta_ms, false),
            Kind::SetBackOwingGuard { delta_ms } => self.set_back(delta_ms.min(0), true),
            Kind::Skew { server, skew_ms } => {
                let i = server as usize % self.servers.len();
                self.servers[i].skew_us = (skew_ms * 1_000).clamp(-SKEW_BAND_US, SKEW_BAND_US);
            }
            Kind::SkewApart { standby } => {
                let (p, s) = (self.primary, self.resolve(Target::Standby(standby)));
                if p != s {
                    self.servers[p].skew_us = SKEW_BAND_US;
                    self.servers[s].skew_us = -SKEW_BAND_US;
                    self.servers[p].slew_ppm = 0;
                    self.servers[s].slew_ppm = 0;
                }
            }
            Kind::Slew { server, ppm } => {
                let i = server as usize % self.servers.len();
                self.servers[i].slew_ppm = ppm;
            }
            Kind::Kill { target, power, restart_after_ticks } => {
                let i = self.resolve(target);
                if self.up(i) {
                    self.crash(i, power);
                    self.servers[i].restart_at = Some(self.t + restart_after_ticks as i64 * TICK_MS);
                }
            }
            Kind::BackendCrash { target } => {
                let i = self.resolve(target);
                if self.up(i) {
                    self.crash(i, false);
                    self.try_start(i);
                }
            }
            Kind::CleanRestart { target } => {
                let i = self.resolve(target);
                if self.up(i) {
                    self.clean_stop(i);
                    self.try_start(i);
                }
            }
            Kind::Partition { standby, ticks } => {
                let i = self.resolve(Target::Standby(standby));
                self.servers[i].partitioned_until = self.t + ticks as i64 * TICK_MS;
            }
            Kind::SlowReplay { standby, ticks } => {
                let i = self.resolve(Target::Standby(standby));
                self.servers[i].slow_replay_until = self.t + ticks as i64 * TICK_MS;
            }
            Kind::Failover { standby, power, crash } => self.failover(standby, power, crash),
            Kind::ManagerDies { standby } => self.manager_dies(standby),
            Kind::Pause { standby, ms } => self.pause(standby, ms),
            Kind::Switchover { standby, crash } => self.switchover(standby, crash),
            Kind::Upgrade { copy_before, binary_starts, confirm } => {
                self.upgrade(copy_before, binary_starts, confirm)
            }
            Kind::LowerLead { new_ms, restart } => {
                // Only on a primary whose promotion is done: lowered while its guard is owed,
                // the guard would run under a lead smaller than the old primary's, which the
                // docs exclude (the old primary's lead no larger than the new one's).
                let p = self.primary;
                let old = self.servers[p].settings.max_lead_ms;
                let promoted =
                    self.servers[p].mem.as_ref().is_some_and(|mem| mem.worker_up && !mem.guard_pending);
                if !promoted
                    || self.servers[p].disk.signal
                    || self.pending_promotion.is_some()
                    || new_ms >= old
                {
                    return;
                }
                if restart {
                    self.clean_stop(p);
                    self.servers[p].settings.max_lead_ms = new_ms;
                    self.try_start(p);
                    return;
                }
                // A reload (`worker`'s SIGHUP): the shards keep the old lead while ahead.
                self.servers[p].settings.max_lead_ms = new_ms;
                let now_unix_ms = self.clock(p);
                let reserve_ms = self.servers[p].settings.reserve_ms;
                let mem = self.servers[p].mem.as_ref().expect("up");
                let lead = Lead {
                    now_unix_ms,
                    setting_ms: new_ms,
                    in_force_ms: generator::lead_in_force(new_ms, &mem.res),
                };
                if let Some(keep) = lead.to_keep(old, mem.res.ceiling.load(Relaxed), reserve_ms, &self.layout)
                {
                    mem.res.inherited_max_lead_ms.fetch_max(keep.max_lead_ms, Relaxed);
                    self.stats.leads_kept += 1;
                }
            }
            Kind::RaiseStandbyLead { standby, new_ms } => {
                let i = self.resolve(Target::Standby(standby));
                let settings = &mut self.servers[i].settings;
                settings.max_lead_ms = settings.max_lead_ms.max(new_ms);
            }
            Kind::WorkerExit { target } => {
                let i = self.resolve(target);
                if let Some(mem) = self.servers[i].mem.as_mut().filter(|mem| mem.worker_up) {
                    // The process's own memory goes: a recording whose fdatasync had not
                    // returned stops there (its write stays in the page cache; harsher than a
                    // SIGTERM, after which the real worker finishes its recording first), the
                    // last recording's time, the lease as it knew it.
                    mem.worker_up = false;
                    mem.recording = None;
                    mem.last_recording_ms = 0;
                    mem.lease = LeaseKeeper::default();
                    mem.worker_start_at = self.t + RETRY_MS;
                    self.stats.worker_exits += 1;
                    trace!(self, "server {i}: its reservation worker exits; started again in a second");
                }
            }
            Kind::Enospc { target, ticks } => {
                let i = self.resolve(target);
                self.servers[i].enospc_until = self.t + ticks as i64 * TICK_MS;
            }
            Kind::WalFull { target, ticks } => {
                let i = self.resolve(target);
                let until = self.t + ticks as i64 * TICK_MS;
                self.servers[i].wal_full_until = until;
                if i != self.primary {
                    // Its WAL receiver cannot write what it receives: it stops, and starts
                    // again once there is room.
                    let server = &mut self.servers[i];
                    server.partitioned_until = server.partitioned_until.max(until);
                }
            }
            Kind::Observe { ahead_ms } => self.observe(ahead_ms),
            Kind::CrashAtStep { step, power } => self.armed_step = Some((step, power)),
            Kind::DiskStall { ms } => self.stall_next_ms = Some(ms),
            Kind::Move => self.start_move(),
        }
    }

    /// The end of a run: every fault healed, every server started. The primary must issue
    /// on every shard again within the documented bound: the clock back within the lead of
    /// the highest ID or floor (after a clock set back, shards wait for it, as documented),
    /// plus the promotion's bound, plus the worker's restart, its recordings and slack.
    fn quiet_end(&mut self) -> Result<(), Violation> {
        self.armed_step = None;
        self.stall_next_ms = None;
        // A stalled recording still in flight delays the first IDs by what is left of it.
        let stalled_ms = self
            .servers
            .iter()
            .filter_map(|server| server.mem.as_ref()?.recording.map(|flight| flight.done_at - self.t))
            .max()
            .unwrap_or(0)
            .max(0);
        for server in &mut self.servers {
            server.enospc_until = 0;
            server.wal_full_until = 0;
            server.partitioned_until = 0;
            server.slow_replay_until = 0;
            server.slew_ppm = 0;
        }
        self.ha_quiet();
        for i in 0..self.servers.len() {
            if !self.up(i) && self.servers[i].restart_at.is_none() {
                self.servers[i].restart_at = Some(self.t);
            }
        }
        let start = self.t;
        let max_lead_ms = self.servers.iter().map(|server| server.settings.max_lead_ms).max().unwrap_or(0);
        let mut bound_ms: Option<i64> = None;
        let mut issued = [false; SHARDS as usize];
        loop {
            self.tick();
            self.failed()?;
            let p = self.primary;
            if bound_ms.is_none() && self.up(p) && !self.servers[p].disk.signal {
                let now = self.layout.time_part(self.clock(p)).expect("in range");
                let floor = self.servers[p].mem.as_ref().expect("up").res.floor.load(Relaxed);
                let highest = self.checker.highest_time_part(&self.layout).unwrap_or(0).max(floor);
                let ahead = highest.saturating_sub(now) as i64;
                let lead_bound = max_lead_ms + self.cfg.reserve_ms + 1 + MAX_CLOCK_SKEW_MS;
                // Two recordings at the disk's slowest: the one in flight, then the one a
                // waiting call needs.
                let disk_ms = 2 * self.cfg.max_disk_latency_ms + stalled_ms;
                bound_ms = Some(self.t - start + ahead + lead_bound as i64 + disk_ms + 5_000);
            }
            if self.up(p) && !self.servers[p].disk.signal {
                for shard in 0..SHARDS {
                    let before = self.checker_count();
                    self.claim(p, shard, 1, false);
                    self.failed()?;
                    if self.checker_count() > before {
                        issued[shard as usize] = true;
                    }
                }
            }
            if issued.iter().all(|&done| done) {
                return Ok(());
            }
            let limit = bound_ms.unwrap_or(60_000);
            if self.t - start > limit {
                return Err(Violation {
                    kind: "liveness",
                    message: format!(
                        "after the faults stopped, server {p} had not issued on every shard within {limit} ms (issued: {issued:?}, up: {})",
                        self.up(p)
                    ),
                    at_ms: self.t - START_UNIX_MS,
                });
            }
        }
    }

    fn checker_count(&self) -> u64 {
        self.stats.ids
    }
}

/// What a record written from a plan (`resume::RecordToWrite`) reads back as.
fn record_of_write(write: resume::RecordToWrite) -> RecordRead {
    RecordRead { ceiling_unix_ms: write.ceiling_unix_ms, lead: write.lead, unconfirmed: write.unconfirmed }
}
