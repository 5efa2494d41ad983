//! `snowflake_id.allowed_shards`: the shards a session may issue, set by a superuser per role
//! or per database (`ALTER ROLE tenant_a SET snowflake_id.allowed_shards = '5'`).
//!
//! A shard is a resource every caller shares: its 4,096 IDs a millisecond, and its lead bound
//! (a shard claimed faster than that runs ahead of the clock, and at the bound every caller of
//! it waits). On a server shared by tenants, the DBA gives each tenant's roles their own shards,
//! and one tenant's load can then hold back only its own (docs/security.md). Empty, the
//! default, allows every shard the fence allows: the server's roles are one application's.
//!
//! | setting | context | why |
//! |---|---|---|
//! | `allowed_shards` | superuser | a limit on the role: the role itself must not lift it; set with `ALTER ROLE` or `ALTER DATABASE` (or granted with `GRANT SET ON PARAMETER`). Read at login, kept through `SET ROLE` and `SECURITY DEFINER` calls: it limits the session |

use super::{shard_list_hooks, SessionShards};
use crate::postgres::guc::{self, ConfiguredAtStart};
use pgrx::guc::{GucContext, GucFlags, GucRegistry, GucSetting};
use std::ffi::{CStr, CString};

const ALLOWED_SHARDS_SETTING: &CStr = c"snowflake_id.allowed_shards";

static ALLOWED_SHARDS: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(Some(c""));

static SESSION_ALLOWED: SessionShards = SessionShards::new();

/// Defines `snowflake_id.allowed_shards`; called while preloading, after the layout (its
/// values are checked against it). Stops the server when its configured value was refused:
/// it would fall back to allowing every shard.
pub fn define() {
    let configured = ConfiguredAtStart::capture(ALLOWED_SHARDS_SETTING);
    // SAFETY: the hooks are `#[pg_guard]`ed and only read their arguments.
    unsafe {
        GucRegistry::define_string_guc_with_hooks(
            ALLOWED_SHARDS_SETTING,
            c"The shards this session may issue IDs for, such as 3,5-7; empty means every shard the server issues.",
            c"Set by a superuser per role or database (ALTER ROLE tenant SET snowflake_id.allowed_shards = '5'), \
              so that one tenant's load can hold back only its own shards.",
            &ALLOWED_SHARDS,
            GucContext::Suset,
            GucFlags::default(),
            Some(check_allowed_shards),
            Some(assign_allowed_shards),
            None,
        );
    }
    configured.stop_unless_applied(|text| setting_text() == text);
}

/// Whether this session may issue `shard` (a shard of the layout).
#[inline(always)]
pub fn session_allows(shard: u32) -> bool {
    SESSION_ALLOWED.allows(shard)
}

/// `snowflake_id.allowed_shards` as this session has it, for messages.
pub fn setting_text() -> String {
    guc::text(&ALLOWED_SHARDS)
}

shard_list_hooks!(
    check_allowed_shards,
    assign_allowed_shards,
    SESSION_ALLOWED,
    "List the shards the role may issue, such as '3,5-7'; '' allows every shard, 'none' none."
);
