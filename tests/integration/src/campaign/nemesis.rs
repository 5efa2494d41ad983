//! The nemesis: the schedule's process lane (restarts, failovers, moves, bad starts, one at a
//! time) in this thread, its environment lane (the clocks, the disk, a backend killed) in
//! another, overlapping it; then the quiet end, in which every writer must issue again.

use super::schedule::{Fault, Group, Schedule, Step};
use super::shared::Shared;
use super::system::{System, REGISTRY_PREFIX};
use crate::faults::FsyncFault;
use crate::registry::Registry;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::sleep;
use std::time::{Duration, Instant};

/// A fault as it ran.
#[derive(Clone, Debug)]
pub struct Done {
    pub end_ms: u64,
    pub kind: &'static str,
    /// What went wrong when the fault could not be carried out (a server that did not come
    /// back, a start that was not refused): a finding.
    pub failure: Option<String>,
}

/// What the nemesis did, for the checker.
pub struct Outcome {
    pub faults: Vec<Done>,
    /// When the last fault had ended: the quiet end starts.
    pub quiet_from_ms: u64,
    /// The bound within which every writer must issue again after `quiet_from_ms`.
    pub liveness_bound: Duration,
    pub system: System,
}

/// Every writer issues again within this after the last fault, plus the largest clock step
/// (a group that issued ahead of a clock stepped back refuses until it has caught up).
pub const LIVENESS_BASE: Duration = Duration::from_secs(60);

/// A lane skips a step it reaches later than this after the step's time (its previous faults
/// took longer than planned: failovers and base backups on a loaded machine), so that a run
/// keeps its planned length and the shape of its schedule. The 60-minute runs beside two other
/// campaigns had their environment lane 40 minutes late after an hour, and would have run for
/// hours more. The second server's pg_upgrade is never skipped.
const LATE_BY: Duration = Duration::from_secs(60);

pub fn run(shared: &Shared, system: System, schedule: &Schedule) -> Outcome {
    let load_started = Instant::now();
    let system = Mutex::new(system);
    let done = Mutex::new(Vec::new());
    // Set at the first fault that could not be carried out: no more faults after it.
    let halted = AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| lane(shared, &system, &schedule.environment, &done, &halted));
        lane(shared, &system, &schedule.process, &done, &halted);
    });

    let quiet_from_ms = shared.now_ms();
    let liveness_bound = LIVENESS_BASE + Duration::from_millis(schedule.largest_step_ms() as u64);
    println!("campaign: faults over at {:.1} s; the quiet end", quiet_from_ms as f64 / 1000.0);
    // Until the planned end, and at least until every writer has issued again (or the bound).
    let writers = shared.successes.lock().unwrap().len();
    loop {
        let now = shared.now_ms();
        let all_issued =
            shared.successes.lock().unwrap().values().filter(|&&at| at > quiet_from_ms).count() == writers;
        let planned_end = load_started.elapsed() >= schedule.duration;
        if planned_end && (all_issued || now > quiet_from_ms + liveness_bound.as_millis() as u64) {
            break;
        }
        sleep(Duration::from_millis(500));
        janitor(&system, Duration::from_secs(20));
    }
    let system = system.into_inner().unwrap_or_else(|poisoned| poisoned.into_inner());
    Outcome { faults: done.into_inner().unwrap(), quiet_from_ms, liveness_bound, system }
}

/// Commits prepared transactions left behind by clients that lost their connection, so that
/// they do not hold the horizon of their shard until the end; rebuilds a standby whose replay
/// stands still (`System::rebuild_standby_if_stuck`).
fn janitor(system: &Mutex<System>, age: Duration) {
    let mut system = lock(system);
    for group in Group::ALL {
        let _ = catch_unwind(AssertUnwindSafe(|| system.resolve_prepared(group, None, age)));
    }
    let _ = catch_unwind(AssertUnwindSafe(|| system.rebuild_standby_if_stuck()));
}

fn lane(
    shared: &Shared,
    system: &Mutex<System>,
    steps: &[Step],
    done: &Mutex<Vec<Done>>,
    halted: &AtomicBool,
) {
    // The schedule counts from the start of the load, after the servers were set up.
    let load_started = Instant::now();
    for (number, step) in steps.iter().enumerate() {
        sleep(step.at.saturating_sub(load_started.elapsed()));
        if halted.load(Ordering::Relaxed) {
            return;
        }
        if load_started.elapsed() > step.at + LATE_BY && !matches!(step.fault, Fault::Upgrade { .. }) {
            shared.skipped_steps.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        let start_ms = shared.now_ms();
        println!("campaign: {:7.1} s  {}", start_ms as f64 / 1000.0, step.fault);
        let failure = match catch_unwind(AssertUnwindSafe(|| apply(shared, system, &step.fault, number))) {
            Ok(result) => result.err(),
            Err(panic) => Some(
                panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|text| text.to_string()))
                    .unwrap_or_default(),
            ),
        };
        if let Some(failure) = &failure {
            shared.finding(format!("{} at {:.1} s: {failure}", step.fault, start_ms as f64 / 1000.0));
            halted.store(true, Ordering::Relaxed);
        }
        done.lock().unwrap().push(Done { end_ms: shared.now_ms(), kind: step.fault.kind(), failure });
        if matches!(
            step.fault,
            Fault::Failover(_)
                | Fault::MoveShard
                | Fault::MoveShardTargetLostPower
                | Fault::KillPostmaster(_)
                | Fault::PowerLoss { .. }
                | Fault::StopImmediate(_)
        ) {
            janitor(system, Duration::from_secs(20));
        }
    }
}

/// Carries out one fault; `Err` when it was not refused as it must be.
fn apply(shared: &Shared, system: &Mutex<System>, fault: &Fault, number: usize) -> Result<(), String> {
    match *fault {
        Fault::KillPostmaster(group) => lock(system).kill_postmaster(group),
        Fault::PowerLoss { group, clock_behind_ms } => lock(system).power_loss(group, clock_behind_ms),
        Fault::StopImmediate(group) => lock(system).restart(group, "immediate"),
        Fault::CleanRestart(group) => lock(system).restart(group, "fast"),
        Fault::KillWorker(group) => lock(system).kill_worker(group),
        Fault::TermWorker(group) => lock(system).term_worker(group),
        Fault::KillBackend(group) => lock(system).kill_backend(group, number),
        Fault::Failover(before) => lock(system).failover(before),
        Fault::RestartStandby => lock(system).restart_standby(),
        Fault::MoveShard => lock(system).move_shard(number, false),
        Fault::MoveShardTargetLostPower => lock(system).move_shard(number, true),
        Fault::RefusedStart(group, what) => return lock(system).refused_start(group, what),
        Fault::Upgrade { forgotten } => return lock(system).upgrade_second(forgotten),
        Fault::ClockBump { group, ms, hold } | Fault::StepBackAfterAhead { group, ms, hold } => {
            shared.set_offset(group, ms);
            sleep(hold);
            shared.set_offset(group, 0);
        }
        Fault::ClockStrobe { group, ms, period, hold } => {
            let mut elapsed = Duration::ZERO;
            let mut off = true;
            while elapsed < hold {
                shared.set_offset(group, if off { ms } else { 0 });
                off = !off;
                sleep(period);
                elapsed += period;
            }
            shared.set_offset(group, 0);
        }
        Fault::SlowFsync { group, delay, hold } => {
            let _slow = worker_pid(system, group).map(|pid| FsyncFault::slow(pid, delay));
            sleep(hold);
        }
        Fault::FailingFsync { group, hold } => {
            let _failing = worker_pid(system, group).map(FsyncFault::failing);
            sleep(hold);
        }
        Fault::FailingReplayFsync { hold } => {
            let failing = startup_pid(system).map(FsyncFault::failing);
            sleep(hold);
            drop(failing);
            // A failure during the fault shuts the standby down within moments.
            sleep(Duration::from_secs(1));
            lock(system).revive_standby();
        }
        Fault::RegistryDown { hold } => {
            let registry = registry(system);
            registry.lock().unwrap().kill();
            sleep(hold);
            registry.lock().unwrap().run();
        }
        Fault::ClaimStolen { shard, hold } => {
            let registry = registry(system);
            // A system identifier no server of the run has.
            registry.lock().unwrap().steal_claim(REGISTRY_PREFIX, shard, 1);
            sleep(hold);
            registry.lock().unwrap().give_back(REGISTRY_PREFIX, shard);
        }
        Fault::Copy { hold } => {
            // The system held only to start and to kill the copy: the process lane's faults
            // go on meanwhile.
            let copy = lock(system).start_copy();
            sleep(hold);
            lock(system).end_copy(copy);
        }
    }
    Ok(())
}

/// The run's registry (a schedule draws its faults only with one).
fn registry(system: &Mutex<System>) -> Arc<Mutex<Registry>> {
    lock(system).registry.clone().expect("a schedule with the registry's faults has a registry")
}

/// The system, also after a fault panicked while holding it (that fault is a finding already,
/// and no other follows it; the final checks and the logs still need the servers).
fn lock(system: &Mutex<System>) -> std::sync::MutexGuard<'_, System> {
    system.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The standby's startup process (its replay), if one runs now.
fn startup_pid(system: &Mutex<System>) -> Option<u32> {
    let system = lock(system);
    let cluster = &system.pair.standby.cluster;
    catch_unwind(AssertUnwindSafe(|| cluster.startup_process_pid())).ok().flatten()
}

/// The reservation worker of `group`'s primary, if one runs now.
fn worker_pid(system: &Mutex<System>, group: Group) -> Option<u32> {
    let mut system = lock(system);
    let cluster = &system.server(group).cluster;
    // Between a crash and the reset the postmaster may have gone: no worker then.
    catch_unwind(AssertUnwindSafe(|| cluster.reservation_worker_pid())).ok().flatten()
}
