//! The horizons given so far (see the top of `horizon`): the history shared by every backend,
//! one entry per next xid, and each backend's own entries.
//!
//! # Who can push a reader's horizons out
//! Every role may call `snowflake_horizon()`, so no caller may push the horizons another
//! reader needs out of what is kept (0.7.0 kept the last 256 calls of all: a flood of calls by
//! one role sent the others' polls back to the horizon of the start). Two rules:
//! * One shared entry per next xid: an entry is used only for snapshots with `N < S.xmax`,
//!   taken after an xid `>= N` was assigned, so after every computation that still saw `N` as
//!   the next xid. The newest computation for one `N` holds for exactly the snapshots the older
//!   ones held for, and is at least as high (the horizon of every shard never goes back; that of
//!   one shard is the higher of the two when both asked for it): it replaces them (`merged`).
//!   A shard's own horizon replaced by a call for another shard leaves that entry's horizon of
//!   every shard, lower and true. Calls that assign no xid, however many, so write one entry
//!   between two xid assignments: only xids advance the `HISTORY` shared entries.
//! * Each backend keeps its own entries in its own memory (`OWN`), and a call returns the
//!   highest that holds of the shared ones and its own. A caller who assigns xids as fast as it
//!   can (a loop of `SELECT pg_current_xact_id(), snowflake_horizon()`, or subtransactions) can
//!   flush the shared ones, and only them: a reader's own previous polls stay, and answer as
//!   they would have from the shared history, its own shard's horizon included. Its own are
//!   few, and none of those that matter is dropped (`Own::keep`): an entry whose `N` had been
//!   assigned and had ended when a later one was kept holds for every snapshot taken since, and
//!   such entries are merged into one (merging an entry into a later one is always true, see
//!   `merged`: the merge only holds for fewer snapshots); of the others, the oldest is the first
//!   to hold, and is kept with the newest.
//!   Keeping only the last few would not do: subtransactions that assign xids and do not end
//!   (released savepoints) give each poll its own next xid while none of them holds, and a
//!   reader polling more often than its writers commit would lose the one poll that does.

use pgrx::pg_sys;

/// How many horizons whose next xid had not ended yet each backend keeps of its own.
const OWN_PENDING: usize = 8;

/// Horizons given, newest last, at most one per next xid; all zero: empty.
#[derive(Clone, Copy)]
#[repr(C)]
pub struct History<const N: usize> {
    /// Entries written so far; the newest is at `(written - 1) % N`.
    written: u64,
    entries: [Given; N],
}

/// A horizon given, as time parts, with the next xid when it was computed.
#[derive(Clone, Copy)]
#[repr(C)]
pub struct Given {
    pub next_xid: pg_sys::TransactionId,
    /// The shard the call asked for; `EVERY_SHARD`: none.
    pub shard: u32,
    /// Of every shard: at least the entry's before.
    pub every_shard: u64,
    /// Of `shard`: at least `every_shard`.
    pub of_shard: u64,
}

pub const EVERY_SHARD: u32 = u32::MAX;

impl Given {
    const NONE: Given =
        Given { next_xid: pg_sys::TransactionId::INVALID, shard: EVERY_SHARD, every_shard: 0, of_shard: 0 };

    /// The horizon this entry gives for `shard` (`None`: every shard).
    pub fn of(&self, shard: Option<u32>) -> u64 {
        if shard == Some(self.shard) {
            self.of_shard
        } else {
            self.every_shard
        }
    }

    /// This entry and `newer`, computed later (so with the same next xid or a later one), in
    /// one: with `newer`'s next xid, so that it holds for the snapshots `newer` holds for (see
    /// the top), which this one holds for too; so the higher of each horizon does. With the
    /// same next xid, the snapshots of both. The shard's own horizon is kept for `newer`'s
    /// shard, or for this one's when `newer` asked for none.
    pub fn merged(self, newer: Given) -> Given {
        let every_shard = self.every_shard.max(newer.every_shard);
        let (shard, of_shard) = if newer.shard == self.shard || newer.shard == EVERY_SHARD {
            (self.shard, self.of_shard.max(newer.of_shard))
        } else {
            (newer.shard, newer.of_shard)
        };
        Given { next_xid: newer.next_xid, shard, every_shard, of_shard: of_shard.max(every_shard) }
    }
}

impl<const N: usize> History<N> {
    /// The entry written `age` entries before the newest, while it is kept.
    pub fn newest(&self, age: u64) -> Option<Given> {
        let kept = self.written.min(N as u64);
        (age < kept).then(|| self.entries[((self.written - 1 - age) % N as u64) as usize])
    }

    /// Keeps `given`, computed after every entry: merged into the newest one when that was
    /// computed with the same next xid (see the top), else as the newest, in place of the
    /// oldest when `N` are kept.
    pub fn keep(&mut self, given: Given) {
        match self.newest(0) {
            Some(newest) if newest.next_xid == given.next_xid => {
                self.entries[((self.written - 1) % N as u64) as usize] = newest.merged(given);
            }
            _ => {
                self.entries[(self.written % N as u64) as usize] = given;
                self.written += 1;
            }
        }
    }

    /// The highest horizon for `shard` (`None`: every shard) of the entries computed before
    /// `snapshot`; `None` if there is none. Each entry's next xid is at least that of the one
    /// before it (read later), so the entries that hold are the newest that does and all older.
    pub fn highest_before(&self, snapshot: &pg_sys::SnapshotData, shard: Option<u32>) -> Option<u64> {
        (0..N as u64)
            .map_while(|age| self.newest(age))
            // SAFETY: compares two xids, as PostgreSQL does (modulo 2^32).
            .skip_while(|given| !unsafe { pg_sys::TransactionIdPrecedes(given.next_xid, snapshot.xmax) })
            .map(|given| given.of(shard))
            .max()
    }
}

/// A backend's own horizons (see the top).
pub struct Own {
    /// Its entries whose next xid had been assigned and had ended when it kept a later one,
    /// merged: they hold for every snapshot taken since.
    settled: Option<Given>,
    /// Its later entries, oldest first: `pending[..len]`.
    pending: [Given; OWN_PENDING],
    len: usize,
}

impl Own {
    pub const EMPTY: Own = Own { settled: None, pending: [Given::NONE; OWN_PENDING], len: 0 };

    /// Keeps `given`, computed after every entry, when `completed` was the newest xid that had
    /// ended: the entries whose next xid is `completed` or older are merged into `settled`
    /// (`given`'s is newer: the next xid is above every xid that ended); `given` is merged
    /// into the newest entry computed with the same next xid, or else added, and when there is
    /// no room the second and third oldest are merged (the oldest is the first to hold, the
    /// newest are the freshest).
    pub fn keep(&mut self, given: Given, completed: pg_sys::TransactionId) {
        let mut kept = 0;
        for index in 0..self.len {
            let entry = self.pending[index];
            // SAFETY: compares two xids, as PostgreSQL does (modulo 2^32).
            if unsafe { pg_sys::TransactionIdPrecedesOrEquals(entry.next_xid, completed) } {
                self.settled = Some(self.settled.map_or(entry, |settled| settled.merged(entry)));
            } else {
                self.pending[kept] = entry;
                kept += 1;
            }
        }
        self.len = kept;
        if self.len > 0 && self.pending[self.len - 1].next_xid == given.next_xid {
            self.pending[self.len - 1] = self.pending[self.len - 1].merged(given);
            return;
        }
        if self.len == OWN_PENDING {
            self.pending[1] = self.pending[1].merged(self.pending[2]);
            self.pending.copy_within(3.., 2);
            self.len -= 1;
        }
        self.pending[self.len] = given;
        self.len += 1;
    }

    /// The highest horizon for `shard` (`None`: every shard) of the entries computed before
    /// `snapshot`; `None` if there is none.
    pub fn highest_before(&self, snapshot: &pg_sys::SnapshotData, shard: Option<u32>) -> Option<u64> {
        self.settled
            .iter()
            .chain(&self.pending[..self.len])
            // SAFETY: compares two xids, as PostgreSQL does (modulo 2^32).
            .filter(|given| unsafe { pg_sys::TransactionIdPrecedes(given.next_xid, snapshot.xmax) })
            .map(|given| given.of(shard))
            .max()
    }
}
