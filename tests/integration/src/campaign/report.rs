//! What a run leaves: one summary with figures, printed and saved beside the schedule; on a
//! failure, the same folder also holds the clients' history, the readers' pages and every
//! server's log.

use super::clients::{Op, Reads};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

#[derive(Default)]
pub struct Summary {
    pub seed: u64,
    pub minutes: f64,
    pub synchronous: bool,
    pub ids_acknowledged: usize,
    pub rows_committed: usize,
    pub faults: BTreeMap<&'static str, usize>,
    pub duplicates: usize,
    pub lost_rows: usize,
    /// Commits acknowledged before a failover under asynchronous replication and not on the
    /// promoted standby: allowed, counted.
    pub lost_to_async_failover: usize,
    /// Rows committed on a copy of the pair's primary (`Fault::Copy`), which the pair never has.
    pub rows_on_copies: usize,
    pub phantom_rows: usize,
    pub skipped_rows: usize,
    pub order_violations: usize,
    pub lead_violations: usize,
    pub fence_violations: usize,
    pub largest_lead_ms: i64,
    pub longest_unavailable_ms: u64,
    pub errors: BTreeMap<String, usize>,
    /// How many times each guard acted (`coverage`), zeros included.
    pub coverage: Vec<(&'static str, usize)>,
    /// Standbys the harness rebuilt, their replay stuck (not a finding: PostgreSQL's, or the
    /// disk's; said so that a run which needed it is seen).
    pub rebuilt_standbys: Vec<String>,
    /// Promotions the harness repeated, the standby stopped during them (a failing fsync of
    /// its replay, say: an HA manager starts it again and promotes again; said for the same
    /// reason).
    pub repeated_promotions: Vec<String>,
    /// Fault steps skipped because their lane reached them over a minute late.
    pub skipped_steps: usize,
    pub findings: Vec<String>,
}

/// What shows that a guard acted: a line of a server's log, or a client's error message
/// (saying one thing, and not another when one is given).
enum Sign {
    Log(&'static str),
    Refusal(&'static str, Option<&'static str>),
}

/// Each guard whose action can be seen, and its sign. A run in which one never acted did not
/// test it: the summary lists them all, zeros included, as Antithesis reports "sometimes"
/// assertions that never held.
const GUARDS: [(&str, Sign); 17] = [
    ("promotion resumed at the bound", Sign::Log("recovery ended; shards resume at")),
    ("promotion resumed at a clean stop", Sign::Log("recovery ended on the old primary's clean stop")),
    ("ceiling lowered after a clock jump", Sign::Log("the reservation moves back to")),
    ("reservation not recorded (fsync)", Sign::Log("could not record the snowflake_id reservation")),
    // Of those, on a standby: its startup process stops, and PostgreSQL the standby.
    (
        "standby stopped: a replayed ceiling not recorded",
        Sign::Log("snowflake_id.reservation\" during replay"),
    ),
    ("start refused: another layout", Sign::Log("FATAL:  snowflake_id is configured with another layout")),
    (
        "start refused: a damaged record",
        Sign::Log("FATAL:  could not read the snowflake_id reservation file"),
    ),
    ("lease lost", Sign::Log("the lease is lost")),
    // The shard registry's (`--registry`): a shard fenced for its claim, by why.
    ("claim refused: a copy of the holder", Sign::Log("its claim in the registry is waiting")),
    ("claim refused: held elsewhere", Sign::Log("its claim in the registry is held_elsewhere")),
    ("claim lost", Sign::Log("its claim in the registry is lost")),
    ("claim replaced by a promotion", Sign::Log("its claim in the registry is replaced")),
    ("larger lead kept", Sign::Log("shards keep issuing under a lead of")),
    ("call refused: ahead of the clock", Sign::Refusal("ahead of the wall clock", None)),
    ("call refused: reservation used up", Sign::Refusal("used up the durable reservation", None)),
    ("call refused: without the lease", Sign::Refusal("cannot show that it is the primary", None)),
    (
        "call refused: fenced",
        Sign::Refusal("is not issued by this server", Some("cannot show that it is the primary")),
    ),
];

/// How many times each guard acted in the run, from every server's log (those a failover
/// replaced included) and the clients' errors.
pub fn coverage(logs: &[(String, String)], ops: &[Op]) -> Vec<(&'static str, usize)> {
    GUARDS
        .iter()
        .map(|(guard, sign)| {
            let count = match sign {
                Sign::Log(text) => logs.iter().map(|(_, log)| log.matches(text).count()).sum(),
                Sign::Refusal(text, not) => {
                    let says = |message: &str| {
                        message.contains(text) && not.is_none_or(|not| !message.contains(not))
                    };
                    ops.iter().filter(|op| op.message.as_deref().is_some_and(says)).count()
                }
            };
            (*guard, count)
        })
        .collect()
}

/// The one guard whose action is certain: every promotion records its guard (a "recovery
/// ended" line, at the bound or at the old primary's clean stop) before its server issues an
/// ID, at its first start as a primary or, when a crash cut the promotion short, at the start
/// after it (`snowflake_id.promotion_pending`). Fewer such lines than promotions in the run's
/// logs: a promotion resumed without its guard, whatever the IDs showed (the floor a standby
/// replays often covers for it: docs/reliability.md). More are allowed: a crash after the
/// guard and before its file was removed records it again. Counted over the run, so one
/// promotion without a guard can hide behind another recorded twice.
pub fn promotions_without_guard(coverage: &[(&'static str, usize)], promotions: usize) -> Option<String> {
    let guards: usize = coverage
        .iter()
        .filter(|(guard, _)| guard.starts_with("promotion resumed"))
        .map(|(_, count)| count)
        .sum();
    (guards < promotions).then(|| {
        format!(
            "promotion guard: promotions {promotions}, guards recorded in the servers' logs \
             (\"snowflake_id: recovery ended\") {guards}"
        )
    })
}

impl Summary {
    pub fn passed(&self) -> bool {
        self.findings.is_empty()
    }

    pub fn text(&self) -> String {
        let mut out = String::new();
        let replication = if self.synchronous { "synchronous" } else { "asynchronous" };
        let _ = writeln!(out, "seed {}: {:.1} minutes, {replication} standby", self.seed, self.minutes);
        let _ = writeln!(
            out,
            "  {} IDs acknowledged, {} rows committed; {} duplicates, {} lost rows ({} lost to asynchronous failover, \
             {} committed on a copy, allowed), {} rows never committed present, {} skipped rows",
            self.ids_acknowledged,
            self.rows_committed,
            self.duplicates,
            self.lost_rows,
            self.lost_to_async_failover,
            self.rows_on_copies,
            self.phantom_rows,
            self.skipped_rows
        );
        let _ = writeln!(
            out,
            "  order violations {}, fence violations {}, largest lead {} ms ({} over the bound), longest unavailability {:.1} s",
            self.order_violations,
            self.fence_violations,
            self.largest_lead_ms,
            self.lead_violations,
            self.longest_unavailable_ms as f64 / 1000.0
        );
        let faults: Vec<String> = self.faults.iter().map(|(kind, n)| format!("{kind} {n}")).collect();
        let _ = writeln!(out, "  faults: {}", faults.join(", "));
        if self.skipped_steps > 0 {
            let _ =
                writeln!(out, "  fault steps skipped, reached over a minute late: {}", self.skipped_steps);
        }
        let errors: Vec<String> = self.errors.iter().map(|(code, n)| format!("{code} {n}")).collect();
        let _ = writeln!(
            out,
            "  client errors: {}",
            if errors.is_empty() { "none".into() } else { errors.join(", ") }
        );
        let acted: Vec<String> = self.coverage.iter().map(|(guard, n)| format!("{guard} {n}")).collect();
        let _ = writeln!(out, "  guards acted: {}", acted.join(", "));
        for (title, said) in [
            ("standbys rebuilt, their replay stuck", &self.rebuilt_standbys),
            ("promotions repeated, their standby stopped during them", &self.repeated_promotions),
        ] {
            let _ = writeln!(out, "  {title}: {}", said.len());
            for line in said {
                let _ = writeln!(out, "    {line}");
            }
        }
        if self.passed() {
            let _ = writeln!(out, "  every check passed");
        }
        for finding in &self.findings {
            let _ = writeln!(out, "  FINDING {finding}");
        }
        out
    }
}

/// Writes the summary into `dir` (beside the schedule), and on a failure the history, the
/// pages read and every server's log.
pub fn write(dir: &Path, summary: &Summary, ops: &[Op], reads: &[Reads], logs: &[(String, String)]) {
    let text = summary.text();
    println!("campaign: summary\n{text}");
    std::fs::write(dir.join("summary.txt"), &text).unwrap();
    if summary.passed() {
        return;
    }
    let mut history = String::from("tag\twriter\tshard\tkind\tserver\tepoch\tcommit_lsn\tstart_ms\tend_ms\tend_unix_ms\terror\tcommitted\taborted\tmaybe\tmaybe_unseen\tbare\tmessage\n");
    let list = |ids: &[i64]| ids.iter().map(|id| id.to_string()).collect::<Vec<_>>().join(",");
    for op in ops {
        let _ = writeln!(
            history,
            "{}\t{}\t{}\t{:?}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
            op.tag,
            op.writer,
            op.shard,
            op.kind,
            op.server,
            op.epoch,
            op.commit_lsn.map(|lsn| format!("{:X}/{:X}", lsn >> 32, lsn & 0xFFFF_FFFF)).unwrap_or_default(),
            op.start_ms,
            op.end_ms,
            op.end_unix_ms,
            op.error.as_deref().unwrap_or(""),
            list(&op.committed),
            list(&op.aborted),
            list(&op.maybe),
            op.maybe_unseen,
            list(&op.bare),
            op.message.as_deref().unwrap_or("").replace(['\t', '\n'], " ")
        );
    }
    std::fs::write(dir.join("history.tsv"), history).unwrap();
    for reader in reads {
        std::fs::write(dir.join(format!("reads-shard-{}.txt", reader.shard)), list(&reader.read.ids))
            .unwrap();
    }
    for (name, log) in logs {
        std::fs::write(dir.join(format!("{name}.log")), log).unwrap();
    }
    println!("campaign: the seed, schedule, history and every server's log are in {}", dir.display());
}
