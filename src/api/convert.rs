//! `snowflake_convert_column(tbl, col, shard)`: adopting snowflake IDs on a table that already
//! has a serial, identity or plain integer key. The function is PL/pgSQL (`convert.sql`):
//! it is a sequence of DDL statements, which read best as SQL.
//!
//! It locks the table (and the tables whose foreign keys point at it), refuses what cannot
//! be converted safely (22004, 22023, 42703, 42804, 42809, 55000: see the README's Errors),
//! drops the identity or the column's own sequence, widens the column and the referencing
//! columns to `bigint`, sets `DEFAULT snowflake_nextval(shard)` and advances the shard past
//! the largest existing value. Added in 0.2.0: `sql/snowflake_id--0.1.0--0.2.0.sql` carries
//! the same definition to databases created with 0.1.0.

use pgrx::prelude::*;

// PL/pgSQL resolves the functions it calls when it runs, so the order only keeps the
// generated script readable: the new function after the ones it calls.
extension_sql_file!(
    "convert.sql",
    name = "snowflake_convert_column",
    requires = ["snowflake_decode", "snowflake_advance_privileges"]
);
