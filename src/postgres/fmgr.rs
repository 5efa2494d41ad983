//! Hand-written version-1 function entries, for the SQL functions whose cost is dominated by
//! `#[pg_extern]`'s general wrapper (memory-context switch, argument iterator, a guard
//! against PostgreSQL errors around every call): the generators. This module holds the
//! mechanics; `api::issuing` decides what each function does.
//!
//! A hand-written entry must do itself what the wrapper did: declare its `pg_finfo_` record,
//! read its arguments from `fcinfo`, and never let a Rust panic or a PostgreSQL error cross
//! into PostgreSQL unguarded.

use pgrx::pg_sys;

/// The `pg_finfo_` record PostgreSQL looks up for a version-1 C function written by hand
/// (`#[pg_extern]` emits one for the functions it wraps).
macro_rules! version_1_function_info {
    ($finfo:ident) => {
        #[no_mangle]
        #[doc(hidden)]
        pub extern "C" fn $finfo() -> &'static pgrx::pg_sys::Pg_finfo_record {
            const V1_API: pgrx::pg_sys::Pg_finfo_record = pgrx::pg_sys::Pg_finfo_record { api_version: 1 };
            &V1_API
        }
    };
}
pub(crate) use version_1_function_info;

/// Argument `n` of a call, declared `integer`: `None` when NULL.
///
/// # Safety
/// `fcinfo` is PostgreSQL's, for a function with more than `n` arguments, the `n`th an `integer`.
#[inline(always)]
pub unsafe fn integer_argument(fcinfo: pg_sys::FunctionCallInfo, n: usize) -> Option<i32> {
    // SAFETY: as the caller promises.
    let argument = unsafe { &*(*fcinfo).args.as_ptr().add(n) };
    (!argument.isnull).then(|| argument.value.value() as i32)
}

/// The entry of a hand-written generator: the ID of `fast` when it has one, else the call
/// goes through `guarded`, under pgrx's guard. `fast` must call nothing in PostgreSQL that
/// can raise an error: it runs unguarded.
#[inline(always)]
pub fn fast_or_guarded(
    fast: impl FnOnce() -> Option<i64> + std::panic::UnwindSafe,
    guarded: impl FnOnce() -> i64,
) -> pg_sys::Datum {
    // A panic (only a bug could cause one) must not unwind into PostgreSQL: it falls back
    // to the guarded path, which reports it as an error.
    if let Ok(Some(id)) = std::panic::catch_unwind(fast) {
        return pg_sys::Datum::from(id);
    }
    under_guard(|| pg_sys::Datum::from(guarded()))
}

/// Runs the body of a hand-written entry as `#[pg_extern]`'s wrapper would: a Rust panic
/// becomes an ERROR, and a PostgreSQL error raised inside unwinds the Rust frames properly.
///
/// `pgrx_extern_c_guard` is the guard that `#[pg_extern]`'s generated wrapper calls; pgrx
/// marks it `#[doc(hidden)]`, outside its documented API. That is why Cargo.toml pins pgrx
/// to one version (`=0.19.3`): a new pgrx must be checked here before it is taken. Checked for
/// 0.19.3: the same signature and contract; what changed is inside (a PostgreSQL error caught
/// on the way is now rethrown unchanged with `pg_re_throw`, where 0.18 reported a copy of it).
#[inline(always)]
pub fn under_guard(body: impl FnOnce() -> pg_sys::Datum) -> pg_sys::Datum {
    // SAFETY: the guard turns Rust panics and PostgreSQL errors into a proper ereport.
    unsafe { pg_sys::submodules::panic::pgrx_extern_c_guard(body) }
}

/// The call's `ReturnSetInfo` when its caller accepts a set in materialize mode, else `None`.
///
/// # Safety
/// `fcinfo` is PostgreSQL's.
pub unsafe fn materialize_target(fcinfo: pg_sys::FunctionCallInfo) -> Option<*mut pg_sys::ReturnSetInfo> {
    // SAFETY: `resultinfo` is checked to be a ReturnSetInfo before it is read as one.
    unsafe {
        let result = (*fcinfo).resultinfo as *mut pg_sys::ReturnSetInfo;
        let accepts = !result.is_null()
            && (*result).type_ == pg_sys::NodeTag::T_ReturnSetInfo
            && (*result).allowedModes & pg_sys::SetFunctionReturnMode::SFRM_Materialize as i32 != 0;
        accepts.then_some(result)
    }
}

/// Hands PostgreSQL `ids` as the call's result, a set of one `bigint` column named `id`,
/// in one tuplestore ("materialize mode"), where a `SetOfIterator` would be called back once
/// per row, each time through the full function-call wrapper. PostgreSQL stores a set
/// returned to `FROM` in a tuplestore either way.
///
/// # Safety
/// `result` came from `materialize_target` for the current call.
pub unsafe fn return_ids_materialized(result: *mut pg_sys::ReturnSetInfo, ids: impl Iterator<Item = i64>) {
    // SAFETY: the tuplestore and its row description live in the query's memory, as
    // PostgreSQL requires of a materialized result.
    unsafe {
        let per_query = (*(*result).econtext).ecxt_per_query_memory;
        let random_access =
            (*result).allowedModes & pg_sys::SetFunctionReturnMode::SFRM_Materialize_Random as i32 != 0;
        let (description, store) = pgrx::PgMemoryContexts::For(per_query).switch_to(|_| {
            let description = super::compat::row_description(&[(c"id", pg_sys::INT8OID)]);
            (description, pg_sys::tuplestore_begin_heap(random_access, false, pg_sys::work_mem))
        });
        put_ids(store, description, ids);
        (*result).returnMode = pg_sys::SetFunctionReturnMode::SFRM_Materialize;
        (*result).setResult = store;
        (*result).setDesc = description;
    }
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
            super::compat::form_minimal_tuple(description, &mut [pg_sys::Datum::from(first)], &mut [false]);
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
        // Interrupts (statement_timeout, pg_cancel_backend) are looked at every
        // INTERRUPT_CHECK_EVERY rows: a batch of millions otherwise runs for seconds past them.
        // The IDs were claimed as one block before this loop, so a cancelled batch leaves the
        // shard past all of them, as a rolled-back nextval leaves a sequence.
        pg_sys::ffi::pg_guard_ffi_boundary(|| {
            tuplestore_puttupleslot(store, slot);
            for (row, id) in ids.enumerate() {
                if row % INTERRUPT_CHECK_EVERY == 0
                    && std::ptr::read_volatile(&raw const pg_sys::InterruptPending) != 0
                {
                    ProcessInterrupts();
                }
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

/// Rows between two looks at PostgreSQL's interrupt flag while a batch is stored: about
/// 0.1 ms of work, so a cancel is honoured at once and the look costs nothing measurable.
const INTERRUPT_CHECK_EVERY: usize = 4096;

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
    // CHECK_FOR_INTERRUPTS() without the flag test, which is inlined at the call. Its ERROR
    // (57014) jumps to the loop's one guard: pgrx's own guard would turn it into a panic
    // inside that guard, which cannot unwind.
    fn ProcessInterrupts();
}
