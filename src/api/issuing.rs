//! The generating functions of the SQL surface: checks, one claim, IDs out. The three
//! hottest enter through hand-written entries (`postgres::fmgr` holds their mechanics).
//!
//! All of them are `VOLATILE` (each call issues new IDs) and `PARALLEL SAFE`: the state is
//! in shared memory, which parallel workers share with their leader, so a worker issues IDs
//! exactly as its leader would. They raise:
//! 22004 for a NULL argument, 22023 for a shard outside `0..2^shard_bits-1` or a bad count,
//! 42501 for a shard outside the session's `snowflake_id.allowed_shards`,
//! 55000 for a shard outside the fence (`snowflake_id.shards`), when the library is not preloaded, the clock is past the policy's bounds or the
//! durable reservation is not keeping up, 25006 on a hot standby.

use super::{errors, preloaded_layout};
use crate::postgres::clock::{self, NoWaitClock, WallClock};
use crate::postgres::fence::{self, shared as shared_fence};
use crate::postgres::fmgr::{self, version_1_function_info};
use crate::postgres::registry::{self, shared::ClaimState};
use crate::postgres::{fixed_layout, horizon, reservation, settings, shmem};
use pgrx::prelude::*;
use snowflake_core::generator::{self, Claim, Clock, NoKeeper, Refusal, Reservation, ShardSlot};
use snowflake_core::horizon::Pending;
use snowflake_core::layout::{Layout, LayoutError};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

/// A shard ready to issue from: its number checked against the layout and the fence, its
/// slot in shared memory.
struct OpenShard {
    layout: Layout,
    shard: u32,
    slot: &'static ShardSlot,
    reservation: &'static Reservation,
    /// This backend's hold on the shard's horizon: it stays below the IDs its transaction claims.
    pending: Pending<'static>,
}

/// Why a shard cannot be issued from, in the order an operator would fix it.
enum Closed {
    NotPreloaded,
    NullShard,
    BadShard(LayoutError),
    /// This session's `snowflake_id.shards` refuses the shard.
    Fenced(u32),
    /// This session's `snowflake_id.allowed_shards` does not name the shard.
    NotAllowed(u32),
    /// This session's setting gives the shard, the server-wide fence does not (`fence::shared`):
    /// the worker has not applied the reload this session has, or this session has not yet
    /// applied the one the worker has (it does between statements).
    FencedServerWide(u32),
    InRecovery,
}

/// The checks every generator makes before touching a shard. Calls nothing in PostgreSQL
/// except through `in_recovery`, so the unguarded fast path can make the same checks.
#[inline(always)]
fn try_open_shard(shard: Option<i32>, in_recovery: impl FnOnce() -> bool) -> Result<OpenShard, Closed> {
    let reservation = shmem::reservation().ok_or(Closed::NotPreloaded)?;
    let layout = fixed_layout::get();
    let shard = layout.check_shard(shard.ok_or(Closed::NullShard)?.into()).map_err(Closed::BadShard)?;
    if !fence::session_allows(shard) {
        return Err(Closed::Fenced(shard));
    }
    if !fence::role::session_allows(shard) {
        return Err(Closed::NotAllowed(shard));
    }
    if !shared_fence::allows(shard) {
        return Err(Closed::FencedServerWide(shard));
    }
    let slot = shmem::slot(shard).ok_or(Closed::NotPreloaded)?;
    // Every process that runs SQL has one (its number is below MaxBackends).
    let pending = horizon::pending(shard).ok_or(Closed::NotPreloaded)?;
    if in_recovery() {
        return Err(Closed::InRecovery);
    }
    Ok(OpenShard { layout, shard, slot, reservation, pending })
}

/// The shard, or the error that says what to fix.
#[inline]
fn open_shard(function: &'static str, shard: Option<i32>) -> OpenShard {
    let mut clock = WallClock::default();
    let mut waited_ms = 0;
    let closed = loop {
        match try_open_shard(shard, in_recovery) {
            Ok(open) => return open,
            // Fenced for the lease, or by a registry that gave the shard to another: nothing to
            // wait for. (A shard not claimed yet is waited for, as a reload not yet applied.)
            Err(Closed::FencedServerWide(shard))
                if shared_fence::lease_lost_since().is_some()
                    || registry::refusal(shard).is_some_and(|view| view.state != ClaimState::NotYet) =>
            {
                server_fence_refusal(function, shard)
            }
            // The worker may not have applied the reload this session has (`reload_pending`).
            Err(Closed::FencedServerWide(shard)) if !reload_pending() => {
                if waited_ms >= settings::clock_policy().max_reservation_wait_ms {
                    if let Some(view) = registry::refusal(shard) {
                        errors::registry_refused(function, shard, view);
                    }
                    errors::fence_not_applied(function, shard, &shared_fence::text(), waited_ms);
                }
                clock.sleep_ms(1);
                waited_ms += 1;
            }
            Err(closed) => break closed,
        }
    };
    match closed {
        Closed::NotPreloaded => errors::not_preloaded(function),
        Closed::NullShard => errors::null_argument(function, "shard"),
        Closed::BadShard(error) => errors::layout_error(function, error),
        Closed::Fenced(shard) => errors::shard_fenced(function, shard, &fence::setting_text()),
        Closed::NotAllowed(shard) => errors::shard_not_allowed(function, shard, &fence::role::setting_text()),
        Closed::FencedServerWide(shard) => server_fence_refusal(function, shard),
        Closed::InRecovery => errors::during_recovery(function),
    }
}

/// The error of a shard the server-wide fence refuses: the lease's when it is lost (it closed
/// the fence for every shard), else the fence's.
#[cold]
fn server_fence_refusal(function: &'static str, shard: u32) -> ! {
    if let Some(since) = shared_fence::lease_refused_since() {
        errors::lease_lost(function, shard, since);
    }
    // A shard this server's setting gives, that the registry keeps closed.
    if fence::session_allows(shard) {
        if let Some(view) = registry::refusal(shard) {
            errors::registry_refused(function, shard, view);
        }
    }
    errors::shard_fenced(function, shard, &shared_fence::text())
}

/// Whether this backend has a reload to apply (it does so before its next statement). When
/// its setting gives a shard that the server-wide fence refuses, a pending reload means the
/// worker applied one this session has not yet, which moved the shard away: the call is
/// refused at once. Without one, the session has the newer setting (a reload that gave this
/// server the shard, which the worker applies within milliseconds): the call waits for the
/// worker, at most `snowflake_id.max_reservation_wait_ms`, as it waits for a reservation.
fn reload_pending() -> bool {
    // SAFETY: a flag set by this backend's SIGHUP handler, read as PostgreSQL reads it.
    unsafe { std::ptr::read_volatile(&raw const pg_sys::ConfigReloadPending) != 0 }
}

/// Set once this backend has seen recovery finished (see `in_recovery`).
static RECOVERY_FINISHED: AtomicBool = AtomicBool::new(false);

/// Whether this server is a hot standby (or still replaying WAL). Once a backend has seen
/// recovery finished it never starts again (PostgreSQL caches it the same way), so later
/// calls read a flag instead of crossing into PostgreSQL, which pgrx guards with a
/// `sigsetjmp` per call.
#[inline]
fn in_recovery() -> bool {
    if RECOVERY_FINISHED.load(Relaxed) {
        return false;
    }
    // SAFETY: reads shared state under PostgreSQL's own locking.
    let in_recovery = unsafe { pg_sys::RecoveryInProgress() };
    RECOVERY_FINISHED.store(!in_recovery, Relaxed);
    in_recovery
}

/// Claims `count` consecutive IDs of a shard, or raises the refusal.
#[inline]
fn claim(function: &'static str, shard: Option<i32>, count: u64) -> (Layout, u32, Claim) {
    let open = open_shard(function, shard);
    let policy = settings::clock_policy();
    let mut clock = WallClock::default();
    let result = generator::claim(
        open.slot,
        open.reservation,
        open.pending,
        count,
        &open.layout,
        policy,
        &mut clock,
        &mut reservation::Worker,
    );
    clock.count_step_back(open.slot);
    match result {
        // The fence again, now that the claim is made (see `fence::shared`): moved away
        // meanwhile, the claimed IDs are dropped (a gap in the shard, as a rolled-back sequence
        // leaves) and the call is refused like one made after the move.
        // And the lease's deadline, which the worker may not yet have closed the fence for
        // (a machine paused past it wakes with its backends and its worker at once: F11).
        Ok(_) if !shared_fence::still_allows(open.shard) || !shared_fence::lease_deadline_holds() => {
            server_fence_refusal(function, open.shard)
        }
        Ok(claim) => (open.layout, open.shard, claim),
        Err(refusal) => errors::refusal(function, open.shard, refusal),
    }
}

/// The next ID of `shard`: greater than every ID this server issued for it before. The
/// guarded path of `snowflake_nextval`: it waits when the policy says so, and raises the
/// errors. The SQL function enters through `snowflake_nextval_wrapper` below.
fn next_id_or_raise(shard: Option<i32>) -> i64 {
    let (layout, shard, claim) = claim("snowflake_nextval", shard, 1);
    layout.id_of_counter(shard, claim.first)
}

/// `snowflake_nextval(integer)` as PostgreSQL calls it, the column default of a sharded
/// primary key (`DEFAULT snowflake_nextval(3)`): the function every INSERT into a sharded
/// table runs, so its entry is written by hand instead of by `#[pg_extern]`, whose general
/// wrapper costs about as much as issuing the ID. The common case, a valid shard on a
/// primary with nothing to wait for, calls nothing in PostgreSQL, so it needs no guard
/// against its errors; everything else (a NULL or bad shard, not preloaded, a standby, a
/// clock to wait for or to refuse) takes the guarded `next_id_or_raise`, which decides
/// afresh and raises the error. The symbol keeps the name `#[pg_extern]` gave it, so
/// existing function definitions stay valid.
///
/// # Safety
/// Called by PostgreSQL's function manager with a valid `fcinfo` of one argument.
#[no_mangle]
pub unsafe extern "C-unwind" fn snowflake_nextval_wrapper(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    // SAFETY: PostgreSQL passes one argument, declared `integer`.
    let shard = unsafe { fmgr::integer_argument(fcinfo, 0) };
    fmgr::fast_or_guarded(|| nextval_without_waiting(shard), || next_id_or_raise(shard))
}

version_1_function_info!(pg_finfo_snowflake_nextval_wrapper);

/// The next ID when nothing needs PostgreSQL: `None` when the call must wait, be refused or
/// check the recovery state, for `next_id_or_raise` to handle. A refused claim issues
/// nothing, so deciding again there is safe.
#[inline(always)]
fn nextval_without_waiting(shard: Option<i32>) -> Option<i64> {
    // Recovery not yet seen finished: the guarded path asks PostgreSQL.
    let OpenShard { layout, shard, slot, reservation, pending } =
        try_open_shard(shard, || !RECOVERY_FINISHED.load(Relaxed)).ok()?;
    // No time to wait: past a bound, the claim is refused at once instead of sleeping.
    let policy =
        generator::ClockPolicy { max_wait_ms: 0, max_reservation_wait_ms: 0, ..settings::clock_policy() };
    let mut clock = NoWaitClock(WallClock::default());
    // Waking the worker is a call into PostgreSQL: left to the guarded path, which waits for it.
    let claim = generator::claim(slot, reservation, pending, 1, &layout, policy, &mut clock, &mut NoKeeper);
    clock.0.count_step_back(slot);
    let claim = claim.ok()?;
    // The fence again, as `claim` looks at it: moved away meanwhile, the claimed ID is dropped
    // (a gap, as a rolled-back sequence leaves), and the guarded path refuses the call.
    if !shared_fence::still_allows(shard) || !shared_fence::lease_deadline_holds() {
        return None;
    }
    Some(layout.id_of_counter(shard, claim.first))
}

extension_sql!(
    r#"
CREATE FUNCTION "snowflake_nextval"(
	"shard" INT
) RETURNS bigint
VOLATILE PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'snowflake_nextval_wrapper';
"#,
    name = "snowflake_nextval_of_shard",
);

/// The next ID of the shard named by `snowflake_id.shard` (55000 while it is unset).
/// Raises the errors; the SQL function enters through the wrapper below.
fn next_id_of_default_shard_or_raise() -> i64 {
    preloaded_layout("snowflake_nextval");
    let Some(shard) = settings::default_shard() else { errors::shard_unset("snowflake_nextval") };
    next_id_or_raise(Some(shard))
}

/// `snowflake_nextval()` as PostgreSQL calls it, the column default of tables whose shard is
/// set per database or role: the same fast path as `snowflake_nextval_wrapper`, and the same
/// fallback to the guarded path for everything else (the setting unset included).
///
/// # Safety
/// Called by PostgreSQL's function manager.
#[no_mangle]
pub unsafe extern "C-unwind" fn snowflake_nextval_of_default_shard_wrapper(
    _fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    fmgr::fast_or_guarded(
        || settings::default_shard().and_then(|shard| nextval_without_waiting(Some(shard))),
        next_id_of_default_shard_or_raise,
    )
}

version_1_function_info!(pg_finfo_snowflake_nextval_of_default_shard_wrapper);

extension_sql!(
    r#"
CREATE FUNCTION "snowflake_nextval"() RETURNS bigint
STRICT VOLATILE PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'snowflake_nextval_of_default_shard_wrapper';
"#,
    name = "snowflake_nextval_of_default_shard",
);

/// `count` consecutive IDs of `shard`, increasing, claimed in one atomic step: no other
/// call's IDs interleave with them. At most `(max_lead_ms + 1) * IDs per ms` per call.
///
/// Written by hand instead of with `#[pg_extern]` (the symbol keeps the name it gave, so
/// existing definitions stay valid): it hands PostgreSQL the whole batch at once
/// (`fmgr::return_ids_materialized`).
///
/// # Safety
/// Called by PostgreSQL's function manager with a valid `fcinfo` of two arguments.
#[no_mangle]
pub unsafe extern "C-unwind" fn snowflake_nextvals_wrapper(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    fmgr::under_guard(|| next_ids_or_raise(fcinfo))
}

version_1_function_info!(pg_finfo_snowflake_nextvals_wrapper);

fn next_ids_or_raise(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    const FUNCTION: &str = "snowflake_nextvals";
    // SAFETY: PostgreSQL passes two arguments, both declared `integer`.
    let (shard, count) = unsafe { (fmgr::integer_argument(fcinfo, 0), fmgr::integer_argument(fcinfo, 1)) };
    // Every check before the claim: a refused call issues nothing.
    // SAFETY: `fcinfo` is PostgreSQL's.
    let Some(result) = (unsafe { fmgr::materialize_target(fcinfo) }) else {
        errors::set_not_accepted(FUNCTION)
    };
    let Some(count) = count else { errors::null_argument(FUNCTION, "count") };
    if count <= 0 {
        errors::count_not_positive(FUNCTION, count);
    }
    let (layout, shard, claim) = claim(FUNCTION, shard, count as u64);
    let ids = (claim.first..=claim.last).map(|counter| layout.id_of_counter(shard, counter));
    // SAFETY: `result` is this call's, from `materialize_target`.
    unsafe { fmgr::return_ids_materialized(result, ids) };
    pg_sys::Datum::from(0)
}

extension_sql!(
    r#"
CREATE FUNCTION "snowflake_nextvals"(
	"shard" INT,
	"count" INT
) RETURNS SETOF bigint
VOLATILE PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'snowflake_nextvals_wrapper';
"#,
    name = "snowflake_nextvals",
);

extension_sql!(
    r#"
/* A batch claims up to max_lead_ms of one shard's IDs at once, holding the shard at its lead
   bound for every other caller until the clock catches up: granted by an operator, like
   snowflake_advance, not to PUBLIC. */
REVOKE ALL ON FUNCTION snowflake_nextvals(integer, integer) FROM PUBLIC;
"#,
    name = "snowflake_nextvals_privileges",
    requires = ["snowflake_nextvals"]
);

/// Makes every later ID of `shard` on this server greater than `id` (of any shard), like
/// `setval` for a sequence; never moves a shard back. Use it after restoring a dump or
/// moving a shard here from another server. Returns `id`. Refused (55000) when `id` is
/// further ahead of this server's clock than `snowflake_id.max_lead_ms`.
#[pg_extern(volatile, parallel_unsafe)]
fn snowflake_advance(shard: Option<i32>, id: Option<i64>) -> i64 {
    const FUNCTION: &str = "snowflake_advance";
    let Some(id) = id else { errors::null_argument(FUNCTION, "id") };
    // The fence is looked at before only: an advance moves the shard and issues no ID, so one
    // that races a move of the fence can only leave a gap in the shard, never hand out an ID.
    let OpenShard { layout, shard, slot, reservation, .. } = open_shard(FUNCTION, shard);
    let first_allowed =
        layout.first_counter_above(shard, id).unwrap_or_else(|e| errors::layout_error(FUNCTION, e));
    let policy = reservation::clock_policy_in_force(reservation);
    generator::check_advance(first_allowed, &layout, policy, clock::wall_clock_unix_ms())
        .unwrap_or_else(|refusal| errors::advance_refused(FUNCTION, shard, refusal));
    // The shard moves once the new position is durable (the worker is asked to move the
    // reservation past it, `generator::advance_step`): a refused call leaves the shard where
    // it was, except when the worker lowered the ceiling under a first move and the wait for
    // it then ran out (the shard stays moved forward, which issues nothing).
    let mut clock = WallClock::default();
    let mut budget_ms = ADVANCE_DURABLE_WITHIN_MS;
    let step = || generator::advance_step(slot, reservation, first_allowed, &layout);
    if let Err((time_part, ceiling)) =
        reservation::forward_once_reserved(reservation, &mut budget_ms, &mut clock, step)
    {
        errors::refusal(FUNCTION, shard, Refusal::NotReserved { time_part, ceiling, policy });
    }
    id
}

/// How long `snowflake_advance` waits for the reservation to pass the advanced ID: long
/// enough that only a stalled worker (a failing disk, or none running) makes it fail.
const ADVANCE_DURABLE_WITHIN_MS: u64 = 5000;

extension_sql!(
    r#"
/* Moving a shard forward is an operator's act (after a restore or a move): not for PUBLIC. */
REVOKE ALL ON FUNCTION snowflake_advance(integer, bigint) FROM PUBLIC;
"#,
    name = "snowflake_advance_privileges",
    requires = [snowflake_advance]
);
