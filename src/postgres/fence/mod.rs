//! The shard fence: the shards this server may issue (`snowflake_id.shards`, reloadable).
//! Each session keeps its own parsed copy of the setting (here), and the whole server one in
//! shared memory (`shared`), which reaches statements already running when a reload moves
//! the fence; a call obeys both.
//!
//! | setting | context | why |
//! |---|---|---|
//! | `shards` | reload (SIGHUP) | moved with the shards, without a restart; checked against the layout, so defined after it |

pub mod shared;

use super::fixed_layout;
use super::guc::{self, ConfiguredAtStart};
use pgrx::guc::{GucContext, GucFlags, GucRegistry, GucSetting};
use pgrx::pg_sys;
use snowflake_core::fence::ShardFence;
use std::ffi::{c_char, c_void, CStr, CString};
use std::sync::atomic::{AtomicPtr, Ordering::Relaxed};

const SHARDS_SETTING: &CStr = c"snowflake_id.shards";

static SHARDS: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(Some(c""));

/// The parsed `snowflake_id.shards` of this process, set by its assign hook; null: no fence.
/// Read on every call, so it is parsed once per change and not per call. A backend applies a
/// reload only between statements: the fence that reaches running statements too is the
/// server-wide one (`shared`), which the reservation worker publishes from its own.
static SESSION_FENCE: AtomicPtr<ShardFence> = AtomicPtr::new(std::ptr::null_mut());

/// Defines `snowflake_id.shards`; stops the server when its configured value was refused
/// (it would fall back to no fence at all). Called while preloading, after the layout.
pub fn define() {
    let configured = ConfiguredAtStart::capture(SHARDS_SETTING);
    // SAFETY: the hooks are `#[pg_guard]`ed and only read their arguments.
    unsafe {
        GucRegistry::define_string_guc_with_hooks(
            SHARDS_SETTING,
            c"The shards this server may issue IDs for, such as 0-5,9; empty means all, none means none.",
            c"Every generator refuses any other shard. Give each shard to one server only, and move \
              it here only after its old server's list no longer names it.",
            &SHARDS,
            GucContext::Sighup,
            GucFlags::default(),
            Some(check_shards),
            Some(assign_shards),
            None,
        );
    }
    configured.stop_unless_applied(|text| setting_text() == text);
}

/// Whether this session's fence lets it issue `shard` (a shard of the layout).
#[inline(always)]
pub fn session_allows(shard: u32) -> bool {
    let fence = SESSION_FENCE.load(Relaxed);
    // SAFETY: a non-null pointer is a fence leaked by `assign_shards`, replaced (and freed)
    // only between statements, in this same thread.
    fence.is_null() || unsafe { (*fence).allows(shard) }
}

/// This session's fence, parsed.
pub fn session_fence() -> ShardFence {
    // SAFETY: as in `session_allows`.
    unsafe { SESSION_FENCE.load(Relaxed).as_ref() }.cloned().unwrap_or(ShardFence::Open)
}

/// `snowflake_id.shards` as configured, for messages.
pub fn setting_text() -> String {
    guc::text(&SHARDS)
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn check_shards(
    newval: *mut *mut c_char,
    _extra: *mut *mut c_void,
    _source: pg_sys::GucSource::Type,
) -> bool {
    // SAFETY: PostgreSQL passes a valid pointer to a string or to NULL.
    let text = unsafe { guc::hook_text(*newval) };
    match ShardFence::parse(&text, fixed_layout::get().max_shard()) {
        Ok(_) => true,
        Err(reason) => guc::refuse_setting(
            &reason,
            "List the shards this server owns, such as '0-5,9'; '' allows every shard, 'none' none.",
        ),
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn assign_shards(newval: *const c_char, _extra: *mut c_void) {
    // SAFETY: as in `check_shards`; the value passed the check just before.
    let fence = match ShardFence::parse(&unsafe { guc::hook_text(newval) }, fixed_layout::get().max_shard()) {
        Ok(ShardFence::Open) | Err(_) => std::ptr::null_mut(),
        Ok(fence) => Box::into_raw(Box::new(fence)),
    };
    let old = SESSION_FENCE.swap(fence, Relaxed);
    if !old.is_null() {
        // SAFETY: leaked by an earlier call of this hook, and no longer published.
        drop(unsafe { Box::from_raw(old) });
    }
}
