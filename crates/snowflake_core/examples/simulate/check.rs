//! The checks every run is held to. IDs are kept as ranges of a shard's counters (a claim is
//! `first..=last`), so a claim of a million IDs costs one entry.
//!
//! Stricter than "acknowledged": every ID a claim returned counts, acknowledged or not (a bare
//! `SELECT snowflake_nextval()` hands its ID out without any WAL; a commit lost with its
//! connection still handed the ID to someone). The protocol promises that no ID is ever issued
//! twice, and since only one server issues at a time, per shard every claim must lie above
//! every claim before it, whichever server made it: that one comparison is both the
//! uniqueness check and the order check across takeovers.

use snowflake_core::layout::Layout;

#[derive(Clone, Debug)]
pub struct Violation {
    /// A short name: shrinking keeps a schedule only while it fails with the same kind.
    pub kind: &'static str,
    pub message: String,
    pub at_ms: i64,
}

#[derive(Clone, Copy)]
struct Issued {
    first: u64,
    last: u64,
    server: usize,
    at_ms: i64,
}

pub struct Checker {
    shards: Vec<Vec<Issued>>,
}

impl Checker {
    pub fn new(shards: u32) -> Self {
        Checker { shards: (0..shards).map(|_| Vec::new()).collect() }
    }

    /// A claim `first..=last` of `shard` returned by `server`. Ranges stay sorted and
    /// disjoint, since a claim that breaks that ends the run.
    pub fn issue(
        &mut self,
        layout: &Layout,
        shard: u32,
        first: u64,
        last: u64,
        server: usize,
        at_ms: i64,
    ) -> Result<(), Violation> {
        let history = &self.shards[shard as usize];
        if let Some(top) = history.last().copied() {
            if first <= top.last {
                let index = history.partition_point(|issued| issued.last < first);
                let (kind, before) = match history.get(index) {
                    Some(issued) if issued.first <= last => ("duplicate", *issued),
                    _ => ("order", top),
                };
                return Err(violation(layout, kind, shard, first, last, server, before, at_ms));
            }
        }
        self.shards[shard as usize].push(Issued { first, last, server, at_ms });
        Ok(())
    }

    /// A claim that may lie below IDs other servers issued since (an old primary woken after
    /// its standby's promotion, F11 of docs/reliability.md): checked only for IDs given twice.
    pub fn issue_out_of_order(
        &mut self,
        layout: &Layout,
        shard: u32,
        first: u64,
        last: u64,
        server: usize,
        at_ms: i64,
    ) -> Result<(), Violation> {
        let history = &mut self.shards[shard as usize];
        let index = history.partition_point(|issued| issued.last < first);
        if let Some(issued) = history.get(index).copied().filter(|issued| issued.first <= last) {
            return Err(violation(layout, "duplicate", shard, first, last, server, issued, at_ms));
        }
        history.insert(index, Issued { first, last, server, at_ms });
        Ok(())
    }

    /// The highest time part issued on any shard.
    pub fn highest_time_part(&self, layout: &Layout) -> Option<u64> {
        self.shards
            .iter()
            .filter_map(|history| history.last())
            .map(|top| layout.counter_time_part(top.last))
            .max()
    }
}

/// A claim `first..=last` that met `before`: an ID issued twice, or one below an earlier ID.
#[allow(clippy::too_many_arguments)]
fn violation(
    layout: &Layout,
    kind: &'static str,
    shard: u32,
    first: u64,
    last: u64,
    server: usize,
    before: Issued,
    at_ms: i64,
) -> Violation {
    let id = |counter| layout.id_of_counter(shard, counter);
    Violation {
        kind,
        message: format!(
            "shard {shard}: server {server} issued IDs {}..={} (counters {first}..={last}), but server {} had \
             issued {}..={} at t={} ms{}",
            id(first),
            id(last),
            before.server,
            id(before.first),
            id(before.last),
            before.at_ms,
            if kind == "duplicate" { ": an ID issued twice" } else { ": below an earlier ID" }
        ),
        at_ms,
    }
}
