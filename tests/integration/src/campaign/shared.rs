//! What the campaign's parts share: the shards and where each is issued (the directory the
//! clients route by), the faked clocks' offsets, the moves and promotions the checks read, and
//! the findings met on the way.

use super::schedule::Group;
use postgres::Config;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard, TryLockError};
use std::time::Instant;

/// Shards each group issues at the start; the last of each moves between the groups.
pub const PAIR_SHARDS: [i32; 5] = [1, 2, 3, 4, 5];
pub const SECOND_SHARDS: [i32; 3] = [11, 12, 15];
pub const MOVABLE_SHARDS: [i32; 2] = [5, 15];

pub fn all_shards() -> Vec<i32> {
    PAIR_SHARDS.iter().chain(&SECOND_SHARDS).copied().collect()
}

/// Where a group accepts writes now.
#[derive(Clone)]
pub struct Endpoint {
    /// The server's name in the history and the logs, such as `pair-2` (the pair's second
    /// primary) or `second`.
    pub name: String,
    pub config: Config,
}

/// What the clients look up before each statement: where each group accepts writes, and
/// which group issues each shard.
#[derive(Default)]
pub struct Directory {
    /// `None` while a group accepts none (during a failover).
    pub primary: [Option<Endpoint>; 2],
    pub home: BTreeMap<i32, Group>,
    /// Failovers of each group so far.
    pub epoch: [u32; 2],
    /// During a split brain (`BeforePromotion::ManagerDied`), the pair's old primary, still
    /// running after another was promoted, and its epoch: the writers' statements go to either,
    /// as clients of a primary nobody stopped do, so that each shard is written on both.
    pub split: Option<(Endpoint, u32)>,
    /// While a copy of the pair's primary's data directory runs beside it (`Fault::Copy`):
    /// the copy, which the writers of the pair's shards send every other statement to, as the
    /// clients of a snapshot started by mistake would.
    pub copy: Option<Endpoint>,
}

/// What every thread of a campaign shares.
pub struct Shared {
    pub started: Instant,
    pub stop_writing: AtomicBool,
    /// Set when the readers are to stop at once (they ran out of time).
    pub give_up: AtomicBool,
    pub directory: RwLock<Directory>,
    /// One freeze per shard: the freeze of the documented move (which waits for the writes
    /// in flight and holds new ones), kept in the clients' process (`enter`, `freeze`).
    freezes: BTreeMap<i32, Freeze>,
    /// The offset of each group's clock from the real time, in ms, with when it was set (ms
    /// since the start): the lead check reads the clock a server had.
    pub offsets: Mutex<[Vec<OffsetChange>; 2]>,
    /// The files libfaketime reads each group's offset from, one per running server, each with
    /// that server's own skew from its group's clock (ms; see `pair_skew_ms`).
    pub clock_files: Mutex<[Vec<(PathBuf, i64)>; 2]>,
    /// The skew of the pair's standbys' clocks from their primary's, in ms (the schedule's
    /// `pair_skew_ms`): every standby is built with the skew its primary lacks, so the two
    /// servers of the pair always disagree by it. 0 in seeds without skew.
    pub pair_skew_ms: i64,
    /// Each server's skew from its group's clock, by name (0 for a name not here).
    pub skews: Mutex<BTreeMap<String, i64>>,
    /// The lead bound of each group (the larger of its servers'), in ms.
    pub lead_ms: [i64; 2],
    /// Things that went wrong outside the checks (a fault whose server did not come back).
    pub findings: Mutex<Vec<String>>,
    /// Each writer's last success, in ms since the start.
    pub successes: Mutex<BTreeMap<usize, u64>>,
    /// The moves of shards so far.
    pub moves: Mutex<Vec<Move>>,
    /// Where each failover of the pair switched timelines: the end of the WAL its promoted
    /// standby had, by the epoch it ended (the old primary's).
    pub switchpoints: Mutex<BTreeMap<u32, u64>>,
    /// The pair's standbys the harness rebuilt because their replay stood still (see
    /// `System::rebuild_standby_if_stuck`), each said as the summary says it.
    pub rebuilt_standbys: Mutex<Vec<String>>,
    /// Promotions the harness repeated because the standby stopped during them (see
    /// `System::promote_standby`), each said as the summary says it.
    pub repeated_promotions: Mutex<Vec<String>>,
    /// Fault steps a lane skipped, reached too late (`nemesis::LATE_BY`).
    pub skipped_steps: AtomicUsize,
}

/// A shard moved from one group to the other.
pub struct Move {
    pub shard: i32,
    pub from: Group,
    pub to: Group,
    /// When the source's reservation worker applied the fence without the shard (ms since
    /// the start), and the source's clock then (Unix ms, offset included).
    pub fenced_at_ms: u64,
    pub fenced_clock_unix_ms: i64,
    /// When the target's fence let the shard in.
    pub opened_at_ms: u64,
    /// The source's last ID of the shard `FENCE_REACTION` after its worker applied the fence
    /// (`snowflake_stats()`): none may come later. `None` when the source no longer knew it
    /// (reset by a crash since its last call of the shard).
    pub last_id_at_fence: Option<i64>,
}

/// How long after the worker applied a fence a call may still issue: one that passed the
/// fence check just before it changed, on a loaded machine. The fence check allows this much,
/// not the lead bound (an ID ahead of the clock could hide a late call up to that far).
pub const FENCE_REACTION: std::time::Duration = std::time::Duration::from_millis(100);

/// A shard's freeze: every client statement of the shard holds `lock` shared; a move sets
/// `pending`, so that no new statement takes it, and then takes it exclusively once the
/// statements in flight have ended. (Waiting in `RwLock::write` would hold new readers too,
/// but then nothing else could be done while waiting.)
struct Freeze {
    lock: RwLock<()>,
    pending: AtomicBool,
}

/// A shard frozen for a move, until dropped.
pub struct Frozen<'a> {
    _lock: RwLockWriteGuard<'a, ()>,
    pending: &'a AtomicBool,
}

impl Drop for Frozen<'_> {
    fn drop(&mut self) {
        // Before the lock is released (fields drop after this): a client that sees no move
        // pending waits in `read` for the moment it is.
        self.pending.store(false, Ordering::SeqCst);
    }
}

impl Shared {
    /// What a client statement of `shard` holds while it runs; `None` while a move freezes the
    /// shard (the client tries again a moment later).
    pub fn enter(&self, shard: i32) -> Option<RwLockReadGuard<'_, ()>> {
        let freeze = &self.freezes[&shard];
        if freeze.pending.load(Ordering::SeqCst) {
            return None;
        }
        Some(freeze.lock.read().unwrap())
    }

    /// Freezes `shard` for a move: holds new client statements of it off and waits for those in
    /// flight, calling `meanwhile` every 20 ms while it waits.
    pub fn freeze(&self, shard: i32, mut meanwhile: impl FnMut()) -> Frozen<'_> {
        let freeze = &self.freezes[&shard];
        freeze.pending.store(true, Ordering::SeqCst);
        loop {
            match freeze.lock.try_write() {
                Ok(lock) => return Frozen { _lock: lock, pending: &freeze.pending },
                Err(TryLockError::Poisoned(error)) => panic!("a client panicked holding the freeze: {error}"),
                Err(TryLockError::WouldBlock) => {
                    meanwhile();
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
            }
        }
    }

    pub fn new(lead_ms: [i64; 2], pair_skew_ms: i64) -> Shared {
        let freezes = all_shards()
            .into_iter()
            .map(|shard| (shard, Freeze { lock: RwLock::new(()), pending: AtomicBool::new(false) }))
            .collect();
        Shared {
            started: Instant::now(),
            stop_writing: AtomicBool::new(false),
            give_up: AtomicBool::new(false),
            directory: RwLock::new(Directory::default()),
            freezes,
            offsets: Mutex::new([vec![OffsetChange::default()], vec![OffsetChange::default()]]),
            clock_files: Mutex::new([Vec::new(), Vec::new()]),
            pair_skew_ms,
            skews: Mutex::new(BTreeMap::new()),
            lead_ms,
            findings: Mutex::new(Vec::new()),
            successes: Mutex::new(BTreeMap::new()),
            moves: Mutex::new(Vec::new()),
            switchpoints: Mutex::new(BTreeMap::new()),
            rebuilt_standbys: Mutex::new(Vec::new()),
            repeated_promotions: Mutex::new(Vec::new()),
            skipped_steps: AtomicUsize::new(0),
        }
    }

    /// ms since the campaign started.
    pub fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    pub fn writing(&self) -> bool {
        !self.stop_writing.load(Ordering::Relaxed)
    }

    pub fn finding(&self, finding: String) {
        eprintln!("campaign: FINDING: {finding}");
        self.findings.lock().unwrap().push(finding);
    }

    /// Where a writer sends its statement number `op` of `shard`: as `route`, except during a
    /// split brain, when every writer of the pair's shards sends its statements to the old
    /// primary and the new one by turns (with synchronous replication a writer's commit on the
    /// old primary then waits for a standby that was promoted, but bare IDs, the stray's
    /// among them, still come back from it), and while a copy of the pair's primary runs, when
    /// they send them to the primary and the copy by turns.
    pub fn route_for(&self, op: i64, shard: i32) -> (Group, Option<Endpoint>, u32) {
        let directory = self.directory.read().unwrap();
        let group = directory.home[&shard];
        match &directory.split {
            Some((old, epoch)) if group == Group::Pair && op % 2 == 1 => (group, Some(old.clone()), *epoch),
            None if group == Group::Pair && op % 2 == 1 && directory.copy.is_some() => {
                (group, directory.copy.clone(), directory.epoch[group.index()])
            }
            _ => (group, directory.primary[group.index()].clone(), directory.epoch[group.index()]),
        }
    }

    /// The current primary of the group that issues `shard`, and the group's epoch.
    pub fn route(&self, shard: i32) -> (Group, Option<Endpoint>, u32) {
        let directory = self.directory.read().unwrap();
        let group = directory.home[&shard];
        (group, directory.primary[group.index()].clone(), directory.epoch[group.index()])
    }

    /// Sets the clock of every server of `group` `ms` off the real time (each with its skew),
    /// at once.
    pub fn set_offset(&self, group: Group, ms: i64) {
        // Taken before clocks_steady: the failover that holds the pair's clock starts servers.
        let _held = (group == Group::Pair).then(pair_clock_held);
        let _steady = clocks_steady();
        let from_ms = self.now_ms();
        let files = self.clock_files.lock().unwrap();
        for (file, skew_ms) in &files[group.index()] {
            write_offset(file, ms + skew_ms);
        }
        self.offsets.lock().unwrap()[group.index()].push(OffsetChange {
            from_ms,
            until_ms: self.now_ms(),
            ms,
        });
    }

    /// The current offset of `group`'s clock.
    pub fn offset(&self, group: Group) -> i64 {
        self.offsets.lock().unwrap()[group.index()].last().map_or(0, |change| change.ms)
    }

    /// A new server `name` of `group` reads its clock from `file`: it starts at the group's
    /// offset, `skew_ms` off it for as long as it runs.
    pub fn add_clock(&self, group: Group, name: &str, file: PathBuf, skew_ms: i64) {
        write_offset(&file, self.offset(group) + skew_ms);
        self.skews.lock().unwrap().insert(name.to_string(), skew_ms);
        self.clock_files.lock().unwrap()[group.index()].push((file, skew_ms));
    }

    pub fn remove_clock(&self, group: Group, file: &std::path::Path) {
        self.clock_files.lock().unwrap()[group.index()].retain(|(known, _)| known != file);
    }

    /// The skew of the server `name`'s clock from its group's, in ms.
    pub fn skew_of(&self, name: &str) -> i64 {
        self.skews.lock().unwrap().get(name).copied().unwrap_or(0)
    }
}

/// A group's clock set `ms` off the real time: its files were written between `from_ms` and
/// `until_ms` (campaign time; on a loaded machine the two can be tens of ms apart, and a
/// server may read the new offset at any moment between them).
#[derive(Clone, Copy, Default, Debug)]
pub struct OffsetChange {
    pub from_ms: u64,
    pub until_ms: u64,
    pub ms: i64,
}

/// Held while a server starts and while an offset changes, so that no clock moves during a
/// start. `pg_ctl start -w` runs on the faked clock too and waits for a postmaster.pid whose
/// start time is at most 2 s before its own: a clock set back further between the two
/// readings makes it wait until its timeout for a server that has started (seed 201 on 18).
pub fn clocks_steady() -> std::sync::MutexGuard<'static, ()> {
    static STEADY: Mutex<()> = Mutex::new(());
    STEADY.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Held by a failover from the moment its standby stops receiving the primary's WAL (stopped,
/// powered off, cut off) until the promoted server has its new standby: meanwhile no fault
/// moves the pair's clock. A clock run ahead while the standby receives nothing, then set back
/// before the promotion, breaks the promotion's documented assumption (README, guarantee 3;
/// docs/reliability.md, "What it still cannot see"): it would repeat IDs by design. Taken
/// before `clocks_steady`, never inside it.
pub fn pair_clock_held() -> std::sync::MutexGuard<'static, ()> {
    static HELD: Mutex<()> = Mutex::new(());
    HELD.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The offset as libfaketime reads it: seconds, with a sign and a fraction.
fn write_offset(file: &std::path::Path, ms: i64) {
    crate::faults::write_offset_file(file, &format!("{:+.3}", ms as f64 / 1000.0));
}
