//! Where a server resumes issuing: every decision of the durable reservation's protocol, as
//! pure functions from facts to a plan. The extension's glue (`src/postgres/reservation/`)
//! gathers the facts (the record file, the WAL record replayed, the clock, the settings, what
//! the replay left in shared memory) and carries the plan out (writes, WAL, shared memory, the
//! log line made from the plan's reason); the simulation (`crates/snowflake_sim`) drives the
//! same functions under millions of fault schedules. Nothing here reads a clock or a file.
//!
//! The moments, in the order a server meets them:
//! * `at_start`: the postmaster creates shared memory (a start, or again after a backend
//!   crash): both bounds at the recorded ceiling, raised first under pg_upgrade, refused on a
//!   damaged record or on pg_upgrade's unconfirmed estimate;
//! * `promotion_owed`: whether that start owes a promotion guard (in recovery, or a debt left
//!   on disk by a start in recovery that never recorded its guard);
//! * `replay`: a ceiling's WAL record replayed, in crash recovery (never below the file) or on
//!   a standby (raised to the promotion's bound above its highest clock reading, F1);
//! * `promotion`: the worker's first start after a recovery: the old primary's clean stop, or
//!   the promotion's bound ahead of the clock, or the replayed floor when higher;
//! * `renewal`: every tick of the worker: a lower ceiling after a clock jump came back, or a
//!   new one ahead of the clock, recorded in the steps `RECORDING` lists (and the ceiling a
//!   primary resumed at, logged again when its worker starts: `RECORDING_AT_START`);
//! * `lead_to_keep`, `forget_kept_lead`: a `max_lead_ms` larger than the setting, kept while
//!   IDs lie further ahead of the clock than the setting allows (after a promotion from a
//!   primary with a longer lead, a lowered setting, a restart that kept one).
//!
//! Times: a "ceiling" or "floor" is a time part (`Layout::time_part`); a `*_unix_ms` is Unix
//! milliseconds, the unit of the record file and the WAL record (they mean the same whatever
//! the epoch).

use crate::generator::{self, LeadSettings, Reservation, ShardSlot};
use crate::layout::Layout;
use crate::sync::Ordering::Relaxed;

/// This server's settings that decide where it resumes (`snowflake_id.max_lead_ms`,
/// `reserve_ms`, `max_clock_skew_ms` as configured, without a lead it keeps for a while).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    pub max_lead_ms: u64,
    pub reserve_ms: u64,
    pub max_clock_skew_ms: u64,
}

impl Settings {
    /// The lead settings alone.
    pub fn lead(self) -> LeadSettings {
        LeadSettings { max_lead_ms: self.max_lead_ms, reserve_ms: self.reserve_ms }
    }

    /// How far ahead of its own clock a server with these lead settings can have issued IDs:
    /// how far ahead of the clock the pg_upgrade guard resumes.
    pub fn old_server_lead_bound_ms(self) -> u64 {
        self.lead().bound_ms()
    }

    /// How far ahead of this server's clock a promotion resumes the shards at least: above
    /// every ID an old primary could have issued with lead settings no larger than these or
    /// than `primary`'s (the last its WAL carried), when its clock read at most
    /// `max_clock_skew_ms` more than this one. A standby also applies it to its clock readings
    /// as it replays (`replay`).
    pub fn promotion_bound_ms(self, primary: Option<LeadSettings>) -> u64 {
        let own = self.old_server_lead_bound_ms();
        own.max(primary.map_or(0, LeadSettings::bound_ms)) + self.max_clock_skew_ms
    }
}

/// Whether `reserve_ms` is too long for the clock policy: a restart resumes at the reservation,
/// up to `reserve_ms` ahead of the clock, and a call waits at most `max_wait_ms` for the clock
/// to come within `max_lead_ms` of it; with a longer reservation every restart would refuse
/// calls until the clock caught up. The settings' check hooks refuse such a combination.
pub fn reservation_too_long(max_lead_ms: u64, max_wait_ms: u64, reserve_ms: u64) -> bool {
    reserve_ms > max_lead_ms.saturating_add(max_wait_ms)
}

/// A recorded ceiling (Unix ms) as a time part: before the epoch it restricts nothing, past
/// the range of the time bits it means the IDs ran out.
pub fn time_part_of_ceiling(layout: &Layout, unix_ms: i64) -> u64 {
    match layout.time_part(unix_ms) {
        Ok(time_part) => time_part,
        Err(_) if unix_ms < layout.epoch_unix_ms() => 0,
        Err(_) => layout.max_time_part() + 1,
    }
}

/// What the record file said when it was read (`snowflake_id.reservation`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordRead {
    pub ceiling_unix_ms: i64,
    /// The lead settings kept with the ceiling (they exceeded the server's own when written).
    pub lead: Option<LeadSettings>,
    /// Marked by pg_upgrade's starts of a new cluster: only an estimate of the old server's.
    pub unconfirmed: bool,
}

/// A record to write, and how: `unconfirmed` carries pg_upgrade's mark.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordToWrite {
    pub ceiling_unix_ms: i64,
    pub lead: Option<LeadSettings>,
    pub unconfirmed: bool,
}

/// The facts of a start (the postmaster creating shared memory).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StartFacts {
    /// The record file: absent on a server that never issued, an error when it cannot be
    /// read or its checksum fails.
    pub record: Result<Option<RecordRead>, String>,
    /// Started by pg_upgrade (`postgres -b`): the old cluster, the new one, or `--check`.
    pub binary_upgrade: bool,
    pub now_unix_ms: i64,
}

/// Where a start resumes, or why it refuses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StartPlan {
    /// Both bounds at `ceiling`: nothing is issued until the worker has recorded a new one.
    /// `write` first, when set (the pg_upgrade guard). `lead_kept` is the record's lead
    /// settings, which the worker keeps (`lead_to_keep`) and a promotion reads.
    Resume {
        ceiling: u64,
        write: Option<RecordToWrite>,
        lead_kept: Option<LeadSettings>,
        reason: StartReason,
    },
    /// The server must not start (an ERROR in the postmaster).
    Refuse(StartRefusal),
}

/// Why a start resumes where it does, for its log line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartReason {
    /// No record: this server never issued an ID.
    NoRecord,
    /// The recorded ceiling.
    Recorded,
    /// Under pg_upgrade, the record raised `bound_ms` ahead of the clock; on a new cluster
    /// (`new_cluster`), marked unconfirmed.
    UpgradeGuard { bound_ms: u64, ceiling_unix_ms: i64, new_cluster: bool },
    /// Under pg_upgrade, the record already that far ahead: nothing written.
    UpgradeAlreadyAhead,
}

/// Why a start refuses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StartRefusal {
    /// The record cannot be read (58030 or XX001 in the glue: data corrupted): guessing could
    /// repeat IDs.
    Unreadable(String),
    /// The first real start of a cluster made by pg_upgrade without the old server's record
    /// (F0000): its ceiling is only pg_upgrade's estimate.
    Unconfirmed { estimate_unix_ms: i64 },
}

/// Where the shards resume when shared memory is created.
///
/// Under pg_upgrade (every start, of the new cluster or the old one, and `--check`'s): the old
/// server may have issued up to its ceiling, at most `old_server_lead_bound_ms` ahead of its
/// clock, and pg_upgrade carries the tables, not the record; so the record is raised to that far
/// ahead of now (never lowered). On a new cluster (no record, or one these starts marked) it is
/// written marked unconfirmed, and the first real start refuses it until the old server's record
/// is copied over it. At every such start, since `--check` may run long before the upgrade.
pub fn at_start(facts: &StartFacts, settings: Settings, layout: &Layout) -> StartPlan {
    let record = match &facts.record {
        Ok(record) => *record,
        Err(reason) => return StartPlan::Refuse(StartRefusal::Unreadable(reason.clone())),
    };
    let lead_kept = record.and_then(|record| record.lead);
    if facts.binary_upgrade {
        let bound_ms = settings.old_server_lead_bound_ms();
        let guard_unix_ms = facts.now_unix_ms.saturating_add(bound_ms as i64);
        if let Some(record) = record.filter(|record| record.ceiling_unix_ms >= guard_unix_ms) {
            let ceiling = time_part_of_ceiling(layout, record.ceiling_unix_ms);
            return StartPlan::Resume {
                ceiling,
                write: None,
                lead_kept,
                reason: StartReason::UpgradeAlreadyAhead,
            };
        }
        let new_cluster = record.is_none_or(|record| record.unconfirmed);
        let ceiling_unix_ms =
            record.map_or(guard_unix_ms, |record| record.ceiling_unix_ms.max(guard_unix_ms));
        let write = RecordToWrite { ceiling_unix_ms, lead: lead_kept, unconfirmed: new_cluster };
        return StartPlan::Resume {
            ceiling: time_part_of_ceiling(layout, ceiling_unix_ms),
            write: Some(write),
            lead_kept,
            reason: StartReason::UpgradeGuard { bound_ms, ceiling_unix_ms, new_cluster },
        };
    }
    match record {
        Some(record) if record.unconfirmed => {
            StartPlan::Refuse(StartRefusal::Unconfirmed { estimate_unix_ms: record.ceiling_unix_ms })
        }
        Some(record) => StartPlan::Resume {
            ceiling: time_part_of_ceiling(layout, record.ceiling_unix_ms),
            write: None,
            lead_kept,
            reason: StartReason::Recorded,
        },
        None => StartPlan::Resume { ceiling: 0, write: None, lead_kept: None, reason: StartReason::NoRecord },
    }
}

/// Whether a start owes a promotion guard, and whether it must first record the debt on disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PromotionDebt {
    /// The worker's first start after this recovery runs `promotion`.
    pub owed: bool,
    /// Write the debt's file durably before anything else: PostgreSQL removes the signal file
    /// early in the end of recovery, before the worker starts, and a crash from then on must
    /// still find the debt.
    pub record_it: bool,
}

/// At a start: `in_recovery` (a signal file, `standby.signal` or `recovery.signal`, is there),
/// `owed_before` (the debt's file is there: a start in recovery whose guard was never
/// recorded, cut short by a crash at the end of its promotion). The worker removes the file
/// only once the guard is recorded.
pub fn promotion_owed(in_recovery: bool, owed_before: bool) -> PromotionDebt {
    PromotionDebt { owed: in_recovery || owed_before, record_it: in_recovery && !owed_before }
}

/// Which recovery replays a ceiling's record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recovery {
    /// After a crash of this server: its own WAL, up to what was flushed.
    Crash,
    /// A standby, or archive recovery: a primary's WAL.
    Archive,
}

/// What a standby's replay remembers from one ceiling's record to the next (the startup
/// process's own memory: a new startup process starts again from the record file, which holds
/// what the one before it kept).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StandbyReadings {
    /// The last ceiling replayed (Unix ms).
    pub last_replayed_unix_ms: Option<i64>,
    /// The clock readings a lowering has not dropped (`Reading`).
    kept: KeptReadings,
}

/// How many clock readings a standby keeps apart. Normally one: a clock that goes on reading
/// later makes every older reading's bound redundant. More only after the clock went back
/// (a reading below an older one, kept as the older may be dropped first); past this many, the
/// newest two are merged into one that stays as long as either would (safe, never dropped
/// earlier), so that the state stays a fixed size.
const KEPT_READINGS: usize = 4;

/// Clock readings' bounds, oldest first, each higher than every newer one (a newer, higher
/// reading replaces the older ones it covers).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct KeptReadings {
    readings: [Reading; KEPT_READINGS],
    len: usize,
}

/// One clock reading a standby keeps: the promotion's bound above it, how much WAL the standby
/// had received, and its boot clock (which clock steps do not move) when it was taken.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Reading {
    guard_unix_ms: i64,
    received: u64,
    boot_ms: u64,
}

impl KeptReadings {
    /// The highest bound kept: the oldest.
    fn highest(&self) -> Option<i64> {
        (self.len > 0).then(|| self.readings[0].guard_unix_ms)
    }

    fn add(&mut self, reading: Reading) {
        while self.len > 0 && self.readings[self.len - 1].guard_unix_ms <= reading.guard_unix_ms {
            self.len -= 1;
        }
        if self.len == KEPT_READINGS {
            // The newest kept is higher than this one: it stays, until this one could go too.
            let newest = &mut self.readings[self.len - 1];
            newest.received = newest.received.max(reading.received);
            newest.boot_ms = newest.boot_ms.max(reading.boot_ms);
            return;
        }
        self.readings[self.len] = reading;
        self.len += 1;
    }

    /// A lowering: the readings surely taken before the primary wrote it go, those it had not
    /// received yet (its record ends at `record_end`) taken more than `skew_ms` before
    /// `written_boot_ms` on the boot clock. The others stay (finding F7).
    fn drop_taken_before(&mut self, record_end: u64, written_boot_ms: u64, skew_ms: u64) {
        let mut kept = 0;
        for k in 0..self.len {
            let reading = self.readings[k];
            let before =
                reading.received < record_end && reading.boot_ms.saturating_add(skew_ms) < written_boot_ms;
            if !before {
                self.readings[kept] = reading;
                kept += 1;
            }
        }
        self.len = kept;
    }
}

/// The facts of one ceiling's record replayed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplayFacts {
    pub ceiling_unix_ms: i64,
    /// The lead settings the primary wrote with it (0.8.0 on).
    pub lead: Option<LeadSettings>,
    pub recovery: Recovery,
    /// The ceiling the record file held when shared memory was created (a time part).
    pub recorded_at_start: u64,
    pub now_unix_ms: i64,
    /// Where the record ends in WAL.
    pub record_end: u64,
    /// How much WAL this server had received when it replayed the record (its WAL receiver's
    /// flushed position): at least `record_end`, and `u64::MAX` when not known, as on a
    /// standby replaying what it received before a restart (a reading then stays until a
    /// higher one replaces it).
    pub received: u64,
    /// This server's boot clock (ms; Linux's CLOCK_BOOTTIME, which clock steps do not move).
    pub boot_ms: u64,
}

/// What a replayed record does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplayPlan {
    /// Both bounds go there (`Reservation::replay`): the last record replayed holds, lower or
    /// higher, since records are replayed in the order they were decided.
    pub bounds: u64,
    /// The record file rewritten durably with this before the bounds are used. On a standby
    /// at every record (a restart of the standby, or the postmaster re-creating shared memory,
    /// starts again from it). In crash recovery only for a record above what the file held at
    /// the start (one whose file write the crash cut): the older records replayed first could
    /// only set the file back, and above it the bounds would stand where no later start
    /// resumes (finding F9).
    pub write: Option<RecordToWrite>,
}

/// A ceiling's WAL record replayed.
///
/// In crash recovery, never below the ceiling the file held at the start: the worker makes each
/// ceiling durable in the file before any ID uses it, without waiting for its WAL record's flush,
/// so the newest records may be missing from the WAL while the file has them. A record above the
/// file (a worker's start record, logged before the file's write, the crash between the two,
/// `RECORDING_AT_START`; or a record before a lowering the file holds, whose own record the crash
/// took) is written to the file too: the bounds go there, a horizon may be given up to the floor,
/// and a clean restart after this recovery resumes at the file, which must not be below it (F9 of
/// docs/reliability.md, found by the simulation).
///
/// On a standby, raised to the promotion's bound above the highest clock reading taken at a
/// replay since the primary last lowered its ceiling (`standby_floor_unix_ms`), and written to
/// the file with the primary's lead settings when they exceed this server's.
pub fn replay(
    facts: &ReplayFacts,
    readings: &mut StandbyReadings,
    settings: Settings,
    layout: &Layout,
) -> ReplayPlan {
    let lead = generator::lead_to_record(facts.lead, settings.lead());
    match facts.recovery {
        Recovery::Crash => {
            let replayed = time_part_of_ceiling(layout, facts.ceiling_unix_ms);
            ReplayPlan {
                bounds: replayed.max(facts.recorded_at_start),
                write: (replayed > facts.recorded_at_start).then_some(RecordToWrite {
                    ceiling_unix_ms: facts.ceiling_unix_ms,
                    lead,
                    unconfirmed: false,
                }),
            }
        }
        Recovery::Archive => {
            let floor_unix_ms = standby_floor_unix_ms(facts, readings, settings, layout);
            ReplayPlan {
                bounds: time_part_of_ceiling(layout, floor_unix_ms),
                write: Some(RecordToWrite { ceiling_unix_ms: floor_unix_ms, lead, unconfirmed: false }),
            }
        }
    }
}

/// On a standby, where a promotion must resume at least, for a ceiling just replayed: that
/// ceiling, or, when higher, the promotion's bound above the highest clock reading taken at a
/// replay since the primary last lowered its ceiling.
///
/// Why the clock (finding F1 of docs/reliability.md): the promotion guard resumes the bound
/// ahead of the clock at the promotion, which covers IDs issued under records this server never
/// received only while the old primary's clock never read further ahead than this clock does
/// then. A clock that ran ahead while the primary issued and was set back before the failover
/// breaks that; this server read the same fast clock as it replayed, and keeps the highest.
///
/// Why not forever: a record lower than the one before says the primary lowered its ceiling
/// after a jump came back, with nothing issued up there: the readings taken before the primary
/// wrote that record go. Not those taken after (finding F7): a standby whose replay lags what it
/// has received, or a lowering still on its way, can have it read a clock run ahead again while
/// it replays older records, then replay a lowering the primary wrote before that second jump;
/// the primary issued up there after it, under records that may never reach this server. A
/// reading taken once the lowering had arrived stays; so does one taken, by the boot clock,
/// less than `max_clock_skew_ms` before the primary wrote it: `lower_ceiling` puts the lowered
/// ceiling `reserve_ms` ahead of the primary's clock, which reads within the skew of this one
/// (the primary's `reserve_ms` from the record; without it, this server's, no smaller by the
/// docs' assumption, which dates the writing earlier: more readings stay). Any record below the
/// one before is read so, and one further ahead of the primary's clock would date itself later
/// than it was written (finding F13): `lower_ceiling` no longer holds a lowering at a floor
/// ahead, a renewal below the last ceiling logged is held to `reserve_ms` ahead (`renewal`),
/// and a guard or a start record never goes below one logged before (`promotion`,
/// `ceiling_at_start`). One dated ahead of this clock by more than the skew is taken as
/// undated, and drops nothing not yet received: a lowering written while the primary's clock
/// had jumped ahead (a ceiling of a larger jump still pending), set back since, or one an older
/// version held at its floor. The file's floor,
/// which a new startup process starts from, was read when part of what it replays may already
/// have been received (which part, the file does not say): kept until a higher reading
/// replaces it.
fn standby_floor_unix_ms(
    facts: &ReplayFacts,
    readings: &mut StandbyReadings,
    settings: Settings,
    layout: &Layout,
) -> i64 {
    let guard_now = facts.now_unix_ms.saturating_add(settings.promotion_bound_ms(facts.lead) as i64);
    let previous = readings.last_replayed_unix_ms.replace(facts.ceiling_unix_ms);
    if previous.is_none() && readings.kept.highest().is_none() {
        let file_floor = layout.unix_ms(facts.recorded_at_start);
        readings.kept.add(Reading { guard_unix_ms: file_floor, received: u64::MAX, boot_ms: u64::MAX });
    }
    if previous.is_some_and(|previous| facts.ceiling_unix_ms < previous) {
        let reserve_ms = facts.lead.map_or(settings.reserve_ms, |lead| lead.reserve_ms);
        let written_unix_ms = facts.ceiling_unix_ms.saturating_sub(reserve_ms as i64);
        let skew_ms = settings.max_clock_skew_ms;
        // Dated in the future of this clock by more than the skew: not a date (a lowering
        // written while the primary's clock had jumped, or held at its floor by an older
        // version). Nothing not yet received goes.
        let written_boot_ms = if written_unix_ms > facts.now_unix_ms.saturating_add(skew_ms as i64) {
            0
        } else {
            let age_ms = facts.now_unix_ms.saturating_sub(written_unix_ms).max(0) as u64;
            facts.boot_ms.saturating_sub(age_ms)
        };
        readings.kept.drop_taken_before(facts.record_end, written_boot_ms, skew_ms);
    }
    let reading = Reading {
        guard_unix_ms: guard_now,
        received: facts.received.max(facts.record_end),
        boot_ms: facts.boot_ms,
    };
    readings.kept.add(reading);
    let guard = readings.kept.highest().expect("a reading was just kept");
    facts.ceiling_unix_ms.max(guard)
}

/// The facts of a promotion (the worker's first start after a recovery).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PromotionFacts {
    pub now_unix_ms: i64,
    /// Where the replay left the floor (and the ceiling): the last ceiling replayed, raised.
    pub replayed_floor: u64,
    /// The last ceiling's record replayed since shared memory was created, if any.
    pub last_replayed: Option<ReplayedCeiling>,
    /// The lead settings the record file kept when shared memory was created
    /// (`StartPlan::Resume::lead_kept`): on a standby restarted since its last ceiling's
    /// record, those its primary wrote into it, when they exceed this server's.
    pub lead_recorded_at_start: Option<LeadSettings>,
    /// The replay ended on a shutdown checkpoint that comes after `last_replayed`'s record:
    /// the old primary stopped cleanly, and every ID it issued lies below that ceiling.
    pub ended_on_shutdown_checkpoint: bool,
    /// The `max_lead_ms` in force now (`generator::lead_in_force`).
    pub max_lead_in_force_ms: u64,
    /// A guard this server logged for this promotion already (`Reservation::last_logged`; 0:
    /// none), whose file write failed: the worker exited and runs the promotion again. The
    /// guard never goes below it (finding F13): a standby of this server reads a lower record
    /// as a lowering, and dates it `reserve_ms` before its ceiling, later than it was written.
    pub guard_logged: u64,
}

/// A ceiling's record as replayed: the ceiling, and the lead settings it carried (0.8.0 on).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplayedCeiling {
    pub ceiling_unix_ms: i64,
    pub lead: Option<LeadSettings>,
}

impl PromotionFacts {
    /// The old primary's lead settings: those of the last record replayed, or, when none was
    /// replayed since shared memory was created (the standby restarted, or crashed, after a
    /// restartpoint past the last one, and its primary wrote none since), those the record
    /// file kept (written there only when they exceed this server's own, which is when they
    /// count).
    pub fn primary_lead(&self) -> Option<LeadSettings> {
        match self.last_replayed {
            Some(replayed) => replayed.lead,
            None => self.lead_recorded_at_start,
        }
    }

    /// Where the old primary stopped (its last ceiling, Unix ms), when the replay ended on its
    /// clean stop (`ended_on_shutdown_checkpoint`); never without a ceiling replayed in this
    /// run of the standby.
    pub fn clean_stop_unix_ms(&self) -> Option<i64> {
        self.last_replayed
            .filter(|_| self.ended_on_shutdown_checkpoint)
            .map(|replayed| replayed.ceiling_unix_ms)
    }
}

/// Where a promotion resumes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PromotionPlan {
    /// A planned switchover: the floor comes down to where the old primary stopped (above all
    /// it issued); the ceiling the replay recorded stays. Nothing to record.
    CleanStop { floor: u64, stopped_at_unix_ms: i64, keep_lead: Option<KeepLead> },
    /// Both bounds at `ceiling`, recorded first (`RECORDING_GUARD`), with `keep_lead` kept before
    /// the record is written so that it carries it. `above_replayed`: the replayed floor (or a
    /// guard logged before, `PromotionFacts::guard_logged`) was higher than the bound ahead of
    /// the clock (`bound_ms`).
    Guard { ceiling: u64, bound_ms: u64, above_replayed: bool, keep_lead: Option<KeepLead> },
}

/// A `max_lead_ms` to keep, larger than the setting, and how far ahead of the clock the IDs
/// lie (for the warning).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeepLead {
    pub max_lead_ms: u64,
    pub ahead_ms: u64,
}

/// Where the shards resume after a recovery.
///
/// The WAL this server replayed may stop short of what the old primary wrote (asynchronous
/// replication, a standby cut off): the old primary issued at most its lead bound ahead of its
/// clock, which read at most `max_clock_skew_ms` more than this one. So the shards resume the
/// promotion's bound ahead of this clock, or at the replayed floor when that is higher. Unless
/// the replay ended on the old primary's clean stop: then every ID it issued lies below its
/// last ceiling, and the shards resume at that or the clock.
pub fn promotion(facts: &PromotionFacts, settings: Settings, layout: &Layout) -> PromotionPlan {
    let primary_lead = facts.primary_lead();
    if let Some(stopped_at_unix_ms) = facts.clean_stop_unix_ms() {
        let keep_lead = primary_lead.and_then(|primary| {
            lead_to_keep(primary.max_lead_ms, facts.replayed_floor, facts, settings, layout)
        });
        return PromotionPlan::CleanStop {
            floor: time_part_of_ceiling(layout, stopped_at_unix_ms),
            stopped_at_unix_ms,
            keep_lead,
        };
    }
    let bound_ms = settings.promotion_bound_ms(primary_lead);
    let guard = time_part_of_ceiling(layout, facts.now_unix_ms.saturating_add(bound_ms as i64));
    let ceiling = guard.max(facts.replayed_floor).max(facts.guard_logged);
    let keep_lead =
        primary_lead.and_then(|primary| lead_to_keep(primary.max_lead_ms, ceiling, facts, settings, layout));
    PromotionPlan::Guard { ceiling, bound_ms, above_replayed: ceiling != guard, keep_lead }
}

fn lead_to_keep(
    max_lead_ms: u64,
    reserved_up_to: u64,
    facts: &PromotionFacts,
    settings: Settings,
    layout: &Layout,
) -> Option<KeepLead> {
    let lead = Lead {
        now_unix_ms: facts.now_unix_ms,
        setting_ms: settings.max_lead_ms,
        in_force_ms: facts.max_lead_in_force_ms,
    };
    lead.to_keep(max_lead_ms, reserved_up_to, settings.reserve_ms, layout)
}

/// The `max_lead_ms` a server has now: the setting, and the one in force (the setting or a
/// larger one kept, `generator::lead_in_force`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lead {
    pub now_unix_ms: i64,
    pub setting_ms: u64,
    pub in_force_ms: u64,
}

impl Lead {
    /// Whether to keep `max_lead_ms` in force, larger than the setting, while IDs this server
    /// must stay above may lie further ahead of the clock than the setting allows: up to
    /// `reserved_up_to` (a time part). Without it every call would be refused until the clock
    /// caught up (tens of seconds after a long lead). Not when it is no larger than the lead
    /// in force, or already spent (`generator::inherited_lead_spent`).
    pub fn to_keep(
        self,
        max_lead_ms: u64,
        reserved_up_to: u64,
        reserve_ms: u64,
        layout: &Layout,
    ) -> Option<KeepLead> {
        let now = layout.time_part(self.now_unix_ms).ok()?;
        let spent = generator::inherited_lead_spent(now, reserved_up_to, reserve_ms, self.setting_ms);
        (max_lead_ms > self.in_force_ms && !spent)
            .then(|| KeepLead { max_lead_ms, ahead_ms: reserved_up_to.saturating_sub(now) })
    }
}

/// What to do with a kept lead at a tick of the worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeptLead {
    /// Still needed (or none kept).
    Keep,
    /// Drop it (`logged`: it was larger than the setting, say the setting holds again).
    Drop { logged: bool },
}

/// Drops a kept lead once the ceiling is back within the setting's bound: from there every ID
/// lies where the setting alone would have put it.
pub fn forget_kept_lead(now: u64, kept_ms: u64, ceiling: u64, setting_ms: u64, reserve_ms: u64) -> KeptLead {
    if kept_ms == 0
        || (kept_ms > setting_ms && !generator::inherited_lead_spent(now, ceiling, reserve_ms, setting_ms))
    {
        return KeptLead::Keep;
    }
    KeptLead::Drop { logged: kept_ms > setting_ms }
}

/// The lead settings a primary's restart keeps (`Lead::to_keep` decides whether the clock still
/// needs them): those of its record file as crash recovery left it (`recorded`: the file's at
/// the start, `StartPlan::Resume::lead_kept`, or, when crash recovery wrote a replayed record
/// to the file, F9, that record's, `written_by_recovery`), but no larger than those of the last
/// ceiling's record its crash recovery replayed, when it replayed one.
///
/// Why (finding F10 of docs/reliability.md, found by the simulation): the file is written after
/// each WAL record, so a power loss or a crash can leave it older than WAL. After a reload
/// lowered `max_lead_ms`, the WAL says the smaller lead, and a standby promoted later goes by
/// that (`PromotionFacts::primary_lead`); a restart that kept the file's larger lead issued
/// further ahead than that standby's promotion resumes. The smaller of the two costs at most
/// calls refused until the clock catches up with the file's ceiling, never a repeated ID.
///
/// Why the file as recovery left it, not as the start read it (finding F12, found by the
/// simulation's long mode): crash recovery writes a replayed record above the file to it, with
/// its lead; a restart that went by the file it started on kept none, logged its resumed ceiling
/// with the smaller setting and wrote that into the file too, and a power loss before that
/// write was durable left the file with the record's larger lead, which the next restart kept:
/// a standby copied meanwhile (its base backup reads the written file) knew only the smaller
/// one, and its promotion resumed below IDs issued with the larger.
pub fn lead_kept_at_restart(
    recorded_at_start: Option<LeadSettings>,
    written_by_recovery: Option<Option<LeadSettings>>,
    crash_replayed: Option<LeadSettings>,
) -> Option<LeadSettings> {
    let recorded = written_by_recovery.unwrap_or(recorded_at_start);
    match (recorded, crash_replayed) {
        (Some(file), Some(wal)) if wal.max_lead_ms < file.max_lead_ms => Some(wal),
        (recorded, _) => recorded,
    }
}

/// A new ceiling the worker records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Renewal {
    /// After the clock jumped ahead and came back with nothing issued up there: the lower
    /// ceiling, already published by `generator::lower_ceiling`; recorded, never published.
    Lowered(u64),
    /// A ceiling ahead of the clock (`generator::next_ceiling`): recorded, then published.
    Raised(u64),
}

/// The worker's rule at each tick: lower the ceiling after a jump came back, else renew it.
pub fn renewal(
    now: u64,
    reservation: &Reservation,
    slots: &[ShardSlot],
    layout: &Layout,
    lead: LeadSettings,
    recording_ms: u64,
) -> Option<Renewal> {
    if let Some(lower) =
        generator::lower_ceiling(now, reservation, slots, layout, lead.reserve_ms, lead.max_lead_ms)
    {
        return Some(Renewal::Lowered(lower));
    }
    generator::next_ceiling(now, reservation, layout, lead.reserve_ms, lead.max_lead_ms, recording_ms)
        .and_then(|target| dated_right(now, reservation, lead.reserve_ms, target))
        .map(Renewal::Raised)
}

/// A renewal's ceiling, held to `reserve_ms` ahead of the clock when it lies below the last ceiling
/// logged (finding F13, second form). A lowering is published before it is recorded, and one whose
/// file write fails (a full disk) is never logged: the next renewal may then lie below the last
/// ceiling logged, the one from before the clock came back. (Until the file was written before the
/// WAL record, a raised ceiling whose file write failed was logged and never published, with the
/// same end.) A standby reads that record as a lowering, and dates it `reserve_ms` before its
/// ceiling (`standby_floor_unix_ms`); with a renewal's headroom (wider when recordings are slow, or
/// a call wants IDs ahead) the date would lie after the writing, and the lowering would drop a
/// reading the standby took in between. Held to `reserve_ms` ahead, it is dated right. `None` while
/// the published ceiling still lies that far ahead: the worker waits for the clock (at most the
/// lead bound), as calls then still have `reserve_ms` to issue in.
fn dated_right(now: u64, reservation: &Reservation, reserve_ms: u64, target: u64) -> Option<u64> {
    if target >= reservation.last_logged.load(Relaxed) {
        return Some(target);
    }
    let held = target.min(now.saturating_add(reserve_ms));
    (held > reservation.ceiling.load(Relaxed)).then_some(held)
}

/// One step of recording a ceiling.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// The record file, durably (fdatasync): what makes the ceiling durable on this server,
    /// since crash recovery may miss the newest WAL records, which were not flushed.
    WriteFile,
    /// The WAL record of the ceiling, with the lead settings in force, not waited for: a
    /// standby replays it, so that its promotion resumes above it; the rows issued under it
    /// follow it in WAL, and their commits flush it.
    LogWal,
    /// Shared memory: claims may issue below the raised ceiling from now on
    /// (`Reservation::publish_ceiling`).
    Publish,
    /// Shared memory, at a promotion's guard: both bounds go to the ceiling
    /// (`Reservation::resume_at`), so nothing is issued below it.
    ResumeAt,
}

/// The order every renewed ceiling is recorded in: the file, durably, then the WAL record, and
/// only then shared memory. The file comes first so that WAL never carries a ceiling, or a
/// lead, that the file may not hold after a restart. Logged first, a ceiling whose file write
/// then failed (a full disk) left the file below what a standby knew, and a clean restart's
/// start record, the file's ceiling, read to the standby as a lowering dated too late (finding
/// F15); and a record carrying a lowered lead, whose file write a power loss took, left the
/// larger lead in the file for the restart (F10's first form). Written first, a ceiling whose
/// file write fails is never logged, and a crash between the two steps leaves what a power
/// loss of an unflushed record leaves anyway: the file ahead of WAL, nothing issued under it.
/// A lowered ceiling is published first by `generator::lower_ceiling`, and takes only the
/// first two steps (`RECORDING_LOWERED`).
pub const RECORDING: &[Step] = &[Step::WriteFile, Step::LogWal, Step::Publish];
/// A lowered ceiling's recording (see `RECORDING`).
pub const RECORDING_LOWERED: &[Step] = &[Step::WriteFile, Step::LogWal];
/// A primary's worker at its start (not after a recovery that owes a promotion guard, which
/// records its own): the ceiling the server resumed at goes into WAL once more, then into the
/// file with the lead now in force. The one recording whose WAL record comes first: its
/// ceiling is the file's already, and the record must be in WAL whatever the file write does.
///
/// The WAL record: the record file may hold a ceiling whose WAL record a power loss took (the
/// record is not waited for, the file is fdatasynced), with IDs issued under it that nothing in
/// WAL covers (a bare `SELECT snowflake_nextval()`, an asynchronous commit): a clean switchover
/// resumes at the last ceiling in WAL before the old primary's shutdown checkpoint, and without
/// this record that is a lower one, below those IDs (finding F5, found by the simulation). It
/// is logged at once, before the file's fdatasync, and also when the file write fails (a full
/// disk). Nothing is issued between the start and this record: both bounds start at the file's
/// ceiling, and a new ceiling is recorded before any ID uses it.
///
/// Its lead is the larger of the lead now in force and the file's (`start_record_lead`): until
/// the file write below is durable, a restart may find the file's lead again, and a standby
/// must know of it.
///
/// The file: a restart may keep a smaller lead than the file held (`lead_kept_at_restart`, or
/// none once the clock has caught up); left in the file, the larger one would come back at the
/// next restart, while the records after this one carry the smaller (finding F10).
pub const RECORDING_AT_START: &[Step] = &[Step::LogWal, Step::WriteFile];

/// The lead settings a primary's start record carries (`RECORDING_AT_START`): the lead in
/// force, or the record file's (as crash recovery left it, as for `lead_kept_at_restart`) when
/// that is longer. The file is written after the record, with the lead in force; a power loss
/// may take that write, and crash recovery may replay nothing to cap the file's lead with (a
/// checkpoint came after the record), so a restart can keep the file's lead again: a standby
/// that knew only the smaller one from this record would resume its promotion below IDs issued
/// under it (finding F16, found by the simulation). Knowing the longer one costs a promotion
/// right after at most a longer wait for the clock.
pub fn start_record_lead(
    in_force: LeadSettings,
    recorded_at_start: Option<LeadSettings>,
    written_by_recovery: Option<Option<LeadSettings>>,
) -> LeadSettings {
    match written_by_recovery.unwrap_or(recorded_at_start) {
        Some(file) if file.max_lead_ms > in_force.max_lead_ms => file,
        _ => in_force,
    }
}

/// The ceiling a primary's worker records at its start (`RECORDING_AT_START`; 0: none, the server
/// never issued): the one the server resumed at, or a higher one an earlier worker logged (before a
/// lowering it published whose file write failed; the worker was restarted while shared memory
/// stayed). A record below that one would read as a lowering on a standby, dated later than it was
/// written (finding F13).
pub fn ceiling_at_start(reservation: &Reservation) -> u64 {
    reservation.ceiling.load(Relaxed).max(reservation.last_logged.load(Relaxed))
}

/// A promotion guard's recording: as `RECORDING`, then both bounds there.
pub const RECORDING_GUARD: &[Step] = &[Step::WriteFile, Step::LogWal, Step::ResumeAt];

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::layout::DEFAULT_EPOCH_UNIX_MS;

    const LAYOUT: Layout = Layout::new(DEFAULT_EPOCH_UNIX_MS, 10, 12);
    const SETTINGS: Settings = Settings { max_lead_ms: 2_000, reserve_ms: 250, max_clock_skew_ms: 500 };
    const NOW: i64 = DEFAULT_EPOCH_UNIX_MS + 100 * 86_400_000;

    fn tp(unix_ms: i64) -> u64 {
        time_part_of_ceiling(&LAYOUT, unix_ms)
    }

    fn record(ceiling_unix_ms: i64, unconfirmed: bool) -> Option<RecordRead> {
        Some(RecordRead { ceiling_unix_ms, lead: None, unconfirmed })
    }

    #[test]
    fn a_reservation_longer_than_lead_and_wait_is_refused() {
        assert!(!reservation_too_long(2_000, 1_000, 3_000));
        assert!(reservation_too_long(2_000, 1_000, 3_001));
        assert!(!reservation_too_long(0, 0, 0));
    }

    #[test]
    fn bounds_add_up_as_documented() {
        assert_eq!(SETTINGS.old_server_lead_bound_ms(), 2_251);
        assert_eq!(SETTINGS.promotion_bound_ms(None), 2_751);
        let longer = LeadSettings { max_lead_ms: 60_000, reserve_ms: 250 };
        assert_eq!(SETTINGS.promotion_bound_ms(Some(longer)), 60_751);
    }

    #[test]
    fn a_start_resumes_at_the_record_and_refuses_what_it_cannot_trust() {
        let start = |record, binary_upgrade| {
            at_start(&StartFacts { record, binary_upgrade, now_unix_ms: NOW }, SETTINGS, &LAYOUT)
        };
        assert!(matches!(start(Ok(record(NOW + 5, false)), false),
            StartPlan::Resume { ceiling, write: None, reason: StartReason::Recorded, .. } if ceiling == tp(NOW + 5)));
        assert!(matches!(
            start(Ok(None), false),
            StartPlan::Resume { ceiling: 0, reason: StartReason::NoRecord, .. }
        ));
        assert_eq!(
            start(Ok(record(NOW, true)), false),
            StartPlan::Refuse(StartRefusal::Unconfirmed { estimate_unix_ms: NOW })
        );
        assert!(matches!(start(Err("crc".into()), false), StartPlan::Refuse(StartRefusal::Unreadable(_))));
        assert!(matches!(start(Err("crc".into()), true), StartPlan::Refuse(StartRefusal::Unreadable(_))));
    }

    #[test]
    fn pg_upgrade_raises_the_record_and_marks_only_a_new_cluster() {
        let start = |record| {
            at_start(&StartFacts { record, binary_upgrade: true, now_unix_ms: NOW }, SETTINGS, &LAYOUT)
        };
        let guard = NOW + 2_251;
        // A new cluster: written marked.
        let StartPlan::Resume { ceiling, write: Some(write), .. } = start(Ok(None)) else { panic!() };
        assert_eq!((ceiling, write.ceiling_unix_ms, write.unconfirmed), (tp(guard), guard, true));
        // The old cluster's own record, behind: raised, not marked.
        let StartPlan::Resume { write: Some(write), .. } = start(Ok(record(NOW - 10, false))) else {
            panic!()
        };
        assert_eq!((write.ceiling_unix_ms, write.unconfirmed), (guard, false));
        // Already ahead: left alone, never lowered.
        let plan = start(Ok(record(NOW + 10_000, false)));
        assert!(
            matches!(plan, StartPlan::Resume { ceiling, write: None, .. } if ceiling == tp(NOW + 10_000))
        );
        // A record these starts marked before, behind now: raised again, still marked.
        let StartPlan::Resume { write: Some(write), .. } = start(Ok(record(NOW - 10, true))) else {
            panic!()
        };
        assert!(write.unconfirmed);
    }

    #[test]
    fn the_promotion_debt_is_recorded_once_and_owed_until_settled() {
        assert_eq!(promotion_owed(true, false), PromotionDebt { owed: true, record_it: true });
        assert_eq!(promotion_owed(true, true), PromotionDebt { owed: true, record_it: false });
        assert_eq!(promotion_owed(false, true), PromotionDebt { owed: true, record_it: false });
        assert_eq!(promotion_owed(false, false), PromotionDebt { owed: false, record_it: false });
    }

    #[test]
    fn crash_recovery_never_goes_below_the_file() {
        let facts = |ceiling_unix_ms| ReplayFacts {
            ceiling_unix_ms,
            lead: None,
            recovery: Recovery::Crash,
            recorded_at_start: tp(NOW + 300_000),
            now_unix_ms: NOW,
            record_end: 100,
            received: 100,
            boot_ms: 0,
        };
        let mut readings = StandbyReadings::default();
        let plan = replay(&facts(NOW), &mut readings, SETTINGS, &LAYOUT);
        assert_eq!(plan, ReplayPlan { bounds: tp(NOW + 300_000), write: None });
        let plan = replay(&facts(NOW + 400_000), &mut readings, SETTINGS, &LAYOUT);
        assert_eq!(plan.bounds, tp(NOW + 400_000));
        // Above the file, the record goes to the file too (F9): a clean restart resumes there.
        let write = plan.write.expect("a record above the file is written");
        assert_eq!((write.ceiling_unix_ms, write.unconfirmed), (NOW + 400_000, false));
    }

    /// Replays ceilings on a standby, one record each, a second apart by the boot clock:
    /// `(ceiling, clock now, record's end, WAL received)`, and the floors it writes.
    fn standby_floors(records: &[(i64, i64, u64, u64)]) -> Vec<i64> {
        let mut readings = StandbyReadings::default();
        let mut boot_ms = 0;
        let mut replay_one = |&(ceiling_unix_ms, now_unix_ms, record_end, received)| {
            boot_ms += 1_000;
            let facts = ReplayFacts {
                ceiling_unix_ms,
                lead: None,
                recovery: Recovery::Archive,
                recorded_at_start: 0,
                now_unix_ms,
                record_end,
                received,
                boot_ms,
            };
            replay(&facts, &mut readings, SETTINGS, &LAYOUT).write.unwrap().ceiling_unix_ms
        };
        records.iter().map(&mut replay_one).collect()
    }

    #[test]
    fn a_standby_keeps_its_highest_clock_reading_until_the_primary_lowers() {
        let floors = standby_floors(&[
            // The clock runs 15 s fast while the primary issues: the floor follows it.
            (NOW + 15_500, NOW + 15_000, 10, 10),
            // Set right: the reading stays.
            (NOW + 15_600, NOW, 20, 20),
            // The primary lowers its ceiling (written as this replays: its ceiling reserve_ms
            // ahead of the clock now): the readings taken before it go.
            (NOW + 250, NOW, 30, 30),
        ]);
        assert_eq!(floors, [NOW + 15_000 + 2_751, NOW + 15_000 + 2_751, NOW + 2_751]);
    }

    #[test]
    fn a_lagging_standby_keeps_a_reading_taken_after_the_lowering_arrived() {
        // F7: the primary lowered its ceiling (its record ends at 30) and its clock then ran
        // ahead again; this standby had received it all (up to 50) but replayed behind, and
        // read the fast clock as it replayed an older record. The lowering is older than
        // that reading: the reading stays.
        let floors = standby_floors(&[
            (NOW + 15_500, NOW + 15_000, 10, 10),
            (NOW + 15_600, NOW + 20_000, 20, 50),
            (NOW + 250, NOW + 1_000, 30, 50),
        ]);
        assert_eq!(floors[2], NOW + 20_000 + 2_751);
        // A reading below an older one is kept apart: the older goes with the lowering, the
        // newer stays (received at 40, after the lowering arrived).
        let floors = standby_floors(&[
            (NOW + 15_500, NOW + 15_000, 10, 10),
            (NOW + 15_600, NOW + 5_000, 20, 40),
            (NOW + 250, NOW + 1_000, 30, 40),
        ]);
        assert_eq!(floors, [NOW + 15_000 + 2_751, NOW + 15_000 + 2_751, NOW + 5_000 + 2_751]);
    }

    #[test]
    fn a_standby_keeps_a_reading_taken_after_the_primary_wrote_a_lowering_still_on_its_way() {
        // F7's other half: the lowering (its ceiling reserve_ms ahead of the primary's clock
        // when it wrote it) arrives 1.5 s after it was written, after this standby read a
        // second jump, by the boot clock 0.5 s after the writing: the reading stays.
        let floors = standby_floors(&[
            (NOW + 15_500, NOW + 15_000, 10, 10),
            (NOW + 15_600, NOW + 20_000, 20, 20),
            (NOW + 250, NOW + 1_500, 30, 30),
        ]);
        assert_eq!(floors[2], NOW + 20_000 + 2_751);
        // Written 0.2 s before it arrives, 0.8 s after the second reading (more than the skew):
        // both readings were taken before it, and go.
        let floors = standby_floors(&[
            (NOW + 15_500, NOW + 15_000, 10, 10),
            (NOW + 15_600, NOW + 20_000, 20, 20),
            (NOW + 250, NOW + 200, 30, 30),
        ]);
        assert_eq!(floors[2], NOW + 200 + 2_751);
    }

    #[test]
    fn a_lowering_dated_ahead_of_the_clock_drops_nothing_not_yet_received() {
        // Held at the primary's floor, 10 s ahead of this clock: not a date.
        let floors =
            standby_floors(&[(NOW + 15_500, NOW + 15_000, 10, 10), (NOW + 11_000, NOW + 1_000, 30, 30)]);
        assert_eq!(floors[1], NOW + 15_000 + 2_751);
    }

    #[test]
    fn a_renewal_below_a_ceiling_logged_but_never_published_is_held_to_reserve_ms_ahead() {
        // F13's second form: a ceiling logged 10 s ahead (the clock had jumped) whose file write
        // failed; the clock is back, and a slow disk widened the headroom to the lead bound.
        let lead = LeadSettings { max_lead_ms: 2_000, reserve_ms: 250 };
        let now = tp(NOW);
        let renew = |published: u64, wanted: u64, last_logged: u64| {
            let reservation = Reservation::default();
            reservation.ceiling.store(published, Relaxed);
            reservation.wanted.store(wanted, Relaxed);
            reservation.last_logged.store(last_logged, Relaxed);
            renewal(now, &reservation, &[], &LAYOUT, lead, 1_000)
        };
        // Above the last ceiling logged, the headroom as `next_ceiling` gives it.
        assert_eq!(renew(now + 50, 0, now + 50), Some(Renewal::Raised(now + 2_250)));
        // Below it, a standby dates the record `reserve_ms` before its ceiling: held there.
        assert_eq!(renew(now + 50, 0, now + 10_000), Some(Renewal::Raised(now + 250)));
        // While the published ceiling still lies `reserve_ms` ahead (a call wants more), the
        // worker waits for the clock rather than record a lowering dated after its writing.
        assert_eq!(renew(now + 300, now + 1_500, now + 10_000), None);
        assert_eq!(renew(now + 300, now + 1_500, now + 300), Some(Renewal::Raised(now + 2_251)));
    }

    #[test]
    fn kept_readings_stay_a_fixed_size_and_merged_ones_stay_as_long_as_either() {
        let reading = |received, guard_unix_ms, boot_ms| Reading { guard_unix_ms, received, boot_ms };
        let mut kept = KeptReadings::default();
        // A clock going back at every reading: each one kept apart, until the last two merge.
        for k in 0..10 {
            kept.add(reading(10 * (k + 1), 1_000 - k as i64, 100 * (k + 1)));
        }
        assert_eq!(kept.len, KEPT_READINGS);
        // The merged one is the higher of the newest two, kept until the newest could go.
        assert_eq!(kept.readings[KEPT_READINGS - 1], reading(100, 1_000 - (KEPT_READINGS as i64 - 1), 1_000));
        kept.drop_taken_before(95, 10_000, 0);
        assert_eq!(kept.highest(), Some(1_000 - (KEPT_READINGS as i64 - 1)));
        // Taken before the lowering arrived, but not long enough before it was written: stays.
        kept.drop_taken_before(101, 1_000, 0);
        assert_eq!(kept.highest(), Some(1_000 - (KEPT_READINGS as i64 - 1)));
        kept.drop_taken_before(101, 1_001, 0);
        assert_eq!(kept.highest(), None);
        // A higher reading replaces every lower one.
        kept.add(reading(5, 10, 1));
        kept.add(reading(6, 5, 2));
        kept.add(reading(7, 20, 3));
        assert_eq!((kept.len, kept.highest()), (1, Some(20)));
    }

    #[test]
    fn a_restarted_standby_keeps_the_readings_its_file_holds() {
        // The file holds a floor raised by a fast clock's reading; a new startup process
        // replays an older, lower ceiling with the clock set right: the floor stays.
        let mut readings = StandbyReadings::default();
        let facts = ReplayFacts {
            ceiling_unix_ms: NOW + 100,
            lead: None,
            recovery: Recovery::Archive,
            recorded_at_start: tp(NOW + 17_751),
            now_unix_ms: NOW,
            record_end: 10,
            received: u64::MAX,
            boot_ms: 0,
        };
        let plan = replay(&facts, &mut readings, SETTINGS, &LAYOUT);
        assert_eq!(plan.bounds, tp(NOW + 17_751));
    }

    #[test]
    fn a_standby_writes_a_longer_primary_lead_and_its_bound() {
        let mut readings = StandbyReadings::default();
        let lead = LeadSettings { max_lead_ms: 60_000, reserve_ms: 250 };
        let facts = ReplayFacts {
            ceiling_unix_ms: NOW,
            lead: Some(lead),
            recovery: Recovery::Archive,
            recorded_at_start: 0,
            now_unix_ms: NOW,
            record_end: 10,
            received: 10,
            boot_ms: 0,
        };
        let plan = replay(&facts, &mut readings, SETTINGS, &LAYOUT);
        assert_eq!(
            plan.write,
            Some(RecordToWrite { ceiling_unix_ms: NOW + 60_751, lead: Some(lead), unconfirmed: false })
        );
    }

    fn promotion_facts() -> PromotionFacts {
        PromotionFacts {
            now_unix_ms: NOW,
            replayed_floor: tp(NOW - 1_000),
            last_replayed: Some(ReplayedCeiling { ceiling_unix_ms: NOW + 200, lead: None }),
            lead_recorded_at_start: None,
            ended_on_shutdown_checkpoint: false,
            max_lead_in_force_ms: SETTINGS.max_lead_ms,
            guard_logged: 0,
        }
    }

    #[test]
    fn a_worker_restarted_after_a_failed_write_records_what_it_logged() {
        let reservation = Reservation::default();
        assert_eq!(ceiling_at_start(&reservation), 0);
        reservation.ceiling.store(500, Relaxed);
        reservation.last_logged.store(500, Relaxed);
        assert_eq!(ceiling_at_start(&reservation), 500);
        // A renewal logged 10 s further ahead, its file write failed: never published.
        reservation.last_logged.store(10_500, Relaxed);
        assert_eq!(ceiling_at_start(&reservation), 10_500);
    }

    #[test]
    fn a_promotion_run_again_never_logs_a_guard_below_the_one_it_logged_before() {
        // The first attempt logged its guard 5 s further ahead (the clock was set back since),
        // and its file write failed: the guard stays there, not a lower record a standby of
        // this server would date later than it was written (F13).
        let facts = PromotionFacts { guard_logged: tp(NOW + 7_751), ..promotion_facts() };
        let plan = promotion(&facts, SETTINGS, &LAYOUT);
        assert!(
            matches!(plan, PromotionPlan::Guard { ceiling, above_replayed: true, .. } if ceiling == tp(NOW + 7_751))
        );
    }

    #[test]
    fn a_promotion_resumes_its_bound_ahead_or_at_a_higher_floor() {
        let plan = promotion(&promotion_facts(), SETTINGS, &LAYOUT);
        assert_eq!(
            plan,
            PromotionPlan::Guard {
                ceiling: tp(NOW + 2_751),
                bound_ms: 2_751,
                above_replayed: false,
                keep_lead: None
            }
        );
        let higher = PromotionFacts { replayed_floor: tp(NOW + 9_000), ..promotion_facts() };
        let plan = promotion(&higher, SETTINGS, &LAYOUT);
        assert!(
            matches!(plan, PromotionPlan::Guard { ceiling, above_replayed: true, .. } if ceiling == tp(NOW + 9_000))
        );
    }

    #[test]
    fn a_clean_stop_resumes_where_the_old_primary_stopped() {
        let facts = PromotionFacts { ended_on_shutdown_checkpoint: true, ..promotion_facts() };
        let plan = promotion(&facts, SETTINGS, &LAYOUT);
        assert_eq!(
            plan,
            PromotionPlan::CleanStop { floor: tp(NOW + 200), stopped_at_unix_ms: NOW + 200, keep_lead: None }
        );
        // No ceiling replayed in this run of the standby: not shown clean, the guard.
        let facts = PromotionFacts { last_replayed: None, ..facts };
        assert!(matches!(promotion(&facts, SETTINGS, &LAYOUT), PromotionPlan::Guard { .. }));
    }

    #[test]
    fn a_longer_primary_lead_is_kept_until_spent() {
        let lead = LeadSettings { max_lead_ms: 60_000, reserve_ms: 250 };
        let replayed = ReplayedCeiling { ceiling_unix_ms: NOW, lead: Some(lead) };
        let facts = PromotionFacts { last_replayed: Some(replayed), ..promotion_facts() };
        assert_eq!(facts.primary_lead(), Some(lead));
        // A standby restarted past its last record: the lead its file kept.
        let restarted = PromotionFacts { last_replayed: None, lead_recorded_at_start: Some(lead), ..facts };
        assert_eq!(restarted.primary_lead(), Some(lead));
        let PromotionPlan::Guard { ceiling, keep_lead, .. } = promotion(&facts, SETTINGS, &LAYOUT) else {
            panic!()
        };
        assert_eq!(ceiling, tp(NOW + 60_751));
        assert_eq!(keep_lead, Some(KeepLead { max_lead_ms: 60_000, ahead_ms: 60_751 }));
        // Within the setting's bound: nothing to keep.
        let lead_now = Lead { now_unix_ms: NOW, setting_ms: 2_000, in_force_ms: 2_000 };
        assert_eq!(lead_now.to_keep(60_000, tp(NOW + 2_000), 250, &LAYOUT), None);
        assert_eq!(forget_kept_lead(tp(NOW), 60_000, tp(NOW + 60_751), 2_000, 250), KeptLead::Keep);
        assert_eq!(
            forget_kept_lead(tp(NOW), 60_000, tp(NOW + 2_000), 2_000, 250),
            KeptLead::Drop { logged: true }
        );
        assert_eq!(forget_kept_lead(tp(NOW), 0, tp(NOW + 60_751), 2_000, 250), KeptLead::Keep);
    }

    #[test]
    fn a_restart_keeps_no_larger_lead_than_its_crash_recovery_replayed() {
        let (long, short) = (
            LeadSettings { max_lead_ms: 30_000, reserve_ms: 250 },
            LeadSettings { max_lead_ms: 1_000, reserve_ms: 250 },
        );
        // No crash recovery, or one that replayed no ceiling: the file's.
        assert_eq!(lead_kept_at_restart(Some(long), None, None), Some(long));
        assert_eq!(lead_kept_at_restart(None, None, None), None);
        // The file older than WAL after a reload lowered the lead (F10): the WAL's.
        assert_eq!(lead_kept_at_restart(Some(long), None, Some(short)), Some(short));
        // WAL with the larger one: the file's, which Lead::to_keep weighs against the setting.
        assert_eq!(lead_kept_at_restart(Some(short), None, Some(long)), Some(short));
        assert_eq!(lead_kept_at_restart(None, None, Some(long)), None);
        // Crash recovery wrote the replayed record with the larger one to the file (F9): the
        // file is that record now, and the restart keeps its lead (F12).
        assert_eq!(lead_kept_at_restart(None, Some(Some(long)), Some(long)), Some(long));
        // It wrote one with none beyond the setting, or a later record carried a smaller one.
        assert_eq!(lead_kept_at_restart(Some(long), Some(None), Some(short)), None);
        assert_eq!(lead_kept_at_restart(None, Some(Some(long)), Some(short)), Some(short));
    }

    #[test]
    fn a_start_record_carries_the_file_lead_when_longer() {
        let (long, short) = (
            LeadSettings { max_lead_ms: 5_000, reserve_ms: 250 },
            LeadSettings { max_lead_ms: 500, reserve_ms: 250 },
        );
        // F16: the restart kept none, the file still holds the longer one until rewritten.
        assert_eq!(start_record_lead(short, Some(long), None), long);
        // As crash recovery left the file: its write replaces what the start read.
        assert_eq!(start_record_lead(short, None, Some(Some(long))), long);
        assert_eq!(start_record_lead(short, Some(long), Some(None)), short);
        // The lead in force when the file's is no longer, or the file has none beyond it.
        assert_eq!(start_record_lead(long, Some(short), None), long);
        assert_eq!(start_record_lead(short, None, None), short);
    }

    #[test]
    fn the_file_is_durable_before_the_wal_record_but_at_a_start() {
        let position = |steps: &[Step], step| steps.iter().position(|&s| s == step);
        for steps in [RECORDING, RECORDING_LOWERED, RECORDING_GUARD] {
            // F15: a ceiling whose file write fails is never logged.
            assert!(position(steps, Step::WriteFile) < position(steps, Step::LogWal), "{steps:?}");
            // Nothing published before both.
            for publish in [Step::Publish, Step::ResumeAt] {
                if let Some(at) = position(steps, publish) {
                    assert!(at > position(steps, Step::LogWal).unwrap(), "{steps:?}");
                }
            }
        }
        // F5: the start record goes into WAL whatever the file write does.
        assert_eq!(RECORDING_AT_START, &[Step::LogWal, Step::WriteFile]);
    }
}
