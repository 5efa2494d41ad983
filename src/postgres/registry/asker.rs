//! The registry's asking thread: the reservation worker's (`worker_thread`), so that the
//! worker's loop (which renews the reservation and moves the fence) never waits on the registry. Each round it reads
//! every shard it does not hold and takes those the rules let it take, and renews those it
//! holds (a fresh lease, the claim written again, the mark raised when due), each request
//! within one deadline. It calls nothing of PostgreSQL (no palloc, no elog): what it learnt
//! goes to the worker through `Exchange`, which the worker reads each turn of its loop.

use super::Config;
use crate::postgres::worker_thread;
use snowflake_core::registry::{self, Claim, Holder, Verdict};
use snowflake_registry::{Current, Error, Etcd, Outcome};
use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The longest any one request may take, whatever the lease: a registry slower than this is
/// treated as down for that request.
const MAX_REQUEST_DEADLINE: Duration = Duration::from_secs(2);
/// How often a shard not held is asked about again.
const RETRY: Duration = Duration::from_millis(500);

/// What the thread is asked to keep.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wanted {
    pub config: Config,
    pub me: Holder,
    /// What the claim says for the operator: `cluster_name`, or the port.
    pub node: String,
    pub shards: Vec<u32>,
}

/// What the thread learnt of one shard at its last request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Report {
    /// Held by this server, its mark recorded up to `mark_unix_ms`. `resume_above_unix_ms`:
    /// the mark another holder left (a take), above which this server must resume the shard.
    Held { mark_unix_ms: u64, resume_above_unix_ms: Option<u64>, since_unix_ms: i64 },
    /// Not this server's: the rules' verdict, with the holder when there is one.
    Refused { verdict: Verdict },
    /// A renewal was written by another: the claim is gone, or another's.
    Lost,
    /// Held, but the registry did not answer the last renewal: the mark stands where it was.
    Unanswered { mark_unix_ms: u64 },
}

/// The worker's and the thread's meeting place, behind one lock held only to copy fields.
#[derive(Default)]
pub struct Exchange {
    pub wanted: Option<Wanted>,
    /// The ceiling the worker wants (Unix ms): a mark is due when it comes near.
    pub ceiling_unix_ms: u64,
    pub reports: BTreeMap<u32, Report>,
    /// The last failed request's reason (`None` after an answer), for the log.
    pub last_failure: Option<String>,
    /// When the registry last answered (Unix ms), for `snowflake_status()`.
    pub last_answer_unix_ms: Option<u64>,
    /// Set by the worker when it stops: the thread releases its claims and clears it.
    pub release: bool,
}

pub type Shared = Arc<(Mutex<Exchange>, Condvar)>;

/// Starts the thread (`worker_thread`: every signal blocked in it, nothing of PostgreSQL called).
pub fn start() -> std::io::Result<Shared> {
    let shared: Shared = Arc::new((Mutex::new(Exchange::default()), Condvar::new()));
    let for_thread = Arc::clone(&shared);
    worker_thread::spawn("snowflake registry", move || ask_forever(&for_thread)).map(|()| shared)
}

fn wall_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |since| since.as_millis() as u64)
}

/// A claim this thread holds: the revision its next write compares, its mark, and the mark
/// another holder left when it was taken (reported with every renewal, so that a worker that
/// missed the first report still resumes above it; raising the floor again is a no-op).
#[derive(Clone, Copy)]
struct Holding {
    revision: i64,
    mark_unix_ms: u64,
    since_unix_ms: i64,
    resume_above_unix_ms: Option<u64>,
}

fn ask_forever(shared: &(Mutex<Exchange>, Condvar)) {
    let (exchange, wake) = shared;
    let mut client: Option<(Config, Etcd)> = None;
    let mut held: BTreeMap<u32, Holding> = BTreeMap::new();
    loop {
        let (wanted, ceiling_unix_ms, release) = {
            let mut state = exchange.lock().unwrap_or_else(|e| e.into_inner());
            while state.wanted.is_none() && !state.release {
                state = wake.wait(state).unwrap_or_else(|e| e.into_inner());
            }
            (state.wanted.clone(), state.ceiling_unix_ms, state.release)
        };
        let started = Instant::now();
        let Some(wanted) = wanted else {
            // Asked to release before anything was wanted: nothing is held.
            exchange.lock().unwrap_or_else(|e| e.into_inner()).release = false;
            wake.notify_all();
            continue;
        };
        if client.as_ref().is_none_or(|(config, _)| *config != wanted.config) {
            client = connect(&wanted.config).map(|etcd| (wanted.config.clone(), etcd)).ok();
        }
        let mut failure = None;
        let mut reports = BTreeMap::new();
        if let Some((config, etcd)) = &client {
            for &shard in &wanted.shards {
                let report = if release {
                    release_one(etcd, shard, held.remove(&shard))
                } else {
                    step(etcd, config, &wanted, shard, ceiling_unix_ms, &mut held)
                };
                match report {
                    Ok(report) => {
                        reports.insert(shard, report);
                    }
                    Err(error) => {
                        if let Some(holding) = held.get(&shard) {
                            reports.insert(shard, Report::Unanswered { mark_unix_ms: holding.mark_unix_ms });
                        }
                        failure = Some(error.to_string());
                    }
                }
            }
            // Claims of shards no longer wanted (a reload moved them away): released.
            let dropped: Vec<u32> =
                held.keys().copied().filter(|shard| !wanted.shards.contains(shard)).collect();
            for shard in dropped {
                let _ = release_one(etcd, shard, held.remove(&shard));
            }
        } else {
            failure = Some(format!("{} does not answer as an etcd", wanted.config.url));
        }
        let mut state = exchange.lock().unwrap_or_else(|e| e.into_inner());
        if failure.is_none() {
            state.last_answer_unix_ms = Some(wall_ms());
        }
        state.last_failure = failure;
        state.reports = reports;
        if release {
            state.release = false;
            state.wanted = None;
            wake.notify_all();
            continue;
        }
        let every_shard_held = wanted.shards.iter().all(|shard| held.contains_key(shard));
        let interval = if every_shard_held {
            Duration::from_millis(wanted.config.ttl_ms / 3)
        } else {
            RETRY.min(Duration::from_millis(wanted.config.ttl_ms / 3))
        };
        let rest = interval.saturating_sub(started.elapsed());
        if !rest.is_zero() && !state.release && state.wanted.as_ref() == Some(&wanted) {
            let _ = wake.wait_timeout(state, rest);
        }
    }
}

/// A client of the configured etcd, pinned to the cluster that answers now: from then on an
/// answer counts only from that cluster (a process that took the port after etcd stopped
/// could otherwise hand out claims).
fn connect(config: &Config) -> Result<Etcd, Error> {
    let deadline = MAX_REQUEST_DEADLINE.min(Duration::from_millis(config.ttl_ms / 4));
    let etcd = Etcd::new(&config.url, &config.prefix, deadline).map_err(Error::NoAnswer)?;
    let cluster_id = etcd.cluster_id()?;
    Ok(etcd.with_cluster_id(cluster_id))
}

/// One shard's round: a renewal of a claim held, or a read and, when the rules allow, a take.
fn step(
    etcd: &Etcd,
    config: &Config,
    wanted: &Wanted,
    shard: u32,
    ceiling_unix_ms: u64,
    held: &mut BTreeMap<u32, Holding>,
) -> Result<Report, Error> {
    let now = wall_ms();
    if let Some(holding) = held.get(&shard).copied() {
        let mark = if registry::mark_due(now, ceiling_unix_ms, holding.mark_unix_ms, config.reserve_ms) {
            registry::mark_to_record(now, ceiling_unix_ms, holding.mark_unix_ms, config.reserve_ms)
        } else {
            holding.mark_unix_ms
        };
        let claim = Claim { holder: wanted.me, since_unix_ms: holding.since_unix_ms };
        let lease = etcd.grant(config.ttl_ms)?;
        return Ok(match etcd.renew(shard, holding.revision, &claim, &wanted.node, lease, mark)? {
            Outcome::Written { revision, mark: written } => {
                let mark_unix_ms = written.map_or(mark, |written| written.unix_ms);
                held.insert(shard, Holding { revision, mark_unix_ms, ..holding });
                Report::Held {
                    mark_unix_ms,
                    resume_above_unix_ms: holding.resume_above_unix_ms,
                    since_unix_ms: holding.since_unix_ms,
                }
            }
            Outcome::Lost { .. } => {
                held.remove(&shard);
                Report::Lost
            }
        });
    }
    let current = etcd.read(shard)?;
    let live = current.claim.as_ref().map(|held| held.claim);
    let marked_by = current.mark.map(|mark| mark.by);
    match registry::verdict(wanted.me, live, marked_by) {
        Verdict::Take | Verdict::TakeOver => {
            take(etcd, config, wanted, shard, &current, ceiling_unix_ms, held)
        }
        Verdict::Renew => {
            // This postmaster's own claim, from before the worker restarted: held again from
            // its revision; every ID this server issued lies below its mark already.
            let held_claim = current.claim.expect("a verdict to renew has a claim");
            let mark_unix_ms = current.mark.map_or(0, |mark| mark.unix_ms);
            held.insert(
                shard,
                Holding {
                    revision: held_claim.revision,
                    mark_unix_ms,
                    since_unix_ms: held_claim.claim.since_unix_ms,
                    resume_above_unix_ms: None,
                },
            );
            step(etcd, config, wanted, shard, ceiling_unix_ms, held)
        }
        verdict => Ok(Report::Refused { verdict }),
    }
}

/// Takes a shard the rules gave this server, then records a mark ahead of its own ceiling, so
/// that the shard can be published at once; the mark found is where it must resume above.
fn take(
    etcd: &Etcd,
    config: &Config,
    wanted: &Wanted,
    shard: u32,
    current: &Current,
    ceiling_unix_ms: u64,
    held: &mut BTreeMap<u32, Holding>,
) -> Result<Report, Error> {
    let now = wall_ms();
    let since_unix_ms = now as i64;
    let claim = Claim { holder: wanted.me, since_unix_ms };
    let lease = etcd.grant(config.ttl_ms)?;
    let Outcome::Written { revision, mark } = etcd.take(shard, current, &claim, &wanted.node, lease)? else {
        return Ok(Report::Lost);
    };
    let found = mark.map_or(0, |mark| mark.unix_ms);
    // Another holder's mark, or this one's from before a restart that lost its memory of it
    // (a crash): either way every ID of the shard so far lies below it.
    let resume_above_unix_ms = mark.filter(|mark| mark.by != wanted.me).map(|mark| mark.unix_ms);
    let wanted_ceiling = ceiling_unix_ms.max(found);
    let new_mark = registry::mark_to_record(now, wanted_ceiling, found, config.reserve_ms);
    held.insert(shard, Holding { revision, mark_unix_ms: found, since_unix_ms, resume_above_unix_ms });
    let lease = etcd.grant(config.ttl_ms)?;
    Ok(match etcd.renew(shard, revision, &claim, &wanted.node, lease, new_mark)? {
        Outcome::Written { revision, mark: written } => {
            let mark_unix_ms = written.map_or(new_mark, |written| written.unix_ms);
            held.insert(shard, Holding { revision, mark_unix_ms, since_unix_ms, resume_above_unix_ms });
            Report::Held { mark_unix_ms, resume_above_unix_ms, since_unix_ms }
        }
        Outcome::Lost { .. } => {
            held.remove(&shard);
            Report::Lost
        }
    })
}

/// Releases a claim at a clean stop: the next holder need not wait out its lease. The mark
/// stays, above every ID this server issued.
fn release_one(etcd: &Etcd, shard: u32, holding: Option<Holding>) -> Result<Report, Error> {
    if let Some(holding) = holding {
        etcd.release(shard, holding.revision)?;
    }
    Ok(Report::Lost)
}
