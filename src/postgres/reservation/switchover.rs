//! A planned switchover resumes where the old primary stopped, not a bound ahead of the clock.
//!
//! The promotion guard (`worker::record_promotion_guard`) resumes `max_lead_ms + reserve_ms +
//! max_clock_skew_ms` ahead of the clock (2.75 s by default) because a standby cannot know what
//! its old primary wrote after the last record it received. After a clean stop it can: the old
//! primary's shutdown checkpoint is written once every backend and the reservation worker have
//! exited, so every ceiling it ever issued under was in WAL before it (the worker writes a
//! ceiling's record before it publishes the ceiling), and every ID it issued lies below the last
//! ceiling record before it (a lowered ceiling is logged only once no shard has issued at or
//! above it, `generator::lower_ceiling`). So when the last record this server replayed before
//! its promotion is a shutdown checkpoint that comes after the last ceiling record it replayed,
//! it resumes at the larger of that ceiling and its clock: within the reservation's headroom
//! (`reserve_ms`, 0.5 s at most) of the clock, where the guard put it 2.75 s ahead. A switchover
//! by Patroni, or `pg_ctl stop -m fast` of the primary, the standby catching up, then a
//! promotion, is this case.
//!
//! What it assumes: the old primary did not run as a primary again after that checkpoint
//! without its WAL reaching this server (an HA manager restarts it as a standby; run as a
//! primary again, it would write a ceiling record at once, and this server, receiving it, falls
//! back to the guard). Anything else (the last record not a shutdown checkpoint, no ceiling
//! record replayed in this run of the standby, WAL that cannot be read) falls back to the guard.

use pgrx::pg_sys;
use pgrx::PgTryBuilder;
use std::ptr::null_mut;

/// PostgreSQL's reader callbacks for local WAL, as the C functions the reader calls (pgrx's
/// bindings wrap them as Rust functions, which cannot be given to it).
mod callbacks {
    use pgrx::pg_sys::{TimeLineID, XLogReaderState, XLogRecPtr, XLogSegNo};
    use std::ffi::{c_char, c_int};

    unsafe extern "C-unwind" {
        pub fn read_local_xlog_page_no_wait(
            state: *mut XLogReaderState,
            target_page: XLogRecPtr,
            wanted: c_int,
            target_record: XLogRecPtr,
            page: *mut c_char,
        ) -> c_int;
        pub fn wal_segment_open(state: *mut XLogReaderState, segment: XLogSegNo, timeline: *mut TimeLineID);
        pub fn wal_segment_close(state: *mut XLogReaderState);
    }
}

/// Whether the replay ended on the old primary's clean stop: the last record replayed is a
/// shutdown checkpoint, after `ceiling_end`, the end of the last ceiling record replayed (0:
/// none in this run of the standby, which is never clean). Run after the promotion, by the
/// reservation worker; an error reading the WAL is caught, and means `false`.
/// `resume::promotion` decides what follows from it.
pub fn replay_ended_on_shutdown_checkpoint(ceiling_end: pg_sys::XLogRecPtr) -> bool {
    if ceiling_end == 0 {
        return false;
    }
    // SAFETY: reads this server's own WAL up to where its replay ended, with PostgreSQL's
    // reader for local WAL; the reader is freed on every path but an error, which the catch
    // turns into `false` (its memory is then the worker's transaction-less context's, freed
    // with the process).
    PgTryBuilder::new(|| unsafe { replay_ended_on_shutdown_checkpoint_after(ceiling_end) })
        .catch_others(|_| false)
        .execute()
}

/// Whether the records from `after` to the end of the replay end with a shutdown checkpoint
/// (see the top).
unsafe fn replay_ended_on_shutdown_checkpoint_after(after: pg_sys::XLogRecPtr) -> bool {
    // SAFETY: as `replay_ended_on_shutdown_checkpoint` says.
    unsafe {
        let replay_end = pg_sys::GetXLogReplayRecPtr(null_mut());
        if after >= replay_end {
            return false;
        }
        let mut routine = pg_sys::XLogReaderRoutine {
            // Never waits for WAL that is not there (the records looked at were replayed); it
            // says so in its private data, which it needs.
            page_read: Some(callbacks::read_local_xlog_page_no_wait),
            segment_open: Some(callbacks::wal_segment_open),
            segment_close: Some(callbacks::wal_segment_close),
        };
        let mut no_wait = pg_sys::ReadLocalXLogPageNoWaitPrivate { end_of_wal: false };
        let reader = pg_sys::XLogReaderAllocate(
            pg_sys::wal_segment_size,
            null_mut(),
            &mut routine,
            (&raw mut no_wait).cast(),
        );
        if reader.is_null() {
            return false;
        }
        pg_sys::XLogBeginRead(reader, after);
        let clean = loop {
            let mut error: *mut std::ffi::c_char = null_mut();
            if pg_sys::XLogReadRecord(reader, &mut error).is_null() {
                // The WAL ended, or could not be read, before the replay's end: not shown clean.
                break false;
            }
            if (*reader).EndRecPtr >= replay_end {
                let header = &(*(*reader).record).header;
                break (*reader).EndRecPtr == replay_end
                    && header.xl_rmid as u32 == pg_sys::RmgrIds::RM_XLOG_ID
                    && (header.xl_info & !(pg_sys::XLR_INFO_MASK as u8)) as u32
                        == pg_sys::XLOG_CHECKPOINT_SHUTDOWN;
            }
        };
        pg_sys::XLogReaderFree(reader);
        clean
    }
}
