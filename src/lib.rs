//! snowflake_id: Snowflake-style 64-bit IDs generated inside PostgreSQL.
//!
//! Three tiers, each using only the ones below it:
//! - `snowflake_core` (crates/snowflake_core): the rules, with no PostgreSQL in them: the bit
//!   layout, the generator's claims and clock policy, UTC arithmetic.
//! - `postgres`: the glue that puts those rules into a server: the layout fixed at start,
//!   the settings, shared memory and the durable reservation (its worker, its WAL records,
//!   the promotion guard), the fence, the lease and the shard registry, the committed horizon, the clock inside a
//!   backend, the hand-written function entries, and the differences between majors.
//! - `api`: the SQL surface: the functions users call, and the errors they raise.
//!
//! Beside them, `pg_tests`: the tests that need a live backend (`cargo pgrx test`).
//!
//! # Glossary
//! One word per thing, in the code, the messages and the docs:
//! - **shard**: the number in an ID's shard bits (`snowflake_nextval(3)` issues shard 3).
//!   One server issues each shard; IDs of different shards never collide.
//! - **slot**: a shard's state in shared memory (`ShardSlot`: the counter of its last ID and
//!   its statistics), one per shard of the layout (`shmem::slot`).
//! - **fence**: the shards this server may issue (`snowflake_id.shards`); every other shard
//!   is refused (`postgres::fence`).
//! - **layout**: the epoch and how an ID's 63 (or, narrowed, 53 to 62) bits split into time, shard and sequence
//!   (`snowflake_core::layout::Layout`). A *named layout* is a scheme in use elsewhere
//!   (`snowflake_id.layout = 'instagram'`); the *fixed layout* is the one this server issues
//!   in, frozen at start (`postgres::fixed_layout`); the *recorded layout* is its line in the
//!   data directory, checked at every start.
//! - **time part**: an ID's time bits, milliseconds since the epoch. **counter**: time part
//!   and sequence together, what a slot's compare-and-swap moves.
//! - **lead**: how far an ID's time part runs ahead of the wall clock (when a millisecond's
//!   sequence runs out, or the clock stepped back); bounded by `snowflake_id.max_lead_ms`.
//! - **reservation**: the window of time parts this server may issue, durable before use
//!   (`postgres::reservation`). Its **ceiling** is recorded on disk before any ID reaches it;
//!   its **floor** is where the shards resumed after a restart (the recorded ceiling): nothing
//!   below it is issued.

/// The SQL surface: generators, decoders, statistics, key conversion, and their errors.
mod api;
/// Tests that need a live backend (`cargo pgrx test`).
#[cfg(any(test, feature = "pg_test"))]
mod pg_tests;
/// PostgreSQL glue: the fixed layout, settings, shared memory, the reservation and its worker.
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
    postgres::horizon::register();
    postgres::reservation::wal::register();
    postgres::reservation::worker::register();
    postgres::sequence_hint::register();
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
