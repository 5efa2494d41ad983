//! Prepared transactions (two-phase commit) hold their IDs after their backend has moved on:
//! until `COMMIT PREPARED` or `ROLLBACK PREPARED`, maybe from another session, maybe after a
//! restart. So `PREPARE TRANSACTION` records the transaction's lowest time part here, in
//! shared memory and durably in `snowflake_id.prepared` (read back when shared memory is
//! created), before its backend's slot is released; a horizon stays below every entry whose
//! transaction is still prepared, and drops the others.
//!
//! The file is rewritten whole (`durable_file::replace`) at each `PREPARE TRANSACTION` that
//! holds IDs, with the entries still prepared: a transaction that takes IDs and is prepared
//! costs two fsyncs more, one that takes none nothing. An entry whose transaction is gone
//! (committed, rolled back, or never prepared because `PREPARE` failed after this step)
//! lingers in the file until the next rewrite, and is dropped by the first horizon after a
//! start.
//!
//! Limit: the file is this server's. A standby does not receive it, so after a promotion the
//! prepared transactions carried over from the old primary hold no horizon (their IDs are
//! unknown here): docs/reading-in-order.md says to finish them first.

use super::LOCK;
use crate::postgres::{durable_file, fixed_layout};
use pgrx::pg_sys::{self, panic::ErrorReport};
use pgrx::{PgLogLevel, PgSqlErrorCode};
use snowflake_core::horizon::{PendingSlot, NONE};
use std::ffi::{c_int, CStr};
use std::sync::atomic::Ordering::Relaxed;

/// The record, relative to the data directory (every server process's working directory).
pub const FILE: &str = "snowflake_id.prepared";
const TEMP_FILE: &str = "snowflake_id.prepared.tmp";
const PREFIX: &str = "snowflake_id prepared ";
const SHMEM_NAME: &CStr = c"snowflake_id prepared transactions";

unsafe extern "C" {
    /// `max_prepared_transactions` (PGDLLIMPORT in `access/twophase.h`).
    static max_prepared_xacts: c_int;
}

/// A prepared transaction and the lowest time part of its IDs. `fxid` 0: a free entry.
#[derive(Clone, Copy, Default)]
#[repr(C)]
struct Entry {
    fxid: u64,
    since: u64,
}

static mut ENTRIES: *mut Entry = std::ptr::null_mut();
static mut ENTRY_COUNT: usize = 0;

fn entry_count() -> usize {
    // SAFETY: a setting read in the postmaster before shared memory is requested.
    unsafe { max_prepared_xacts.max(0) as usize }
}

pub fn bytes_needed() -> usize {
    entry_count() * size_of::<Entry>()
}

/// Maps the entries; when shared memory is being created, fills them from the file.
///
/// # Safety
/// Called by `horizon::attach`, with AddinShmemInitLock held.
pub unsafe fn attach(create: bool) {
    let count = entry_count();
    let mut found = false;
    // SAFETY: as the caller promises.
    unsafe {
        ENTRIES =
            pg_sys::ShmemInitStruct(SHMEM_NAME.as_ptr(), bytes_needed().max(1), &mut found).cast::<Entry>();
        ENTRY_COUNT = count;
    }
    if !create {
        return;
    }
    let recorded = read().unwrap_or_else(|reason| unreadable(&reason));
    let entries = entries();
    entries.fill(Entry::default());
    // More entries than max_prepared_transactions allows now: the lowest are kept, which
    // holds the horizon no higher than they would.
    let mut recorded = recorded;
    recorded.sort_by_key(|entry| entry.since);
    for (slot, entry) in entries.iter_mut().zip(recorded) {
        *slot = entry;
    }
}

fn entries() -> &'static mut [Entry] {
    // SAFETY: ENTRIES points at ENTRY_COUNT entries in shared memory, set once per process
    // before any SQL runs; callers hold the horizon lock (or are the postmaster creating them).
    unsafe {
        if ENTRIES.is_null() {
            &mut []
        } else {
            std::slice::from_raw_parts_mut(ENTRIES, ENTRY_COUNT)
        }
    }
}

/// Whether the transaction `fxid` is still running or prepared. A full transaction id that
/// lies 2^31 or more behind the next one is long gone (its 32-bit xid may be reused).
fn still_prepared(fxid: u64) -> bool {
    // SAFETY: reads PostgreSQL's transaction state under its own locking.
    unsafe {
        let next = pg_sys::ReadNextFullTransactionId().value;
        fxid < next
            && next - fxid < 1 << 31
            && pg_sys::TransactionIdIsInProgress(pg_sys::TransactionId::from_inner(fxid as u32))
    }
}

/// The lowest time part of the prepared transactions' IDs (`NONE` if none), dropping the
/// entries of transactions no longer prepared. Called with the horizon lock held.
pub fn lowest_since() -> u64 {
    let mut lowest = NONE;
    for entry in entries().iter_mut().filter(|entry| entry.fxid != 0) {
        // SAFETY: the postmaster creating shared memory has no transactions to ask about:
        // every entry counts there.
        if unsafe { pg_sys::IsUnderPostmaster } && !still_prepared(entry.fxid) {
            *entry = Entry::default();
        } else {
            lowest = lowest.min(entry.since);
        }
    }
    lowest
}

/// `XACT_EVENT_PRE_PREPARE` of a transaction that holds IDs: records its lowest time part,
/// in shared memory and durably, before `PREPARE TRANSACTION` goes on. An error here fails the
/// `PREPARE` (the transaction is rolled back), as PostgreSQL's own steps of it do.
pub fn remember(slot: &PendingSlot) {
    let since = slot.since.load(Relaxed);
    if since == NONE || entry_count() == 0 {
        // No IDs held; or prepared transactions are disabled, which PostgreSQL reports next.
        return;
    }
    // SAFETY: called during PREPARE TRANSACTION, whose xid is assigned first.
    let fxid = unsafe { pg_sys::GetTopFullTransactionIdIfAny() }.value;
    // SAFETY: see `horizon::for_active_snapshot`.
    unsafe { pg_sys::LWLockAcquire(LOCK, pg_sys::LWLockMode::LW_EXCLUSIVE) };
    lowest_since(); // drops the entries of transactions no longer prepared
    let entries = entries();
    let Some(free) = entries.iter_mut().find(|entry| entry.fxid == 0) else {
        // SAFETY: acquired above.
        unsafe { pg_sys::LWLockRelease(LOCK) };
        ErrorReport::new(
            PgSqlErrorCode::ERRCODE_CONFIGURATION_LIMIT_EXCEEDED,
            "maximum number of prepared transactions reached",
            "snowflake_id",
        )
        .set_hint("Increase max_prepared_transactions.")
        .report(PgLogLevel::ERROR);
        unreachable!("an ERROR report returns control to PostgreSQL");
    };
    *free = Entry { fxid, since };
    let written = write(entries);
    // SAFETY: acquired above.
    unsafe { pg_sys::LWLockRelease(LOCK) };
    if let Err(error) = written {
        pgrx::error!(
            "could not record the prepared transaction's IDs in \"{FILE}\" for the snowflake_id horizon: {error}"
        );
    }
}

/// The file's lines: one per entry, readable by people,
/// `snowflake_id prepared fxid=123 since_unix_ms=1732406400000`.
fn write(entries: &[Entry]) -> std::io::Result<()> {
    let layout = fixed_layout::get();
    let text: String = entries
        .iter()
        .filter(|entry| entry.fxid != 0)
        .map(|entry| format!("{PREFIX}fxid={} since_unix_ms={}\n", entry.fxid, layout.unix_ms(entry.since)))
        .collect();
    durable_file::replace(FILE, TEMP_FILE, &text)
}

/// The entries of the file (none when there is none).
fn read() -> Result<Vec<Entry>, String> {
    let text = match std::fs::read_to_string(FILE) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
        Err(error) => return Err(error.to_string()),
    };
    text.lines().map(parse_line).collect()
}

fn parse_line(line: &str) -> Result<Entry, String> {
    let malformed = || format!("unexpected line {line:?}");
    let fields = line.strip_prefix(PREFIX).ok_or_else(malformed)?;
    let (fxid, since_unix_ms) = fields.split_once(' ').ok_or_else(malformed)?;
    let fxid =
        fxid.strip_prefix("fxid=").and_then(|value| value.parse::<u64>().ok()).ok_or_else(malformed)?;
    let since_unix_ms = since_unix_ms
        .strip_prefix("since_unix_ms=")
        .and_then(|value| value.parse::<i64>().ok())
        .ok_or_else(malformed)?;
    // Before the epoch: nothing is below; past the layout's end: the end.
    let layout = fixed_layout::get();
    let since = layout.time_part(since_unix_ms.max(layout.epoch_unix_ms())).unwrap_or(layout.max_time_part());
    Ok(Entry { fxid, since })
}

fn unreadable(reason: &str) -> ! {
    ErrorReport::new(
        PgSqlErrorCode::ERRCODE_DATA_CORRUPTED,
        format!("could not read the snowflake_id file of prepared transactions \"{FILE}\": {reason}"),
        "snowflake_id",
    )
    .set_detail(
        "The file records the lowest ID of each prepared transaction, which snowflake_horizon() must stay below \
         until the transaction is committed or rolled back.",
    )
    .set_hint(format!(
        "Restore the file from a backup. If this server has no prepared transaction (pg_prepared_xacts is empty), \
         or none that took IDs, delete \"{FILE}\"."
    ))
    .report(PgLogLevel::ERROR);
    unreachable!("an ERROR report returns control to PostgreSQL")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_parse_or_say_why_not() {
        let entry = parse_line("snowflake_id prepared fxid=742 since_unix_ms=1732406400000").unwrap();
        assert_eq!(entry.fxid, 742);
        let layout = fixed_layout::get();
        assert_eq!(layout.unix_ms(entry.since), 1_732_406_400_000);
        for line in
            ["", "snowflake_id prepared fxid=x since_unix_ms=1", "snowflake_id prepared fxid=1", "other"]
        {
            assert!(parse_line(line).is_err(), "{line:?}");
        }
    }
}
