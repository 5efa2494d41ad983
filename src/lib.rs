//! snowflake_id: Snowflake-style 64-bit IDs generated inside PostgreSQL.
//!
//! The modules, from pure rules to the SQL surface:

/// The bit layout of an ID: widths, shifts, masks (pure Rust).
pub mod layout;
/// UTC calendar arithmetic for the epoch setting and JSON output (pure Rust).
pub mod utc;
/// The generator's rules and clock policy over one atomic word per shard (pure Rust).
pub mod generator;
/// The wall clock and interruptible waiting inside a backend.
mod clock;
/// The `snowflake_id.*` settings.
mod gucs;
/// The generator state in shared memory.
mod shmem;
/// Every SQL-facing error, with its SQLSTATE, detail and hint.
mod errors;
/// SQL functions that issue IDs.
mod generate;
/// SQL functions that decode and compose IDs.
mod decode;
/// Tests that need a live backend (`cargo pgrx test`).
#[cfg(any(test, feature = "pg_test"))]
mod pg_tests;

use pgrx::prelude::*;

::pgrx::pg_module_magic!();

#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    gucs::init();
    // SAFETY: reads PostgreSQL globals in the process loading the library.
    unsafe {
        // Typos such as `snowflake_id.shardbits` become errors instead of silent no-ops.
        #[cfg(not(any(feature = "pg13", feature = "pg14")))]
        pg_sys::MarkGUCPrefixReserved(c"snowflake_id".as_ptr());
        #[cfg(any(feature = "pg13", feature = "pg14"))]
        pg_sys::EmitWarningsOnPlaceholders(c"snowflake_id".as_ptr());

        // Shared memory can only be had while preloading. Loaded later (by CREATE EXTENSION
        // alone), the generators raise an error that names the fix.
        if pg_sys::process_shared_preload_libraries_in_progress {
            shmem::init();
        }
    }
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
