//! The registry's rules (docs/registry.md), without PostgreSQL, sockets or a backend: who may
//! take a shard's claim, where a server that takes one resumes, how far ahead a claim's mark
//! stands, and what a holder does when the registry does not answer.
//!
//! This is the first part of the registry: the extension does not ask a registry yet. The
//! reservation worker that will (etcd's JSON gateway, or a table on another PostgreSQL server)
//! gathers what the registry answered and applies these verdicts, as it applies `resume`'s plans.
//!
//! Two records per shard, because a claim and a mark outlive different things: the claim (who
//! holds the shard) lives only while its holder renews it, and frees itself when the holder
//! dies; the mark (the shard's high-water mark: no holder ever issued at or above it) must
//! outlive every holder, or a server taking a dead holder's shard would not know where to
//! resume. In etcd the claim is a key bound to a lease and the mark a key without one; in a
//! table, one row with the claim's expiry as a column. A mark is written only in the same
//! transaction that checks the claim is still the writer's, so a holder that lost its claim can
//! never raise the mark past what the next holder read.

/// Who holds a claim, or asks for one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Holder {
    /// `pg_control`'s system identifier: the same for a primary, its standbys and every copy of
    /// its data directory.
    pub system_identifier: u64,
    /// The server's timeline: a promotion raises it.
    pub timeline: u32,
    /// A number the postmaster draws at each start and keeps only in its memory (inherited by
    /// every process it forks, never written to disk): the same across a backend crash, new at
    /// every start, and different in a copy of the data directory started beside the original,
    /// which has everything on disk the original has.
    pub incarnation: u64,
}

/// A shard's claim as the registry answered, while its lease runs (an expired claim is none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Claim {
    pub holder: Holder,
    /// When the holder took it (Unix ms, the registry's clock), for the operator's message.
    pub since_unix_ms: i64,
}

/// What a server does about one shard, given the live claim the registry holds for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// No live claim: take it, and resume above the mark. The take succeeds only while the
    /// claim and the mark are still as the read found them: a read goes stale while a server
    /// is paused, and a successor may have held the shard and marked it meanwhile.
    Take,
    /// This postmaster's own claim (a backend crash or a worker restart in between): renew it.
    Renew,
    /// The claim of an earlier timeline of this data directory: this server is its promoted
    /// standby. Take it over at once, without waiting for the lease, and resume above the mark;
    /// the old primary loses it at its next renewal.
    TakeOver,
    /// A later timeline of this data directory holds it, or wrote the mark last: this server
    /// was replaced by a promotion. Fence the shard at its current ceiling (55000), for good:
    /// also once that later timeline has stopped, since this server's data has diverged from it.
    Replaced { by: Holder },
    /// The same data directory and timeline, another postmaster: this server restarted after a
    /// crash (its old claim runs out within the lease), or it is a copy started beside the
    /// original (whose claim never runs out while the original renews). Fence the shard (55000)
    /// and ask again; take it once the claim has expired.
    WaitForExpiry { held: Claim },
    /// Another server's (another system identifier): two servers are configured with this
    /// shard. Refuse it (55000 naming the holder) and keep asking; the other shards go on.
    HeldElsewhere { held: Claim },
}

/// Who may take a claim (docs/registry.md, "Who may take a claim"), given the live claim and
/// who wrote the mark last (`marked_by`, which outlives the claim).
pub fn verdict(me: Holder, live: Option<Claim>, marked_by: Option<Holder>) -> Verdict {
    let Some(claim) = live else {
        // A free shard whose mark a later timeline of this data directory wrote: its holder
        // stopped (cleanly, or its claim ran out), and this server is the primary it replaced.
        return match marked_by {
            Some(writer)
                if writer.system_identifier == me.system_identifier && writer.timeline > me.timeline =>
            {
                Verdict::Replaced { by: writer }
            }
            _ => Verdict::Take,
        };
    };
    let holder = claim.holder;
    if holder.system_identifier != me.system_identifier {
        return Verdict::HeldElsewhere { held: claim };
    }
    match holder.timeline.cmp(&me.timeline) {
        std::cmp::Ordering::Less => Verdict::TakeOver,
        std::cmp::Ordering::Greater => Verdict::Replaced { by: holder },
        std::cmp::Ordering::Equal if holder.incarnation == me.incarnation => Verdict::Renew,
        std::cmp::Ordering::Equal => Verdict::WaitForExpiry { held: claim },
    }
}

/// Where a shard taken from the registry resumes (time parts): above every ID any holder
/// issued, which all lie below the mark, whatever this server's clock says; and never below
/// where this server's own record puts it.
pub fn resume_floor(own_floor: u64, mark: Option<u64>) -> u64 {
    own_floor.max(mark.unwrap_or(0))
}

/// The ceiling a holder may publish: never past its mark, so that every ID it issues stays
/// below what the next holder resumes above. A renewal that wants more records a higher mark
/// first (`mark_to_record`) and publishes only once the registry accepted it.
pub fn ceiling_within_mark(wanted: u64, mark: u64) -> u64 {
    wanted.min(mark)
}

/// Whether the holder records a higher mark now: once its clock, or the ceiling it wants, comes
/// within half of `registry_reserve_ms` of the mark. Recording ahead by `registry_reserve_ms`
/// keeps the registry out of every renewal of the reservation, and lets a holder go on issuing
/// through an outage of up to half of it.
pub fn mark_due(now: u64, wanted_ceiling: u64, mark: u64, registry_reserve_ms: u64) -> bool {
    let horizon = now.max(wanted_ceiling).saturating_add(registry_reserve_ms / 2);
    horizon >= mark
}

/// The mark to record: `registry_reserve_ms` ahead of the clock or of the ceiling wanted,
/// whichever is further, and never below the mark there (a mark only rises).
pub fn mark_to_record(now: u64, wanted_ceiling: u64, mark: u64, registry_reserve_ms: u64) -> u64 {
    now.max(wanted_ceiling).saturating_add(registry_reserve_ms).max(mark)
}

/// What a holder does when the registry does not answer (`snowflake_id.registry_down`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WhenDown {
    /// Go on issuing up to the mark already recorded, never beyond (the default).
    KeepToMark,
    /// Fence the shard at the first renewal that fails.
    Stop,
}

/// The ceiling a holder may still publish while the registry does not answer: up to the mark,
/// or nothing more (`None`: fence the shard). No choice issues past the mark: a server that
/// cannot record a claim cannot know that no other server holds one.
pub fn ceiling_while_down(when_down: WhenDown, wanted: u64, mark: u64) -> Option<u64> {
    match when_down {
        WhenDown::KeepToMark => Some(ceiling_within_mark(wanted, mark)),
        WhenDown::Stop => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ME: Holder = Holder { system_identifier: 7301, timeline: 3, incarnation: 41 };

    fn claim(system_identifier: u64, timeline: u32, incarnation: u64) -> Claim {
        Claim { holder: Holder { system_identifier, timeline, incarnation }, since_unix_ms: 1_000 }
    }

    #[test]
    fn every_row_of_who_may_take_a_claim() {
        assert_eq!(verdict(ME, None, None), Verdict::Take);
        assert_eq!(verdict(ME, Some(claim(7301, 3, 41)), None), Verdict::Renew);
        // A promoted standby of the holder: same data directory, later timeline.
        assert_eq!(verdict(ME, Some(claim(7301, 2, 9)), None), Verdict::TakeOver);
        // The old primary, once its standby was promoted and took the claim.
        let by = claim(7301, 4, 9);
        assert_eq!(verdict(ME, Some(by), None), Verdict::Replaced { by: by.holder });
        // A copy started beside its original, or this server after a crash restart.
        let held = claim(7301, 3, 42);
        assert_eq!(verdict(ME, Some(held), None), Verdict::WaitForExpiry { held });
        // Two servers configured with one shard.
        let held = claim(9999, 3, 41);
        assert_eq!(verdict(ME, Some(held), None), Verdict::HeldElsewhere { held });
    }

    #[test]
    fn an_old_primary_never_takes_back_a_shard_its_successor_released() {
        let successor = Holder { timeline: 4, incarnation: 9, ..ME };
        // Its successor stopped (released the claim, or its lease ran out): the mark says who.
        assert_eq!(verdict(ME, None, Some(successor)), Verdict::Replaced { by: successor });
        // A mark last written by this server, an earlier timeline, or another server: free.
        assert_eq!(verdict(ME, None, Some(ME)), Verdict::Take);
        assert_eq!(verdict(ME, None, Some(Holder { timeline: 2, ..ME })), Verdict::Take);
        assert_eq!(verdict(ME, None, Some(Holder { system_identifier: 9999, ..successor })), Verdict::Take);
    }

    #[test]
    fn a_clone_never_takes_a_claim_its_live_original_holds() {
        let original = Holder { incarnation: 1, ..ME };
        let clone = Holder { incarnation: 2, ..ME };
        let held = Claim { holder: original, since_unix_ms: 0 };
        // Whatever the clone asks, while the original renews, it waits and never renews.
        assert_eq!(verdict(clone, Some(held), Some(original)), Verdict::WaitForExpiry { held });
        assert_eq!(verdict(original, Some(held), Some(original)), Verdict::Renew);
    }

    #[test]
    fn a_new_holder_resumes_above_the_mark_whatever_its_clock() {
        // Its own record far behind (a clock 30 s behind the dead holder's): the mark.
        assert_eq!(resume_floor(1_000, Some(31_000)), 31_000);
        // Its own record ahead of the mark (a promoted standby's guard): its own.
        assert_eq!(resume_floor(40_000, Some(31_000)), 40_000);
        assert_eq!(resume_floor(5, None), 5);
    }

    #[test]
    fn a_holder_publishes_nothing_past_its_mark() {
        assert_eq!(ceiling_within_mark(10_500, 10_000), 10_000);
        assert_eq!(ceiling_within_mark(9_500, 10_000), 9_500);
    }

    #[test]
    fn the_mark_is_recorded_ahead_and_only_rises() {
        let reserve = 30_000;
        // 20 s left of a 30 s reserve: not yet; 14 s left: due.
        assert!(!mark_due(100_000, 100_250, 120_000, reserve));
        assert!(mark_due(106_000, 106_250, 120_000, reserve));
        // A ceiling wanted far ahead (calls borrowing) makes it due too.
        assert!(mark_due(100_000, 110_000, 120_000, reserve));
        assert_eq!(mark_to_record(106_000, 106_250, 120_000, reserve), 136_250);
        // After the clock was set back, the mark stays where it was.
        assert_eq!(mark_to_record(50_000, 50_250, 120_000, reserve), 120_000);
    }

    #[test]
    fn the_registry_down_never_lets_a_holder_past_its_mark() {
        assert_eq!(ceiling_while_down(WhenDown::KeepToMark, 12_000, 10_000), Some(10_000));
        assert_eq!(ceiling_while_down(WhenDown::KeepToMark, 9_000, 10_000), Some(9_000));
        assert_eq!(ceiling_while_down(WhenDown::Stop, 9_000, 10_000), None);
    }
}
