//! Automatic keys: under `snowflake_id.auto_keys`, a new table's single-column `bigint`
//! primary key made as `bigserial` or as an identity column gets `DEFAULT snowflake_nextval()`
//! as it is created, in the same transaction, so that the tables an ORM's migrations create
//! get snowflake keys with no change to their models. An event trigger at the end of `CREATE
//! TABLE` and `ALTER TABLE`, in PL/pgSQL (`auto_keys.sql`).
//!
//! It runs with the rights of the role whose statement fired it, never more (it is not
//! `SECURITY DEFINER`), so it converts only what that role may change and what needs no
//! operator's act: keys whose sequence the statement itself created, on tables that have no
//! rows (new IDs need no advance past old ones, and nothing is rewritten) and that no other
//! table references (their columns are their owners'). Everything else is left alone with a
//! NOTICE naming `snowflake_convert_column`, which the table's owner runs. A statement that
//! makes no sequence (the trigger's own `ALTER TABLE`s among them) converts nothing, so the
//! trigger never acts on its own work. `GENERATED ALWAYS` identities and keys narrower than
//! `bigint` are left as they are too; an unset `snowflake_id.shard` refuses the statement
//! (55000). Event triggers do not fire in single-user mode, under `event_triggers = off`
//! (PostgreSQL 17 and later), or with `session_replication_role = replica`: tables created
//! then keep their sequences.

use crate::api::errors;
use crate::postgres::auto_keys;
use pgrx::prelude::*;

/// The schemas `snowflake_id.auto_keys` lists for this session, as its check reads them (one
/// parser: the trigger acts on exactly the schemas the check accepted): `{public,pg_temp}` for
/// `public, pg_temp`, empty for none. What the event triggers and `snowflake_check_columns()`
/// read the setting with. A value its check refused is never set, so the error (22023) is for
/// a value that changed meaning under a new parser (a database's setting from 0.7.0 with
/// unusual whitespace), named with its fix.
#[pg_extern(stable, parallel_safe)]
fn snowflake_auto_keys_schemas() -> Vec<String> {
    auto_keys::schemas()
        .unwrap_or_else(|reason| errors::auto_keys_unreadable("snowflake_auto_keys_schemas", &reason))
}

// After snowflake_convert_column, which its NOTICEs name, and the setting's reader.
extension_sql_file!(
    "auto_keys.sql",
    name = "snowflake_auto_keys",
    requires = ["snowflake_convert_column", snowflake_auto_keys_schemas]
);
