//! The shard registry (docs/registry.md): an opt-in etcd that this server claims each of its
//! shards from (`snowflake_id.shards`), so that two servers never issue one shard, even when
//! both are configured with it, or one is a copy of the other's data directory.
//!
//! Who may take a claim, where a new holder resumes and how far ahead the mark stands are
//! `snowflake_core::registry`'s rules; the requests are `snowflake_registry`'s. Here:
//! - the settings, and a start refused when one configured cannot be used (a registry that
//!   silently fell back to "off" would let two servers issue one shard);
//! - this postmaster's identity (`me`): the system identifier, the timeline, and the
//!   incarnation, a number drawn when the library is preloaded, which lives only in the
//!   postmaster's memory and the processes it forks (a copy of the data directory started
//!   beside this one draws another);
//! - what each shard's claim came to, in shared memory, for the refusals' words and
//!   `snowflake_registry_claims()` (`shared`);
//! - the asking (`asker`, a thread of the reservation worker's own, which never waits on the
//!   registry) and the worker's side (`keeper`: which claims to publish in the fence, the
//!   ceiling's cap at the marks).
//!
//! | setting | context | why |
//! |---|---|---|
//! | `registry_url` | server start | etcd's address (`http://127.0.0.1:2379`); '' (the default) is off |
//! | `registry_prefix` | server start | the keyspace of one layout: two layouts make the same numbers |
//! | `registry_ttl_ms` | server start | the claim's lease: how long a dead holder's shard stays held |
//! | `registry_reserve_ms` | server start | how far ahead the mark is recorded: what an outage of the registry may use |
//! | `registry_down` | server start | `keep_to_mark` or `stop`: what a holder does while the registry does not answer |
//!
//! All at server start: a claim names its holder and the keyspace it is in, and a holder that
//! moved either while it holds claims would leave them behind, held.

pub mod asker;
pub mod keeper;
pub mod shared;

use super::guc::{self, ConfiguredAtStart};
use pgrx::guc::{GucContext, GucFlags, GucRegistry, GucSetting};
use pgrx::pg_sys;
use shared::{ClaimState, ClaimView, ShardClaim};
use snowflake_core::registry::{Holder, WhenDown};
use std::ffi::{c_char, c_void, CStr, CString};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

const URL_SETTING: &CStr = c"snowflake_id.registry_url";
const PREFIX_SETTING: &CStr = c"snowflake_id.registry_prefix";
const TTL_SETTING: &CStr = c"snowflake_id.registry_ttl_ms";
const RESERVE_SETTING: &CStr = c"snowflake_id.registry_reserve_ms";
const DOWN_SETTING: &CStr = c"snowflake_id.registry_down";

static URL: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(Some(c""));
static PREFIX: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(Some(c"/snowflake_id/"));
static TTL_MS: GucSetting<i32> = GucSetting::<i32>::new(10_000);
static RESERVE_MS: GucSetting<i32> = GucSetting::<i32>::new(30_000);
static DOWN: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(Some(c"keep_to_mark"));

/// This postmaster's incarnation (see the top): drawn while preloading, 0 before.
static INCARNATION: AtomicU64 = AtomicU64::new(0);

/// The registry as configured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    pub url: String,
    pub prefix: String,
    pub ttl_ms: u64,
    pub reserve_ms: u64,
    pub when_down: WhenDown,
}

/// Defines the settings and draws the incarnation; called from `settings::init` while
/// preloading. Stops the server when one was configured with a value PostgreSQL refused.
pub fn define() {
    let configured = [URL_SETTING, PREFIX_SETTING, TTL_SETTING, RESERVE_SETTING, DOWN_SETTING]
        .map(ConfiguredAtStart::capture);
    let mut drawn = [0u8; 8];
    // SAFETY: fills the 8 bytes given.
    if !unsafe { pg_sys::pg_strong_random(drawn.as_mut_ptr().cast(), drawn.len()) } {
        // Without a random source, the time and the process id still tell two postmasters
        // apart (they start at other moments or with other pids).
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        drawn = (now.as_nanos() as u64 ^ (u64::from(std::process::id()) << 40)).to_le_bytes();
    }
    INCARNATION.store(u64::from_le_bytes(drawn).max(1), Relaxed);
    // SAFETY: the hooks are `#[pg_guard]`ed and only read their arguments.
    unsafe {
        GucRegistry::define_string_guc_with_hooks(
            URL_SETTING,
            c"The etcd this server claims its shards from (http://127.0.0.1:2379); '' for none.",
            c"Each shard of snowflake_id.shards is issued only while this server holds its claim there.",
            &URL,
            GucContext::Postmaster,
            GucFlags::default(),
            Some(check_url),
            None,
            None,
        );
        GucRegistry::define_string_guc_with_hooks(
            PREFIX_SETTING,
            c"The registry's keys for this keyspace, such as /snowflake_id/orders/.",
            c"One prefix per layout: servers of one prefix never issue one shard at the same time.",
            &PREFIX,
            GucContext::Postmaster,
            GucFlags::default(),
            Some(check_prefix),
            None,
            None,
        );
        GucRegistry::define_string_guc_with_hooks(
            DOWN_SETTING,
            c"While the registry does not answer: keep_to_mark (issue up to the mark recorded) or stop.",
            c"No value issues past the mark recorded in the registry.",
            &DOWN,
            GucContext::Postmaster,
            GucFlags::default(),
            Some(check_down),
            None,
            None,
        );
    }
    GucRegistry::define_int_guc(
        TTL_SETTING,
        c"How long a claim outlives its holder's last renewal in the registry.",
        c"A shard whose holder died is taken by another server this long after the last renewal.",
        &TTL_MS,
        2_000,
        600_000,
        GucContext::Postmaster,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        RESERVE_SETTING,
        c"How far ahead of the clock a holder records its shards' mark in the registry.",
        c"A holder issues up to the mark without asking the registry: an outage of up to half of this costs nothing.",
        &RESERVE_MS,
        1_000,
        600_000,
        GucContext::Postmaster,
        GucFlags::UNIT_MS,
    );
    const OFF_INSTEAD: &str =
        "snowflake_id will not start with a registry setting it cannot apply: the registry \
                               would be off or another one, and two servers could issue the same shard.";
    let [url, prefix, ttl, reserve, down] = configured;
    url.stop_unless_applied_because(OFF_INSTEAD, |text| guc::text(&URL) == text);
    prefix.stop_unless_applied_because(OFF_INSTEAD, |text| guc::text(&PREFIX) == text);
    down.stop_unless_applied_because(OFF_INSTEAD, |text| guc::text(&DOWN) == text);
    for (setting, value) in [(ttl, &TTL_MS), (reserve, &RESERVE_MS)] {
        setting.stop_unless_applied_because(OFF_INSTEAD, |text| {
            guc::parse_int_with_unit(text, pg_sys::GUC_UNIT_MS) == Some(guc::read(value))
        });
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn check_url(
    newval: *mut *mut c_char,
    _extra: *mut *mut c_void,
    _source: pg_sys::GucSource::Type,
) -> bool {
    let hint = "Give etcd's client address, such as 'http://127.0.0.1:2379' (its JSON gateway); '' for none.";
    // SAFETY: PostgreSQL's arguments of a check hook.
    unsafe { guc::check_text(newval, guc::url_or_off, hint) }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn check_prefix(
    newval: *mut *mut c_char,
    _extra: *mut *mut c_void,
    _source: pg_sys::GucSource::Type,
) -> bool {
    let check = |text: &str| {
        let printable = text.chars().all(|c| c.is_ascii_graphic());
        if text.len() >= 2 && text.starts_with('/') && text.ends_with('/') && printable {
            Ok(())
        } else {
            Err(format!("\"{text}\" is not a key prefix that starts and ends with '/'"))
        }
    };
    let hint =
        "Give a prefix such as '/snowflake_id/' or '/snowflake_id/orders/', printable and without spaces.";
    // SAFETY: PostgreSQL's arguments of a check hook.
    unsafe { guc::check_text(newval, check, hint) }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn check_down(
    newval: *mut *mut c_char,
    _extra: *mut *mut c_void,
    _source: pg_sys::GucSource::Type,
) -> bool {
    let check =
        |text: &str| when_down(text).ok_or_else(|| format!("\"{text}\" is neither keep_to_mark nor stop"));
    let hint = "keep_to_mark issues up to the mark recorded while the registry is down; stop fences at once.";
    // SAFETY: PostgreSQL's arguments of a check hook.
    unsafe { guc::check_text(newval, check, hint) }
}

fn when_down(text: &str) -> Option<WhenDown> {
    match text {
        "keep_to_mark" => Some(WhenDown::KeepToMark),
        "stop" => Some(WhenDown::Stop),
        _ => None,
    }
}

/// The registry as configured, `None` while off.
pub fn configured() -> Option<Config> {
    let url = guc::text(&URL);
    if url.is_empty() {
        return None;
    }
    Some(Config {
        url,
        prefix: guc::text(&PREFIX),
        ttl_ms: guc::read(&TTL_MS) as u64,
        reserve_ms: guc::read(&RESERVE_MS) as u64,
        when_down: when_down(&guc::text(&DOWN)).unwrap_or(WhenDown::Stop),
    })
}

/// This server as a holder of claims: its data directory, timeline and postmaster. Read by
/// the reservation worker, which runs only on a primary, where the timeline no longer moves.
pub fn me() -> Holder {
    // SAFETY: plain reads of the control file's copy in shared memory and of the WAL's
    // insertion timeline, valid once recovery has ended (the worker starts only then).
    let (system_identifier, timeline) =
        unsafe { (pg_sys::GetSystemIdentifier(), pg_sys::GetWALInsertionTimeLine()) };
    Holder { system_identifier, timeline, incarnation: INCARNATION.load(Relaxed) }
}

/// Why the registry keeps `shard` fenced, when it is on and does: for the refusal's words.
pub fn refusal(shard: u32) -> Option<ClaimView> {
    configured()?;
    shared::claim(shard).map(ShardClaim::view).filter(|view| view.state != ClaimState::Held)
}
