//! PostgreSQL glue: how the core's rules live inside a server. Nothing here raises the SQL
//! surface's errors; it reports what it found, and `api` decides what the user is told.
//!
//! From the bottom up: the PostgreSQL facts (`compat`, `clock`, `durable_file`, `guc`,
//! `fmgr`); the layout fixed at start (`fixed_layout`); the fence, the lease that closes it
//! while the HA manager does not confirm this server, the registry that closes each shard this
//! server does not hold, and the other settings (`fence`, `fence::lease`, `registry`,
//! `settings`), with the worker's own threads that ask the last two (`worker_thread`); the
//! reservation's record and its restore at start
//! (`reservation::record`, `reservation::restore`); shared memory (`shmem`), which restores
//! the reservation when it is created; and what runs on it: the WAL resource manager, the
//! worker and the promotion guard, owed on disk until it is recorded, and resuming where the
//! old primary stopped after a clean switchover (`reservation::wal`, `reservation::worker`,
//! `reservation::promotion_pending`, `reservation::switchover`); the
//! committed horizon, its pending slots and prepared transactions (`horizon`). Beside them, for
//! the SQL surface's DDL: new tables' keys (`auto_keys`) and the hint on a converted key's
//! missing sequence (`sequence_hint`).

/// `snowflake_id.auto_keys`: the schemas whose new tables get snowflake keys on their own.
pub mod auto_keys;
/// The wall clock and interruptible sleeps inside a backend.
pub mod clock;
/// Differences between PostgreSQL majors in the C API, and facts of the running server that
/// come from it (binary-upgrade mode), each at the major where it changed.
pub mod compat;
/// Files in the data directory replaced whole or not at all (reservation, layout).
pub mod durable_file;
/// The shard fence: the setting, each session's copy, and the server-wide one in shared memory.
pub mod fence;
/// The layout of this server's IDs: its settings, checked and frozen at start, and recorded.
pub mod fixed_layout;
/// Hand-written version-1 function entries: the fast path, its guarded fallback, batches
/// returned in materialize mode.
pub mod fmgr;
/// The plumbing the settings share: hot-path reads, refusals, checks at start.
pub mod guc;
/// The committed horizon: pending slots, the transaction callback, prepared transactions.
pub mod horizon;
/// The shard registry: the claims this server holds in etcd, which the fence obeys.
pub mod registry;
/// The durable reservation: its record file, WAL records, and the worker that renews it.
pub mod reservation;
/// A hint on "relation "…_seq" does not exist": the converted key's sequence is gone, and why.
pub mod sequence_hint;
/// The other `snowflake_id.*` settings: default shard, clock policy, reservation, WAL ids.
pub mod settings;
/// The generator state in shared memory: the reservation and one slot per shard.
pub mod shmem;
/// The reservation worker's own threads, which ask network peers: every signal blocked in them.
pub mod worker_thread;
