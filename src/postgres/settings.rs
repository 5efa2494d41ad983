//! The `snowflake_id.*` settings: defined once in `init()`, read through typed accessors.
//! The layout's settings live with the layout (`fixed_layout`), the fence's with the fence
//! (`fence`); the plumbing they all share is in `guc`.
//!
//! | setting | context | why |
//! |---|---|---|
//! | `layout`, `epoch`, `shard_bits`, `seq_bits`, `id_bits` | postmaster | see `fixed_layout` |
//! | `shards` | reload (SIGHUP) | see `fence` |
//! | `allowed_shards` | superuser | see `fence::role` |
//! | `shard` | superuser | the default shard of `snowflake_nextval()`; per database or role with `ALTER ... SET`, never by an unprivileged role for others |
//! | `max_lead_ms`, `max_wait_ms`, `max_reservation_wait_ms` | reload (SIGHUP) | the clock policy; operators tune it without a restart |
//! | `reserve_ms` | reload (SIGHUP) | how far ahead of the clock the durable reservation is kept |
//! | `max_clock_skew_ms` | reload (SIGHUP) | how far the clocks of a primary and its standbys may disagree: a promoted standby resumes that much further ahead |
//! | `auto_keys` | user | see `auto_keys` |
//! | `lease_url`, `lease_ms` | reload (SIGHUP) | see `fence::lease` |
//! | `registry_url`, `registry_prefix`, `registry_ttl_ms`, `registry_reserve_ms`, `registry_down` | postmaster | see `registry` |
//! | `wal_rmgr_id`, `legacy_wal_rmgr_id` | postmaster | the custom WAL resource manager ids (written; replayed from earlier versions); the same on a primary and its standbys |

use super::guc::{self, read, refuse_setting, ConfiguredAtStart};
use super::{auto_keys, fence, fixed_layout, registry};
use pgrx::guc::{GucContext, GucFlags, GucRegistry, GucSetting};
use pgrx::pg_sys::{self, panic::ErrorReport};
use pgrx::{PgLogLevel, PgSqlErrorCode};
use snowflake_core::generator::ClockPolicy;
use snowflake_core::layout::MAX_SHARD_BITS;
use snowflake_core::resume;
use std::ffi::{c_void, CStr};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

/// `snowflake_id.shard` when nothing was set.
const SHARD_UNSET: i32 = -1;
/// Defaults of the clock policy. 2 s of lead absorbs the clock steps NTP daemons make
/// (ntpd steps past 128 ms, chrony's usual `makestep 1 3` past 1 s) and lets a batch of a
/// million IDs be issued at once even with 13 shard bits (512 per ms), while an
/// ID's time part stays within 2 s of the real time. Waiting 1 s more turns steps of up
/// to 3 s into a short stall instead of an error; longer steps fail at once.
const DEFAULT_MAX_LEAD_MS: i32 = 2000;
const DEFAULT_MAX_WAIT_MS: i32 = 1000;
/// A call waits this long for the worker to record more of the reservation. With a healthy
/// disk that takes milliseconds. When fsync takes seconds, the worker widens its headroom
/// (see `generator::next_ceiling`), up to `max_lead_ms + reserve_ms`, and the longest wait is
/// the first slow recording's, about twice the fsync time: 5 s rides out fsyncs of 2 s as a
/// slowdown. Fsyncs longer than the widest headroom (2.5 s by default) outrun the clock, and
/// calls fail after this wait with a hint instead of hanging.
const DEFAULT_MAX_RESERVATION_WAIT_MS: i32 = 5000;
/// The reservation is kept 250 to 500 ms ahead of the clock (renewed about four times a
/// second): a server restarted at once resumes at most 0.5 s ahead of its clock (plus any
/// lead that calls borrowing time had taken, up to max_lead_ms). Calls that
/// borrow further ask the worker for more and wait the few ms it takes to record it.
const DEFAULT_RESERVE_MS: i32 = 500;
/// The clocks of a primary and its standbys, kept by NTP or chrony, agree within a few ms;
/// 250 ms leaves room for a badly synchronised one, and costs a promoted standby at most that
/// much more waiting before its first IDs (see `reservation::worker::record_promotion_guard`).
const DEFAULT_MAX_CLOCK_SKEW_MS: i32 = 250;
/// The id the reservation records are written under. Not 128: PostgreSQL keeps that one
/// (RM_EXPERIMENTAL_ID) for extensions under development, so two of them may both use it.
/// Chosen high in the custom range (128-255), where few extensions pick; PostgreSQL's wiki
/// page "CustomWALResourceManagers" lists the ids extensions use. 0 turns the records off.
const DEFAULT_WAL_RMGR_ID: i32 = 213;
/// The id versions up to 0.2.0 wrote under (128) is registered for replay only, and by
/// default (-1) only while their records may remain in this data directory's WAL
/// (`reservation::legacy_wal`): a fresh cluster leaves PostgreSQL's experimental id to others.
const LEGACY_WAL_RMGR_AUTO: i32 = -1;
const DEFAULT_LEGACY_WAL_RMGR_ID: i32 = LEGACY_WAL_RMGR_AUTO;

static SHARD: GucSetting<i32> = GucSetting::<i32>::new(SHARD_UNSET);
static MAX_LEAD_MS: GucSetting<i32> = GucSetting::<i32>::new(DEFAULT_MAX_LEAD_MS);
static MAX_WAIT_MS: GucSetting<i32> = GucSetting::<i32>::new(DEFAULT_MAX_WAIT_MS);
static MAX_RESERVATION_WAIT_MS: GucSetting<i32> = GucSetting::<i32>::new(DEFAULT_MAX_RESERVATION_WAIT_MS);
static RESERVE_MS: GucSetting<i32> = GucSetting::<i32>::new(DEFAULT_RESERVE_MS);
static MAX_CLOCK_SKEW_MS: GucSetting<i32> = GucSetting::<i32>::new(DEFAULT_MAX_CLOCK_SKEW_MS);
static WAL_RMGR_ID: GucSetting<i32> = GucSetting::<i32>::new(DEFAULT_WAL_RMGR_ID);
static LEGACY_WAL_RMGR_ID: GucSetting<i32> = GucSetting::<i32>::new(DEFAULT_LEGACY_WAL_RMGR_ID);

const SHARD_SETTING: &CStr = c"snowflake_id.shard";
const MAX_LEAD_MS_SETTING: &CStr = c"snowflake_id.max_lead_ms";
const RESERVE_MS_SETTING: &CStr = c"snowflake_id.reserve_ms";
const WAL_RMGR_ID_SETTING: &CStr = c"snowflake_id.wal_rmgr_id";
const LEGACY_WAL_RMGR_ID_SETTING: &CStr = c"snowflake_id.legacy_wal_rmgr_id";

/// Registers every setting. Called from `_PG_init` while shared_preload_libraries is being
/// processed: PostgreSQL allows postmaster-only settings to be defined only then. The layout
/// first: the default shard and the fence are checked against it.
pub fn init() {
    fixed_layout::define();
    let configured =
        [SHARD_SETTING, WAL_RMGR_ID_SETTING, LEGACY_WAL_RMGR_ID_SETTING].map(ConfiguredAtStart::capture);
    // SAFETY: as above.
    unsafe {
        GucRegistry::define_int_guc_with_hooks(
            SHARD_SETTING,
            c"Shard used by snowflake_nextval() without an argument; -1 means unset.",
            c"Set it per database or role: ALTER DATABASE shard7 SET snowflake_id.shard = 7.",
            &SHARD,
            SHARD_UNSET,
            (1 << MAX_SHARD_BITS) - 1,
            GucContext::Suset,
            GucFlags::default(),
            Some(check_default_shard),
            None,
            None,
        );
    }
    fence::define();
    fence::role::define();
    fence::lease::define();
    registry::define();
    // SAFETY: as above.
    unsafe {
        GucRegistry::define_int_guc_with_hooks(
            MAX_LEAD_MS_SETTING,
            c"How far the time part of an ID may run ahead of the wall clock.",
            c"Used when a millisecond's IDs run out or the clock steps back.",
            &MAX_LEAD_MS,
            0,
            86_400_000,
            GucContext::Sighup,
            GucFlags::UNIT_MS,
            Some(check_max_lead_ms),
            None,
            None,
        );
    }
    // SAFETY: as above.
    unsafe {
        GucRegistry::define_int_guc_with_hooks(
            c"snowflake_id.max_wait_ms",
            c"How long a call may wait for the clock when it is past max_lead_ms, before failing.",
            c"",
            &MAX_WAIT_MS,
            0,
            60_000,
            GucContext::Sighup,
            GucFlags::UNIT_MS,
            Some(check_max_wait_ms),
            None,
            None,
        );
    }
    GucRegistry::define_int_guc(
        c"snowflake_id.max_reservation_wait_ms",
        c"How long a call may wait for the reservation worker to record more IDs, before failing.",
        c"Recording takes one fsync; on a slow or stuck disk calls wait for it up to this long.",
        &MAX_RESERVATION_WAIT_MS,
        0,
        600_000,
        GucContext::Sighup,
        GucFlags::UNIT_MS,
    );
    // SAFETY: as above.
    unsafe {
        GucRegistry::define_int_guc_with_hooks(
            RESERVE_MS_SETTING,
            c"How far ahead of the wall clock the durable reservation of IDs is kept.",
            c"A restarted server resumes at the recorded reservation, so right after a restart IDs may \
              lead the clock by up to this much. Calls that borrow further ahead wait for the worker \
              to record more (a few ms). At most max_lead_ms + max_wait_ms.",
            &RESERVE_MS,
            // The worker looks every 50 ms and renews at half the window: below this the clock
            // would pass the ceiling between two looks.
            100,
            3_600_000,
            GucContext::Sighup,
            GucFlags::UNIT_MS,
            Some(check_reserve_ms),
            None,
            None,
        );
    }
    GucRegistry::define_int_guc(
        c"snowflake_id.max_clock_skew_ms",
        c"How far the clocks of a primary and its standbys may disagree.",
        c"A promoted standby (or a server after archive recovery) resumes max_lead_ms + reserve_ms + \
          this far ahead of its clock: above anything the old primary could have issued, also in WAL \
          the standby never received, as long as the clocks agree this closely.",
        &MAX_CLOCK_SKEW_MS,
        0,
        3_600_000,
        GucContext::Sighup,
        GucFlags::UNIT_MS,
    );
    auto_keys::define();
    // SAFETY: as above.
    unsafe {
        GucRegistry::define_int_guc_with_hooks(
            WAL_RMGR_ID_SETTING,
            c"Custom WAL resource manager id of the reservation records (128-255), 0 for none.",
            c"Records of this id can only be replayed where snowflake_id is preloaded. Use the same \
              value on a primary and its standbys.",
            &WAL_RMGR_ID,
            0,
            255,
            GucContext::Postmaster,
            GucFlags::default(),
            Some(check_wal_rmgr_id),
            None,
            None,
        );
        GucRegistry::define_int_guc_with_hooks(
            LEGACY_WAL_RMGR_ID_SETTING,
            c"WAL resource manager id of reservation records written by earlier versions (replayed only).",
            c"Versions up to 0.2.0 wrote under 128. -1: 128 while their records may remain in this data \
              directory's WAL (until a checkpoint after the update), else none. 128 to replay old archives; \
              0 for none.",
            &LEGACY_WAL_RMGR_ID,
            LEGACY_WAL_RMGR_AUTO,
            255,
            GucContext::Postmaster,
            GucFlags::default(),
            Some(check_legacy_wal_rmgr_id),
            None,
            None,
        );
    }
    let [shard, wal_rmgr_id, legacy_wal_rmgr_id] = configured;
    shard.stop_unless_applied(|text| guc::parse_int_as_postgres(text) == Some(SHARD.get()));
    wal_rmgr_id.stop_unless_applied(|text| guc::parse_int_as_postgres(text) == Some(WAL_RMGR_ID.get()));
    legacy_wal_rmgr_id
        .stop_unless_applied(|text| guc::parse_int_as_postgres(text) == Some(LEGACY_WAL_RMGR_ID.get()));
    // The three once all are set (their hooks check them only from now on).
    if let Some(reason) = reservation_too_long(read(&MAX_LEAD_MS), read(&MAX_WAIT_MS), read(&RESERVE_MS)) {
        ErrorReport::new(PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE, reason, "_PG_init")
            .set_detail(RESERVATION_TOO_LONG_DETAIL)
            .set_hint(
                "Keep snowflake_id.reserve_ms at most snowflake_id.max_lead_ms + snowflake_id.max_wait_ms in \
                 postgresql.conf.",
            )
            .report(PgLogLevel::ERROR);
    }
    SETTINGS_DEFINED.store(true, Relaxed);
}

/// Set at the end of `init`: from then on (in every process forked afterwards) the hooks of
/// `max_lead_ms`, `max_wait_ms` and `reserve_ms` check each new value against the others. Not
/// before: while they are being defined, the other may still hold its default.
static SETTINGS_DEFINED: AtomicBool = AtomicBool::new(false);

/// `snowflake_id.shard`, if set.
#[inline]
pub fn default_shard() -> Option<i32> {
    let shard = read(&SHARD);
    (shard != SHARD_UNSET).then_some(shard)
}

/// The reloadable clock policy.
#[inline]
pub fn clock_policy() -> ClockPolicy {
    ClockPolicy {
        max_lead_ms: read(&MAX_LEAD_MS) as u64,
        max_wait_ms: read(&MAX_WAIT_MS) as u64,
        max_reservation_wait_ms: read(&MAX_RESERVATION_WAIT_MS) as u64,
    }
}

/// How far ahead of the clock the worker keeps the durable reservation.
pub fn reserve_ms() -> u64 {
    RESERVE_MS.get() as u64
}

/// How far the clocks of a primary and its standbys may disagree.
pub fn max_clock_skew_ms() -> u64 {
    MAX_CLOCK_SKEW_MS.get() as u64
}

/// The WAL resource manager id, unless WAL-logging is off.
pub fn wal_rmgr_id() -> Option<u8> {
    match WAL_RMGR_ID.get() {
        0 => None,
        id => Some(id as u8),
    }
}

/// Which id to register for earlier versions' records (`snowflake_id.legacy_wal_rmgr_id`).
pub enum LegacyRmgr {
    /// 128 while records of versions up to 0.2.0 may remain (`reservation::legacy_wal`).
    Auto,
    Id(u8),
    None,
}

pub fn legacy_wal_rmgr_id() -> LegacyRmgr {
    match LEGACY_WAL_RMGR_ID.get() {
        LEGACY_WAL_RMGR_AUTO => LegacyRmgr::Auto,
        0 => LegacyRmgr::None,
        id => LegacyRmgr::Id(id as u8),
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn check_default_shard(
    newval: *mut i32,
    _extra: *mut *mut c_void,
    _source: pg_sys::GucSource::Type,
) -> bool {
    // SAFETY: PostgreSQL passes a valid pointer.
    let shard = unsafe { *newval };
    let layout = fixed_layout::get();
    if shard == SHARD_UNSET || layout.check_shard(shard as i64).is_ok() {
        return true;
    }
    refuse_setting(
        &format!(
            "snowflake_id.shard_bits = {} allows shards 0 to {}.",
            layout.shard_bits(),
            layout.max_shard()
        ),
        "Choose a shard in that range, or -1 to unset it.",
    )
}

/// `reserve_ms` at most `max_lead_ms + max_wait_ms` (`resume::reservation_too_long`). `None`
/// when they agree, else why not. Each hook checks its new value against the other two
/// settings' current ones; at start, `init` checks the three once all are set.
fn reservation_too_long(max_lead_ms: i32, max_wait_ms: i32, reserve_ms: i32) -> Option<String> {
    let ms = |value: i32| value.max(0) as u64;
    resume::reservation_too_long(ms(max_lead_ms), ms(max_wait_ms), ms(reserve_ms)).then(|| {
        format!(
            "snowflake_id.reserve_ms ({reserve_ms} ms) is larger than snowflake_id.max_lead_ms + \
             snowflake_id.max_wait_ms ({max_lead_ms} + {max_wait_ms} ms)"
        )
    })
}

const RESERVATION_TOO_LONG_DETAIL: &str = "A restarted server resumes at its reservation, up to reserve_ms \
    ahead of the clock, and a call waits at most max_wait_ms for the clock to come within max_lead_ms of it: \
    after every restart, calls would be refused until the clock caught up.";

/// The check hooks' side of `reservation_too_long`.
fn lead_wait_and_reserve_agree(max_lead_ms: i32, max_wait_ms: i32, reserve_ms: i32) -> bool {
    if !SETTINGS_DEFINED.load(Relaxed) {
        return true;
    }
    match reservation_too_long(max_lead_ms, max_wait_ms, reserve_ms) {
        None => true,
        Some(reason) => refuse_setting(
            &format!("{reason}. {RESERVATION_TOO_LONG_DETAIL}"),
            "Keep snowflake_id.reserve_ms at most snowflake_id.max_lead_ms + snowflake_id.max_wait_ms. To \
             change several in one reload, raise max_lead_ms or max_wait_ms first (or lower reserve_ms \
             first), one reload each.",
        ),
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn check_max_lead_ms(
    newval: *mut i32,
    _extra: *mut *mut c_void,
    _source: pg_sys::GucSource::Type,
) -> bool {
    // SAFETY: PostgreSQL passes a valid pointer.
    lead_wait_and_reserve_agree(unsafe { *newval }, read(&MAX_WAIT_MS), read(&RESERVE_MS))
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn check_max_wait_ms(
    newval: *mut i32,
    _extra: *mut *mut c_void,
    _source: pg_sys::GucSource::Type,
) -> bool {
    // SAFETY: PostgreSQL passes a valid pointer.
    lead_wait_and_reserve_agree(read(&MAX_LEAD_MS), unsafe { *newval }, read(&RESERVE_MS))
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn check_reserve_ms(
    newval: *mut i32,
    _extra: *mut *mut c_void,
    _source: pg_sys::GucSource::Type,
) -> bool {
    // SAFETY: PostgreSQL passes a valid pointer.
    lead_wait_and_reserve_agree(read(&MAX_LEAD_MS), read(&MAX_WAIT_MS), unsafe { *newval })
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn check_legacy_wal_rmgr_id(
    newval: *mut i32,
    extra: *mut *mut c_void,
    source: pg_sys::GucSource::Type,
) -> bool {
    // SAFETY: PostgreSQL passes a valid pointer; the rest as `check_wal_rmgr_id`.
    unsafe { *newval == LEGACY_WAL_RMGR_AUTO || check_wal_rmgr_id(newval, extra, source) }
}

/// WAL resource manager ids: PostgreSQL leaves 128 to 255 to extensions (and its own below).
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn check_wal_rmgr_id(
    newval: *mut i32,
    _extra: *mut *mut c_void,
    _source: pg_sys::GucSource::Type,
) -> bool {
    // SAFETY: PostgreSQL passes a valid pointer.
    let id = unsafe { *newval };
    if id == 0 || (128..=255).contains(&id) {
        return true;
    }
    refuse_setting(
        &format!("{id} is not a custom WAL resource manager id: PostgreSQL keeps 0 to 127 for its own."),
        "Choose an id from 128 to 255 that no other preloaded extension uses (PostgreSQL's wiki page \
         CustomWALResourceManagers lists the ids in use), or 0 to write no records.",
    )
}
