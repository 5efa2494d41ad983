//! Columns too narrow for snowflake IDs: `snowflake_check_columns()` lists them (and the keys
//! automatic keys left on a sequence), each with its fix, and the event trigger
//! `snowflake_check_defaults` refuses a snowflake default on such a column in the statement
//! that makes it, and warns of a foreign key from one to a snowflake key. In SQL
//! (`column_checks.sql`): both are catalog queries.
//!
//! What real applications' test suites found: Django's `GenericForeignKey` keeps other tables'
//! keys in an `integer` column, SQLAlchemy's `Integer` foreign keys point at `BigInteger` keys,
//! and a migration from `BigAutoField` to `SmallAutoField` keeps the default: each fails only
//! at the first INSERT of a new ID, far from the migration that caused it.

use pgrx::prelude::*;

// After the event trigger of automatic keys, whose conversions it checks (event triggers fire
// in the order of their names), and after the generators its query looks up.
extension_sql_file!(
    "column_checks.sql",
    name = "snowflake_column_checks",
    requires = ["snowflake_auto_keys", "snowflake_nextvals"]
);
