//! The generating functions of the SQL surface. Thin: checks, one claim, IDs out.
//!
//! All of them are `VOLATILE` (each call issues new IDs) and `PARALLEL SAFE`: the state is
//! in shared memory, which parallel workers share with their leader, so a worker issues IDs
//! exactly as its leader would. They raise:
//! 22004 for a NULL argument, 22023 for a shard outside `0..2^shard_bits-1` or a bad count,
//! 55000 when the library is not preloaded, the clock is past the policy's bounds or the
//! durable reservation is not keeping up, 25006 on a hot standby.

use crate::generator::{self, Claim, Refusal, Reservation, ShardState};
use crate::layout::Layout;
use crate::{clock::WallClock, errors, gucs, shmem};
use pgrx::prelude::*;
use std::sync::atomic::Ordering::Relaxed;

/// A shard ready to issue from.
struct OpenShard {
    layout: Layout,
    shard: u32,
    state: &'static ShardState,
    reservation: &'static Reservation,
}

/// The checks every generator makes before touching a shard, in the order an operator
/// would fix them.
#[inline]
fn open_shard(function: &'static str, shard: Option<i32>) -> OpenShard {
    let layout = gucs::preloaded_layout(function);
    let Some(shard) = shard else { errors::null_argument(function, "shard") };
    let shard = layout.check_shard(shard.into()).unwrap_or_else(|e| errors::layout_error(function, e));
    let (Some(state), Some(reservation)) = (shmem::shard(shard), shmem::reservation()) else {
        errors::not_preloaded(function)
    };
    // SAFETY: reads a flag; after the first `false` it is a plain load of a local variable.
    if unsafe { pg_sys::RecoveryInProgress() } {
        errors::during_recovery(function);
    }
    OpenShard { layout, shard, state, reservation }
}

/// Claims `count` consecutive IDs of a shard, or raises the refusal.
#[inline]
fn claim(function: &'static str, shard: Option<i32>, count: u64) -> (Layout, u32, Claim) {
    let open = open_shard(function, shard);
    let policy = gucs::clock_policy();
    let mut clock = WallClock::default();
    let result = generator::claim(open.state, open.reservation, count, &open.layout, policy, &mut clock);
    if clock.stepped_back() {
        open.state.clock_regressions.fetch_add(1, Relaxed);
    }
    match result {
        Ok(claim) => (open.layout, open.shard, claim),
        Err(refusal) => errors::refusal(function, open.shard, refusal),
    }
}

/// The next ID of `shard`: greater than every ID this server issued for it before.
/// The column default of a sharded primary key: `DEFAULT snowflake_nextval(3)`.
#[pg_extern(volatile, parallel_safe)]
fn snowflake_nextval(shard: Option<i32>) -> i64 {
    let (layout, shard, claim) = claim("snowflake_nextval", shard, 1);
    layout.id_of_counter(shard, claim.first)
}

/// The next ID of the shard named by `snowflake_id.shard` (55000 while it is unset).
#[pg_extern(volatile, parallel_safe, name = "snowflake_nextval")]
fn snowflake_nextval_of_default_shard() -> i64 {
    gucs::preloaded_layout("snowflake_nextval");
    let Some(shard) = gucs::default_shard() else { errors::shard_unset("snowflake_nextval") };
    snowflake_nextval(Some(shard))
}

/// `count` consecutive IDs of `shard`, increasing, claimed in one atomic step: no other
/// call's IDs interleave with them. At most `(max_lead_ms + 1) * IDs per ms` per call.
#[pg_extern(volatile, parallel_safe)]
fn snowflake_nextvals(shard: Option<i32>, count: Option<i32>) -> SetOfIterator<'static, i64> {
    const FUNCTION: &str = "snowflake_nextvals";
    let Some(count) = count else { errors::null_argument(FUNCTION, "count") };
    if count <= 0 {
        errors::count_not_positive(FUNCTION, count);
    }
    let (layout, shard, claim) = claim(FUNCTION, shard, count as u64);
    SetOfIterator::new((claim.first..=claim.last).map(move |counter| layout.id_of_counter(shard, counter)))
}

/// Makes every later ID of `shard` on this server greater than `id` (of any shard), like
/// `setval` for a sequence; never moves a shard back. Use it after restoring a dump or
/// moving a shard here from another server. Returns `id`. Refused (55000) when `id` is
/// further ahead of this server's clock than `snowflake_id.max_lead_ms`.
#[pg_extern(volatile, parallel_unsafe)]
fn snowflake_advance(shard: Option<i32>, id: Option<i64>) -> i64 {
    const FUNCTION: &str = "snowflake_advance";
    let Some(id) = id else { errors::null_argument(FUNCTION, "id") };
    let OpenShard { layout, shard, state, reservation } = open_shard(FUNCTION, shard);
    let first_allowed =
        layout.first_counter_above(shard, id).unwrap_or_else(|e| errors::layout_error(FUNCTION, e));
    let now = crate::clock::wall_clock_unix_ms();
    let policy = gucs::clock_policy();
    // First make the new position durable (the worker is asked to move the reservation past
    // it), then move the shard: a refused call leaves the shard where it was.
    let time_part = layout.counter_time_part(first_allowed);
    let mut clock = WallClock::default();
    let lead_ms = time_part.saturating_sub(layout.time_part(now).unwrap_or(0));
    if lead_ms <= policy.max_lead_ms {
        reservation.wanted.fetch_max(time_part + 1, Relaxed);
        generator::Clock::wake_worker(&mut clock, reservation);
        for _ in 0..ADVANCE_DURABLE_WITHIN_MS {
            if reservation.ceiling.load(Relaxed) > time_part {
                break;
            }
            generator::Clock::sleep_ms(&mut clock, 1);
        }
        let ceiling = reservation.ceiling.load(Relaxed);
        if ceiling <= time_part {
            errors::refusal(FUNCTION, shard, Refusal::NotReserved { time_part, ceiling, policy });
        }
    }
    if let Err(refusal) = generator::advance(&state.last_issued, first_allowed, &layout, policy, now) {
        errors::advance_refused(FUNCTION, shard, refusal);
    }
    id
}

/// How long `snowflake_advance` waits for the reservation to pass the advanced ID: long
/// enough that only a stalled worker (a failing disk, or none running) makes it fail.
const ADVANCE_DURABLE_WITHIN_MS: u32 = 5000;

extension_sql!(
    r#"
/* Moving a shard forward is an operator's act (after a restore or a move): not for PUBLIC. */
REVOKE ALL ON FUNCTION snowflake_advance(integer, bigint) FROM PUBLIC;
"#,
    name = "snowflake_advance_privileges",
    requires = [snowflake_advance]
);
