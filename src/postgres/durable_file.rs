//! Files in the data directory that must survive a crash whole: the reservation and the
//! recorded layout.

use std::io::Write;

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
