//! Which shards may be issued: by this server (`snowflake_id.shards`, reloadable: the shard
//! fence) and by this session's role (`snowflake_id.allowed_shards`, a superuser's setting:
//! `role`). Each session keeps its own parsed copy of both settings (`SessionShards`), and the
//! whole server one of the fence in shared memory (`shared`), which reaches statements
//! already running when a reload moves the fence; a call obeys all three.
//!
//! | setting | context | why |
//! |---|---|---|
//! | `shards` | reload (SIGHUP) | moved with the shards, without a restart; checked against the layout, so defined after it |
//!
//! The server-wide fence also closes for every shard while an opt-in lease is lost (`lease`:
//! the HA manager has not said for `snowflake_id.lease_ms` that this server is the leader; each
//! question to it is `lease_question`'s).

pub mod lease;
pub mod lease_question;
pub mod role;
pub mod shared;

use super::fixed_layout;
use super::guc::{self, ConfiguredAtStart};
use pgrx::guc::{GucContext, GucFlags, GucRegistry, GucSetting};
use snowflake_core::fence::ShardFence;
use std::ffi::{c_char, CStr, CString};
use std::sync::atomic::{AtomicPtr, Ordering::Relaxed};

const SHARDS_SETTING: &CStr = c"snowflake_id.shards";

static SHARDS: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(Some(c""));

/// A shard list setting of this process, parsed by its assign hook: read on every call, so it
/// is parsed once per change and not per call.
pub struct SessionShards(AtomicPtr<ShardFence>);

impl SessionShards {
    pub const fn new() -> Self {
        SessionShards(AtomicPtr::new(std::ptr::null_mut()))
    }

    /// Whether the list lets this session issue `shard` (a shard of the layout).
    #[inline(always)]
    pub fn allows(&self, shard: u32) -> bool {
        let list = self.0.load(Relaxed);
        // SAFETY: a non-null pointer is a list leaked by `assign`, replaced (and freed) only
        // between statements, in this same thread.
        list.is_null() || unsafe { (*list).allows(shard) }
    }

    /// The list, parsed.
    pub fn get(&self) -> ShardFence {
        // SAFETY: as in `allows`.
        unsafe { self.0.load(Relaxed).as_ref() }.cloned().unwrap_or(ShardFence::Open)
    }

    /// Takes a new value of the setting, which passed its check hook just before.
    ///
    /// # Safety
    /// `newval` is what PostgreSQL passes an assign hook: NULL or a NUL-terminated string.
    pub unsafe fn assign(&self, newval: *const c_char) {
        // SAFETY: as the caller promises.
        let list =
            match ShardFence::parse(&unsafe { guc::hook_text(newval) }, fixed_layout::get().max_shard()) {
                Ok(ShardFence::Open) | Err(_) => std::ptr::null_mut(),
                Ok(list) => Box::into_raw(Box::new(list)),
            };
        let old = self.0.swap(list, Relaxed);
        if !old.is_null() {
            // SAFETY: leaked by an earlier call, and no longer published.
            drop(unsafe { Box::from_raw(old) });
        }
    }
}

/// The shard list of a setting's text, or `refuse_setting`'s answer with `hint`: a check hook.
///
/// # Safety
/// `newval` is what PostgreSQL passes a check hook.
pub unsafe fn check_shard_list(newval: *mut *mut c_char, hint: &str) -> bool {
    // SAFETY: as the caller promises.
    unsafe { guc::check_text(newval, |text| ShardFence::parse(text, fixed_layout::get().max_shard()), hint) }
}

/// The check and assign hooks of a shard list setting whose session copy is `$session` (a
/// `SessionShards`): the check refuses what `ShardFence::parse` refuses, with `$hint`.
macro_rules! shard_list_hooks {
    ($check:ident, $assign:ident, $session:expr, $hint:expr) => {
        #[pgrx::pg_guard]
        unsafe extern "C-unwind" fn $check(
            newval: *mut *mut std::ffi::c_char,
            _extra: *mut *mut std::ffi::c_void,
            _source: pgrx::pg_sys::GucSource::Type,
        ) -> bool {
            // SAFETY: PostgreSQL's arguments of a check hook.
            unsafe { $crate::postgres::fence::check_shard_list(newval, $hint) }
        }

        #[pgrx::pg_guard]
        unsafe extern "C-unwind" fn $assign(newval: *const std::ffi::c_char, _extra: *mut std::ffi::c_void) {
            // SAFETY: PostgreSQL's argument of an assign hook.
            unsafe { $session.assign(newval) }
        }
    };
}
pub(crate) use shard_list_hooks;

/// This session's `snowflake_id.shards`. A backend applies a reload only between statements:
/// the fence that reaches running statements too is the server-wide one (`shared`), which the
/// reservation worker publishes from its own.
static SESSION_FENCE: SessionShards = SessionShards::new();

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
    SESSION_FENCE.allows(shard)
}

/// This session's fence, parsed.
pub fn session_fence() -> ShardFence {
    SESSION_FENCE.get()
}

/// `snowflake_id.shards` as configured, for messages.
pub fn setting_text() -> String {
    guc::text(&SHARDS)
}

shard_list_hooks!(
    check_shards,
    assign_shards,
    SESSION_FENCE,
    "List the shards this server owns, such as '0-5,9'; '' allows every shard, 'none' none."
);
