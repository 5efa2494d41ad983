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

/// A claim's IDs, `first..=last` of a shard's counters, returned by `server` at `at_ms`.
#[derive(Clone, Copy)]
pub struct Issued {
    pub first: u64,
    pub last: u64,
    pub server: usize,
    pub at_ms: i64,
}

pub struct Checker {
    shards: Vec<Vec<Issued>>,
}

impl Checker {
    pub fn new(shards: u32) -> Self {
        Checker { shards: (0..shards).map(|_| Vec::new()).collect() }
    }

    /// A claim of `shard`: no ID of it given before, and above every earlier one (the
    /// protocol's promise). Ranges stay sorted and disjoint, since a claim that breaks that ends
    /// the run.
    pub fn issue(&mut self, layout: &Layout, shard: u32, claim: Issued) -> Result<(), Violation> {
        let history = &mut self.shards[shard as usize];
        let index = history.partition_point(|issued| issued.last < claim.first);
        if let Some(before) = history.get(index).copied().filter(|issued| issued.first <= claim.last) {
            return Err(violation(layout, "duplicate", shard, claim, before));
        }
        match history.last().copied() {
            Some(top) if claim.first <= top.last => Err(violation(layout, "order", shard, claim, top)),
            _ => {
                history.insert(index, claim);
                Ok(())
            }
        }
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

/// A claim that met `before`: an ID issued twice, or one below an earlier ID.
fn violation(layout: &Layout, kind: &'static str, shard: u32, claim: Issued, before: Issued) -> Violation {
    let id = |counter| layout.id_of_counter(shard, counter);
    let Issued { first, last, server, at_ms } = claim;
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
