//! The checks, computed after the run from the clients' history, the readers' pages, the
//! servers' final contents and what the nemesis did. None is judged while the run goes on.

use super::clients::{Kind, Op, Reads};
use super::nemesis::Outcome;
use super::report::Summary;
use super::schedule::{Group, Schedule};
use super::shared::{Move, Shared};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::MutexGuard;

/// The layout the campaign's servers run with (the defaults): the time part is above 22 bits
/// of shard and sequence, in ms since 2024-01-01.
const TIME_SHIFT: u32 = 22;
const EPOCH_UNIX_MS: i64 = 1_704_067_200_000;
/// What the measurement of a client's op adds to a lead: the time between the server's clock
/// read and the client's, and a clock offset written a moment before it was recorded.
const LEAD_SLACK_MS: i64 = 150;
/// SQLSTATEs a client may meet in a fault: 55000 (a wait for the clock or the reservation
/// ran out, a fenced shard), 25006 (a standby), a server shutting down, crashed or starting.
const EXPECTED: [&str; 6] = ["55000", "25006", "57P01", "57P02", "57P03", "lost"];
/// A call's refusal because the durable reservation ran out: the worker could not record a
/// new ceiling (its fsync failing or slow, the worker or its server down) while the call
/// waited `snowflake_id.max_reservation_wait_ms`, which the campaign leaves at its default.
const USED_UP: &str = "used up the durable reservation";
const RESERVATION_WAIT_MS: u64 = 5_000;
/// Of that wait, what a client may not see of it (the server's sleep starts a moment after the
/// client's clock read).
const RESERVATION_WAIT_SLACK_MS: u64 = 100;
/// Findings of each check listed in full, at most.
const EXAMPLES: usize = 5;

/// The Unix ms of an ID's time part.
pub fn unix_ms_of(id: i64) -> i64 {
    (id >> TIME_SHIFT) + EPOCH_UNIX_MS
}

/// The group that `server` (a name of the directory) belongs to: the second server, and the
/// one pg_upgrade made of it, or a server of the pair.
fn group_of(server: &str) -> Group {
    if server.starts_with("second") {
        Group::Second
    } else {
        Group::Pair
    }
}

/// A check's failures: how many, and the first few in words.
#[derive(Default)]
struct Failures {
    count: usize,
    examples: Vec<String>,
}

impl Failures {
    fn add(&mut self, what: impl FnOnce() -> String) {
        self.count += 1;
        if self.examples.len() < EXAMPLES {
            self.examples.push(what());
        }
    }

    fn into_findings(self, check: &str, findings: &mut Vec<String>) {
        for example in self.examples {
            findings.push(format!("{check}: {example}"));
        }
        if self.count > EXAMPLES {
            findings.push(format!("{check}: … {} in all", self.count));
        }
    }
}

pub fn check(
    shared: &Shared,
    schedule: &Schedule,
    ops: &[Op],
    reads: &[Reads],
    finals: &BTreeMap<i32, Vec<(i64, i64)>>,
    outcome: &Outcome,
) -> Summary {
    let mut summary = Summary {
        seed: schedule.seed,
        minutes: shared.started.elapsed().as_secs_f64() / 60.0,
        synchronous: schedule.synchronous,
        ..Summary::default()
    };
    let mut findings = std::mem::take(&mut *shared.findings.lock().unwrap());
    let run = Run {
        shared,
        synchronous: schedule.synchronous,
        ops,
        reads,
        finals,
        outcome,
        by_tag: ops.iter().map(|op| (op.tag, op)).collect(),
        present: finals
            .iter()
            .map(|(shard, rows)| (*shard, rows.iter().map(|(id, _)| *id).collect()))
            .collect(),
        moves: shared.moves.lock().unwrap(),
        switchpoints: shared.switchpoints.lock().unwrap(),
        failovers: outcome
            .faults
            .iter()
            .filter(|done| done.kind.starts_with("failover"))
            .map(|done| done.end_ms)
            .collect(),
    };
    let (unique, owner) = unique_ids(&run, &mut summary);
    unique.into_findings("unique-ids", &mut findings);
    let (lost, phantom) = set_full(&run, &owner, &mut summary);
    lost.into_findings("set-full (lost)", &mut findings);
    phantom.into_findings("set-full (never committed)", &mut findings);
    order(&run, &mut summary).into_findings("order", &mut findings);
    lead(&run, &mut summary).into_findings("lead", &mut findings);
    fence(&run, &mut summary).into_findings("fence", &mut findings);
    horizon(&run, &mut summary).into_findings("horizon", &mut findings);
    errors(&run, &mut summary).into_findings("errors", &mut findings);
    liveness(&run, &mut summary).into_findings("liveness", &mut findings);
    for done in &outcome.faults {
        *summary.faults.entry(done.kind).or_default() += 1;
    }
    summary.rebuilt_standbys = shared.rebuilt_standbys.lock().unwrap().clone();
    summary.repeated_promotions = shared.repeated_promotions.lock().unwrap().clone();
    summary.skipped_steps = shared.skipped_steps.load(std::sync::atomic::Ordering::Relaxed);
    summary.findings = findings;
    summary
}

/// What every check reads: the run's record, and the rules that excuse a row missing at the
/// end.
struct Run<'a> {
    shared: &'a Shared,
    synchronous: bool,
    ops: &'a [Op],
    reads: &'a [Reads],
    finals: &'a BTreeMap<i32, Vec<(i64, i64)>>,
    outcome: &'a Outcome,
    by_tag: HashMap<i64, &'a Op>,
    /// The IDs each shard holds at the end.
    present: BTreeMap<i32, HashSet<i64>>,
    moves: MutexGuard<'a, Vec<Move>>,
    switchpoints: MutexGuard<'a, BTreeMap<u32, u64>>,
    /// When each failover of the pair ended (ms since the start).
    failovers: Vec<u64>,
}

impl Run<'_> {
    /// The group that issued `shard` at `at_ms`.
    fn home_at(&self, shard: i32, at_ms: u64) -> Group {
        let start = if super::shared::PAIR_SHARDS.contains(&shard) { Group::Pair } else { Group::Second };
        self.moves.iter().rfind(|m| m.shard == shard && m.opened_at_ms <= at_ms).map_or(start, |m| m.to)
    }

    /// A failover of the pair ended after `op` started, while its shard was on the pair.
    fn failover_after(&self, op: &Op) -> bool {
        self.failovers.iter().any(|&at| at >= op.start_ms && self.home_at(op.shard, at) == Group::Pair)
    }

    /// A commit acknowledged by the pair's primary may be lost with asynchronous replication
    /// when the standby promoted after it had not received it: its WAL position lies past the
    /// promotion's switch point (PostgreSQL's contract, not ours; counted, not a finding). Any
    /// other acknowledged commit must be there: a row copied to the pair by a move (the move
    /// waits for the target's standby, F2), one the standby had.
    fn may_be_lost(&self, op: &Op) -> bool {
        !self.synchronous
            && group_of(&op.server) == Group::Pair
            && self
                .switchpoints
                .get(&op.epoch)
                .is_some_and(|&switchpoint| op.commit_lsn.is_none_or(|lsn| lsn > switchpoint))
    }

    /// A commit never acknowledged (its connection was lost) may have been seen by a reader on
    /// the primary and be gone after a failover, synchronous replication or not: PostgreSQL
    /// shows a commit to other sessions before its synchronous standby has confirmed it, and a
    /// primary restarted after a crash recovers it from its own WAL (seeds 302 on 15, 202 on
    /// 18).
    fn may_be_gone_unacknowledged(&self, op: &Op) -> bool {
        op.committed.is_empty() && self.failover_after(op)
    }
}

/// unique-ids: no ID given to two ops, or twice to one; none stored twice. Returns the op each
/// ID was given to, for set-full.
fn unique_ids(run: &Run, summary: &mut Summary) -> (Failures, HashMap<i64, i64>) {
    let mut unique = Failures::default();
    let mut owner: HashMap<i64, i64> = HashMap::new();
    for op in run.ops {
        for id in op.ids() {
            summary.ids_acknowledged += 1;
            if let Some(other) = owner.insert(id, op.tag) {
                unique.add(|| {
                    format!(
                        "ID {id} given to op {other} and to op {} ({:?} on {})",
                        op.tag, op.kind, op.server
                    )
                });
            }
        }
        summary.rows_committed += op.committed.len();
    }
    for (shard, rows) in run.finals {
        let mut seen = HashSet::new();
        for &(id, tag) in rows {
            if !seen.insert(id) {
                unique.add(|| format!("ID {id} stored twice in shard {shard}"));
            }
            if owner.get(&id).is_some_and(|&other| other != tag) {
                unique.add(|| format!("ID {id} stored by op {tag}, given to op {}", owner[&id]));
            }
        }
    }
    // What readers saw counts too: a row read and later lost (to an asynchronous failover)
    // whose ID another op got after it.
    for reader in run.reads {
        for (&id, &tag) in reader.read.ids.iter().zip(&reader.read.tags) {
            if owner.get(&id).is_some_and(|&other| other != tag) {
                unique.add(|| {
                    format!(
                        "ID {id} read in shard {} with op {tag}'s tag, given to op {}",
                        reader.shard, owner[&id]
                    )
                });
            }
        }
    }
    summary.duplicates = unique.count;
    (unique, owner)
}

/// set-full: every acknowledged commit present (but those an asynchronous failover may lose);
/// nothing present that was not committed (or whose COMMIT's answer was lost). Returns the
/// lost and the never committed.
fn set_full(run: &Run, owner: &HashMap<i64, i64>, summary: &mut Summary) -> (Failures, Failures) {
    let mut lost = Failures::default();
    let mut phantom = Failures::default();
    for op in run.ops {
        let here = &run.present[&op.shard];
        for &id in &op.committed {
            if !here.contains(&id) {
                if op.server.starts_with("copy") {
                    // Committed on a copy of the pair's primary (`Fault::Copy`): its own
                    // database, never the pair's.
                    summary.rows_on_copies += 1;
                } else if run.may_be_lost(op) {
                    summary.lost_to_async_failover += 1;
                } else {
                    lost.add(|| {
                        format!(
                            "ID {id} of op {} ({:?} on {}, shard {}) committed, not present",
                            op.tag, op.kind, op.server, op.shard
                        )
                    });
                }
            }
        }
        for &id in op.aborted.iter().chain(&op.bare) {
            if here.contains(&id) {
                phantom.add(|| format!("ID {id} of op {} ({:?}) present, never committed", op.tag, op.kind));
            }
        }
    }
    for (shard, rows) in run.finals {
        for &(id, tag) in rows {
            let stored_as_given = run.by_tag.get(&tag).is_some_and(|op| {
                op.shard == *shard
                    && (op.committed.contains(&id)
                        || op.maybe.contains(&id)
                        || (op.maybe_unseen && !owner.contains_key(&id)))
            });
            if !stored_as_given {
                phantom
                    .add(|| format!("ID {id} present in shard {shard} with tag {tag}, never attempted so"));
            }
        }
    }
    summary.lost_rows = lost.count;
    summary.phantom_rows = phantom.count;
    (lost, phantom)
}

/// order: within a shard, every ID of an op is above every ID of each op that ended before it
/// started (restarts, promotions and moves included); inside one op, its IDs increase.
fn order(run: &Run, summary: &mut Summary) -> Failures {
    let mut order = Failures::default();
    let mut by_shard: BTreeMap<i32, Vec<&Op>> = BTreeMap::new();
    for op in run.ops.iter().filter(|op| op.ids().next().is_some()) {
        by_shard.entry(op.shard).or_default().push(op);
    }
    for (shard, shard_ops) in &by_shard {
        let mut by_end: Vec<&&Op> = shard_ops.iter().collect();
        by_end.sort_by_key(|op| op.end_ms);
        let mut by_start: Vec<&&Op> = shard_ops.iter().collect();
        by_start.sort_by_key(|op| op.start_ms);
        let (mut ended, mut highest): (usize, Option<(i64, &Op)>) = (0, None);
        for op in by_start {
            while ended < by_end.len() && by_end[ended].end_ms < op.start_ms {
                let earlier = by_end[ended];
                let top = earlier.ids().max().unwrap();
                if highest.is_none_or(|(id, _)| top > id) {
                    highest = Some((top, earlier));
                }
                ended += 1;
            }
            let low = op.ids().min().unwrap();
            if let Some((top, earlier)) = highest {
                if low <= top {
                    order.add(|| {
                        format!(
                            "shard {shard}: op {} on {} from {} ms got {low}, not above {top} of op {} on {} (ended {} ms)",
                            op.tag, op.server, op.start_ms, earlier.tag, earlier.server, earlier.end_ms
                        )
                    });
                }
            }
        }
    }
    // And inside one op: the IDs a statement or a transaction got (a batch's included) came
    // in increasing order. (Not its rolled-back ones: a savepoint's are listed after the rest.)
    for op in run.ops {
        for (what, ids) in [("committed", &op.committed), ("maybe", &op.maybe), ("bare", &op.bare)] {
            if let Some(pair) = ids.windows(2).find(|pair| pair[0] >= pair[1]) {
                order.add(|| {
                    format!(
                        "op {} ({:?} on {}): {what} {} then {}",
                        op.tag, op.kind, op.server, pair[0], pair[1]
                    )
                });
            }
        }
    }
    summary.order_violations = order.count;
    order
}

/// lead: no ID's time part further ahead of the server's (faked) clock than its bound.
fn lead(run: &Run, summary: &mut Summary) -> Failures {
    let mut lead = Failures::default();
    let offsets = run.shared.offsets.lock().unwrap();
    for op in run.ops {
        let group = group_of(&op.server);
        let changes = &offsets[group.index()];
        // The largest offset that may have been in force at any moment of the op: each change
        // begun before its end, unless the next one was written in full 50 ms before its start
        // (a change recorded only once written was missed when its writing ended just after a
        // 1 ms op: 65 IDs of seed 5146 on 18 called 269 ms past the lead bound).
        let offset = changes
            .iter()
            .enumerate()
            .filter(|(i, change)| {
                change.from_ms <= op.end_ms
                    && changes.get(i + 1).is_none_or(|next| next.until_ms + 50 > op.start_ms)
            })
            .map(|(_, change)| change.ms)
            .max()
            .unwrap_or(0);
        let clock = op.end_unix_ms + offset + run.shared.skew_of(&op.server);
        for id in op.ids() {
            let ahead = unix_ms_of(id) - clock;
            summary.largest_lead_ms = summary.largest_lead_ms.max(ahead);
            if ahead > run.shared.lead_ms[group.index()] + LEAD_SLACK_MS {
                lead.add(|| {
                    format!("ID {id} of op {} on {} is {ahead} ms ahead of its clock", op.tag, op.server)
                });
            }
        }
    }
    summary.lead_violations = lead.count;
    lead
}

/// fence: no ID of a shard issued by a group later than `FENCE_REACTION` after the group's
/// fence left that shard out (a statement already running included): none above the last
/// ID the source had then. Where the source had forgotten that (a crash reset it), none
/// stamped more than the lead bound after the fence's moment.
fn fence(run: &Run, summary: &mut Summary) -> Failures {
    let mut fence = Failures::default();
    for op in run.ops {
        let group = group_of(&op.server);
        for fenced in run.moves.iter().filter(|m| m.shard == op.shard && m.from == group) {
            let came_back = run.moves.iter().any(|m| {
                m.shard == op.shard
                    && m.to == group
                    && m.opened_at_ms > fenced.fenced_at_ms
                    && m.opened_at_ms <= op.start_ms
            });
            if came_back || op.end_ms < fenced.fenced_at_ms {
                continue;
            }
            let limit = fenced.fenced_clock_unix_ms + run.shared.lead_ms[group.index()] + LEAD_SLACK_MS;
            let late_id = |id: i64| match fenced.last_id_at_fence {
                Some(last) => id > last,
                None => unix_ms_of(id) > limit,
            };
            if let Some(late) = op.ids().filter(|&id| late_id(id)).max() {
                fence.add(|| {
                    format!(
                        "shard {} issued by {} after its fence left it out: ID {late}, {} ms after (op {}, {:?})",
                        op.shard,
                        op.server,
                        unix_ms_of(late) - fenced.fenced_clock_unix_ms,
                        op.tag,
                        op.kind
                    )
                });
            }
        }
    }
    summary.fence_violations = fence.count;
    fence
}

/// horizon: each reader read the shard's final rows, in order, each once, none skipped.
fn horizon(run: &Run, summary: &mut Summary) -> Failures {
    let mut horizon = Failures::default();
    for reader in run.reads {
        let here = &run.present[&reader.shard];
        if reader.read.gave_up {
            horizon.add(|| format!("the reader of shard {} did not reach the last row", reader.shard));
        }
        if let Some(pair) = reader.read.ids.windows(2).find(|pair| pair[0] >= pair[1]) {
            horizon.add(|| format!("shard {}: read {} then {}", reader.shard, pair[0], pair[1]));
        }
        let read: HashSet<i64> = reader.read.ids.iter().copied().collect();
        let skipped = here.difference(&read).count();
        summary.skipped_rows += skipped;
        if skipped > 0 {
            let first = here.difference(&read).min().copied().unwrap_or_default();
            horizon.add(|| format!("shard {}: {skipped} rows never read (the lowest {first})", reader.shard));
        }
        for (id, tag) in reader.read.ids.iter().zip(&reader.read.tags).filter(|(id, _)| !here.contains(id)) {
            if !run
                .by_tag
                .get(tag)
                .is_some_and(|op| run.may_be_lost(op) || run.may_be_gone_unacknowledged(op))
            {
                horizon
                    .add(|| format!("shard {}: read {id} (op {tag}), not present at the end", reader.shard));
            }
        }
    }
    horizon
}

/// errors: only those a fault explains: the expected SQLSTATEs, and a reservation used up only
/// after the call waited for it.
fn errors(run: &Run, summary: &mut Summary) -> Failures {
    let mut errors = Failures::default();
    for op in run.ops {
        let Some(code) = &op.error else { continue };
        *summary.errors.entry(code.clone()).or_default() += 1;
        // COMMIT PREPARED of a transaction the janitor committed first.
        let resolved = code == "42704" && op.kind == Kind::Prepared;
        let message = op.message.as_deref().unwrap_or("");
        // Refused as used up sooner than the wait allows: the call did not wait for the worker
        // (with the claim's wait removed, tests/mutations/claim-reservation-wait.patch, 111 to
        // 483 calls a seed were refused so, at once; none with it in place, in the same seeds).
        let refused_without_waiting = code == "55000"
            && message.contains(USED_UP)
            && op.end_ms.saturating_sub(op.start_ms) + RESERVATION_WAIT_SLACK_MS < RESERVATION_WAIT_MS;
        if (!EXPECTED.contains(&code.as_str()) && !resolved) || refused_without_waiting {
            errors.add(|| {
                let when = if refused_without_waiting {
                    format!(" after {} ms, not the reservation's wait", op.end_ms - op.start_ms)
                } else {
                    String::new()
                };
                format!("{code}{when} in op {} ({:?} on {}): {message}", op.tag, op.kind, op.server)
            });
        }
    }
    errors
}

/// liveness: every writer issued again within the bound after the last fault; and the
/// longest time any writer went without a success.
fn liveness(run: &Run, summary: &mut Summary) -> Failures {
    let mut writers: BTreeMap<usize, Vec<&Op>> = BTreeMap::new();
    for op in run.ops {
        writers.entry(op.writer).or_default().push(op);
    }
    let outcome = run.outcome;
    let bound = outcome.liveness_bound.as_millis() as u64;
    let mut late = Failures::default();
    for (writer, its) in &writers {
        let again = its.iter().find(|op| op.error.is_none() && op.start_ms >= outcome.quiet_from_ms);
        if !again.is_some_and(|op| op.end_ms - outcome.quiet_from_ms <= bound) {
            late.add(|| {
                format!(
                    "writer {writer} did not issue within {} s of the last fault",
                    outcome.liveness_bound.as_secs()
                )
            });
        }
        let mut last = 0;
        for op in its.iter().filter(|op| op.error.is_none()) {
            summary.longest_unavailable_ms =
                summary.longest_unavailable_ms.max(op.end_ms.saturating_sub(last));
            last = op.end_ms;
        }
    }

    late
}
