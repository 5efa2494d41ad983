//! `snowflake_id.auto_keys`: the schemas whose new tables get snowflake keys on their own (the
//! event trigger of `api::auto_keys` reads it).
//!
//! | setting | context | why |
//! |---|---|---|
//! | `auto_keys` | user | set per database by its owner (`ALTER DATABASE ... SET` needs a user setting for that). Any role may set it for its own sessions: it changes only the keys of the tables that session creates, which the role could give that default itself |

use super::guc::{self, refuse_setting};
use pgrx::guc::{GucContext, GucFlags, GucRegistry, GucSetting};
use pgrx::pg_sys;
use std::ffi::{c_char, c_void, CStr, CString};

const AUTO_KEYS_SETTING: &CStr = c"snowflake_id.auto_keys";

static AUTO_KEYS: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(Some(c""));

/// Defines the setting; called from `settings::init` while preloading.
pub fn define() {
    // SAFETY: the hook is `#[pg_guard]`ed and only reads its argument.
    unsafe {
        GucRegistry::define_string_guc_with_hooks(
            AUTO_KEYS_SETTING,
            c"Schemas whose new tables get snowflake keys on their own; empty for none.",
            c"A new table's single-column bigint primary key made as bigserial or as an identity column \
              gets DEFAULT snowflake_nextval() instead, as the table is created (pg_temp: temporary tables).",
            &AUTO_KEYS,
            // User-settable, so that a database's owner can set it for the database: it only
            // changes the keys of the tables the session itself creates.
            GucContext::Userset,
            // Given as a list (SET snowflake_id.auto_keys = public, app), as search_path is.
            GucFlags::from_bits_retain(pg_sys::GUC_LIST_INPUT as i32),
            Some(check_auto_keys),
            None,
            None,
        );
    }
}

/// The schemas of `snowflake_id.auto_keys`, or why the text is not a list of schema names:
/// names separated by commas, each a plain identifier (folded to lower case) or a
/// double-quoted one. The event trigger splits the list the same way (at each comma, each name
/// read by `parse_ident`), so a quoted name may hold no comma.
fn auto_keys_schemas(text: &str) -> Result<Vec<String>, String> {
    let mut schemas = Vec::new();
    for item in text.split(',').map(str::trim).filter(|item| !item.is_empty()) {
        let plain = |item: &str| {
            item.chars().next().is_some_and(|c| c.is_alphabetic() || c == '_')
                && item.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '$')
        };
        let name = match item.strip_prefix('"').and_then(|rest| rest.strip_suffix('"')) {
            Some(quoted) if !quoted.is_empty() && !quoted.replace("\"\"", "").contains(['"', ',']) => {
                quoted.replace("\"\"", "\"")
            }
            None if plain(item) => item.to_ascii_lowercase(),
            _ => return Err(format!("{item} is not a schema name.")),
        };
        schemas.push(name);
    }
    Ok(schemas)
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn check_auto_keys(
    newval: *mut *mut c_char,
    _extra: *mut *mut c_void,
    _source: pg_sys::GucSource::Type,
) -> bool {
    // SAFETY: PostgreSQL passes a valid pointer to a string or to NULL.
    match unsafe { guc::hook_text_utf8(*newval) }.and_then(auto_keys_schemas) {
        Ok(_) => true,
        Err(reason) => refuse_setting(
            &reason,
            "List schema names separated by commas, as in search_path: 'public, app'; pg_temp for \
             temporary tables; '' for none.",
        ),
    }
}
