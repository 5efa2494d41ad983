//! The reservation worker: a background worker that keeps the ceiling ahead of the clock,
//! recording each new one (WAL, then the file) before it publishes it, and records the
//! promotion guard once after a recovery ends. Calls ask it for more only through
//! `reservation::Worker`.

use super::record::FILE;
use super::{
    lead_settings_in_force, legacy_wal, promotion_bound_ms, promotion_pending, restore, switchover,
    time_part_of_ceiling, wal, write_durably, LeadSettings,
};
use crate::postgres::{clock, compat, durable_file, fence, fixed_layout, settings, shmem};
use pgrx::bgworkers::{BackgroundWorker, BackgroundWorkerBuilder, BgWorkerStartTime, SignalWakeFlags};
use pgrx::pg_sys;
use snowflake_core::generator::{self, Reservation};
use snowflake_core::utc;
use std::sync::atomic::{
    AtomicU64,
    Ordering::{Acquire, Relaxed, Release},
};
use std::time::{Duration, Instant};

/// How often the worker looks at the clock.
const TICK: Duration = Duration::from_millis(50);

/// The end of recovery on a standby (promotion) or after archive recovery, once per
/// recovery: the reservation worker runs it when it first starts after the recovery (see
/// `shmem::StartState`), not when it is restarted later. The WAL this server replayed may
/// stop short of what the old primary wrote: with asynchronous replication it never
/// received the latest records, ceilings included, nor the rows with the IDs issued under
/// them. The old primary issued at most `max_lead_ms + reserve_ms` ahead of its clock, and
/// that clock, when it stopped, read at most `max_clock_skew_ms` more than this server's
/// does now. So the shards resume that far ahead of this clock: above every ID the old
/// primary could have issued, as long as it ran with lead settings no larger than these and
/// the clocks agree within the skew. The first calls wait (within `max_wait_ms`) until the
/// clock is within `max_lead_ms` of the resumed position, at most `reserve_ms + max_clock_skew_ms`.
///
/// Or at the floor replayed from the old primary's WAL, when that is higher (the old primary
/// ran with a longer lead, or issued while its clock ran ahead). Replay has written that
/// floor to the file already (`wal::replay_ceiling`), so a restart of the standby before the
/// promotion resumes there too. That floor also holds this same bound above the highest clock
/// reading the standby took as it replayed (`wal::standby_floor_unix_ms`): a clock that ran
/// ahead while the old primary issued, and was set back before the promotion, leaves the
/// guard on the clock now short of the IDs issued under records this server never received. Either way the resumed position is recorded before anything
/// is issued: a clean restart after the promotion (no signal file, no WAL to replay) resumes
/// at the file.
///
/// Unless the replay ended on the old primary's clean stop (a planned switchover): then every ID
/// it issued lies below the last ceiling replayed, and the shards resume at the larger of that
/// ceiling and the clock (`switchover`), under the ceiling the replay recorded.
///
/// The old primary's lead settings, when its records carry them, count where larger than this
/// server's: in the bound, and as the lead this server keeps until the clock catches up
/// (`keep_lead`), so that a smaller `max_lead_ms` here does not refuse every call until then.
fn record_promotion_guard(reservation: &Reservation) {
    let layout = fixed_layout::get();
    let now_unix_ms = clock::wall_clock_unix_ms();
    let primary = old_primary_lead();
    if let Some(stopped_at_unix_ms) = clean_stop_of_old_primary() {
        // The replay left floor and ceiling at the same height, recorded in the file: the
        // floor comes down to where the old primary stopped; the ceiling stays, recorded.
        reservation.resume_after_clean_stop(time_part_of_ceiling(stopped_at_unix_ms));
        pgrx::log!(
            "snowflake_id: recovery ended on the old primary's clean stop (its shutdown checkpoint after its \
             last reservation, {}): shards resume at that or the clock, whichever is later",
            utc::format_utc_ms(stopped_at_unix_ms)
        );
        if let Some(primary) = primary {
            keep_lead(
                reservation,
                primary.max_lead_ms,
                reservation.ceiling.load(Relaxed),
                "the old primary ran with snowflake_id.max_lead_ms =",
            );
        }
        return;
    }
    let bound_ms = promotion_bound_ms(primary);
    let guard = time_part_of_ceiling(now_unix_ms.saturating_add(bound_ms as i64));
    let ceiling = guard.max(reservation.floor.load(Relaxed));
    let ceiling_unix_ms = layout.unix_ms(ceiling);
    // Kept before the record is written, so that the record carries the lead kept.
    if let Some(primary) = primary {
        keep_lead(
            reservation,
            primary.max_lead_ms,
            ceiling,
            "the old primary ran with snowflake_id.max_lead_ms =",
        );
    }
    let lead = lead_settings_in_force(reservation);
    wal::log_ceiling(ceiling_unix_ms, lead);
    if let Err(error) = write_durably(ceiling_unix_ms, Some(lead)) {
        // Without the record the shards cannot resume above it after a crash: issue nothing.
        durable_file::not_recorded("the snowflake_id reservation", FILE, " after recovery", error);
    }
    reservation.resume_at(ceiling);
    if ceiling == guard {
        pgrx::log!(
            "snowflake_id: recovery ended; shards resume at {} ({bound_ms} ms ahead of the clock), above the \
             reservation replayed from the old primary's WAL and, for WAL this server never received, above \
             anything the old primary could have issued if it ran with lead settings no larger than these and \
             the clocks agree within snowflake_id.max_clock_skew_ms",
            utc::format_utc_ms(ceiling_unix_ms)
        );
    } else {
        pgrx::log!(
            "snowflake_id: recovery ended; shards resume at {}, the reservation replayed from the old \
             primary's WAL (further ahead than {bound_ms} ms)",
            utc::format_utc_ms(ceiling_unix_ms)
        );
    }
}

/// The lead settings the old primary wrote with the last ceiling replayed, if its version
/// writes them (0.8.0 on): read after the record's end, as `clean_stop_of_old_primary` reads it.
/// When no ceiling was replayed since shared memory was made (the standby restarted, or
/// crashed, after a restartpoint past the last one, and its primary wrote none since), those
/// the record file kept with the ceiling replayed before (`restore::recorded_lead_at_start`):
/// written there only when they exceed this server's own, which is when they count.
fn old_primary_lead() -> Option<LeadSettings> {
    let start = shmem::start_state()?;
    match start.last_replayed_ceiling_end.load(Acquire) {
        0 => restore::recorded_lead_at_start(),
        _ => wal::PackedLead::unpack(start.last_replayed_lead.load(Relaxed)),
    }
}

/// Keeps `max_lead_ms` in force where larger than the setting (`generator::lead_in_force`),
/// while IDs this server must stay above may lie further ahead of the clock than the setting
/// allows: up to `reserved_up_to` (a time part), which the setting alone would put within
/// `max_ceiling_lead_ms` of the clock. Without it every call would be refused until the clock
/// caught up (tens of seconds after a long lead). Says so once, with why (`origin`, which the
/// value follows); the worker drops it once spent (`forget_spent_lead`).
fn keep_lead(reservation: &Reservation, max_lead_ms: u64, reserved_up_to: u64, origin: &str) {
    let layout = fixed_layout::get();
    let Ok(now) = layout.time_part(clock::wall_clock_unix_ms()) else { return };
    let setting = settings::clock_policy().max_lead_ms;
    let spent = generator::inherited_lead_spent(now, reserved_up_to, settings::reserve_ms(), setting);
    if max_lead_ms <= generator::lead_in_force(setting, reservation) || spent {
        return;
    }
    reservation.inherited_max_lead_ms.fetch_max(max_lead_ms, Relaxed);
    pgrx::warning!(
        "snowflake_id: {origin} {max_lead_ms} ms while IDs are reserved up to {} ms ahead of the clock: shards \
         keep issuing under a lead of {max_lead_ms} ms until the clock is within snowflake_id.max_lead_ms = \
         {setting} ms of them, instead of refusing every call until then",
        reserved_up_to - now
    );
}

/// Drops a kept lead (`keep_lead`) once the ceiling is back within the setting's bound: from
/// there every ID lies where the setting alone would have put it.
fn forget_spent_lead(reservation: &Reservation, now: u64) {
    let setting = settings::clock_policy().max_lead_ms;
    let kept = reservation.inherited_max_lead_ms.load(Relaxed);
    let ceiling = reservation.ceiling.load(Relaxed);
    if kept > setting && !generator::inherited_lead_spent(now, ceiling, settings::reserve_ms(), setting) {
        return;
    }
    if kept != 0 {
        reservation.inherited_max_lead_ms.store(0, Relaxed);
        if kept > setting {
            pgrx::log!(
                "snowflake_id: the clock has caught up: snowflake_id.max_lead_ms = {setting} ms holds again (kept \
                 {kept} ms until now)"
            );
        }
    }
}

/// Where the old primary stopped cleanly, if the replay ended there (`switchover`): the last
/// ceiling it replayed, read after the end of its record.
fn clean_stop_of_old_primary() -> Option<i64> {
    let start = shmem::start_state()?;
    let end = start.last_replayed_ceiling_end.load(Acquire);
    switchover::old_primary_stopped_at(start.last_replayed_ceiling_unix_ms.load(Relaxed), end)
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
    } else if let Some(recorded) = restore::recorded_lead_at_start() {
        // A primary restarted while it kept a lead (after a promotion from a primary with a
        // longer one, or a lowered setting): it keeps it until the clock catches up, as before.
        keep_lead(
            reservation,
            recorded.max_lead_ms,
            reservation.ceiling.load(Relaxed),
            "the reservation was recorded under snowflake_id.max_lead_ms =",
        );
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
    loop {
        if BackgroundWorker::sighup_received() {
            let max_lead_before = settings::clock_policy().max_lead_ms;
            // SAFETY: the documented way for a worker to apply a reload.
            unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
            fence::shared::apply_setting(false);
            // A lower max_lead_ms under shards already further ahead: they keep the old one.
            if settings::clock_policy().max_lead_ms < max_lead_before {
                let ceiling = reservation.ceiling.load(Relaxed);
                keep_lead(reservation, max_lead_before, ceiling, "snowflake_id.max_lead_ms was lowered from");
            }
        }
        keep_lease(&mut lease);
        legacy_wal::look_at_checkpoints();
        match renew(reservation) {
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

/// One look at the clock: records and publishes a new ceiling when the current one is too close.
fn renew(reservation: &Reservation) -> std::io::Result<()> {
    let layout = fixed_layout::get();
    // A clock outside the ID range makes every call refuse anyway; nothing to reserve.
    let Ok(now) = layout.time_part(clock::wall_clock_unix_ms()) else { return Ok(()) };
    forget_spent_lead(reservation, now);
    let lead = lead_settings_in_force(reservation);
    let max_lead_ms = lead.max_lead_ms;
    if let Some(lower) = generator::lower_ceiling(
        now,
        reservation,
        shmem::slots(),
        &layout,
        settings::reserve_ms(),
        max_lead_ms,
    ) {
        // Already published: until it is recorded, the higher record on disk still holds.
        let lower_unix_ms = layout.unix_ms(lower);
        wal::log_ceiling(lower_unix_ms, lead);
        write_durably(lower_unix_ms, Some(lead))?;
        pgrx::log!(
            "snowflake_id: the clock had jumped ahead and is back, and no ID was issued up there: the \
             reservation moves back to {}",
            utc::format_utc_ms(lower_unix_ms)
        );
        return Ok(());
    }
    let recording_ms = LAST_RECORDING_MS.load(Relaxed);
    let Some(ceiling) =
        generator::next_ceiling(now, reservation, &layout, settings::reserve_ms(), max_lead_ms, recording_ms)
    else {
        return Ok(());
    };
    let started = Instant::now();
    let ceiling_unix_ms = layout.unix_ms(ceiling);
    wal::log_ceiling(ceiling_unix_ms, lead);
    write_durably(ceiling_unix_ms, Some(lead))?;
    reservation.publish_ceiling(ceiling);
    LAST_RECORDING_MS.store(started.elapsed().as_millis() as u64, Relaxed);
    Ok(())
}

/// How long the worker's last recording of a new ceiling took (ms): the next one is reserved
/// further ahead when the disk is slow (`generator::next_ceiling`).
static LAST_RECORDING_MS: AtomicU64 = AtomicU64::new(0);
