//! The SQL surface: every function a user calls, thin over the core and the glue, and every
//! error they raise. `#[pg_extern]` functions document their volatility, parallel safety
//! and errors where they are defined.

/// `snowflake_id.auto_keys`: new tables' bigserial and identity keys switched as they are made.
mod auto_keys;
/// `snowflake_observe()`: causal order across servers, an ID seen elsewhere held below.
mod causal;
/// Columns too narrow for snowflake IDs: `snowflake_check_columns()` and the event trigger
/// that refuses a snowflake default on one.
mod column_checks;
/// `snowflake_convert_column()`: switching an existing integer key to snowflake IDs.
mod convert;
/// Decoding and composing IDs; the layout.
pub mod decoding;
/// Every SQL-facing error, with its SQLSTATE, detail and hint.
pub mod errors;
/// `snowflake_horizon()`: how far readers paging by ID may read.
mod horizon;
/// Issuing IDs: `snowflake_nextval`, `snowflake_nextvals`, `snowflake_advance`.
mod issuing;
/// What monitoring reads: `snowflake_stats()` (per-shard counters), `snowflake_status()`
/// (the worker, the reservation, the fence), `snowflake_fence_allows(shard)`.
mod stats;

use crate::postgres::{fixed_layout, shmem};
use snowflake_core::layout::Layout;

/// The layout, for a SQL function: raises the error naming the fix when the library was
/// not preloaded (its settings are then undefined, so the layout would only be a guess).
#[inline]
pub fn preloaded_layout(function: &'static str) -> Layout {
    if !shmem::attached() {
        errors::not_preloaded(function);
    }
    fixed_layout::get()
}
