//! The simulated cluster: servers with their clocks, process memory and disks, and the glue
//! that carries out the plans of `snowflake_core::resume` as `src/postgres/reservation/` does.
//! Every decision is the core's: claims (`generator::claim`), renewals (`resume::renewal`, over
//! `next_ceiling` and `lower_ceiling`), starts, replays, promotions, kept leads. What lives here
//! is only what PostgreSQL and the machine do around them: WAL, files, fsyncs, crashes, clocks.

use crate::check::{Checker, Issued, Violation};
use crate::faults::{Config, Event, Kind, PromoStep, RecStep, Target};
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
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// The worker's tick, and the step of virtual time.
pub const TICK_MS: i64 = 50;
const SHARDS: u32 = 3;
/// Where true time starts: a fixed date, so that a run never depends on the machine's clock.
const START_UNIX_MS: i64 = DEFAULT_EPOCH_UNIX_MS + 400 * 86_400_000;
const MAX_CLOCK_SKEW_MS: u64 = 500;
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
    },
    Commit,
    /// A shard move's copy of the rows, committed on the pair (`moves`).
    Copy(u32),
    Checkpoint,
    ShutdownCheckpoint,
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
    res: Reservation,
    slots: Vec<ShardSlot>,
    readings: StandbyReadings,
    recorded_at_start: u64,
    lead_kept: Option<LeadSettings>,
    /// The last ceiling replayed from a primary's WAL since shared memory was created: Unix
    /// ms, its lead, the end of its record.
    last_ceiling: Option<(i64, Option<LeadSettings>, usize)>,
    /// The lead of the last ceiling's record crash recovery replayed (F10).
    crash_replayed_lead: Option<LeadSettings>,
    /// The lease, as the worker keeps it (`ha`).
    lease: LeaseKeeper,
    replayed: usize,
    guard_pending: bool,
    worker_up: bool,
    worker_start_at: i64,
    recording: Option<InFlight>,
    last_recording_ms: u64,
}

impl Mem {
    fn new() -> Self {
        Mem {
            res: Reservation::default(),
            slots: (0..=MOVED).map(|_| ShardSlot::default()).collect(),
            readings: StandbyReadings::default(),
            recorded_at_start: 0,
            lead_kept: None,
            last_ceiling: None,
            crash_replayed_lead: None,
            lease: LeaseKeeper::default(),
            replayed: 0,
            guard_pending: false,
            worker_up: false,
            worker_start_at: i64::MAX,
            recording: None,
            last_recording_ms: 0,
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
    /// How much WAL it had received when its replay last raised its highest clock reading.
    received_at_reading: usize,
    /// Its replay dropped a clock reading on a lowered ceiling's record it had received
    /// before it took that reading (F7 of docs/reliability.md, open): its promotion may resume
    /// short, and a failover onto it is skipped, counted, until it is cloned again.
    dropped_newer_reading: bool,
}

/// A clock the generator reads: the server's reading, frozen for the call (claims here never
/// sleep: `max_wait_ms` is 0; a sleep would only move this copy).
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

/// Counts over a run (and, summed, over many): what the faults reached.
#[derive(Clone, Copy, Default, Debug)]
pub struct Stats {
    pub promotions: u64,
    pub guards: u64,
    pub clean_stops: u64,
    pub switchovers: u64,
    pub upgrades: u64,
    pub unconfirmed_refusals: u64,
    pub power_losses: u64,
    pub kills: u64,
    pub crashes_at_step: u64,
    pub crashes_in_promotion: u64,
    pub debts_found: u64,
    pub clock_set_backs: u64,
    pub set_backs_excluded: u64,
    pub failovers_excluded: u64,
    pub switchovers_excluded: u64,
    pub lowered_ceilings: u64,
    pub leads_kept: u64,
    pub enospc_failures: u64,
    pub torn_restores: u64,
    pub claims: u64,
    pub refusals: u64,
    pub ids: u64,
    pub acked: u64,
    pub moves: u64,
    pub copies_made_again: u64,
    pub managers_dead: u64,
    pub pauses: u64,
    pub ha_failovers: u64,
    pub ha_excluded: u64,
    pub lease_refusals: u64,
    pub wal_panics: u64,
    pub observes: u64,
    pub observes_refused: u64,
}

impl Stats {
    pub fn add(&mut self, other: &Stats) {
        macro_rules! sum { ($($f:ident),*) => { $(self.$f += other.$f;)* } }
        sum!(
            promotions,
            guards,
            clean_stops,
            switchovers,
            upgrades,
            unconfirmed_refusals,
            power_losses,
            kills,
            crashes_at_step,
            crashes_in_promotion,
            debts_found,
            clock_set_backs,
            set_backs_excluded,
            failovers_excluded,
            switchovers_excluded,
            lowered_ceilings,
            leads_kept,
            enospc_failures,
            torn_restores,
            claims,
            refusals,
            ids,
            acked,
            moves,
            copies_made_again,
            managers_dead,
            pauses,
            ha_failovers,
            ha_excluded,
            lease_refusals,
            wal_panics,
            observes,
            observes_refused
        );
    }

    pub fn line(&self) -> String {
        format!(
            "promotions {} (guards {}, clean stops {}), switchovers {}, upgrades {} (unconfirmed refused {}), power \
             losses {}, kills {}, crashes at a recording step {}, crashes inside a promotion {}, debts found at \
             start {}, clock set back {} (excluded {}), failovers excluded {}, switchovers before the worker's start skipped {}, lowered ceilings {}, leads kept \
             {}, ENOSPC failures {}, torn records restored {}, claims {} (refused {}), IDs {}, commits acknowledged {}, \
             shard moves {} (copies made again after a failover {}), HA managers dead alone {}, machines paused {}, \
             promotions with the old primary left running {} (not drawn into a failover, the lease off or another on its way: {}), calls refused \
             for the lease {}, PANICs at a full WAL disk {}, \
             observations {} (refused {})",
            self.promotions,
            self.guards,
            self.clean_stops,
            self.switchovers,
            self.upgrades,
            self.unconfirmed_refusals,
            self.power_losses,
            self.kills,
            self.crashes_at_step,
            self.crashes_in_promotion,
            self.debts_found,
            self.clock_set_backs,
            self.set_backs_excluded,
            self.failovers_excluded,
            self.switchovers_excluded,
            self.lowered_ceilings,
            self.leads_kept,
            self.enospc_failures,
            self.torn_restores,
            self.claims,
            self.refusals,
            self.ids,
            self.acked,
            self.moves,
            self.copies_made_again,
            self.managers_dead,
            self.pauses,
            self.ha_failovers,
            self.ha_excluded,
            self.lease_refusals,
            self.wal_panics,
            self.observes,
            self.observes_refused,
        )
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
}

macro_rules! trace {
    ($w:expr, $($arg:tt)*) => {
        if $w.verbose {
            println!("  t={:>7} {}", $w.t - START_UNIX_MS, format!($($arg)*));
        }
    };
}

mod ha;
mod moves;
mod observers;
mod readers;

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
                restart_at: Some(START_UNIX_MS),
                needs_reclone: false,
                expect_unconfirmed: false,
                old_record: None,
                horizon_given: None,
                confirm_estimate: false,
                ran_since_clean_stop: false,
                received_at_reading: 0,
                dropped_newer_reading: false,
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

    fn flush(&mut self, i: usize) {
        let disk = &mut self.servers[i].disk;
        disk.flushed = disk.wal.len();
    }

    // ---- crashes and starts -------------------------------------------------------------

    fn crash(&mut self, i: usize, power: bool) {
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
    fn memory_lost(&mut self, i: usize) {
        self.servers[i].mem = None;
        if i == self.primary {
            self.waiting_acks.clear();
        }
        self.process_gone(i);
    }

    fn wal_full(&self, i: usize) -> bool {
        self.t < self.servers[i].wal_full_until
    }

    /// A write of WAL failed with ENOSPC: PostgreSQL PANICs (`XLogWrite` runs in a critical
    /// section), the postmaster ends every process and its crash recovery cannot finish until
    /// there is room again (the operator frees it). The machine runs on: what the WAL writer
    /// had written before reaches the disk, and so does the record file's last write; the WAL
    /// buffers not yet written are lost with the memory, a prefix of them drawn.
    fn wal_panic(&mut self, i: usize) {
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
    fn clean_stop(&mut self, i: usize) {
        if i == self.primary && !self.servers[i].disk.signal {
            // The worker finishes the recording it is in (its fdatasync returns); what it
            // would publish dies with the memory.
            self.sync_record(i);
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
    fn reclone(&mut self, i: usize) -> bool {
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
        server.received_at_reading = 0;
        server.dropped_newer_reading = false;
        server.horizon_given = None;
        trace!(self, "server {i} re-cloned from {p}, streaming from {upstream}");
        true
    }

    /// The postmaster creating shared memory (`restore::recorded_ceiling`,
    /// `promotion_pending::owed_at_start`), then recovery's start.
    fn try_start(&mut self, i: usize) {
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
                if let Rec::Ceiling { unix_ms, lead } = self.servers[i].disk.wal[index] {
                    // A record above the file is written to it (F9); a full disk stops the
                    // recovery, and the server is started again later.
                    if !self.replay_ceiling(i, unix_ms, lead, index + 1, Recovery::Crash) {
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

    // ---- replay -------------------------------------------------------------------------

    /// One ceiling's record replayed (`wal::replay_ceiling`). Returns false if the server
    /// crashed (its file could not be written: an ERROR in the startup process).
    fn replay_ceiling(
        &mut self,
        i: usize,
        unix_ms: i64,
        lead: Option<LeadSettings>,
        end: usize,
        recovery: Recovery,
    ) -> bool {
        let now_unix_ms = self.clock(i);
        let settings = self.servers[i].settings;
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
        };
        let highest_before = mem.readings.highest_guard_unix_ms;
        let plan = resume::replay(&facts, &mut mem.readings, settings, &self.layout);
        mem.res.replay(plan.bounds);
        let highest_after = mem.readings.highest_guard_unix_ms;
        if recovery == Recovery::Archive && highest_after != highest_before {
            let received = self.servers[i].disk.wal.len();
            if highest_after > highest_before {
                self.servers[i].received_at_reading = received;
            } else if end <= self.servers[i].received_at_reading {
                // A lowering older than the reading it drops (F7).
                self.servers[i].dropped_newer_reading = true;
            }
        }
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
        }
        true
    }

    /// Replays a standby's received WAL up to `to`.
    fn replay_to(&mut self, i: usize, to: usize) -> bool {
        loop {
            let Some(mem) = self.servers[i].mem.as_ref() else { return false };
            let index = mem.replayed;
            if index >= to {
                return true;
            }
            match self.servers[i].disk.wal[index] {
                Rec::Ceiling { unix_ms, lead } => {
                    if !self.replay_ceiling(i, unix_ms, lead, index + 1, Recovery::Archive) {
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

    fn connected(&self, i: usize) -> bool {
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
    fn sendable(&self, u: usize) -> usize {
        let disk = &self.servers[u].disk;
        if disk.signal {
            disk.wal.len()
        } else {
            disk.flushed
        }
    }

    /// Receives up to `limit` records past what it has.
    fn receive(&mut self, i: usize, limit: usize) {
        if !self.connected(i) {
            return;
        }
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

    fn sync_standby(&self) -> Option<usize> {
        if !self.cfg.sync {
            return None;
        }
        (0..self.servers.len()).find(|&j| {
            j != self.primary && self.servers[j].upstream == self.primary && !self.servers[j].needs_reclone
        })
    }

    // ---- the primary: clients and the worker --------------------------------------------

    fn claim(&mut self, p: usize, shard: u32, count: u64, bare: bool) {
        if self.lease_fenced(p) {
            self.stats.lease_refusals += 1;
            return;
        }
        let now = self.clock(p);
        let layout = self.layout;
        let server = &self.servers[p];
        let Some(mem) = server.mem.as_ref() else { return };
        let result = claim_once(
            &mem.slots[shard as usize],
            &mem.res,
            shard,
            count,
            &layout,
            server.settings.max_lead_ms,
            now,
        );
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
    fn claimed(&mut self, server: usize, shard: u32, result: Result<Claim, Refusal>) -> Option<Claim> {
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
    fn issued(&mut self, shard: u32, claim: &Claim, bare: bool, now: i64) {
        self.stats.ids += claim.last - claim.first + 1;
        if shard == MOVED && !bare {
            self.stored_max_moved = self.stored_max_moved.max(Some(claim.last));
        }
        let now_tp = self.layout.time_part(now).expect("in range");
        self.note_ahead(now, self.layout.counter_time_part(claim.last) as i64 - now_tp as i64);
    }

    /// A clock that issued IDs or gave a horizon, and how far ahead of it they stood: what
    /// confirming pg_upgrade's estimate assumes of every one (`upgrade`).
    fn note_ahead(&mut self, now: i64, ahead_ms: i64) {
        self.highest_issuing_clock = self.highest_issuing_clock.max(now);
        self.furthest_ahead_ms = self.furthest_ahead_ms.max(ahead_ms);
    }

    /// A crash armed at a recording step strikes here.
    fn crash_point(&mut self, p: usize, step: RecStep) -> bool {
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
    /// resumed at. `WriteFile` writes the file, and the fdatasync returns after the disk's
    /// latency (a later tick).
    fn record_steps(&mut self, p: usize, steps: &'static [Step], ceiling: u64, from: usize) {
        let unix_ms = self.layout.unix_ms(ceiling);
        for (index, &step) in steps.iter().enumerate().skip(from) {
            match step {
                Step::LogWal => {
                    let lead = self.lead_in_force(p);
                    self.servers[p].disk.wal.push(Rec::Ceiling { unix_ms, lead: Some(lead) });
                    trace!(
                        self,
                        "server {p} logs ceiling {unix_ms} at {} (clock {})",
                        self.servers[p].disk.wal.len(),
                        self.clock(p)
                    );
                    if self.crash_point(p, RecStep::AfterLogWal) {
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
    fn publish_in_shared_memory(&mut self, p: usize, step: Step, ceiling: u64) {
        let res = &self.servers[p].mem.as_ref().expect("up").res;
        match step {
            Step::Publish => res.publish_ceiling(ceiling),
            Step::ResumeAt => res.resume_at(ceiling),
            Step::LogWal | Step::WriteFile => unreachable!("not a step of shared memory"),
        }
    }

    fn sync_record(&mut self, p: usize) {
        let disk = &mut self.servers[p].disk;
        if let Some(written) = disk.record_unsynced.take() {
            disk.record = Some(written);
        }
    }

    /// The worker's start: the promotion guard once owed, else a lead the record kept.
    fn worker_start(&mut self, p: usize) {
        let now_unix_ms = self.clock(p);
        let settings = self.servers[p].settings;
        let mem = self.servers[p].mem.as_mut().expect("up");
        mem.worker_start_at = i64::MAX;
        if !mem.guard_pending {
            if let Some(kept) = resume::lead_kept_at_restart(mem.lead_kept, mem.crash_replayed_lead) {
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
            // F5 and F10: the ceiling resumed at, into WAL and the file again, with the lead in
            // force (none on a server that never issued).
            let ceiling = mem.res.ceiling.load(Relaxed);
            self.servers[p].ran_since_clean_stop = true;
            if ceiling > 0 {
                self.record_steps(p, RECORDING_AT_START, ceiling, 0);
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
                            self.servers[p].disk.wal.push(Rec::Ceiling { unix_ms, lead: Some(lead) });
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
    fn promotion_facts(&self, p: usize, now_unix_ms: i64) -> PromotionFacts {
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
        }
    }

    fn promo_crash(&mut self, p: usize, step: PromoStep) -> bool {
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
    fn worker_tick(&mut self, p: usize) {
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
            self.record_steps(p, flight.steps, flight.ceiling, flight.next_step);
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
                        Step::LogWal => {
                            self.servers[p].disk.wal.push(Rec::Ceiling { unix_ms, lead: Some(lead) })
                        }
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
                self.record_steps(p, RECORDING, ceiling, 0)
            }
        }
    }

    // ---- time ---------------------------------------------------------------------------

    fn tick(&mut self) {
        self.t += TICK_MS;
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
            let limit = if Some(i) == self.sync_standby() || self.rng.chance(50) {
                usize::MAX
            } else {
                self.rng.below(4) as usize
            };
            self.receive(i, limit);
            if self.up(i) && self.servers[i].disk.signal {
                let have = self.servers[i].disk.wal.len();
                let replayed = self.servers[i].mem.as_ref().expect("up").replayed;
                let to = if self.rng.chance(60) {
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

    /// A turn of a primary's worker (the lease first, as `worker::run` looks at it before it
    /// renews) and of its clients, in either order.
    fn serve(&mut self, p: usize) {
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

    fn clients(&mut self, p: usize) {
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
            Kind::ClockStep { delta_ms } => self.set_back(delta_ms),
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

    /// The shared clock set back. Allowed only where the docs allow it (README guarantee 3,
    /// reliability.md "What it assumes"): while the primary runs with its promotion done and
    /// every standby up, streaming and replaying, so that each reads its clock, as it replays
    /// a ceiling, after the last one the primary decided ahead of it. A clock run ahead only
    /// while a standby was down or cut off, set back before its promotion, is excluded by
    /// design: the promotion would resume short, as documented.
    fn set_back(&mut self, delta_ms: i64) {
        let p = self.primary;
        let primary_ready = self.up(p)
            && !self.servers[p].disk.signal
            && self.servers[p].mem.as_ref().is_some_and(|mem| mem.worker_up && !mem.guard_pending);
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

    fn failover(&mut self, standby: u8, power: bool, crash: Option<(PromoStep, bool)>) {
        self.promote_standby(standby, Some(power), crash);
    }

    /// A failover by the HA managers once the old primary's leader key expired, the old
    /// primary left running (`ha`); false when excluded or not possible.
    fn failover_leaving_running(&mut self, standby: u8) -> bool {
        self.promote_standby(standby, None, None)
    }

    /// A standby promoted, the old primary killed (`Some(power)`) or left running (`None`);
    /// false when the failover was not made.
    fn promote_standby(&mut self, standby: u8, kill: Option<bool>, crash: Option<(PromoStep, bool)>) -> bool {
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
        // F7 (open): a standby whose replay dropped a reading newer than the lowering that
        // dropped it may resume short; skipped and counted with the failovers excluded. The
        // promotion replays what the standby received first, so that replay is done here, before
        // the decision: a drop in it counts too (the long run's seed 5015369038640003791).
        if !self.replay_to(s, received) || !self.up(s) {
            return false;
        }
        if self.servers[s].dropped_newer_reading {
            self.stats.failovers_excluded += 1;
            trace!(self, "failover excluded: the standby dropped a clock reading newer than a lowering (F7)");
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

    fn switchover(&mut self, standby: u8, crash: Option<(PromoStep, bool)>) {
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
    fn promote(&mut self, s: usize) {
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
    fn follow(&mut self, s: usize) {
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
    fn upgrade(&mut self, copy_before: bool, binary_starts: u8, confirm: bool) {
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
            server.partitioned_until = 0;
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
