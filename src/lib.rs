//! snowflake_id: Snowflake-style 64-bit IDs generated inside PostgreSQL.
//!
//! Three tiers, each using only the ones below it:
//! - `snowflake_core` (crates/snowflake_core): the rules, with no PostgreSQL in them: the bit
//!   layout, the generator's claims and clock policy, UTC arithmetic.
//! - `postgres`: the glue that puts those rules into a server: shared memory and its durable
//!   record, the settings, the clock inside a backend, the hand-written function entries, and
//!   the differences between PostgreSQL majors.
//! - `api`: the SQL surface: the functions users call, and the errors they raise.

/// The SQL surface: generators, decoders, statistics, key conversion, and their errors.
mod api;
/// Tests that need a live backend (`cargo pgrx test`).
#[cfg(any(test, feature = "pg_test"))]
mod pg_tests;
/// PostgreSQL glue: shared memory, the reservation and its worker, settings, clock, fmgr.
mod postgres;

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
    postgres::settings::init();
    // SAFETY: called once, in the postmaster, after the settings are defined.
    unsafe {
        // Misspelt `snowflake_id.*` settings are reported instead of silently ignored.
        pg_sys::MarkGUCPrefixReserved(c"snowflake_id".as_ptr());
    }
    postgres::shmem::init();
    postgres::reservation::register_wal();
    postgres::reservation::register_worker();
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
