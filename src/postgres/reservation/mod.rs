//! The durable reservation: how far this server may issue IDs, kept on disk ahead of use.
//!
//! Shared memory is lost on any restart, so the generator may hand out a time part only
//! below a ceiling that is already durable (see `generator.rs`). A background worker keeps
//! the ceiling `snowflake_id.reserve_ms` ahead of the clock (further while recording is slow,
//! see `generator::next_ceiling`); each time it moves it, it
//!
//! 1. writes a WAL record carrying the ceiling (`wal`), without waiting for its flush: a
//!    streaming standby replays it, so once promoted it resumes above anything the old
//!    primary issued in rows the standby has received. Those rows' WAL follows the record,
//!    and their commits flush it;
//! 2. writes the ceiling to the record file (`record`), over the old one in place, and
//!    fdatasyncs it (see `durable_file::overwrite`), so a crash leaves the old or the new
//!    ceiling, never a torn one. This is what makes the ceiling durable on this server:
//!    crash recovery replays only the WAL after the last checkpoint, and may miss the newest
//!    records, which were not flushed;
//! 3. only then publishes the new ceiling in shared memory.
//!
//! So a new ceiling costs one fsync. On every start (and after a backend crash, when the
//! postmaster re-creates shared memory) all shards resume at the recorded ceiling
//! (`restore`). The hot path never touches the disk: about four reservations a second are
//! done by the worker alone, or sooner when a call borrowing time asks for more.
//!
//! Where a server resumes (at a start, in crash recovery, on a standby's replay, at a
//! promotion, under pg_upgrade) is decided by `snowflake_core::resume`, pure and driven by the
//! simulation; the files here gather its facts (the record file, the WAL record, the clock, the
//! settings, what the replay left in shared memory) and apply its plans (writes, WAL, shared
//! memory, the log lines made from the plan's reason).
//!
//! The chain, each link importing only the ones before it, so that `shmem` can restore the
//! ceiling at its creation without importing what runs on it:
//! * `record`: the file's line, its checksum, the lead settings it keeps, reading and writing it;
//! * `legacy_wal`: whether WAL of versions up to 0.2.0 may remain (a flag in the record);
//! * this module: recording a ceiling, the lead bound both guards use, and the one way to
//!   ask the worker for more (`Worker`, `wait_until_reserved`);
//! * `promotion_pending`: the promotion guard a start in recovery owes, kept on disk until paid;
//! * `restore`: the ceiling read (or, under pg_upgrade, raised) when shared memory is created;
//! * `wal`: the custom WAL resource manager, writing and replaying ceilings;
//! * `switchover`: whether a promoted standby's replay ended on its old primary's clean stop;
//! * `recording`: a ceiling recorded in the order `resume` gives (WAL, file, publish);
//! * `lead`: a lead larger than `max_lead_ms`, kept until the clock catches up;
//! * `claims`: a shard taken in the registry, resumed above its last holder's mark;
//! * `worker`: the background worker that renews the ceiling, and the promotion guard.

pub mod claims;
pub mod lead;
pub mod legacy_wal;
pub mod promotion_pending;
pub mod record;
pub mod recording;
pub mod restore;
pub mod switchover;
pub mod wal;
pub mod worker;

use super::settings;
use pgrx::pg_sys;
use record::Record;
use snowflake_core::generator::{self, Reservation, ReservationKeeper};
use snowflake_core::resume;
use std::sync::atomic::Ordering::{Acquire, Relaxed};

/// Records a ceiling so that it survives a crash at any moment, with the lead settings it was
/// reserved under when they exceed this server's own (`generator::lead_to_record`): on a
/// standby those its primary wrote into the record replayed, on a primary those in force.
fn write_durably(ceiling_unix_ms: i64, reserved_under: Option<LeadSettings>) -> std::io::Result<()> {
    let lead = generator::lead_to_record(reserved_under, configured_lead_settings());
    record::write(Record { ceiling_unix_ms, wal128: legacy_wal::may_remain(), lead })
}

/// The lead settings a ceiling is reserved under (`generator::LeadSettings`): the worker writes
/// them into the WAL record of every ceiling (`wal`), so that a promoted standby's bound covers
/// a primary that ran with larger ones than its own (settings drift: an HA manager's per-node
/// parameters, or an `ALTER SYSTEM` a base backup did not carry), and the record file keeps
/// them when larger than the server's own (`write_durably`), so that a restart of the standby
/// before its promotion does not forget them.
pub use generator::LeadSettings;

/// This server's lead settings, now: the `max_lead_ms` in force (`generator::lead_in_force`:
/// the setting or a larger one kept) and `reserve_ms`.
pub fn lead_settings_in_force(reservation: &Reservation) -> LeadSettings {
    LeadSettings {
        max_lead_ms: clock_policy_in_force(reservation).max_lead_ms,
        reserve_ms: settings::reserve_ms(),
    }
}

/// This server's settings alone, without a lead it keeps for a while.
fn configured_lead_settings() -> LeadSettings {
    resume_settings().lead()
}

/// The clock policy with the `max_lead_ms` in force (`generator::lead_in_force`), for the
/// checks outside a claim (`snowflake_advance`, `snowflake_observe`): what a claim may issue,
/// they may move a shard to.
pub fn clock_policy_in_force(reservation: &Reservation) -> generator::ClockPolicy {
    let policy = settings::clock_policy();
    generator::ClockPolicy {
        max_lead_ms: generator::lead_in_force(policy.max_lead_ms, reservation),
        ..policy
    }
}

/// This server's settings that decide where it resumes (`resume::Settings`), as configured now.
pub fn resume_settings() -> resume::Settings {
    resume::Settings {
        max_lead_ms: settings::clock_policy().max_lead_ms,
        reserve_ms: settings::reserve_ms(),
        max_clock_skew_ms: settings::max_clock_skew_ms(),
    }
}

/// The worker, as the generator's keeper of the reservation: the only code that wakes it.
/// A call that wants more reserved (`Reservation::ask_for`) sets the worker's latch, and the
/// worker records it within a few milliseconds.
pub struct Worker;

impl ReservationKeeper for Worker {
    fn extend_soon(&mut self, reservation: &Reservation, _now: u64) {
        let latch = reservation.worker.load(Acquire) as *mut pg_sys::Latch;
        if !latch.is_null() {
            // SAFETY: the worker's latch lives in shared memory for the server's lifetime; a
            // stale one (worker restarted) only causes a harmless spurious wake-up.
            unsafe { pg_sys::SetLatch(latch) };
        }
    }
}

/// Asks the worker to reserve past `time_part` and waits, sleeping through `clock`, until
/// the ceiling has passed it, spending at most `budget_ms` (what is left of it stays there,
/// for a caller that asks again). For callers that must see a position durable before they
/// move a shard there (`snowflake_advance`); claims wait inside `generator::claim`, under
/// their clock policy. Returns the ceiling it gave up at.
pub fn wait_until_reserved(
    reservation: &Reservation,
    time_part: u64,
    budget_ms: &mut u64,
    clock: &mut impl generator::Clock,
) -> Result<(), u64> {
    // The worker reads the clock itself: no time part of the caller's to pass on.
    reservation.ask_for(time_part, &mut Worker, 0);
    while reservation.ceiling.load(Relaxed) <= time_part && *budget_ms > 0 {
        clock.sleep_ms(1);
        *budget_ms -= 1;
    }
    match reservation.ceiling.load(Relaxed) {
        ceiling if ceiling <= time_part => Err(ceiling),
        _ => Ok(()),
    }
}

/// Takes `step` (`generator::advance_step`, `generator::observe_step`) until it is done,
/// waiting for the reservation past each position it asks for (`wait_until_reserved`), all
/// within `budget_ms`. `Err((time_part, ceiling))`: the ceiling had not passed `time_part`
/// when the budget ran out.
pub fn forward_once_reserved(
    reservation: &Reservation,
    budget_ms: &mut u64,
    clock: &mut impl generator::Clock,
    mut step: impl FnMut() -> generator::Forward,
) -> Result<(), (u64, u64)> {
    loop {
        match step() {
            generator::Forward::Done => return Ok(()),
            generator::Forward::WaitPast(time_part) => {
                wait_until_reserved(reservation, time_part, budget_ms, clock)
                    .map_err(|ceiling| (time_part, ceiling))?;
            }
        }
    }
}
