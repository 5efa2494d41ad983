//! The rules of snowflake IDs, with no PostgreSQL in them. The extension (`snowflake_id`)
//! puts them in shared memory and behind SQL functions; everything here is plain Rust,
//! tested with fake clocks by `cargo test -p snowflake_core`.

/// The wall clock as the generator reads it: `clock_gettime`, in Unix milliseconds.
pub mod clock;
/// CRC-32C, the checksum of PostgreSQL's control file, for records in the data directory.
pub mod crc32c;
/// Which shards one server may issue: the parsed `snowflake_id.shards`.
pub mod fence;
/// Claims over one atomic word per shard: the clock policy and the durable reservation's rules.
pub mod generator;
/// The committed horizon: how far readers paging by ID may read without skipping a row.
pub mod horizon;
/// The bit layout of an ID: widths, shifts, masks, pack and unpack. The one source of truth.
pub mod layout;
/// The lease's rules: which URLs and answers count, when it is lost, on a clock that counts suspend.
pub mod lease;
/// The registry's rules (docs/registry.md): who may take a shard's claim, its mark, its outage.
pub mod registry;
/// The durable reservation's shared words, and whoever keeps it (`ReservationKeeper`).
pub mod reservation;
/// Where a server resumes: every decision of the reservation's protocol, facts in, a plan out.
pub mod resume;
/// The atomics of the shared state: std's, or loom's for the model checks of `tests/loom.rs`.
pub mod sync;
/// UTC calendar arithmetic for the epoch setting and JSON output.
pub mod utc;
