//! Automatic keys: under `snowflake_id.auto_keys`, a new table's single-column `bigint`
//! primary key made as `bigserial` or as an identity column gets `DEFAULT snowflake_nextval()`
//! as it is created, in the same transaction, so that the tables an ORM's migrations create
//! get snowflake keys with no change to their models. An event trigger at the end of `CREATE
//! TABLE` and `ALTER TABLE`, in PL/pgSQL (`auto_keys.sql`): it converts with
//! `snowflake_convert_column`, the one copy of that logic, and then sets the default without
//! a shard.
//!
//! Only keys whose sequence the statement itself created are considered: a statement that
//! makes no sequence (the trigger's own `ALTER TABLE`s among them) converts nothing, so the
//! trigger never acts on its own work. `GENERATED ALWAYS` identities and keys narrower than
//! `bigint` are left as they are, with a NOTICE saying why; an unset `snowflake_id.shard`
//! refuses the statement (55000). Event triggers do not fire in single-user mode, under
//! `event_triggers = off` (PostgreSQL 17 and later), or with `session_replication_role =
//! replica`: tables created then keep their sequences.

use pgrx::prelude::*;

// After snowflake_convert_column, which the trigger calls.
extension_sql_file!("auto_keys.sql", name = "snowflake_auto_keys", requires = ["snowflake_convert_column"]);
