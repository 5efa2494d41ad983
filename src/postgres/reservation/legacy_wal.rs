//! Whether WAL records under resource manager id 128 may still have to be replayed here:
//! versions up to 0.2.0 wrote their records under 128, PostgreSQL's id for extensions under
//! development, which other extensions may use too. So 128 is registered only while such
//! records may remain (`snowflake_id.legacy_wal_rmgr_id = -1`, the default): the record file
//! carries the flag (`Record::wal128`), set in every record written before 0.5.0, and
//! cleared once a checkpoint has completed after this server started with a version that
//! writes no record under 128 (crash recovery then starts after every such record). A fresh
//! cluster has no record and never registers 128.
//!
//! Archives and standbys are not seen from here: a standby replaying a primary's old WAL
//! keeps the flag it read from its own file; an operator restoring old archives sets
//! `snowflake_id.legacy_wal_rmgr_id = 128` for that recovery.

use super::record::{self, Record};
use crate::postgres::settings;
use pgrx::pg_sys;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

/// The id versions up to 0.2.0 wrote under.
pub const LEGACY_ID: u8 = 128;

/// Whether the flag is set, in this process: the postmaster's reading of the file at
/// start (inherited by every process), then the worker's own.
static MAY_REMAIN: AtomicBool = AtomicBool::new(false);

/// The flag as the record file holds it now, or this server writes records under 128
/// itself. An unreadable file counts as set: start-up refuses it anyway.
fn read_from_the_file() -> bool {
    let recorded = !matches!(record::read(), Ok(None | Some(Record { wal128: false, .. })));
    recorded || settings::wal_rmgr_id() == Some(LEGACY_ID)
}

/// Whether records under 128 may remain (in the postmaster, while preloading, before the
/// resource managers are registered).
pub fn at_start() -> bool {
    let may_remain = read_from_the_file();
    MAY_REMAIN.store(may_remain, Relaxed);
    may_remain
}

/// What the records this process writes say.
pub fn may_remain() -> bool {
    MAY_REMAIN.load(Relaxed)
}

/// Where the WAL was when the worker started, and the redo point of the first checkpoint
/// it saw starting after that (see `look_at_checkpoints`).
static STARTED_AT: AtomicU64 = AtomicU64::new(0);
static CHECKPOINT_SEEN: AtomicU64 = AtomicU64::new(0);

/// The worker starts: it takes the flag from the file, which an earlier worker may have
/// cleared since the postmaster read it.
pub fn worker_started() {
    MAY_REMAIN.store(read_from_the_file(), Relaxed);
    // SAFETY: reads a WAL position in shared memory under PostgreSQL's own locking.
    STARTED_AT.store(unsafe { pg_sys::GetXLogInsertRecPtr() }, Relaxed);
}

/// Clears the flag once a checkpoint that started after the worker (and so after every
/// record under 128) has completed: crash recovery starts at its redo point or later. A
/// checkpoint is known complete when the next one starts (the checkpointer runs one at a
/// time), so the redo point must be seen moving past the start twice.
pub fn look_at_checkpoints() {
    if !MAY_REMAIN.load(Relaxed) || settings::wal_rmgr_id() == Some(LEGACY_ID) {
        return;
    }
    // SAFETY: as in `worker_started`.
    let redo = unsafe { pg_sys::GetRedoRecPtr() };
    let seen = CHECKPOINT_SEEN.load(Relaxed);
    if seen == 0 && redo > STARTED_AT.load(Relaxed) {
        CHECKPOINT_SEEN.store(redo, Relaxed);
    } else if seen != 0 && redo > seen {
        MAY_REMAIN.store(false, Relaxed);
        pgrx::log!(
            "snowflake_id: no WAL record of versions up to 0.2.0 is left to replay; the next start \
             registers no resource manager under id {LEGACY_ID}"
        );
    }
}
