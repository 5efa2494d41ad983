//! The composite faults: sequences of events that line up the rare moments the rarest guards
//! cover, each named by the guard (or finding) it is for. `schedule` draws some of them among
//! the weighted faults, and splices the others in after every other draw (`splice_drawn`).
//! Each is a plain function of a random stream: no state of the world, only events, so that a
//! shrunk schedule replays it exactly.

use super::{Config, Event, Kind, PromoStep, RecStep, Target, MAX_CLOCK_SKEW_MS, TICK_MS};
use crate::rng::Rng;

/// Whether `floor_ahead_lowering`'s promotion comes once its lowering would be dated (the
/// clock within the skew of its date), or before.
#[derive(Clone, Copy)]
pub(super) enum Dating {
    Dated,
    Undated,
}

/// F7's other half at a restart (`standby-readings-undated`): calls borrow to the lead bound,
/// so that the record file holds a ceiling far ahead of the clock; the clock jumps while the
/// file is full, the jump's ceilings logged and never written to it, and is set back; the
/// primary restarts cleanly (shared memory new, no crash recovery): its start record is the
/// file's ceiling, below the jump's, and dated by a standby more than `max_clock_skew_ms`
/// ahead of its clock. A standby whose replay, and WAL receiver, lag behind reads the clock
/// of a second jump while that start record is still on its way; it is cut off and promoted
/// once the reading is older than the skew, before the clock reaches the start record's
/// date: the promotion replays the start record, which must not drop that reading.
pub(super) fn restart_in_flight(rng: &mut Rng, gap_ticks: u32, out: &mut Vec<Event>) {
    let standby = rng.below(2) as u8;
    out.extend(borrow_to_the_lead_bound(rng, gap_ticks));
    // The standby catches up with the bursts' commits, then falls behind.
    out.push(Event { gap_ticks: 2 + rng.below(6) as u32, kind: Kind::SlowReplay { standby, ticks: 200 } });
    let ahead = rng.range(3_000, 15_000);
    let lasts = 1 + rng.below(4) as u32;
    out.push(Event { gap_ticks: 0, kind: Kind::Enospc { target: Target::Primary, ticks: lasts + 1 } });
    out.push(Event { gap_ticks: 0, kind: Kind::ClockStep { delta_ms: ahead } });
    out.push(Event { gap_ticks: lasts, kind: Kind::ClockStep { delta_ms: -ahead } });
    // Once the file can be written again.
    out.push(Event {
        gap_ticks: 2 + rng.below(2) as u32,
        kind: Kind::CleanRestart { target: Target::Primary },
    });
    let ahead = rng.range(3_000, 15_000);
    out.push(Event { gap_ticks: 1 + rng.below(3) as u32, kind: Kind::ClockStep { delta_ms: ahead } });
    let bare = Kind::BareIds { claims: 1 + rng.below(20) as u32 };
    out.push(Event { gap_ticks: rng.below(2) as u32, kind: bare });
    out.push(Event { gap_ticks: 0, kind: Kind::ClockStep { delta_ms: -ahead } });
    out.push(Event { gap_ticks: rng.below(6) as u32, kind: Kind::Partition { standby, ticks: 100 } });
    out.push(Event {
        gap_ticks: 11 + rng.below(10) as u32,
        kind: Kind::Failover { standby, power: rng.chance(50), crash: None },
    });
}

/// F13's class at a promotion (`promotion-guard-logged`): a failover cut by a kill -9 at the
/// end of recovery, and the promoted server's record file full from its worker's first run:
/// each run of the promotion logs its guard, fails to write it, exits, and runs again a second
/// later. The old primary comes back as its standby (re-cloned within 3 s) and lags; the clock
/// jumps while two runs log their guards, the standby cut off meanwhile, and is set back before
/// the next run (every standby replaying: the standby reads the jump as it replays the first of
/// the two); the file can be written again, and the next run's guard, from the clock set back,
/// is the one published. The standby, cut off again at once, still lacks it when the clock
/// jumps a second time while the new primary issues: set back, the standby reads that jump as
/// it replays the second guard of the first jump, and is cut off again until the guard run
/// again, were it below the one logged before, would be dated (the promotion's bound less
/// `reserve_ms` after it was written); then it receives that guard, not the second jump's
/// ceilings, and is promoted, the primary lost. The promotion replays the guard run again,
/// which must not drop the reading of the second jump.
pub(super) fn guard_run_again(rng: &mut Rng, gap_ticks: u32, cfg: &Config, out: &mut Vec<Event>) {
    // The promoted standby's lead, the larger of the pair's.
    let lead_ms = cfg.standby_lead_ms as i64;
    let standby = rng.below(2) as u8;
    let crash = Some((PromoStep::EndOfRecovery, false));
    out.push(Event { gap_ticks, kind: Kind::Failover { standby, power: rng.chance(50), crash } });
    // Its worker runs the promotion at the next tick, then every 20 ticks: runs 5 and 6 (ticks
    // 81 and 101) still fail, run 7 (tick 121) writes its guard.
    let full = 102 + rng.below(19) as u32;
    out.push(Event { gap_ticks: 0, kind: Kind::Enospc { target: Target::Primary, ticks: full } });
    // Tick 62: the old primary re-cloned and streaming (it restarts within 3 s).
    out.push(Event { gap_ticks: 62, kind: Kind::SlowReplay { standby, ticks: 600 } });
    let ahead = rng.range(3_000, 15_000);
    out.push(Event { gap_ticks: 0, kind: Kind::ClockStep { delta_ms: ahead } });
    // Cut off from tick 80 to 102: runs 5 and 6 log their guards during the jump.
    out.push(Event { gap_ticks: 18, kind: Kind::Partition { standby, ticks: 22 } });
    out.push(Event { gap_ticks: 22, kind: Kind::SetBackOwingGuard { delta_ms: -ahead } });
    // Cut off again until the second set-back. Run 7 (tick 121) writes its guard; a second
    // later the new primary's calls issue (commits the standby will receive after the guard).
    let burst_gap = 39 + rng.below(3) as u32;
    let bare_gap = 1 + rng.below(2) as u32;
    let cut = burst_gap + 1 + bare_gap;
    out.push(Event { gap_ticks: 0, kind: Kind::Partition { standby, ticks: cut } });
    let burst = Kind::Burst { claims: 20 + rng.below(30) as u32, max_batch_ms: 1 + rng.below(100) as u32 };
    out.push(Event { gap_ticks: burst_gap, kind: burst });
    // The guard run again (tick 121) is dated `lead_ms + 1` plus the skew after it was
    // written; replayed sooner it is undated, and drops nothing. The second set-back comes 22
    // ticks or so after it; the standby is cut off until the rest has passed. The second jump
    // lies above what the promoted standby's clock will read then, plus its bound.
    let wait_ticks =
        ((lead_ms + 1 + MAX_CLOCK_SKEW_MS as i64 + 300 - 22 * TICK_MS).max(TICK_MS) / TICK_MS) as u32;
    let ahead = 2 * lead_ms + TICK_MS * i64::from(wait_ticks) + rng.range(3_000, 15_000);
    out.push(Event { gap_ticks: 1, kind: Kind::ClockStep { delta_ms: ahead } });
    let bare = Kind::BareIds { claims: 1 + rng.below(20) as u32 };
    out.push(Event { gap_ticks: bare_gap, kind: bare });
    out.push(Event { gap_ticks: 0, kind: Kind::ClockStep { delta_ms: -ahead } });
    out.push(Event { gap_ticks: 0, kind: Kind::Partition { standby, ticks: wait_ticks } });
    // Connected again for a tick or two: it receives the guard run again and the commits
    // after it, not yet the jump's ceilings.
    out.push(Event {
        gap_ticks: wait_ticks + rng.below(2) as u32,
        kind: Kind::Failover { standby, power: rng.chance(50), crash: None },
    });
}

/// F10's second form and F12 (`worker-start-file-lead`, `recovery-written-lead`): a record file
/// left with a larger lead than the last WAL record and the standby know of, and a restart that
/// takes it. The standby's own `max_lead_ms` must be the smaller one too, so first a history:
/// the primary's setting lowered by a reload, a switchover, and the old primary held down (its
/// WAL disk full) until it is re-cloned, as a standby with that smaller setting, from a new
/// primary whose larger lead is no longer in force. The new primary borrows to its lead bound,
/// and a reload lowers its setting while the ceiling is far ahead (the lead kept). Half the
/// time (F12) the first renewal after it is cut by a kill -9 between its WAL record and its
/// file write, as a server of 0.8.x recorded it (this version writes the file first), and the
/// server starts on this version: crash recovery writes that record, with the kept lead, to the
/// file; the restart keeps that lead, and its start record's fdatasync stalls while the old
/// primary is re-cloned from it, cut off, and the power lost. Else (F10) calls borrow under the
/// kept lead, so that the file carries it; the clock jumps to within the smaller bound of the ceiling (the kept
/// lead spent, no renewal yet) and the old primary is re-cloned; a kill -9, whose restart keeps
/// no lead and logs its start record with the smaller one, and whose file write stalls; the
/// clock set back while the standby replays that record, the standby cut off, and a clean
/// restart, which must not find the larger lead in the file, or a power loss that takes the
/// stalled write, after which the standby must know the larger lead (F16). Then calls borrow,
/// and the standby is promoted.
pub(super) fn lead_lost_at_restart(rng: &mut Rng, gap_ticks: u32, cfg: &Config, out: &mut Vec<Event>) {
    let standby = rng.below(2) as u8;
    let small = 500;
    out.push(Event { gap_ticks, kind: Kind::LowerLead { new_ms: small, restart: false } });
    out.push(Event { gap_ticks: 1 + rng.below(3) as u32, kind: Kind::Switchover { standby, crash: None } });
    let hold_at = out.len();
    out.push(Event { gap_ticks: 0, kind: Kind::WalFull { target: Target::Standby(standby), ticks: 0 } });
    let mut elapsed = 0u32;
    fn push(out: &mut Vec<Event>, elapsed: &mut u32, gap_ticks: u32, kind: Kind) {
        *elapsed += gap_ticks;
        out.push(Event { gap_ticks, kind });
    }
    // Past the old primary's restart (within 3 s of the switchover), so that it waits for room.
    for event in borrow_to_the_lead_bound(rng, 61) {
        push(out, &mut elapsed, event.gap_ticks, event.kind);
    }
    push(out, &mut elapsed, 0, Kind::LowerLead { new_ms: small, restart: false });
    let stall = Kind::DiskStall { ms: rng.range(3_000, 8_000) };
    if rng.chance(50) {
        // F12
        let crash = Kind::CrashAtStep { step: RecStep::OlderVersionAfterLogWal, power: false };
        push(out, &mut elapsed, 0, crash);
        push(out, &mut elapsed, 0, stall);
        let burst =
            Kind::Burst { claims: 20 + rng.below(30) as u32, max_batch_ms: 1_000 + rng.below(3_000) as u32 };
        push(out, &mut elapsed, 1, burst);
        // The renewal at the next tick, the restart a tick later; the old primary re-cloned after.
        let hold = elapsed + 3 + rng.below(3) as u32;
        out[hold_at].kind = Kind::WalFull { target: Target::Standby(standby), ticks: hold };
        let gap = hold - elapsed + 1 + rng.below(3) as u32;
        push(out, &mut elapsed, gap, Kind::Partition { standby, ticks: 100 });
        push(
            out,
            &mut elapsed,
            rng.below(2) as u32,
            Kind::Kill { target: Target::Primary, power: true, restart_after_ticks: 0 },
        );
    } else {
        for event in borrow_to_the_lead_bound(rng, 1) {
            push(out, &mut elapsed, event.gap_ticks, event.kind);
        }
        let lead = cfg.standby_lead_ms as i64;
        let reserve = cfg.reserve_ms as i64;
        let rem = rng.range(reserve / 2 + 250, small as i64 + reserve);
        let jump = (lead + 1 + reserve - rem).max(100);
        push(out, &mut elapsed, 0, Kind::ClockStep { delta_ms: jump });
        push(out, &mut elapsed, 0, stall);
        // The worker drops its kept lead at its next tick; the old primary re-cloned after.
        let hold = elapsed + 2;
        out[hold_at].kind = Kind::WalFull { target: Target::Standby(standby), ticks: hold };
        push(
            out,
            &mut elapsed,
            2,
            Kind::Kill { target: Target::Primary, power: false, restart_after_ticks: 0 },
        );
        let back = rng.range(
            small as i64 + reserve - rem + 300,
            (lead - small as i64 - 600).max(small as i64 + reserve - rem + 400),
        );
        push(out, &mut elapsed, 1, Kind::ClockStep { delta_ms: -back });
        push(out, &mut elapsed, 0, Kind::Partition { standby, ticks: 100 });
        // A power loss takes the start record's stalled write (F16), a clean restart keeps it.
        let restart = if rng.chance(50) {
            Kind::Kill { target: Target::Primary, power: true, restart_after_ticks: 0 }
        } else {
            Kind::CleanRestart { target: Target::Primary }
        };
        push(out, &mut elapsed, rng.below(2) as u32, restart);
    }
    for event in borrow_to_the_lead_bound(rng, 2) {
        push(out, &mut elapsed, event.gap_ticks, event.kind);
    }
    push(
        out,
        &mut elapsed,
        1 + rng.below(4) as u32,
        Kind::Failover { standby, power: rng.chance(50), crash: None },
    );
}

/// F13's first form at a restart (`lower-ceiling-floor-wait`): a standby's replay falls
/// behind; the clock jumps while the primary issues bare IDs, and is set back, the jump's
/// ceiling kept (IDs were issued up there), more than `max_lead_ms` ahead of the clock. The
/// primary restarts cleanly: its floor lies there, and calls are refused until the clock comes
/// within `max_lead_ms` of it. The clock jumps a second time for a tick, its renewal's fdatasync
/// stalled past the set-back (no call issues up there), and the standby is cut off at once: the
/// worker's next tick finds a ceiling far ahead of the clock and nothing issued since the
/// restart, and a lowering held at the floor would date itself (its ceiling less `reserve_ms`)
/// up to the floor's lead later than it was written. Calls issue again at the floor; the clock
/// jumps a third time while the primary issues, and is set back as the standby, connected
/// again, reads it as it replays a record older than the lowering. It receives the lowering and
/// the commits after it, not the third jump's ceilings, is cut off, and is promoted, the
/// primary lost, once the clock has reached the lowering's date less the skew (sooner, it is
/// undated and drops nothing not yet received), while the reading still lies more than the skew
/// before that date: the promotion must keep it.
///
/// `Dating::Undated` is the same history with the promotion before that date less the skew
/// (`standby-readings-undated`). Where it fails a mutant, the lowering is written during the
/// third jump, the second's ceiling still further ahead: `reserve_ms` ahead of the jumped
/// clock, it lies ahead of the standby's clock by more than the skew once the clock is set
/// back, says no date, and the reading taken after it was written, not yet received, must
/// stay.
pub(super) fn floor_ahead_lowering(
    rng: &mut Rng,
    gap_ticks: u32,
    cfg: &Config,
    dating: Dating,
    out: &mut Vec<Event>,
) {
    let standby = rng.below(2) as u8;
    // The primary's lead at most the standbys' (a primary promoted from one has theirs).
    let lead_ms = cfg.standby_lead_ms as i64;
    let latency_ticks = (cfg.max_disk_latency_ms / TICK_MS) as u32 + 1;
    out.push(Event { gap_ticks, kind: Kind::SlowReplay { standby, ticks: 800 } });
    // Bare IDs once the jump's renewal is published: its ceiling stays.
    let first = lead_ms + rng.range(1_500, 4_000);
    out.push(Event { gap_ticks: rng.below(2) as u32, kind: Kind::ClockStep { delta_ms: first } });
    let bare = Kind::BareIds { claims: 5 + rng.below(15) as u32 };
    out.push(Event { gap_ticks: 1 + latency_ticks, kind: bare });
    out.push(Event { gap_ticks: 1, kind: bare });
    out.push(Event { gap_ticks: 0, kind: Kind::ClockStep { delta_ms: -first } });
    let restart_gap = 2 + rng.below(2) as u32;
    out.push(Event { gap_ticks: restart_gap, kind: Kind::CleanRestart { target: Target::Primary } });
    // Once its start record is written: the second jump, one tick, its renewal stalled.
    let stall_ms = rng.range(60, 250);
    out.push(Event { gap_ticks: 10, kind: Kind::DiskStall { ms: stall_ms } });
    let second = first + rng.range(1_500, 6_000);
    out.push(Event { gap_ticks: 0, kind: Kind::ClockStep { delta_ms: second } });
    out.push(Event { gap_ticks: 1, kind: Kind::ClockStep { delta_ms: -second } });
    let since = restart_gap + 11;
    // Ticks after the first set-back: the lowering's date lies about `first` after it (less
    // the jump's wait, plus twice a recording's latency); the third set-back more than the
    // skew before it, the failover after it.
    let jump_ticks = 3 + latency_ticks;
    let (reading_ticks, failover_ticks) = match dating {
        Dating::Dated => (
            ((first - 1_000 - rng.range(0, 300)) / TICK_MS) as u32,
            ((first + 2 * cfg.max_disk_latency_ms + 100) / TICK_MS) as u32,
        ),
        // The promotion 0.6 to 0.9 s before the date less the skew, the reading a second
        // before the promotion (the burst and the lowering come first, whatever that leaves).
        Dating::Undated => {
            let failover_ticks =
                ((first - MAX_CLOCK_SKEW_MS as i64 - 600 - rng.range(0, 300)) / TICK_MS) as u32;
            (failover_ticks.saturating_sub(20), failover_ticks)
        }
    };
    let burst_gap = reading_ticks.saturating_sub(since + jump_ticks + 1).max(1);
    let cut = burst_gap + 1 + jump_ticks;
    out.push(Event { gap_ticks: 0, kind: Kind::Partition { standby, ticks: cut } });
    // Commits after the lowering, so that the standby can receive it without what follows.
    let burst = Kind::Burst { claims: 20 + rng.below(30) as u32, max_batch_ms: 1 + rng.below(20) as u32 };
    out.push(Event { gap_ticks: burst_gap, kind: burst });
    // The third jump lies above what the promoted standby's clock will read, plus its bound.
    let wait_ms = TICK_MS * i64::from(failover_ticks.saturating_sub(since + cut) + jump_ticks);
    let third = lead_ms + wait_ms + rng.range(3_000, 10_000);
    out.push(Event { gap_ticks: 1, kind: Kind::ClockStep { delta_ms: third } });
    let bare = Kind::BareIds { claims: 1 + rng.below(20) as u32 };
    out.push(Event { gap_ticks: jump_ticks, kind: bare });
    out.push(Event { gap_ticks: 0, kind: Kind::ClockStep { delta_ms: -third } });
    let receive = 6 + rng.below(10) as u32;
    out.push(Event { gap_ticks: receive, kind: Kind::Partition { standby, ticks: 400 } });
    let left = failover_ticks.saturating_sub(since + cut + receive).max(1);
    out.push(Event { gap_ticks: left, kind: Kind::Failover { standby, power: rng.chance(50), crash: None } });
}

/// F13's class at a worker's start (`worker-start-logged`): the reservation worker restarted with
/// shared memory kept, after renewals whose file write failed. The two clocks as far apart as the
/// skew allows (the standby's behind), a standby replaying slowly, a call wants IDs up to the lead
/// bound: the worker's next tick records the ceiling there. The clock then jumps while the
/// primary's record file is full, for two to four ticks (and the disk's latency): the jump's
/// ceilings are logged and never published, and the standby, replaying behind, has not replayed
/// them all when the clock is set back (every standby replaying, each reads the jump as it replays
/// its next ceiling's record). The worker exits at that moment and is started again a second later:
/// its start record is the higher of the ceiling published before the jump and the last one logged,
/// and the published one would be a lowering on a standby, dated later than it was written, by
/// nearly the lead bound less that second. The standby, cut off just before that start record,
/// reads the clock of a second jump (the primary issuing up there on every shard) as it replays one
/// of the first jump's ceilings, with the start record not yet received; it receives it, and some
/// of the commits after it but not the second jump's ceiling, for a while after the set-back, and
/// is cut off until the start record would be dated (its ceiling less `reserve_ms`, within the skew
/// of the standby's clock); then it is promoted, the primary lost. The promotion replays the start
/// record, which must not drop the reading of the second jump. Its times come from the seed's
/// configuration (the lead, the disk's latency): with a lead of one second the start comes too late
/// to be misdated.
pub(super) fn worker_restart_in_flight(rng: &mut Rng, gap_ticks: u32, cfg: &Config, out: &mut Vec<Event>) {
    let standby = rng.below(2) as u8;
    let sync_ticks = sync_ticks(cfg);
    out.push(Event { gap_ticks, kind: Kind::SkewApart { standby } });
    out.push(Event { gap_ticks: 0, kind: Kind::SlowReplay { standby, ticks: 600 } });
    // Calls ask for up to the lead bound: the worker's next tick records the ceiling there.
    let wants = Kind::Burst { claims: 12 + rng.below(10) as u32, max_batch_ms: cfg.primary_lead_ms as u32 };
    out.push(Event { gap_ticks: 0, kind: wants });
    let jump_ticks = sync_ticks + 2 + rng.below(3) as u32;
    out.push(Event { gap_ticks: 1, kind: Kind::Enospc { target: Target::Primary, ticks: jump_ticks + 1 } });
    let ahead = rng.range(3_000, 15_000);
    out.push(Event { gap_ticks: 0, kind: Kind::ClockStep { delta_ms: ahead } });
    out.push(Event { gap_ticks: jump_ticks, kind: Kind::ClockStep { delta_ms: -ahead } });
    out.push(Event { gap_ticks: 0, kind: Kind::WorkerExit { target: Target::Primary } });
    // Started again 20 ticks later, it records at its start (then, for the calls, a renewal).
    // The standby is cut off a few ticks before, until the second set-back.
    let before = 2 + rng.below(3) as u32;
    let cut = before + 2 + 3 * sync_ticks;
    out.push(Event { gap_ticks: 20 - before, kind: Kind::Partition { standby, ticks: cut } });
    // Commits after the start record (and the renewal): what the standby may receive with it.
    let burst = Kind::Burst { claims: 20 + rng.below(30) as u32, max_batch_ms: 1 + rng.below(50) as u32 };
    out.push(Event { gap_ticks: before + 1 + 2 * sync_ticks, kind: burst });
    // Connected again after the second set-back for `connected` ticks, then cut off until the
    // start record would be dated: the ceiling published before the jump, `max_lead_ms + 1`
    // ahead of the clock with `reserve_ms` taken off, the clocks the skew apart.
    let connected = 8 + rng.below(17) as u32;
    let set_back_at = jump_ticks + 20 + 2 + 3 * sync_ticks;
    let dated_at = ((cfg.primary_lead_ms as i64 + 1) / TICK_MS) as u32 + 1;
    let cut_off = dated_at.saturating_sub(set_back_at + connected).max(1) + rng.below(4) as u32;
    // The second jump lies above what the promoted standby's clock will read then, plus its
    // bound.
    let ahead =
        2 * cfg.standby_lead_ms as i64 + TICK_MS * i64::from(connected + cut_off) + rng.range(3_000, 15_000);
    out.push(Event { gap_ticks: 0, kind: Kind::ClockStep { delta_ms: ahead } });
    // Once the jump's ceiling is published, calls issue up there on every shard (no shard
    // commits after the set-back, so nothing flushes past what the standby may receive).
    let burst = Kind::Burst { claims: 20 + rng.below(30) as u32, max_batch_ms: 1 + rng.below(50) as u32 };
    out.push(Event { gap_ticks: sync_ticks + 1, kind: burst });
    out.push(Event { gap_ticks: 0, kind: Kind::ClockStep { delta_ms: -ahead } });
    out.push(Event { gap_ticks: connected, kind: Kind::Partition { standby, ticks: 200 } });
    out.push(Event {
        gap_ticks: cut_off,
        kind: Kind::Failover { standby, power: rng.chance(50), crash: None },
    });
}

/// F13's second form (`renewal-below-logged-held`): a renewal below the last ceiling logged. A
/// standby replays slowly; the clock jumps, and the jump's renewal, its fdatasync stalled, is
/// recorded and published once the clock is set back (nothing issued up there); the primary's
/// record file fills at the set-back, so that the worker's lowering is published and, its file
/// write failing, never logged. Once the disk has room, calls want IDs up to the lead
/// bound: the renewal for them lies below the jump's last ceiling logged, and with their
/// headroom it would be dated (its ceiling less `reserve_ms`) later than it was written. The
/// standby is cut off as it is written; the clock jumps a second time while the primary issues
/// bare IDs, and is set back, the standby reading that jump as it replays an older record; it
/// receives the renewal and the commits after it, not the second jump's ceilings, and is cut off
/// until the renewal would be dated, then promoted, the primary lost. The promotion replays the
/// renewal, which must not drop the reading of the second jump.
pub(super) fn renewal_below_logged(rng: &mut Rng, gap_ticks: u32, cfg: &Config, out: &mut Vec<Event>) {
    let standby = rng.below(2) as u8;
    let sync_ticks = sync_ticks(cfg);
    out.push(Event { gap_ticks, kind: Kind::SlowReplay { standby, ticks: 600 } });
    let ahead = rng.range(3_000, 15_000);
    out.push(Event { gap_ticks: 0, kind: Kind::ClockStep { delta_ms: ahead } });
    // The jump's renewal stalls past the set-back: its ceiling is recorded, and published only
    // once the clock is back, so that nothing is issued up there.
    let stall_ms = rng.range(150, 400);
    out.push(Event { gap_ticks: 0, kind: Kind::DiskStall { ms: stall_ms } });
    // The record file full from the set-back until after the worker's lowering (at its first
    // tick once the stalled renewal is published).
    let back = 1 + rng.below(2) as u32;
    let full = (stall_ms / TICK_MS) as u32 + 2 + rng.below(3) as u32;
    out.push(Event { gap_ticks: back, kind: Kind::Enospc { target: Target::Primary, ticks: full } });
    out.push(Event { gap_ticks: 0, kind: Kind::ClockStep { delta_ms: -ahead } });
    // Once the disk has room: calls ask for up to the lead bound.
    let wants = Kind::Burst { claims: 12 + rng.below(10) as u32, max_batch_ms: cfg.primary_lead_ms as u32 };
    out.push(Event { gap_ticks: full + 1, kind: wants });
    // The worker records their renewal at its next tick: cut off until the second set-back.
    let jump_ticks = sync_ticks + 1;
    let cut = 1 + sync_ticks + 1 + jump_ticks;
    out.push(Event { gap_ticks: 0, kind: Kind::Partition { standby, ticks: cut } });
    // Commits after the renewal: what the standby may receive with it.
    let burst = Kind::Burst { claims: 20 + rng.below(30) as u32, max_batch_ms: 1 + rng.below(50) as u32 };
    out.push(Event { gap_ticks: 1 + sync_ticks, kind: burst });
    // Connected again after the second set-back for `connected` ticks, then cut off until the
    // renewal would be dated: `max_lead_ms + 1` ahead of the clock with `reserve_ms` taken off.
    let connected = 2 + rng.below(8) as u32;
    let dated_at = ((cfg.primary_lead_ms as i64 + 1) / TICK_MS) as u32 + 1;
    let cut_off = dated_at.saturating_sub(cut + connected).max(1) + rng.below(4) as u32;
    // The second jump lies above what the promoted standby's clock will read then, plus its
    // bound.
    let ahead =
        2 * cfg.standby_lead_ms as i64 + TICK_MS * i64::from(connected + cut_off) + rng.range(3_000, 15_000);
    out.push(Event { gap_ticks: 1, kind: Kind::ClockStep { delta_ms: ahead } });
    let bare = Kind::BareIds { claims: 1 + rng.below(20) as u32 };
    out.push(Event { gap_ticks: jump_ticks, kind: bare });
    out.push(Event { gap_ticks: 0, kind: Kind::ClockStep { delta_ms: -ahead } });
    out.push(Event { gap_ticks: connected, kind: Kind::Partition { standby, ticks: 200 } });
    out.push(Event {
        gap_ticks: cut_off,
        kind: Kind::Failover { standby, power: rng.chance(50), crash: None },
    });
}

/// Ticks a recording's fdatasync may take, at the seed's largest disk latency.
fn sync_ticks(cfg: &Config) -> u32 {
    ((cfg.max_disk_latency_ms + TICK_MS - 1) / TICK_MS) as u32
}

/// Bursts of claims, batches large enough that calls borrow time up to the lead bound: the
/// first waits at the ceiling, the worker's next tick records up to `max_lead_ms + 1 +
/// reserve_ms` ahead for it, and the bursts of the ticks after issue up to the lead bound.
pub(super) fn borrow_to_the_lead_bound(rng: &mut Rng, gap_ticks: u32) -> Vec<Event> {
    // Batches of up to seconds each: a claim waits at the ceiling with its whole batch, and
    // the worker records past it at its next tick, so each tick takes the IDs up by a batch.
    let burst =
        Kind::Burst { claims: 20 + rng.below(30) as u32, max_batch_ms: 1_000 + rng.below(3_000) as u32 };
    (0..3 + rng.below(4))
        .map(|k| Event { gap_ticks: if k == 0 { gap_ticks } else { 1 }, kind: burst })
        .collect()
}

/// F1's failover: the clock runs ahead while the primary issues and the standby replays behind
/// it, is set back (the standby reads its clock as it replays), then the standby is cut off and
/// the primary lost before the newest records reach it. Only its clock readings cover the IDs
/// issued under them. Half the time the two clocks are as far apart as the skew allows (the
/// readings' skew term, `standby-floor-skew`), and half the time the standby restarts between
/// the set-back and the failover (its readings from its file, `standby-readings-restart`).
pub(super) fn clock_readings_failover(rng: &mut Rng, gap_ticks: u32, out: &mut Vec<Event>) {
    let ahead = rng.range(3_000, 15_000);
    let standby = rng.below(2) as u8;
    let burst = Kind::Burst { claims: 10 + rng.below(30) as u32, max_batch_ms: 1 + rng.below(100) as u32 };
    if rng.chance(50) {
        // The last IDs before the set-back at the lead bound, the standby's clock the skew behind.
        out.push(Event { gap_ticks, kind: Kind::SkewApart { standby } });
        out.push(Event { gap_ticks: 0, kind: Kind::ClockStep { delta_ms: ahead } });
        let gap_ticks = rng.below(4) as u32;
        out.extend(borrow_to_the_lead_bound(rng, gap_ticks));
    } else {
        out.push(Event { gap_ticks, kind: Kind::ClockStep { delta_ms: ahead } });
        for _ in 0..1 + rng.below(4) {
            out.push(Event { gap_ticks: rng.below(4) as u32, kind: burst });
        }
    }
    out.push(Event { gap_ticks: 0, kind: Kind::ClockStep { delta_ms: -ahead } });
    cut_off_then_failover(rng, standby, (2, 20), out);
}

/// The standby cut off at once, restarted half the time (its readings then from its file),
/// and promoted `min + below(spread)` ticks later, the primary lost.
fn cut_off_then_failover(rng: &mut Rng, standby: u8, (min, spread): (u32, u64), out: &mut Vec<Event>) {
    out.push(Event { gap_ticks: 0, kind: Kind::Partition { standby, ticks: 100 } });
    if rng.chance(50) {
        let kind =
            Kind::Kill { target: Target::Standby(standby), power: rng.chance(50), restart_after_ticks: 0 };
        out.push(Event { gap_ticks: rng.below(3) as u32, kind });
    }
    out.push(Event {
        gap_ticks: min + rng.below(spread) as u32,
        kind: Kind::Failover { standby, power: rng.chance(50), crash: None },
    });
}

/// F7's failover (`standby-readings-received`): the clock runs ahead while the primary issues,
/// and the standby's replay falls behind; the clock is set back, the primary lowers its
/// ceiling, and the standby receives that lowering without replaying it; the clock runs ahead
/// again while the primary issues, and is set back (the standby, still behind, reads the fast
/// clock as it replays a record older than the lowering); the standby is cut off at once and
/// the primary lost: the promotion replays the lowering, and must not drop that reading. Half
/// the time the standby restarts before the failover (the reading then in its file's floor).
/// Half the composites are the other half's instead (`lowering_in_flight`).
pub(super) fn lagging_readings_failover(rng: &mut Rng, gap_ticks: u32, out: &mut Vec<Event>) {
    let standby = rng.below(2) as u8;
    let burst = Kind::Burst { claims: 10 + rng.below(30) as u32, max_batch_ms: 1 + rng.below(100) as u32 };
    out.push(Event { gap_ticks, kind: Kind::SlowReplay { standby, ticks: 200 } });
    if rng.chance(50) {
        lowering_in_flight(rng, standby, burst, out);
        return;
    }
    jump_and_back(rng, 0, burst, out);
    // The primary's worker lowers its ceiling at its next ticks; the standby receives it.
    let gap_ticks = 2 + rng.below(6) as u32;
    jump_and_back(rng, gap_ticks, burst, out);
    cut_off_then_failover(rng, standby, (1, 10), out);
}

/// A clock jump of 3 to 15 s ahead, one to four `burst`s while it lasts, and the clock set
/// back: F7's composites' jumps.
fn jump_and_back(rng: &mut Rng, gap_ticks: u32, burst: Kind, out: &mut Vec<Event>) {
    let ahead = rng.range(3_000, 15_000);
    out.push(Event { gap_ticks, kind: Kind::ClockStep { delta_ms: ahead } });
    for _ in 0..1 + rng.below(4) {
        out.push(Event { gap_ticks: rng.below(4) as u32, kind: burst });
    }
    out.push(Event { gap_ticks: 0, kind: Kind::ClockStep { delta_ms: -ahead } });
}

/// F7's other half (`standby-readings-in-flight`): as `lagging_readings_failover`, but the
/// second jump comes right after the primary lowered its ceiling and issues only bare IDs (no
/// commit flushes the lowering), and its set-back reads the standby's clock while the lowering
/// is still on its way to it: its slow WAL receiver gets it a tick or more later, perhaps
/// without the jump's records after it, before it is cut off. The promotion comes once the
/// reading is more than `max_clock_skew_ms` old, and replays the lowering. Half the time
/// (F13's second form, `renewal-below-logged-held`) the first jump issues nothing and the
/// primary's record file is full from its set-back on: the lowering is published and, its file
/// write failing, never logged (the file comes first, F15's fix), and the "lowering" a standby
/// reads is the first renewal recorded after it, below the jump's last ceiling logged, with a
/// renewal's headroom. Half of those, calls borrow to the lead bound before the jump, and the
/// worker exits as the clock is set back (`worker-start-logged`): the record below is the
/// restarted worker's start record, and the second jump comes after it.
fn lowering_in_flight(rng: &mut Rng, standby: u8, burst: Kind, out: &mut Vec<Event>) {
    let full = rng.chance(50);
    let exits = full && rng.chance(50);
    if exits {
        out.extend(borrow_to_the_lead_bound(rng, 0));
    }
    if full {
        // The file comes before WAL (F15's fix): the jump's ceilings are recorded, nothing is
        // issued up there, and the file is full from the set-back, so that the lowering is
        // published and never logged, and the renewals after it lie below the jump's.
        let ahead = rng.range(3_000, 15_000);
        out.push(Event { gap_ticks: 0, kind: Kind::ClockStep { delta_ms: ahead } });
        let ticks = 2 + rng.below(6) as u32;
        out.push(Event {
            gap_ticks: 2 + rng.below(4) as u32,
            kind: Kind::Enospc { target: Target::Primary, ticks },
        });
        out.push(Event { gap_ticks: 0, kind: Kind::ClockStep { delta_ms: -ahead } });
    } else {
        jump_and_back(rng, 0, burst, out);
    }
    let mut gap_ticks = 2 + rng.below(5) as u32;
    if exits {
        out.push(Event { gap_ticks: 0, kind: Kind::WorkerExit { target: Target::Primary } });
        // Started again a second later (20 ticks), it records at its start.
        gap_ticks += 20;
    }
    // The worker lowers (or renews) at one of its next ticks (it may be recording).
    let ahead = rng.range(3_000, 15_000);
    out.push(Event { gap_ticks, kind: Kind::ClockStep { delta_ms: ahead } });
    let bare = Kind::BareIds { claims: 1 + rng.below(20) as u32 };
    out.push(Event { gap_ticks: rng.below(2) as u32, kind: bare });
    out.push(Event { gap_ticks: 0, kind: Kind::ClockStep { delta_ms: -ahead } });
    out.push(Event { gap_ticks: 1 + rng.below(8) as u32, kind: Kind::Partition { standby, ticks: 100 } });
    out.push(Event {
        gap_ticks: 6 + rng.below(10) as u32,
        kind: Kind::Failover { standby, power: rng.chance(50), crash: None },
    });
}

/// The promotion's bound at its edge (`promotion-bound-off-by-one`, `promotion-primary-lead`):
/// the two clocks exactly the skew apart, the primary issuing up to its lead bound, the standby
/// cut off, and the failover in that same millisecond. Half the time a failover comes first,
/// so that the standby with the larger `max_lead_ms` (the seeds whose standbys have one) is the
/// primary, and the old primary, back as its standby with the smaller, is the one promoted.
pub(super) fn failover_at_the_edge(rng: &mut Rng, gap_ticks: u32, out: &mut Vec<Event>) {
    let standby = rng.below(2) as u8;
    let gap_ticks = if rng.chance(50) {
        out.push(Event { gap_ticks, kind: Kind::Failover { standby, power: false, crash: None } });
        // The old primary re-cloned and streaming again (it restarts within 3 s).
        80
    } else {
        gap_ticks
    };
    out.push(Event { gap_ticks, kind: Kind::SkewApart { standby } });
    out.push(Event { gap_ticks: 0, kind: Kind::Partition { standby, ticks: 100 } });
    let gap_ticks = 1 + rng.below(3) as u32;
    out.extend(borrow_to_the_lead_bound(rng, gap_ticks));
    out.push(Event { gap_ticks: 0, kind: Kind::Failover { standby, power: rng.chance(50), crash: None } });
}
