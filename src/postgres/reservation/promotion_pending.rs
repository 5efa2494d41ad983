//! The promotion guard, owed on disk until it is recorded.
//!
//! A server started in recovery (a standby, or archive recovery) owes a promotion guard
//! (`worker::record_promotion_guard`) once its recovery ends. Shared memory alone cannot
//! carry that debt: PostgreSQL removes `standby.signal` early in the end of recovery, before
//! its end-of-recovery record and before the worker starts, and a crash from that moment on (a
//! `kill -9`, a backend crash, a power loss) makes the postmaster create shared memory again
//! with no signal file left. Without this file that start ran no guard at all: it resumed at
//! the ceiling it had replayed, below IDs the old primary may have issued under records this
//! server never received.
//!
//! So every start in recovery first writes this file (durably: its content, then the folder),
//! every start that finds it owes the guard, and the worker removes it (durably) only once
//! the guard is recorded. A crash between the guard and the removal records the guard again
//! at the next start: further ahead, never short. A start that finds the file without a
//! signal file knows nothing of what it replayed before the crash (a clean stop of the old
//! primary, its lead settings): its guard is the full bound ahead of the clock, the safe side.

use crate::postgres::durable_file;
use snowflake_core::resume;
use std::path::Path;

/// In the data directory while a promotion guard is owed.
pub const FILE: &str = "snowflake_id.promotion_pending";
const TEMP_FILE: &str = "snowflake_id.promotion_pending.tmp";
const CONTENT: &str = "snowflake_id: this server started in recovery and has not yet recorded its \
                       promotion guard; the reservation worker removes this file once it has\n";

/// The files whose presence at start means recovery (PostgreSQL removes them when it ends).
const SIGNAL_FILES: [&str; 2] = ["standby.signal", "recovery.signal"];

/// Whether the promotion guard is owed, asked by the postmaster when it creates shared
/// memory (its working directory is the data directory): `resume::promotion_owed` of whether
/// a signal file is there and whether this file is. A debt to record is made durable here
/// first; a file that cannot be written stops the start (58030): a recovery without it could
/// end without a guard.
pub fn owed_at_start() -> bool {
    let in_recovery = SIGNAL_FILES.iter().any(|file| Path::new(file).exists());
    let debt = resume::promotion_owed(in_recovery, Path::new(FILE).exists());
    if debt.record_it {
        if let Err(error) = durable_file::replace(FILE, TEMP_FILE, CONTENT) {
            durable_file::not_recorded(
                "that a promotion guard is owed",
                FILE,
                " at a start in recovery",
                error,
            );
        }
    }
    debt.owed
}

/// The debt settled, once the guard is recorded: the file removed, and the removal made
/// durable (the folder fsynced), so that no later start runs the guard again.
pub fn settle() -> std::io::Result<()> {
    match std::fs::remove_file(FILE) {
        Ok(()) => std::fs::File::open(".")?.sync_all(),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(error) => Err(error),
    }
}
