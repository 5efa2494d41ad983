//! snowflake_id: Snowflake-style 64-bit IDs generated inside PostgreSQL.
//!
//! The modules, from pure rules to the SQL surface:

/// The wall clock and interruptible waiting inside a backend.
pub mod clock;
/// Differences between PostgreSQL majors in the C API, each at the major where it changed.
mod compat;
/// `snowflake_convert_column()`: switching an existing integer key to snowflake IDs.
mod convert;
/// SQL functions that decode and compose IDs.
mod decode;
/// Every SQL-facing error, with its SQLSTATE, detail and hint.
mod errors;
/// SQL functions that issue IDs.
mod generate;
/// The generator's rules and clock policy over one atomic word per shard (pure Rust).
pub mod generator;
/// The `snowflake_id.*` settings.
mod gucs;
/// The bit layout of an ID: widths, shifts, masks (pure Rust).
pub mod layout;
/// Tests that need a live backend (`cargo pgrx test`).
#[cfg(any(test, feature = "pg_test"))]
mod pg_tests;
/// The durable reservation: file, WAL records, and the worker that renews it.
mod reservation;
/// The generator state in shared memory.
mod shmem;
/// `snowflake_stats()`: per-shard counters.
mod stats;
/// UTC calendar arithmetic for the epoch setting and JSON output (pure Rust).
pub mod utc;

use pgrx::prelude::*;

::pgrx::pg_module_magic!();

#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    // Shared memory and postmaster-only settings can only be had while preloading. Loaded
    // later (by CREATE EXTENSION alone) the library defines nothing, and every function
    // raises an error that names the fix.
    // SAFETY: reads a PostgreSQL global in the process loading the library.
    if !unsafe { pg_sys::process_shared_preload_libraries_in_progress } {
        return;
    }
    gucs::init();
    // SAFETY: called once, in the postmaster, after the settings are defined.
    unsafe {
        // Misspelt `snowflake_id.*` settings are reported instead of silently ignored.
        pg_sys::MarkGUCPrefixReserved(c"snowflake_id".as_ptr());
    }
    shmem::init();
    reservation::register_wal();
    reservation::register_worker();
}

/// Required by `cargo pgrx test`: the settings of its test server.
#[cfg(test)]
pub mod pg_test {
    pub fn setup(_options: Vec<&str>) {}

    #[must_use]
    pub fn postgresql_conf_options() -> Vec<&'static str> {
        vec!["shared_preload_libraries = 'snowflake_id'"]
    }
}
