//! `snowflake_id.auto_keys`: the schemas whose new tables get snowflake keys on their own (the
//! event trigger of `api::auto_keys` reads it).
//!
//! | setting | context | why |
//! |---|---|---|
//! | `auto_keys` | user | set per database by its owner (`ALTER DATABASE ... SET` needs a user setting for that). Any role may set it for its own sessions: it changes only the keys of the tables that session creates, which the role could give that default itself |

use super::guc;
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

/// The schemas of `snowflake_id.auto_keys` as this session has it, read by the parser of the
/// setting's check (`auto_keys_schemas`): the event triggers and `snowflake_check_columns`
/// act on exactly the schemas the check accepted. (0.7.0 split the list again in SQL, with
/// `btrim` and `parse_ident`, which disagree with Rust's `trim` on whitespace: a value the
/// check accepted could name another schema there, or fail every CREATE TABLE.) Empty where
/// the library was not preloaded: the setting is not defined there.
pub fn schemas() -> Result<Vec<String>, String> {
    match AUTO_KEYS.get() {
        None => Ok(Vec::new()),
        Some(value) => value
            .to_str()
            .map_err(|_| "The value is not valid UTF-8.".to_string())
            .and_then(auto_keys_schemas),
    }
}

/// The schemas of `snowflake_id.auto_keys`, or why the text is not a list of schema names:
/// names separated by commas, each a plain identifier (folded to lower case) or a
/// double-quoted one, with SQL's whitespace around them (space, tab, newline, carriage return,
/// form feed: what PostgreSQL's own scanner skips); any other character outside quotes, a
/// vertical tab or a Unicode space among them, makes the value refused, not trimmed. A quoted
/// name may hold no comma.
fn auto_keys_schemas(text: &str) -> Result<Vec<String>, String> {
    let sql_whitespace: &[char] = &[' ', '\t', '\n', '\r', '\x0c'];
    let mut schemas = Vec::new();
    for item in text.split(',').map(|item| item.trim_matches(sql_whitespace)).filter(|item| !item.is_empty())
    {
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
    let hint = "List schema names separated by commas, as in search_path: 'public, app'; pg_temp for \
                temporary tables; '' for none.";
    // SAFETY: PostgreSQL's arguments of a check hook.
    unsafe { guc::check_text(newval, auto_keys_schemas, hint) }
}
