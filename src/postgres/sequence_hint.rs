//! A hint on the error an ORM meets when it asks for a converted key's sequence by name.
//!
//! Converting a key (automatic keys, or `snowflake_convert_column`) drops its sequence: the
//! default, `snowflake_nextval()`, gives the ID. Most ORMs read the new key back with
//! `RETURNING`, or find the sequence through `pg_get_serial_sequence` (NULL now: Django's
//! `sqlsequencereset` and Rails' `reset_pk_sequence!` then have nothing to do). Some derive its
//! name from the model instead: SQLAlchemy, for a table with `implicit_returning=False`, runs
//! `select nextval('<table>_<column>_seq')` before each INSERT, and PostgreSQL answers 42P01,
//! `relation "orders_id_seq" does not exist`, which says nothing of why. This hook adds the
//! why and the fix to that error, when it names a relation ending in `_seq` and has no hint.
//!
//! An `emit_log_hook`: PostgreSQL calls it for every report, before it is logged and sent, in
//! the error's own memory context, and lets it change the report. It reads only the report:
//! a catalog lookup there could fail while an error is being reported. The untranslated
//! message (`message_id`) tells which error it is, whatever `lc_messages` says.

use pgrx::pg_sys;
use pgrx::PgSqlErrorCode;
use std::ffi::CStr;

/// The error of a relation looked up by name that does not exist, untranslated.
const UNDEFINED_RELATION: &CStr = c"relation \"%s\" does not exist";

const HINT: &CStr = c"If it is the sequence of a key converted to snowflake IDs (snowflake_id.auto_keys or \
snowflake_convert_column), it is gone: the key's default, snowflake_nextval(), gives the ID. Insert without the key \
and read it back with RETURNING, or fetch it first with SELECT snowflake_nextval(); in SQLAlchemy, declare \
default=func.snowflake_nextval() on the key or keep implicit_returning on (docs/orms.md).";

static mut PREVIOUS_HOOK: pg_sys::emit_log_hook_type = None;

/// Installs the hook, after whatever hook was there; called while preloading, so every
/// process of the server has it.
pub fn register() {
    // SAFETY: the postmaster, while preloading, before any other process exists.
    unsafe {
        PREVIOUS_HOOK = pg_sys::emit_log_hook;
        pg_sys::emit_log_hook = Some(hint_missing_sequence);
    }
}

/// Whether a report is "relation "…_seq" does not exist", without a hint of its own.
///
/// # Safety
/// `edata` is a report PostgreSQL is emitting.
unsafe fn is_missing_sequence(edata: &pg_sys::ErrorData) -> bool {
    if edata.elevel < pg_sys::PGERROR as i32
        || edata.sqlerrcode != PgSqlErrorCode::ERRCODE_UNDEFINED_TABLE as i32
        || !edata.hint.is_null()
        || edata.message_id.is_null()
        || edata.message.is_null()
    {
        return false;
    }
    // SAFETY: both are NUL-terminated strings of the report, as the caller promises.
    let (message_id, message) = unsafe { (CStr::from_ptr(edata.message_id), CStr::from_ptr(edata.message)) };
    // The relation's name is in the message, quoted as the translation quotes it.
    message_id == UNDEFINED_RELATION && message.to_bytes().windows(4).any(|window| window == b"_seq")
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn hint_missing_sequence(edata: *mut pg_sys::ErrorData) {
    // SAFETY: PostgreSQL passes the report it is emitting; the previous hook expects the same.
    unsafe {
        if let Some(previous) = PREVIOUS_HOOK {
            previous(edata);
        }
        if let Some(edata) = edata.as_mut() {
            if is_missing_sequence(edata) {
                // Allocated in the current memory context, the error's, as errhint() does.
                edata.hint = pg_sys::pstrdup(HINT.as_ptr());
            }
        }
    }
}
