//! Differences in PostgreSQL's C API between the majors this crate builds for, in one place.
//! Each `cfg` sits at the major where the API changed, so that a build for a major in
//! between (16, 17) takes the right side without anyone touching the callers. The newest side
//! is written as "none of the older majors" (`not(any(...))`), so that a new major takes it and
//! its build fails where its API differs, instead of compiling neither side.

use pgrx::pg_sys;

/// Forms a minimal tuple from one row of values.
///
/// PostgreSQL 18 added an `extra` argument (bytes to allocate after the tuple, commit
/// "Allow extra space to be allocated in minimal tuples"); 0 keeps the earlier behaviour.
///
/// # Safety
/// As `heap_form_minimal_tuple`: `values` and `is_null` hold one entry per column of
/// `description`, and the tuple is allocated in the current memory context.
pub unsafe fn form_minimal_tuple(
    description: pg_sys::TupleDesc,
    values: &mut [pg_sys::Datum],
    is_null: &mut [bool],
) -> pg_sys::MinimalTuple {
    // SAFETY: as the caller promises.
    unsafe {
        #[cfg(any(feature = "pg15", feature = "pg16", feature = "pg17"))]
        let tuple = pg_sys::heap_form_minimal_tuple(description, values.as_mut_ptr(), is_null.as_mut_ptr());
        #[cfg(not(any(feature = "pg15", feature = "pg16", feature = "pg17")))]
        let tuple = pg_sys::heap_form_minimal_tuple(description, values.as_ptr(), is_null.as_ptr(), 0);
        tuple
    }
}

/// A row description made of `columns` (name, type) of the default collation and no typmod,
/// in the current memory context, ready for use.
///
/// PostgreSQL 19 requires `TupleDescFinalize()` on a description once its entries are filled in
/// and before any use (its access/tupdesc.h: "Once a TupleDesc has been populated, before it is
/// used for any purpose, TupleDescFinalize() must be called on it"); earlier majors have no
/// such step.
///
/// # Safety
/// Called inside a transaction, in the memory context the description must live in.
pub unsafe fn row_description(columns: &[(&std::ffi::CStr, pg_sys::Oid)]) -> pg_sys::TupleDesc {
    // SAFETY: a fresh description with one entry per column, each filled in once.
    unsafe {
        let description = pg_sys::CreateTemplateTupleDesc(columns.len() as i32);
        for (number, (name, type_oid)) in (1..).zip(columns) {
            pg_sys::TupleDescInitEntry(description, number, name.as_ptr(), *type_oid, -1, 0);
        }
        #[cfg(not(any(feature = "pg15", feature = "pg16", feature = "pg17", feature = "pg18")))]
        pg_sys::TupleDescFinalize(description);
        description
    }
}

/// Adds `data` to the WAL record being built (between `XLogBeginInsert` and `XLogInsert`).
///
/// PostgreSQL 16 made the length a `uint32` (it was an `int`); PostgreSQL 18 made the data a
/// `const void *` (it was a `char *`).
///
/// # Safety
/// As `XLogRegisterData`: a record is being built, and `data` stays valid until `XLogInsert`.
pub unsafe fn xlog_register_data(data: &mut [u8]) {
    // A record's data is far below either limit (the caller registers 8 bytes).
    debug_assert!(data.len() < i32::MAX as usize);
    // SAFETY: as the caller promises.
    unsafe {
        #[cfg(feature = "pg15")]
        pg_sys::XLogRegisterData(data.as_mut_ptr().cast::<std::ffi::c_char>(), data.len() as i32);
        #[cfg(any(feature = "pg16", feature = "pg17"))]
        pg_sys::XLogRegisterData(data.as_mut_ptr().cast::<std::ffi::c_char>(), data.len() as u32);
        #[cfg(not(any(feature = "pg15", feature = "pg16", feature = "pg17")))]
        pg_sys::XLogRegisterData(data.as_ptr().cast::<std::ffi::c_void>(), data.len() as u32);
    }
}

/// Ends a record's line (the layout's, the reservation's) written by pg_upgrade's starts of a
/// new cluster: what the old server's record said is not known there, so the first real start
/// refuses to run on it until an operator copies the old record over it or deletes the mark.
pub const UNCONFIRMED_BY_PG_UPGRADE: &str = " unconfirmed=pg_upgrade";

/// Whether pg_upgrade is driving this server (`postgres -b`): it restores the schema into
/// the new cluster, and starts the old one to read it. Nothing is issued in this mode.
pub fn in_binary_upgrade() -> bool {
    // SAFETY: a PostgreSQL global, set from the command line before libraries are preloaded.
    unsafe { pg_sys::IsBinaryUpgrade }
}

/// The number (index in `ProcGlobal->allProcs`) of the process whose transaction this
/// process's work belongs to: its parallel leader's in a parallel worker, else its own; `None`
/// before it has a PGPROC. PostgreSQL 17 exports both numbers (`MyProcNumber`,
/// `ParallelLeaderProcNumber`); 15 and 16 keep it in the PGPROC (`pgprocno`, and the leader
/// is the worker's lock group leader). Not computed from addresses: the array's element size
/// is C's, which the Rust bindings need not match.
pub fn transaction_proc_number() -> Option<usize> {
    // SAFETY: process globals set before any SQL runs; a parallel worker joins its leader's
    // lock group (and learns its number) before it runs any of the query.
    unsafe {
        let in_parallel_worker = pg_sys::ParallelWorkerNumber >= 0;
        #[cfg(any(feature = "pg15", feature = "pg16"))]
        let number = {
            let mine = pg_sys::MyProc.as_ref()?;
            let leader = mine.lockGroupLeader.as_ref().filter(|_| in_parallel_worker);
            leader.unwrap_or(mine).pgprocno
        };
        #[cfg(not(any(feature = "pg15", feature = "pg16")))]
        let number = if in_parallel_worker { pg_sys::ParallelLeaderProcNumber } else { pg_sys::MyProcNumber };
        usize::try_from(number).ok()
    }
}

/// The transaction state of the server read together, under ProcArrayLock (which its writers
/// hold): the newest xid that has ended (`latestCompletedXid`), and the next xid to be assigned.
/// In `ShmemVariableCache` up to PostgreSQL 16, in `TransamVariables` from 17.
pub fn completed_and_next_xid() -> (pg_sys::TransactionId, pg_sys::TransactionId) {
    // ProcArrayLock, the fourth of PostgreSQL's built-in locks (lwlocklist.h) on every major.
    const PROC_ARRAY_LOCK: usize = 4;
    // SAFETY: shared state read under the lock PostgreSQL's own readers take.
    unsafe {
        let lock = &raw mut (*pg_sys::MainLWLockArray.add(PROC_ARRAY_LOCK)).lock;
        pg_sys::LWLockAcquire(lock, pg_sys::LWLockMode::LW_SHARED);
        #[cfg(any(feature = "pg15", feature = "pg16"))]
        let variables = pg_sys::ShmemVariableCache;
        #[cfg(not(any(feature = "pg15", feature = "pg16")))]
        let variables = pg_sys::TransamVariables;
        let completed = (*variables).latestCompletedXid.value;
        let next = (*variables).nextXid.value;
        pg_sys::LWLockRelease(lock);
        (pg_sys::TransactionId::from_inner(completed as u32), pg_sys::TransactionId::from_inner(next as u32))
    }
}

/// The start of each backend's open transaction, by process id, as `pg_stat_activity` shows
/// it (`xact_start`; backends without one are left out), from this transaction's snapshot of
/// the backends' statistics.
///
/// PostgreSQL 16 renamed the lookup by position in that snapshot
/// (`pgstat_fetch_stat_local_beentry` became `pgstat_get_local_beentry_by_index`).
pub fn transaction_starts() -> Vec<(i32, pg_sys::TimestampTz)> {
    // SAFETY: reads this backend's snapshot of the statistics, taken by the first call; its
    // entries are numbered from 1 to the count.
    unsafe {
        (1..=pg_sys::pgstat_fetch_stat_numbackends())
            .filter_map(|index| {
                #[cfg(feature = "pg15")]
                let entry = pg_sys::pgstat_fetch_stat_local_beentry(index).as_ref()?;
                #[cfg(not(feature = "pg15"))]
                let entry = pg_sys::pgstat_get_local_beentry_by_index(index).as_ref()?;
                let status = &entry.backendStatus;
                (status.st_xact_start_timestamp != 0)
                    .then_some((status.st_procpid, status.st_xact_start_timestamp))
            })
            .collect()
    }
}
