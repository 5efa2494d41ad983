//! Prepared transactions (two-phase commit) hold their IDs after their backend has moved on:
//! until `COMMIT PREPARED` or `ROLLBACK PREPARED`, maybe from another session, maybe after a
//! restart. So `PREPARE TRANSACTION` records the transaction's lowest time part and the shards
//! it took IDs of here, in shared memory and durably in `snowflake_id.prepared` (read back when
//! shared memory is created), before its backend's slot is released; the horizon of a shard
//! stays below every entry of that shard whose transaction is still prepared (the horizon of
//! every shard below every entry), and drops the others. A line of version 0.6.0 names no
//! shard: it holds every shard, as it did then.
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
use snowflake_core::horizon::{self, Horizons, PendingSlots, NONE, SEVERAL};
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

/// A prepared transaction, the lowest time part of its IDs and the shards it took them of
/// (`mark` as in `horizon::PendingSlot`, and the entry's bit words). `fxid` 0: a free entry.
#[derive(Clone, Copy, Default)]
#[repr(C)]
struct Entry {
    fxid: u64,
    since: u64,
    mark: u64,
}

/// The entries, then each one's bit words.
static mut ENTRIES: *mut Entry = std::ptr::null_mut();
static mut ENTRY_COUNT: usize = 0;

fn entry_count() -> usize {
    // SAFETY: a setting read in the postmaster before shared memory is requested.
    unsafe { max_prepared_xacts.max(0) as usize }
}

/// The bit words of one entry.
fn words() -> usize {
    horizon::bit_words(fixed_layout::get().shard_count())
}

pub fn bytes_needed() -> usize {
    entry_count() * (size_of::<Entry>() + words() * size_of::<u64>())
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
    let (entries, bits) = entries();
    entries.fill(Entry::default());
    bits.fill(0);
    // More entries than max_prepared_transactions allows now: the lowest are kept, which
    // holds the horizon no higher than they would. (Only this many fit in the shared memory
    // anyway, each of those kept with all its shards.)
    let mut recorded = recorded;
    recorded.sort_by_key(|(entry, _)| entry.since);
    let words = words();
    for (index, (entry, shards)) in recorded.into_iter().take(entries.len()).enumerate() {
        entries[index] = entry;
        bits[index * words..(index + 1) * words].copy_from_slice(&shards);
    }
}

/// The entries, and their bit words (`words()` per entry, entry after entry).
fn entries() -> (&'static mut [Entry], &'static mut [u64]) {
    // SAFETY: ENTRIES points at ENTRY_COUNT entries in shared memory, then their bit words,
    // set once per process before any SQL runs; callers hold the horizon lock (or are the
    // postmaster creating them).
    unsafe {
        if ENTRIES.is_null() {
            (&mut [], &mut [])
        } else {
            let bits = ENTRIES.add(ENTRY_COUNT).cast::<u64>();
            (
                std::slice::from_raw_parts_mut(ENTRIES, ENTRY_COUNT),
                std::slice::from_raw_parts_mut(bits, ENTRY_COUNT * words()),
            )
        }
    }
}

/// The shards of entry `index`.
fn shards(entry: &Entry, bits: &[u64], index: usize) -> Vec<u32> {
    let words = words();
    horizon::shards_of(entry.mark, &bits[index * words..(index + 1) * words])
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

/// The lowest time part of the prepared transactions' IDs, of every shard and of `shard`
/// (`NONE` if none), dropping the entries of transactions no longer prepared. Called with the
/// horizon lock held.
pub fn lowest_since(shard: Option<u32>) -> Horizons {
    let mut lowest = Horizons { every_shard: NONE, of_shard: NONE };
    let words = words();
    let (entries, bits) = entries();
    for (index, entry) in entries.iter_mut().enumerate().filter(|(_, entry)| entry.fxid != 0) {
        // SAFETY: the postmaster creating shared memory has no transactions to ask about:
        // every entry counts there.
        if unsafe { pg_sys::IsUnderPostmaster } && !still_prepared(entry.fxid) {
            *entry = Entry::default();
            bits[index * words..(index + 1) * words].fill(0);
            continue;
        }
        lowest.every_shard = lowest.every_shard.min(entry.since);
        let held =
            shard.is_none_or(|shard| horizon::holds(entry.mark, shard, |word| bits[index * words + word]));
        if held {
            lowest.of_shard = lowest.of_shard.min(entry.since);
        }
    }
    lowest
}

/// The prepared transactions that hold IDs: full transaction id, lowest time part, shards.
/// Takes the horizon lock.
pub fn held() -> Vec<(u64, u64, Vec<u32>)> {
    // SAFETY: see `horizon::for_active_snapshot`.
    unsafe { pg_sys::LWLockAcquire(LOCK, pg_sys::LWLockMode::LW_SHARED) };
    let (entries, bits) = entries();
    let held = entries
        .iter()
        .enumerate()
        .filter(|(_, entry)| entry.fxid != 0 && still_prepared(entry.fxid))
        .map(|(index, entry)| (entry.fxid, entry.since, shards(entry, bits, index)))
        .collect();
    // SAFETY: acquired above.
    unsafe { pg_sys::LWLockRelease(LOCK) };
    held
}

/// `XACT_EVENT_PRE_PREPARE` of a transaction that holds IDs (the one of slot `index`):
/// records its lowest time part and its shards, in shared memory and durably, before `PREPARE
/// TRANSACTION` goes on. An error here fails the `PREPARE` (the transaction is rolled back), as
/// PostgreSQL's own steps of it do. Relaxed loads: the slot's marks are this backend's own,
/// or its parallel workers', which have finished.
pub fn remember(slots: &PendingSlots, index: usize) {
    let slot = &slots.slots()[index];
    let since = slot.since.load(Relaxed);
    if since == NONE || entry_count() == 0 {
        // No IDs held; or prepared transactions are disabled, which PostgreSQL reports next.
        return;
    }
    // SAFETY: called during PREPARE TRANSACTION, whose xid is assigned first.
    let fxid = unsafe { pg_sys::GetTopFullTransactionIdIfAny() }.value;
    // SAFETY: see `horizon::for_active_snapshot`.
    unsafe { pg_sys::LWLockAcquire(LOCK, pg_sys::LWLockMode::LW_EXCLUSIVE) };
    lowest_since(None); // drops the entries of transactions no longer prepared
    let (entries, bits) = entries();
    let Some(free) = entries.iter().position(|entry| entry.fxid == 0) else {
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
    entries[free] = Entry { fxid, since, mark: slot.mark.load(Relaxed) };
    let words = words();
    for (to, from) in bits[free * words..(free + 1) * words].iter_mut().zip(slots.bits(index)) {
        *to = from.load(Relaxed);
    }
    let written = write(entries, bits);
    // SAFETY: acquired above.
    unsafe { pg_sys::LWLockRelease(LOCK) };
    if let Err(error) = written {
        durable_file::not_recorded(
            "the prepared transaction's IDs",
            FILE,
            " for the snowflake_id horizon",
            error,
        );
    }
}

/// The file's lines: one per entry, readable by people,
/// `snowflake_id prepared fxid=123 since_unix_ms=1732406400000 shards=3,5`.
fn write(entries: &[Entry], bits: &[u64]) -> std::io::Result<()> {
    let layout = fixed_layout::get();
    let text: String = entries
        .iter()
        .enumerate()
        .filter(|(_, entry)| entry.fxid != 0)
        .map(|(index, entry)| {
            let shards: Vec<String> = shards(entry, bits, index).iter().map(u32::to_string).collect();
            format!(
                "{PREFIX}fxid={} since_unix_ms={} shards={}\n",
                entry.fxid,
                layout.unix_ms(entry.since),
                shards.join(",")
            )
        })
        .collect();
    durable_file::replace(FILE, TEMP_FILE, &text)
}

/// The entries of the file with their bit words (none when there is no file).
fn read() -> Result<Vec<(Entry, Vec<u64>)>, String> {
    let text = match std::fs::read_to_string(FILE) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
        Err(error) => return Err(error.to_string()),
    };
    text.lines().map(parse_line).collect()
}

fn parse_line(line: &str) -> Result<(Entry, Vec<u64>), String> {
    let malformed = || format!("unexpected line {line:?}");
    let fields = line.strip_prefix(PREFIX).ok_or_else(malformed)?;
    let (fxid, rest) = fields.split_once(' ').ok_or_else(malformed)?;
    // Version 0.6.0 wrote no shards: such a transaction holds every shard.
    let (since_unix_ms, shards) =
        rest.split_once(' ').map_or((rest, None), |(since, shards)| (since, Some(shards)));
    let fxid =
        fxid.strip_prefix("fxid=").and_then(|value| value.parse::<u64>().ok()).ok_or_else(malformed)?;
    let since_unix_ms = since_unix_ms
        .strip_prefix("since_unix_ms=")
        .and_then(|value| value.parse::<i64>().ok())
        .ok_or_else(malformed)?;
    // Before the epoch: nothing is below; past the layout's end: the end.
    let layout = fixed_layout::get();
    let since = layout.time_part(since_unix_ms.max(layout.epoch_unix_ms())).unwrap_or(layout.max_time_part());
    let mut bits = vec![0; words()];
    let shards: Vec<u32> = match shards {
        None => (0..layout.shard_count()).collect(),
        Some(shards) => shards
            .strip_prefix("shards=")
            .ok_or_else(malformed)?
            .split(',')
            .map(|shard| shard.parse::<u32>().ok().filter(|&shard| shard < layout.shard_count()))
            .collect::<Option<_>>()
            .ok_or_else(malformed)?,
    };
    for (word, bit) in shards.into_iter().map(horizon::bit_of) {
        bits[word] |= bit;
    }
    Ok((Entry { fxid, since, mark: SEVERAL }, bits))
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
        let (entry, bits) =
            parse_line("snowflake_id prepared fxid=742 since_unix_ms=1732406400000 shards=3,70").unwrap();
        assert_eq!(entry.fxid, 742);
        let layout = fixed_layout::get();
        assert_eq!(layout.unix_ms(entry.since), 1_732_406_400_000);
        assert_eq!(horizon::shards_of(entry.mark, &bits), vec![3, 70]);
        // A line of 0.6.0: every shard.
        let (entry, bits) = parse_line("snowflake_id prepared fxid=742 since_unix_ms=1732406400000").unwrap();
        assert_eq!(horizon::shards_of(entry.mark, &bits).len(), layout.shard_count() as usize);
        for line in [
            "",
            "snowflake_id prepared fxid=x since_unix_ms=1",
            "snowflake_id prepared fxid=1",
            "snowflake_id prepared fxid=1 since_unix_ms=1 shards=",
            "snowflake_id prepared fxid=1 since_unix_ms=1 shards=99999",
            "snowflake_id prepared fxid=1 since_unix_ms=1 other=1",
            "other",
        ] {
            assert!(parse_line(line).is_err(), "{line:?}");
        }
    }
}
