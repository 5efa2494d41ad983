//! PostgreSQL glue: how the core's rules live inside a server. Nothing here raises the SQL
//! surface's errors; it reports what it found, and `api` decides what the user is told.
//!
//! `shmem` and `reservation` are one subsystem in two files, as contrib's autoprewarm keeps
//! its shared state and its dump file: shared memory holds the reservation, the reservation
//! is restored into shared memory when the postmaster creates it, and the worker renews it
//! there. They import each other on purpose; nothing else in the crate does.

/// The wall clock and interruptible sleeps inside a backend.
pub mod clock;
/// Differences between PostgreSQL majors in the C API, each at the major where it changed.
pub mod compat;
/// Files in the data directory replaced whole or not at all (reservation, layout).
pub mod durable_file;
/// Hand-written version-1 function entries: the fast path, its guarded fallback, batches
/// returned in materialize mode.
pub mod fmgr;
/// The layout of this server's IDs, recorded on the first start and checked at every start.
pub mod recorded_layout;
/// The durable reservation: file, WAL records, and the worker that renews it (with `shmem`).
pub mod reservation;
/// The reservation's record file: its line, its checksum, reading and writing it.
pub mod reservation_record;
/// The `snowflake_id.*` settings.
pub mod settings;
/// The shard fence in force on the whole server, in shared memory (written by the worker).
pub mod shared_fence;
/// The generator state in shared memory (with `reservation`).
pub mod shmem;
