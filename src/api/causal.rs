//! `snowflake_observe(id)`: causal order across servers. After it, every ID this server
//! issues, on every shard, is above `id`: a reply written after its post was seen gets an ID
//! above the post's, whatever the two servers' clocks say, as a hybrid logical clock takes in
//! a timestamp it receives. It raises the floor every claim already reads (the rules are
//! `generator::check_observe` and `generator::observe`), so issuing costs nothing more; the
//! call itself is a compare, one atomic maximum and one load when the reservation already
//! covers the ID (almost always: it runs `reserve_ms` ahead of the clock), and one wait for the
//! worker's fsync when it does not.

use super::{errors, preloaded_layout};
use crate::postgres::clock::{self, WallClock};
use crate::postgres::{reservation, shmem};
use pgrx::prelude::*;
use snowflake_core::generator::{self, Clock, Refusal};
use std::sync::atomic::Ordering::{Acquire, Relaxed};

/// Every later ID of this server, on every shard, is above `id` (an ID issued anywhere under
/// the same layout). Returns `id`. NULL observes nothing (a request without a causality
/// token). Refused (55000) when `id` is further ahead of this server's clock than
/// `snowflake_id.max_lead_ms`, and on a hot standby (25006); never lowers anything.
#[pg_extern(volatile, strict, parallel_safe)]
fn snowflake_observe(id: i64) -> i64 {
    const FUNCTION: &str = "snowflake_observe";
    let layout = preloaded_layout(FUNCTION);
    let parts = layout.decode(id).unwrap_or_else(|error| errors::layout_error(FUNCTION, error));
    // SAFETY: reads shared state under PostgreSQL's own locking.
    if unsafe { pg_sys::RecoveryInProgress() } {
        errors::during_recovery(FUNCTION);
    }
    let reservation = shmem::reservation().unwrap_or_else(|| errors::not_preloaded(FUNCTION));
    let policy = reservation::clock_policy_in_force(reservation);
    let floor = generator::check_observe(parts.time_part, &layout, policy, clock::wall_clock_unix_ms())
        .unwrap_or_else(|refusal| errors::observe_refused(FUNCTION, id, refusal));
    // The floor raised once the reservation is past it (durable: a restart resumes above it,
    // `generator::observe_step`); lowered meanwhile under it, the worker is asked again.
    let mut clock = WallClock::default();
    let mut budget_ms = policy.max_reservation_wait_ms;
    // Not before a promotion's guard is recorded: the worker may still move the floor, down
    // too after a clean switchover (`reservation::switchover`), and the observation must come
    // after that. The worker clears the flag (Release) once the guard is in place.
    while shmem::start_state().is_some_and(|start| start.promotion_guard_pending.load(Acquire)) {
        if budget_ms == 0 {
            let ceiling = reservation.ceiling.load(Relaxed);
            errors::observe_refused(FUNCTION, id, Refusal::NotReserved { time_part: floor, ceiling, policy });
        }
        clock.sleep_ms(1);
        budget_ms -= 1;
    }
    let step = || generator::observe_step(reservation, floor);
    if let Err((time_part, ceiling)) =
        reservation::forward_once_reserved(reservation, &mut budget_ms, &mut clock, step)
    {
        errors::observe_refused(FUNCTION, id, Refusal::NotReserved { time_part, ceiling, policy });
    }
    id
}

extension_sql!(
    r#"
/* Raising the floor moves every shard of the server, whoever issues it: up to the lead bound,
   where a busy shard waits. Granted to the roles that carry causality tokens (an application's,
   the mesh's apply role), not to PUBLIC (docs/security.md). */
REVOKE ALL ON FUNCTION snowflake_observe(bigint) FROM PUBLIC;
"#,
    name = "snowflake_observe_privileges",
    requires = [snowflake_observe]
);
