//! The fault campaign: a primary with a streaming standby and a second server under writers
//! and readers, faults drawn from a seed (the nemesis), then checks over what the clients saw
//! and what the servers hold at the end (Jepsen's unique-ids and set-full, and ours: order,
//! lead, horizon, fence, errors, liveness). `scripts/campaign.sh` runs it; a short one is a
//! step of `scripts/test.sh`.
//!
//! - `shared`: what the parts share (the directory of servers, clocks, moves, findings)
//! - `schedule`: the faults of a seed
//! - `system`: the servers, and what the nemesis does to them (failover, moves, bad starts)
//! - `nemesis`: the schedule's two lanes run against the system
//! - `clients`: writers and readers, and the history they record
//! - `checker`: the checks, from the history and the final contents
//! - `report`: the summary, and the folder a failure leaves

pub mod checker;
pub mod clients;
pub mod nemesis;
pub mod report;
pub mod schedule;
mod shared;
pub mod system;

pub use shared::*;

use schedule::Group;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// What a run is told.
pub struct Options {
    pub seed: u64,
    pub duration: Duration,
    /// Where the schedule and the summary are written, and on a failure the history and
    /// every server's log (a folder per seed inside).
    pub out_dir: PathBuf,
    /// The `bin` folder of the next PostgreSQL major, with the extension installed: the second
    /// server is moved there with pg_upgrade once, in the middle of the run.
    pub upgrade_bin: Option<PathBuf>,
    /// Every server claims its shards from a registry of the run's own, which the faults
    /// reach too (`schedule::Schedule::registry`).
    pub registry: bool,
}

/// Runs one campaign; the summary says whether every check passed (when not, the folder of
/// the run holds everything).
pub fn run(options: &Options) -> report::Summary {
    let upgrade_to = options.upgrade_bin.as_deref().map(crate::install::major_of);
    let schedule = schedule::Schedule::new(options.seed, options.duration, upgrade_to, options.registry);
    let dir = options.out_dir.join(format!("seed-{}", options.seed));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let text = schedule.text();
    println!("campaign: schedule\n{text}");
    std::fs::write(dir.join("schedule.txt"), &text).unwrap();

    let kept = if schedule.registry { system::registry_kept_lead_ms(&schedule) } else { 0 };
    let lead =
        |larger: bool| kept + if larger { schedule::LARGER_LEAD_MS } else { schedule::DEFAULT_LEAD_MS };
    let shared =
        Arc::new(Shared::new([lead(schedule.larger_lead_on_standby), lead(false)], schedule.pair_skew_ms));
    let system = system::System::start(shared.clone(), &schedule, options.upgrade_bin.clone());
    let mut clients = clients::Clients::start(shared.clone(), options.seed);
    let mut outcome = nemesis::run(&shared, system, &schedule);

    // The final checks run on a quiet system: writers stopped, prepared transactions left by
    // lost connections committed, readers caught up with the final rows.
    shared.stop_writing.store(true, Ordering::Relaxed);
    let ops = clients.stop_writers(&shared, Duration::from_secs(120));
    for group in Group::ALL {
        outcome.system.resolve_prepared(group, None, Duration::ZERO);
    }
    let finals = outcome.system.final_rows();
    let ends = finals
        .iter()
        .map(|(shard, rows)| (*shard, rows.iter().map(|(id, _)| *id).max().unwrap_or(0)))
        .collect();
    let reads = clients.finish_readers(&shared, ends, Duration::from_secs(120));
    let mut summary = checker::check(&shared, &schedule, &ops, &reads, &finals, &outcome);
    let logs = outcome.system.shutdown();
    summary.coverage = report::coverage(&logs, &ops);
    let promotions = outcome
        .faults
        .iter()
        .filter(|done| done.kind.starts_with("failover") && done.failure.is_none())
        .count();
    summary.findings.extend(report::promotions_without_guard(&summary.coverage, promotions));
    report::write(&dir, &summary, &ops, &reads, &logs);
    summary
}
