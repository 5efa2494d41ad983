//! The reservation worker: a background worker that keeps the ceiling ahead of the clock, recording
//! each new one (the file, then WAL: `resume::RECORDING`) before it publishes it, and records the
//! promotion guard once after a recovery ends. Calls ask it for more only through
//! `reservation::Worker`.

use super::claims::keep_claims;
use super::lead::{forget_spent_lead, keep_lead, lead_to_keep};
use super::record::FILE;
use super::recording::{record, record_logging_lead};
use super::{
    lead_settings_in_force, legacy_wal, promotion_pending, restore, resume_settings, switchover, wal,
};
use crate::postgres::{clock, compat, durable_file, fence, fixed_layout, registry, settings, shmem};
use pgrx::bgworkers::{BackgroundWorker, BackgroundWorkerBuilder, BgWorkerStartTime, SignalWakeFlags};
use pgrx::pg_sys;
use snowflake_core::generator::{self, Reservation};
use snowflake_core::{resume, utc};
use std::sync::atomic::{
    AtomicU64,
    Ordering::{Acquire, Relaxed, Release},
};
use std::time::{Duration, Instant};

/// How often the worker looks at the clock.
const TICK: Duration = Duration::from_millis(50);

/// The end of recovery on a standby (promotion) or after archive recovery, once per
/// recovery: the reservation worker runs it when it first starts after the recovery (see
/// `shmem::StartState`), not when it is restarted later. Where the shards resume is
/// `resume::promotion`'s decision: the promotion's bound ahead of the clock (the WAL this server
/// replayed may stop short of what the old primary wrote), or the floor replayed from the old
/// primary's WAL when higher (`resume::replay` raised it at every record to that bound above the
/// highest clock reading, F1), or, when the replay ended on the old primary's clean stop (a
/// planned switchover), where it stopped (`switchover`). The old primary's lead settings, when
/// its records carry them, count in the bound and as the lead this server keeps until the clock
/// catches up (`keep_lead`). The resumed position is recorded before anything is issued, in
/// `resume::RECORDING_GUARD`'s order.
fn record_promotion_guard(reservation: &Reservation) {
    let facts = resume::PromotionFacts {
        now_unix_ms: clock::wall_clock_unix_ms(),
        replayed_floor: reservation.floor.load(Relaxed),
        last_replayed: last_replayed_ceiling(),
        lead_recorded_at_start: restore::recorded_lead_at_start(),
        ended_on_shutdown_checkpoint: replay_ended_on_clean_stop(),
        max_lead_in_force_ms: generator::lead_in_force(settings::clock_policy().max_lead_ms, reservation),
        guard_logged: reservation.last_logged.load(Relaxed),
    };
    const ORIGIN: &str = "the old primary ran with snowflake_id.max_lead_ms =";
    match resume::promotion(&facts, resume_settings(), &fixed_layout::get()) {
        resume::PromotionPlan::CleanStop { floor, stopped_at_unix_ms, keep_lead: kept } => {
            // The replay left floor and ceiling at the same height, recorded in the file: the
            // floor comes down to where the old primary stopped; the ceiling stays, recorded.
            reservation.resume_after_clean_stop(floor);
            pgrx::log!(
                "snowflake_id: recovery ended on the old primary's clean stop (its shutdown checkpoint after its \
                 last reservation, {}): shards resume at that or the clock, whichever is later",
                utc::format_utc_ms(stopped_at_unix_ms)
            );
            keep_lead(reservation, kept, ORIGIN);
        }
        resume::PromotionPlan::Guard { ceiling, bound_ms, above_replayed, keep_lead: kept } => {
            // Kept before the record is written, so that the record carries the lead kept.
            keep_lead(reservation, kept, ORIGIN);
            let ceiling_unix_ms = fixed_layout::get().unix_ms(ceiling);
            if let Err(error) = record(reservation, ceiling, resume::RECORDING_GUARD) {
                // Without the record the shards cannot resume above it after a crash: issue nothing.
                durable_file::not_recorded("the snowflake_id reservation", FILE, " after recovery", error);
            }
            if above_replayed {
                pgrx::log!(
                    "snowflake_id: recovery ended; shards resume at {}, the reservation replayed from the old \
                     primary's WAL or a guard logged by an earlier attempt (further ahead than {bound_ms} ms)",
                    utc::format_utc_ms(ceiling_unix_ms)
                );
            } else {
                pgrx::log!(
                    "snowflake_id: recovery ended; shards resume at {} ({bound_ms} ms ahead of the clock), above \
                     the reservation replayed from the old primary's WAL and, for WAL this server never received, \
                     above anything the old primary could have issued if it ran with lead settings no larger than \
                     these and the clocks agree within snowflake_id.max_clock_skew_ms",
                    utc::format_utc_ms(ceiling_unix_ms)
                );
            }
        }
    }
}

/// The last ceiling's record replayed since shared memory was created, with the lead settings
/// it carried (`wal::replay_ceiling` keeps them, the end of its record last, with Release).
fn last_replayed_ceiling() -> Option<resume::ReplayedCeiling> {
    let start = shmem::start_state()?;
    (start.last_replayed_ceiling_end.load(Acquire) != 0).then(|| resume::ReplayedCeiling {
        ceiling_unix_ms: start.last_replayed_ceiling_unix_ms.load(Relaxed),
        lead: wal::PackedLead::unpack(start.last_replayed_lead.load(Relaxed)),
    })
}

/// Whether the replay ended on the old primary's clean stop: its shutdown checkpoint after the
/// last ceiling's record replayed (`switchover`).
fn replay_ended_on_clean_stop() -> bool {
    shmem::start_state().is_some_and(|start| {
        switchover::replay_ended_on_shutdown_checkpoint(start.last_replayed_ceiling_end.load(Acquire))
    })
}

/// Registers the worker; called from `_PG_init` while preloading. Not under pg_upgrade: the
/// worker would record a reservation of its own (and WAL) in a cluster that issues nothing.
pub fn register() {
    if compat::in_binary_upgrade() {
        return;
    }
    BackgroundWorkerBuilder::new("snowflake_id reservation")
        .set_type("snowflake_id reservation")
        .set_library("snowflake_id")
        .set_function("snowflake_id_reservation_worker")
        .enable_shmem_access(None)
        // A standby issues nothing; on promotion the worker starts from the replayed ceiling.
        .set_start_time(BgWorkerStartTime::RecoveryFinished)
        .set_restart_time(Some(Duration::from_secs(1)))
        .load();
}

/// The process id of the running reservation worker, `None` while none runs (between a
/// terminated worker and its restart, a second later, or under pg_upgrade). The worker is
/// not in `pg_stat_activity` (it has no database connection), so monitoring asks here.
pub fn running_pid(reservation: &Reservation) -> Option<i32> {
    let latch = reservation.worker.load(Acquire) as *const pg_sys::Latch;
    // SAFETY: a non-null address is the running worker's latch, in its PGPROC in shared
    // memory for the server's lifetime (cleared before the worker exits); owner_pid is a
    // plain int written when the latch was owned, read once.
    (!latch.is_null()).then(|| unsafe { std::ptr::addr_of!((*latch).owner_pid).read_volatile() })
}

/// The worker's main loop: renew the reservation whenever it gets too close.
#[pgrx::pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn snowflake_id_reservation_worker(_argument: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    let reservation = shmem::reservation().expect("the worker runs only when preloaded");
    // SAFETY: MyLatch is this process's latch in shared memory, valid while it runs.
    // Release: a caller that loads the address (with Acquire) sees the latch as set up.
    reservation.worker.store(unsafe { pg_sys::MyLatch } as usize, Release);
    // Once per recovery: cleared only once the guard is recorded, so a worker that failed
    // to record it runs it again when restarted, and one restarted later does not.
    let start = shmem::start_state().expect("the worker runs only when preloaded");
    if start.promotion_guard_pending.load(Acquire) {
        record_promotion_guard(reservation);
        // Only once the guard is durable: a crash before this line owes it again.
        if let Err(error) = promotion_pending::settle() {
            durable_file::not_recorded(
                "that the promotion guard is recorded",
                promotion_pending::FILE,
                " (by removing it)",
                error,
            );
        }
        start.promotion_guard_pending.store(false, Release);
    } else {
        let crash_replayed = wal::PackedLead::unpack(start.crash_replayed_lead.load(Relaxed));
        let written_by_recovery = start
            .crash_wrote_file
            .load(Acquire)
            .then(|| wal::PackedLead::unpack(start.crash_written_lead.load(Relaxed)));
        let recorded_at_start = restore::recorded_lead_at_start();
        if let Some(recorded) =
            resume::lead_kept_at_restart(recorded_at_start, written_by_recovery, crash_replayed)
        {
            // A primary restarted while it kept a lead (after a promotion from a primary with a
            // longer one, or a lowered setting): it keeps it until the clock catches up, that of
            // the file as crash recovery left it (F12), no larger than the last its WAL carried
            // (F10).
            let kept = lead_to_keep(reservation, recorded.max_lead_ms, reservation.ceiling.load(Relaxed));
            keep_lead(reservation, kept, "the reservation was recorded under snowflake_id.max_lead_ms =");
        }
        // The ceiling resumed at, into WAL again: a power loss may have taken its record while
        // the file kept it (F5), with the file's lead when longer (F16); then into the file with
        // the lead now in force, which may be smaller than the file's (F10;
        // `resume::RECORDING_AT_START`). Never lower than a record before it (the file is
        // written before each, and a worker restarted after a lowering it could not record
        // records what it logged, `resume::ceiling_at_start`), so no standby reads it as a
        // lowering; none on a server that never issued. A failed write leaves the file as it
        // was, which the next renewal's write replaces before it publishes anything.
        let ceiling = resume::ceiling_at_start(reservation);
        if ceiling > 0 {
            let in_force = lead_settings_in_force(reservation);
            let logged_lead = resume::start_record_lead(in_force, recorded_at_start, written_by_recovery);
            if let Err(error) =
                record_logging_lead(reservation, ceiling, resume::RECORDING_AT_START, in_force, logged_lead)
            {
                pgrx::warning!(
                    "could not record the snowflake_id reservation resumed at in \"{FILE}\": {error}; the next \
                     renewal records it"
                );
            }
        }
    }
    legacy_wal::worker_started();
    let layout = fixed_layout::get();
    pgrx::log!(
        "snowflake_id reservation worker started: shards resume at {}",
        utc::format_utc_ms(layout.unix_ms(reservation.floor.load(Relaxed)))
    );
    fence::shared::apply_setting(true);
    let mut failing = false;
    let mut lease = fence::lease::Keeper::default();
    let mut claims = registry::keeper::Keeper::start();
    loop {
        if BackgroundWorker::sighup_received() {
            let max_lead_before = settings::clock_policy().max_lead_ms;
            // SAFETY: the documented way for a worker to apply a reload.
            unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
            fence::shared::apply_setting(false);
            // A lower max_lead_ms under shards already further ahead: they keep the old one.
            // (`resume::Lead::to_keep` keeps nothing unless it was lowered.)
            let kept = lead_to_keep(reservation, max_lead_before, reservation.ceiling.load(Relaxed));
            keep_lead(reservation, kept, "snowflake_id.max_lead_ms was lowered from");
        }
        keep_lease(&mut lease);
        keep_claims(reservation, &mut claims);
        legacy_wal::look_at_checkpoints();
        match renew(reservation, claims.cap_unix_ms()) {
            Ok(()) if failing => {
                pgrx::log!("snowflake_id reservation is being recorded again");
                failing = false;
            }
            Ok(()) => {}
            Err(error) if !failing => {
                pgrx::warning!(
                    "could not record the snowflake_id reservation in \"{FILE}\": {error}; IDs will stop once \
                     the current reservation is used up"
                );
                failing = true;
            }
            Err(_) => {}
        }
        if !BackgroundWorker::wait_latch(Some(TICK)) {
            break;
        }
    }
    claims.release();
    reservation.worker.store(0, Release);
    // Exit code 1, so that the postmaster restarts the worker if it was terminated while the
    // server goes on (at shutdown it is not restarted anyway); without it no ID can be issued.
    // SAFETY: the standard way for a worker to exit.
    unsafe { pg_sys::proc_exit(1) }
}

/// One look at the lease (`fence::lease`, opt-in): the fence closed for every shard once the HA
/// manager has not said for `snowflake_id.lease_ms` that this server leads, opened on the
/// setting when it says so again; each change logged, as the fence's are.
fn keep_lease(lease: &mut fence::lease::Keeper) {
    let lost_since = fence::shared::lease_lost_since();
    match lease.look(lost_since.is_some()) {
        fence::lease::Verdict::Held => {
            if fence::shared::regain_lease() {
                pgrx::log!(
                    "snowflake_id: the lease holds (snowflake_id.lease_url answered 200): the shard fence is \
                     snowflake_id.shards = '{}' again",
                    fence::setting_text()
                );
            }
        }
        fence::lease::Verdict::Lost if lost_since.is_none() => {
            // When, on the wall clock: for the messages that name it.
            fence::shared::lose_lease(clock::wall_clock_unix_ms().max(0) as u64);
            let (url, lease_ms) = fence::lease::settings_text();
            pgrx::warning!(
                "snowflake_id: the lease is lost ({url} has not answered 200 for snowflake_id.lease_ms = {lease_ms} \
                 ms): every shard is fenced, no ID is issued until it answers 200 again"
            );
        }
        fence::lease::Verdict::Lost => {}
    }
}

/// One look at the clock: records and publishes a new ceiling when the current one is too
/// close, or records a lowered one (`resume::renewal`), never past `cap_unix_ms` (the lowest
/// mark of the shards held in the registry).
fn renew(reservation: &Reservation, cap_unix_ms: Option<u64>) -> std::io::Result<()> {
    let layout = fixed_layout::get();
    // A clock outside the ID range makes every call refuse anyway; nothing to reserve.
    let Ok(now) = layout.time_part(clock::wall_clock_unix_ms()) else { return Ok(()) };
    forget_spent_lead(reservation, now);
    let lead = lead_settings_in_force(reservation);
    let recording_ms = LAST_RECORDING_MS.load(Relaxed);
    match resume::renewal(now, reservation, shmem::slots(), &layout, lead, recording_ms) {
        None => {}
        Some(resume::Renewal::Lowered(lower)) => {
            // Already published: until it is recorded, the higher record on disk still holds.
            record(reservation, lower, resume::RECORDING_LOWERED)?;
            pgrx::log!(
                "snowflake_id: the clock had jumped ahead and is back, and no ID was issued up there: the \
                 reservation moves back to {}",
                utc::format_utc_ms(layout.unix_ms(lower))
            );
        }
        Some(resume::Renewal::Raised(wanted)) => {
            let cap = cap_unix_ms.and_then(|cap| layout.time_part(cap as i64).ok());
            let ceiling =
                cap.map_or(wanted, |cap| snowflake_core::registry::ceiling_within_mark(wanted, cap));
            if ceiling <= reservation.ceiling.load(Relaxed) {
                return Ok(());
            }
            let started = Instant::now();
            record(reservation, ceiling, resume::RECORDING)?;
            LAST_RECORDING_MS.store(started.elapsed().as_millis() as u64, Relaxed);
        }
    }
    Ok(())
}

/// How long the worker's last recording of a new ceiling took (ms): the next one is reserved
/// further ahead when the disk is slow (`generator::next_ceiling`).
static LAST_RECORDING_MS: AtomicU64 = AtomicU64::new(0);
