//! The generating functions of the SQL surface. Thin: checks, one claim, IDs out.
//!
//! All of them are `VOLATILE` (each call issues new IDs) and `PARALLEL SAFE`: the state is
//! in shared memory, which parallel workers share with their leader, so a worker issues IDs
//! exactly as its leader would. They raise:
//! 22004 for a NULL argument, 22023 for a shard outside `0..2^shard_bits-1` or a bad count,
//! 55000 when the library is not preloaded, the clock is past the policy's bounds or the
//! durable reservation is not keeping up, 25006 on a hot standby.

use crate::generator::{self, Claim, Refusal, Reservation, ShardState};
use crate::layout::{Layout, LayoutError};
use crate::{clock::WallClock, errors, gucs, shmem};
use pgrx::prelude::*;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

/// The `pg_finfo_` record PostgreSQL looks up for a version-1 C function written by hand
/// (`#[pg_extern]` emits one for the functions it wraps).
macro_rules! version_1_function_info {
    ($finfo:ident) => {
        #[no_mangle]
        #[doc(hidden)]
        pub extern "C" fn $finfo() -> &'static pg_sys::Pg_finfo_record {
            const V1_API: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
            &V1_API
        }
    };
}

/// A shard ready to issue from.
struct OpenShard {
    layout: Layout,
    shard: u32,
    state: &'static ShardState,
    reservation: &'static Reservation,
}

/// Why a shard cannot be issued from, in the order an operator would fix it.
enum Closed {
    NotPreloaded,
    NullShard,
    BadShard(LayoutError),
    InRecovery,
}

/// The checks every generator makes before touching a shard. Calls nothing in PostgreSQL
/// except through `in_recovery`, so the unguarded fast path can make the same checks.
#[inline(always)]
fn try_open_shard(shard: Option<i32>, in_recovery: impl FnOnce() -> bool) -> Result<OpenShard, Closed> {
    let reservation = shmem::reservation().ok_or(Closed::NotPreloaded)?;
    let layout = gucs::layout();
    let shard = layout.check_shard(shard.ok_or(Closed::NullShard)?.into()).map_err(Closed::BadShard)?;
    let state = shmem::shard(shard).ok_or(Closed::NotPreloaded)?;
    if in_recovery() {
        return Err(Closed::InRecovery);
    }
    Ok(OpenShard { layout, shard, state, reservation })
}

/// The shard, or the error that says what to fix.
#[inline]
fn open_shard(function: &'static str, shard: Option<i32>) -> OpenShard {
    try_open_shard(shard, in_recovery).unwrap_or_else(|closed| match closed {
        Closed::NotPreloaded => errors::not_preloaded(function),
        Closed::NullShard => errors::null_argument(function, "shard"),
        Closed::BadShard(error) => errors::layout_error(function, error),
        Closed::InRecovery => errors::during_recovery(function),
    })
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
/// Raises the errors; the SQL function enters through `snowflake_nextval_wrapper` below.
fn snowflake_nextval(shard: Option<i32>) -> i64 {
    let (layout, shard, claim) = claim("snowflake_nextval", shard, 1);
    layout.id_of_counter(shard, claim.first)
}

/// `snowflake_nextval(integer)` as PostgreSQL calls it: the function every INSERT into a
/// sharded table runs, so its entry is written by hand instead of by `#[pg_extern]`, whose
/// general wrapper (memory-context switch, argument iterator, guard against PostgreSQL
/// errors) costs about as much as issuing the ID. The common case, a valid shard on a
/// primary with nothing to wait for, calls nothing in PostgreSQL, so it needs no guard
/// against its errors; everything else (a NULL or bad shard, not preloaded, a standby, a
/// clock to wait for or to refuse) takes the guarded `snowflake_nextval`, which decides
/// afresh and raises the error. The symbol keeps the name `#[pg_extern]` gave it, so
/// existing function definitions stay valid.
///
/// # Safety
/// Called by PostgreSQL's function manager with a valid `fcinfo` of one argument.
#[no_mangle]
pub unsafe extern "C-unwind" fn snowflake_nextval_wrapper(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    // SAFETY: PostgreSQL passes one argument, declared `integer`.
    let shard = unsafe {
        let argument = &*(*fcinfo).args.as_ptr();
        (!argument.isnull).then(|| argument.value.value() as i32)
    };
    fast_or_guarded(|| nextval_without_waiting(shard), || snowflake_nextval(shard))
}

/// The entry of a hand-written generator: the ID of `fast` when it has one, else the call
/// goes through `guarded`, under pgrx's guard.
#[inline(always)]
fn fast_or_guarded(
    fast: impl FnOnce() -> Option<i64> + std::panic::UnwindSafe,
    guarded: impl FnOnce() -> i64,
) -> pg_sys::Datum {
    // A panic (only a bug could cause one) must not unwind into PostgreSQL: it falls back
    // to the guarded path, which reports it as an error.
    if let Ok(Some(id)) = std::panic::catch_unwind(fast) {
        return pg_sys::Datum::from(id);
    }
    // SAFETY: the guard turns Rust panics and PostgreSQL errors into a proper ereport.
    unsafe { pg_sys::submodules::panic::pgrx_extern_c_guard(|| pg_sys::Datum::from(guarded())) }
}

version_1_function_info!(pg_finfo_snowflake_nextval_wrapper);

/// The next ID when nothing needs PostgreSQL: `None` when the call must wait, be refused or
/// check the recovery state, for `snowflake_nextval` to handle. A refused claim issues
/// nothing, so deciding again there is safe.
#[inline(always)]
fn nextval_without_waiting(shard: Option<i32>) -> Option<i64> {
    // Recovery not yet seen finished: the guarded path asks PostgreSQL.
    let OpenShard { layout, shard, state, reservation } =
        try_open_shard(shard, || !RECOVERY_FINISHED.load(Relaxed)).ok()?;
    // No time to wait: past a bound, the claim is refused at once instead of sleeping.
    let policy = generator::ClockPolicy { max_wait_ms: 0, ..gucs::clock_policy() };
    let mut clock = NoWaitClock(WallClock::default());
    let claim = generator::claim(state, reservation, 1, &layout, policy, &mut clock);
    if clock.0.stepped_back() {
        state.clock_regressions.fetch_add(1, Relaxed);
    }
    Some(layout.id_of_counter(shard, claim.ok()?.first))
}

/// The wall clock for a call that never sleeps and leaves waking the reservation worker
/// (a call into PostgreSQL) to the path that waits for it.
struct NoWaitClock(WallClock);

impl generator::Clock for NoWaitClock {
    #[inline(always)]
    fn now_unix_ms(&mut self) -> i64 {
        self.0.now_unix_ms()
    }
    fn sleep_ms(&mut self, _ms: u64) {
        unreachable!("a claim with max_wait_ms = 0 never sleeps")
    }
    fn wake_worker(&mut self, _reservation: &Reservation) {}
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
fn snowflake_nextval_of_default_shard() -> i64 {
    gucs::preloaded_layout("snowflake_nextval");
    let Some(shard) = gucs::default_shard() else { errors::shard_unset("snowflake_nextval") };
    snowflake_nextval(Some(shard))
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
    fast_or_guarded(
        || gucs::default_shard().and_then(|shard| nextval_without_waiting(Some(shard))),
        snowflake_nextval_of_default_shard,
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
/// existing definitions stay valid): it hands PostgreSQL the whole batch at once in a
/// tuplestore ("materialize mode"), where a `SetOfIterator` would be called back once per
/// row, each time through the full function-call wrapper. PostgreSQL stores a set
/// returned to `FROM` in a tuplestore either way.
///
/// # Safety
/// Called by PostgreSQL's function manager with a valid `fcinfo` of two arguments.
#[no_mangle]
pub unsafe extern "C-unwind" fn snowflake_nextvals_wrapper(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    // SAFETY: the guard turns Rust panics and PostgreSQL errors into a proper ereport.
    unsafe { pg_sys::submodules::panic::pgrx_extern_c_guard(|| nextvals_materialized(fcinfo)) }
}

version_1_function_info!(pg_finfo_snowflake_nextvals_wrapper);

fn nextvals_materialized(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    const FUNCTION: &str = "snowflake_nextvals";
    // SAFETY: PostgreSQL passes two arguments, both declared `integer`, and its
    // ReturnSetInfo when the call may return a set.
    let (shard, count, result) = unsafe {
        let arguments = (*fcinfo).args.as_slice(2);
        let integer =
            |argument: &pg_sys::NullableDatum| (!argument.isnull).then(|| argument.value.value() as i32);
        (integer(&arguments[0]), integer(&arguments[1]), (*fcinfo).resultinfo as *mut pg_sys::ReturnSetInfo)
    };
    // Every check before the claim: a refused call issues nothing.
    // SAFETY: `result` is checked to be a ReturnSetInfo before it is read as one.
    let accepts_materialized = unsafe {
        !result.is_null()
            && (*result).type_ == pg_sys::NodeTag::T_ReturnSetInfo
            && (*result).allowedModes & pg_sys::SetFunctionReturnMode::SFRM_Materialize as i32 != 0
    };
    if !accepts_materialized {
        errors::set_not_accepted(FUNCTION);
    }
    let Some(count) = count else { errors::null_argument(FUNCTION, "count") };
    if count <= 0 {
        errors::count_not_positive(FUNCTION, count);
    }
    let (layout, shard, claim) = claim(FUNCTION, shard, count as u64);
    // SAFETY: the tuplestore and its row description live in the query's memory, as
    // PostgreSQL requires of a materialized result; `result` was checked above.
    unsafe {
        let per_query = (*(*result).econtext).ecxt_per_query_memory;
        let random_access =
            (*result).allowedModes & pg_sys::SetFunctionReturnMode::SFRM_Materialize_Random as i32 != 0;
        let (description, store) = pgrx::PgMemoryContexts::For(per_query).switch_to(|_| {
            let description = pg_sys::CreateTemplateTupleDesc(1);
            pg_sys::TupleDescInitEntry(description, 1, c"id".as_ptr(), pg_sys::INT8OID, -1, 0);
            (description, pg_sys::tuplestore_begin_heap(random_access, false, pg_sys::work_mem))
        });
        let ids = (claim.first..=claim.last).map(|counter| layout.id_of_counter(shard, counter));
        put_ids(store, description, ids);
        (*result).returnMode = pg_sys::SetFunctionReturnMode::SFRM_Materialize;
        (*result).setResult = store;
        (*result).setDesc = description;
    }
    pg_sys::Datum::from(0)
}

/// Puts the rows of a one-`bigint`-column set into `store`. Each row is stored as a copy of
/// one formed row with its ID written in, which costs less than forming every row from its
/// value (`tuplestore_putvalues`: sizing, zeroing and filling a new row each time).
///
/// # Safety
/// `store` and `description` (one non-null `int8` column) are valid, in the query's memory.
unsafe fn put_ids(
    store: *mut pg_sys::Tuplestorestate,
    description: pg_sys::TupleDesc,
    mut ids: impl Iterator<Item = i64>,
) {
    let Some(first) = ids.next() else { return };
    // SAFETY: as the caller promises; the row and the slot are freed with the call's memory.
    unsafe {
        let row =
            crate::compat::form_minimal_tuple(description, &mut [pg_sys::Datum::from(first)], &mut [false]);
        // A minimal row counts its data offset `t_hoff` from MINIMAL_TUPLE_OFFSET bytes before
        // its start; a single by-value column sits at the start of the data. Checked against
        // the value just formed, so a different build of PostgreSQL can only make it slower.
        let id_in_row = row.cast::<u8>().add(usize::from((*row).t_hoff) - MINIMAL_TUPLE_OFFSET).cast::<i64>();
        let slot = pg_sys::MakeSingleTupleTableSlot(description, &pg_sys::TTSOpsMinimalTuple);
        pg_sys::ExecStoreMinimalTuple(row, slot, false);
        let in_place = id_in_row.read_unaligned() == first;
        // One guard around the whole loop instead of pgrx's guard (a `sigsetjmp`) around every
        // call: the guard catches an error of PostgreSQL's (a full disk while the store spills)
        // and re-raises it; the loop holds nothing that needs dropping, as the guard requires.
        pg_sys::ffi::pg_guard_ffi_boundary(|| {
            tuplestore_puttupleslot(store, slot);
            for id in ids {
                if in_place {
                    id_in_row.write_unaligned(id);
                    tuplestore_puttupleslot(store, slot);
                } else {
                    let (mut value, mut is_null) = (pg_sys::Datum::from(id), false);
                    tuplestore_putvalues(store, description, &mut value, &mut is_null);
                }
            }
        });
        pg_sys::ExecDropSingleTupleTableSlot(slot);
    }
}

/// PostgreSQL's MINIMAL_TUPLE_OFFSET (htup_details.h) on 64-bit platforms.
const MINIMAL_TUPLE_OFFSET: usize = 8;

unsafe extern "C-unwind" {
    // PostgreSQL's own, declared here without pgrx's per-call guard (see their one use).
    fn tuplestore_putvalues(
        state: *mut pg_sys::Tuplestorestate,
        tdesc: pg_sys::TupleDesc,
        values: *mut pg_sys::Datum,
        isnull: *mut bool,
    );
    fn tuplestore_puttupleslot(state: *mut pg_sys::Tuplestorestate, slot: *mut pg_sys::TupleTableSlot);
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
    let policy = gucs::clock_policy();
    let time_part =
        generator::check_advance(first_allowed, &layout, policy, crate::clock::wall_clock_unix_ms())
            .unwrap_or_else(|refusal| errors::advance_refused(FUNCTION, shard, refusal));
    // First make the new position durable (the worker is asked to move the reservation past
    // it), then move the shard: a refused call leaves the shard where it was.
    let mut clock = WallClock::default();
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
    generator::advance(&state.last_issued, first_allowed);
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
