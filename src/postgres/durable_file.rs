//! Files in the data directory that must survive a crash whole: the reservation and the
//! recorded layout.

use pgrx::pg_sys::panic::ErrorReport;
use pgrx::{PgLogLevel, PgSqlErrorCode};
use std::io::Write;
use std::os::unix::fs::FileExt;

/// Raises an ERROR for one of these files that could not be written: 58030 (io_error), as
/// PostgreSQL reports its own files, with the path and the system's reason, never XX000.
/// `what` says what was to be recorded ("the snowflake_id reservation").
pub fn not_recorded(what: &str, file: &str, context: &str, error: std::io::Error) -> ! {
    ErrorReport::new(
        PgSqlErrorCode::ERRCODE_IO_ERROR,
        format!("could not record {what} in \"{file}\"{context}: {error}"),
        "snowflake_id",
    )
    .set_hint(
        "The file is in the data directory: check its disk (free space, permissions, the kernel log); \
         PostgreSQL's own files there are at risk too.",
    )
    .report(PgLogLevel::ERROR);
    unreachable!("an ERROR report returns control to PostgreSQL")
}

/// Replaces `file` with `content` so that a crash at any moment leaves the old or the new
/// content, never a torn one: written to `temp_file`, fsynced, renamed over `file`, and the
/// directory fsynced so that the rename itself is durable.
pub fn replace(file: &str, temp_file: &str, content: &str) -> std::io::Result<()> {
    let mut temp = std::fs::File::create(temp_file)?;
    temp.write_all(content.as_bytes())?;
    temp.sync_all()?;
    drop(temp);
    std::fs::rename(temp_file, file)?;
    std::fs::File::open(".")?.sync_all()
}

/// Writes `content` over `file` in place, when the file exists with the same length: one
/// write at offset 0 and one fdatasync, instead of the two fsyncs of `replace`. Writes kept
/// this short never tear: PostgreSQL relies on the same for `pg_control`, whose writes it
/// keeps within 512 bytes (`PG_CONTROL_MAX_SAFE_SIZE` in `src/include/catalog/pg_control.h`),
/// a disk sector. Otherwise (the first write, or a record of another length) `replace`.
pub fn overwrite(file: &str, temp_file: &str, content: &str) -> std::io::Result<()> {
    const MAX_ATOMIC_WRITE: usize = 512;
    debug_assert!(content.len() <= MAX_ATOMIC_WRITE);
    match std::fs::OpenOptions::new().write(true).open(file) {
        Ok(existing)
            if content.len() <= MAX_ATOMIC_WRITE && existing.metadata()?.len() == content.len() as u64 =>
        {
            existing.write_all_at(content.as_bytes(), 0)?;
            existing.sync_data()
        }
        Ok(_) => replace(file, temp_file, content),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => replace(file, temp_file, content),
        Err(error) => Err(error),
    }
}
