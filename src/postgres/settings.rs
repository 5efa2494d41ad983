//! The `snowflake_id.*` settings: defined once in `init()`, read through typed accessors.
//!
//! | setting | context | why |
//! |---|---|---|
//! | `layout`, `epoch`, `shard_bits`, `seq_bits` | postmaster | the layout of every ID: changing any on a running fleet would make old and new IDs collide or sort wrongly, so they are fixed at server start. `layout` names a scheme in use elsewhere and sets the other three, unless they are set themselves |
//! | `shards` | reload (SIGHUP) | the shard fence: the shards this server may issue; moved with the shards, without a restart |
//! | `shard` | superuser | the default shard of `snowflake_nextval()`; per database or role with `ALTER ... SET`, never by an unprivileged role for others |
//! | `max_lead_ms`, `max_wait_ms`, `max_reservation_wait_ms` | reload (SIGHUP) | the clock policy; operators tune it without a restart |
//! | `reserve_ms` | reload (SIGHUP) | how far ahead of the clock the durable reservation is kept |
//! | `max_clock_skew_ms` | reload (SIGHUP) | how far the clocks of a primary and its standbys may disagree: a promoted standby resumes that much further ahead |
//! | `wal_rmgr_id`, `legacy_wal_rmgr_id` | postmaster | the custom WAL resource manager ids (written; replayed from earlier versions); the same on a primary and its standbys |

use pgrx::guc::{GucContext, GucFlags, GucRegistry, GucSetting};
use pgrx::pg_sys::{self, panic::ErrorReport};
use pgrx::{PgLogLevel, PgSqlErrorCode};
use snowflake_core::fence::ShardFence;
use snowflake_core::generator::ClockPolicy;
use snowflake_core::layout::{
    self, Layout, SplitError, DEFAULT_EPOCH_UNIX_MS, DEFAULT_SEQ_BITS, DEFAULT_SHARD_BITS, MAX_SEQ_BITS,
    MAX_SHARD_BITS, MIN_SEQ_BITS, MIN_SHARD_BITS, MIN_TIME_BITS,
};
use snowflake_core::utc;
use std::ffi::{c_char, c_void, CStr, CString};
use std::sync::atomic::{AtomicI64, AtomicPtr, Ordering::Relaxed};

const DEFAULT_EPOCH: &CStr = c"2024-01-01T00:00:00Z";
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
/// much more waiting before its first IDs (see `reservation::record_promotion_guard`).
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

static EPOCH: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(Some(DEFAULT_EPOCH));
static SHARD_BITS: GucSetting<i32> = GucSetting::<i32>::new(DEFAULT_SHARD_BITS as i32);
static SEQ_BITS: GucSetting<i32> = GucSetting::<i32>::new(DEFAULT_SEQ_BITS as i32);
static LAYOUT_NAME: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(Some(c""));
static SHARD: GucSetting<i32> = GucSetting::<i32>::new(SHARD_UNSET);
static SHARDS: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(Some(c""));
static MAX_LEAD_MS: GucSetting<i32> = GucSetting::<i32>::new(DEFAULT_MAX_LEAD_MS);
static MAX_WAIT_MS: GucSetting<i32> = GucSetting::<i32>::new(DEFAULT_MAX_WAIT_MS);
static MAX_RESERVATION_WAIT_MS: GucSetting<i32> = GucSetting::<i32>::new(DEFAULT_MAX_RESERVATION_WAIT_MS);
static RESERVE_MS: GucSetting<i32> = GucSetting::<i32>::new(DEFAULT_RESERVE_MS);
static MAX_CLOCK_SKEW_MS: GucSetting<i32> = GucSetting::<i32>::new(DEFAULT_MAX_CLOCK_SKEW_MS);
static WAL_RMGR_ID: GucSetting<i32> = GucSetting::<i32>::new(DEFAULT_WAL_RMGR_ID);
static LEGACY_WAL_RMGR_ID: GucSetting<i32> = GucSetting::<i32>::new(DEFAULT_LEGACY_WAL_RMGR_ID);

/// The epoch in Unix ms, parsed once by the assign hook so no call parses a string.
static EPOCH_UNIX_MS: AtomicI64 = AtomicI64::new(DEFAULT_EPOCH_UNIX_MS);

/// The layout, fixed by `check_split` at start from settings that only a restart changes:
/// every call copies it from here, its shifts and bounds already worked out.
struct FixedLayout(std::cell::UnsafeCell<Layout>);
// SAFETY: written once, in `_PG_init`, before this process runs any query or forks a backend;
// only read afterwards.
unsafe impl Sync for FixedLayout {}
static LAYOUT: FixedLayout = FixedLayout(std::cell::UnsafeCell::new(Layout::new(
    DEFAULT_EPOCH_UNIX_MS,
    DEFAULT_SHARD_BITS,
    DEFAULT_SEQ_BITS,
)));

/// The parsed `snowflake_id.shards` of this process, set by its assign hook; null: no fence.
/// Read on every call, so it is parsed once per change and not per call. A backend applies a
/// reload only between statements: the fence that reaches running statements too is the
/// server-wide one (`shared_fence`), which the reservation worker publishes from its own.
static FENCE: AtomicPtr<ShardFence> = AtomicPtr::new(std::ptr::null_mut());

/// Registers every setting. Called from `_PG_init` while shared_preload_libraries is being
/// processed: PostgreSQL allows postmaster-only settings to be defined only then.
///
/// A value in postgresql.conf that PostgreSQL refuses for a setting defined this late only
/// earns a WARNING, and the setting keeps its default. For the layout that would mean
/// issuing IDs in another layout than the rest of the fleet, so a refused value stops the
/// server instead (`CheckedAtStart`).
pub fn init() {
    let configured = CheckedAtStart::ALL.map(|setting| (setting, configured_text(setting.name())));
    // SAFETY: the hooks are `#[pg_guard]`ed and only read their arguments.
    unsafe {
        GucRegistry::define_string_guc_with_hooks(
            EPOCH_NAME,
            c"Start of the time part of every ID (UTC). Fixed for a fleet: never change it.",
            c"A UTC timestamp such as 2024-01-01T00:00:00Z. IDs run out 2^time_bits ms later (69.7 \
              years with the default split). Every server of a fleet must use the same value.",
            &EPOCH,
            GucContext::Postmaster,
            GucFlags::default(),
            Some(check_epoch),
            Some(assign_epoch),
            None,
        );
    }
    GucRegistry::define_int_guc(
        SHARD_BITS_NAME,
        c"Bits of an ID given to the shard id. Fixed for a fleet: never change it.",
        c"10: 1,024 shards (Twitter). 13: 8,192 shards (Instagram). The time part gets what \
          shard_bits and seq_bits leave of 63 bits.",
        &SHARD_BITS,
        MIN_SHARD_BITS as i32,
        MAX_SHARD_BITS as i32,
        GucContext::Postmaster,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        SEQ_BITS_NAME,
        c"Bits of an ID given to the sequence within a millisecond. Fixed for a fleet: never change it.",
        c"12: 4,096 IDs per ms and shard (Twitter). 10: 1,024 (Instagram). The time part gets what \
          shard_bits and seq_bits leave of 63 bits, and must keep at least 38 (8.7 years).",
        &SEQ_BITS,
        MIN_SEQ_BITS as i32,
        MAX_SEQ_BITS as i32,
        GucContext::Postmaster,
        GucFlags::default(),
    );
    // SAFETY: as above.
    unsafe {
        GucRegistry::define_string_guc_with_hooks(
            LAYOUT_NAME_NAME,
            c"A named ID scheme: twitter, discord, instagram or mastodon; empty for none.",
            c"Sets snowflake_id.epoch, shard_bits and seq_bits to that scheme's; any of them set \
              explicitly wins. Fixed for a fleet: never change it.",
            &LAYOUT_NAME,
            GucContext::Postmaster,
            GucFlags::default(),
            Some(check_layout_name),
            None,
            None,
        );
    }
    apply_named_layout();
    check_split();
    // SAFETY: as above.
    unsafe {
        GucRegistry::define_int_guc_with_hooks(
            SHARD_NAME,
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
    // SAFETY: as above.
    unsafe {
        GucRegistry::define_string_guc_with_hooks(
            SHARDS_NAME,
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
    // SAFETY: as above.
    unsafe {
        GucRegistry::define_int_guc_with_hooks(
            MAX_LEAD_MS_NAME,
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
            RESERVE_MS_NAME,
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
    // SAFETY: as above.
    unsafe {
        GucRegistry::define_int_guc_with_hooks(
            WAL_RMGR_ID_NAME,
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
            LEGACY_WAL_RMGR_ID_NAME,
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
    for (setting, text) in configured {
        if let Some(text) = text {
            setting.stop_unless_applied(&text);
        }
    }
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
static SETTINGS_DEFINED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

const EPOCH_NAME: &CStr = c"snowflake_id.epoch";
const SHARD_BITS_NAME: &CStr = c"snowflake_id.shard_bits";
const SEQ_BITS_NAME: &CStr = c"snowflake_id.seq_bits";
const LAYOUT_NAME_NAME: &CStr = c"snowflake_id.layout";
const SHARD_NAME: &CStr = c"snowflake_id.shard";
const SHARDS_NAME: &CStr = c"snowflake_id.shards";
const MAX_LEAD_MS_NAME: &CStr = c"snowflake_id.max_lead_ms";
const RESERVE_MS_NAME: &CStr = c"snowflake_id.reserve_ms";
const WAL_RMGR_ID_NAME: &CStr = c"snowflake_id.wal_rmgr_id";
const LEGACY_WAL_RMGR_ID_NAME: &CStr = c"snowflake_id.legacy_wal_rmgr_id";

/// The text a setting was given in the configuration, if any (read before it is defined,
/// while it is still a placeholder holding the text).
fn configured_text(name: &CStr) -> Option<String> {
    // SAFETY: looks a setting up by name; NULL when it is not set anywhere.
    let value = unsafe { pg_sys::GetConfigOption(name.as_ptr(), true, false) };
    // SAFETY: a non-NULL result is a NUL-terminated string owned by the GUC machinery.
    unsafe { value.as_ref().map(|p| CStr::from_ptr(p).to_string_lossy().into_owned()) }
}

/// An integer setting's text read the way PostgreSQL reads it (also `0x1A`, octal `012`
/// and surrounding spaces), so the comparison with the applied value never disagrees.
fn parse_int_as_postgres(text: &str) -> Option<i32> {
    let text = std::ffi::CString::new(text).ok()?;
    let mut value = 0;
    // SAFETY: `text` is NUL-terminated; no unit flags, and no hint is asked for.
    let parsed = unsafe { pg_sys::parse_int(text.as_ptr(), &mut value, 0, std::ptr::null_mut()) };
    parsed.then_some(value)
}

/// The settings whose configured value must have been applied for the server to start:
/// the layout, the default shard that IDs are issued for, and the shard fence (refused, it
/// would fall back to no fence at all).
#[derive(Clone, Copy)]
enum CheckedAtStart {
    Epoch,
    ShardBits,
    SeqBits,
    LayoutName,
    DefaultShard,
    Fence,
    WalRmgrId,
    LegacyWalRmgrId,
}

impl CheckedAtStart {
    const ALL: [CheckedAtStart; 8] = [
        CheckedAtStart::Epoch,
        CheckedAtStart::ShardBits,
        CheckedAtStart::SeqBits,
        CheckedAtStart::LayoutName,
        CheckedAtStart::DefaultShard,
        CheckedAtStart::Fence,
        CheckedAtStart::WalRmgrId,
        CheckedAtStart::LegacyWalRmgrId,
    ];

    fn name(self) -> &'static CStr {
        match self {
            CheckedAtStart::Epoch => EPOCH_NAME,
            CheckedAtStart::ShardBits => SHARD_BITS_NAME,
            CheckedAtStart::SeqBits => SEQ_BITS_NAME,
            CheckedAtStart::LayoutName => LAYOUT_NAME_NAME,
            CheckedAtStart::DefaultShard => SHARD_NAME,
            CheckedAtStart::Fence => SHARDS_NAME,
            CheckedAtStart::WalRmgrId => WAL_RMGR_ID_NAME,
            CheckedAtStart::LegacyWalRmgrId => LEGACY_WAL_RMGR_ID_NAME,
        }
    }

    /// Whether the setting holds the value of its configured `text`, read as PostgreSQL reads it.
    fn applied(self, text: &str) -> bool {
        match self {
            CheckedAtStart::Epoch => utc::parse_utc_ms(text).ok() == Some(EPOCH_UNIX_MS.load(Relaxed)),
            CheckedAtStart::ShardBits => parse_int_as_postgres(text) == Some(SHARD_BITS.get()),
            CheckedAtStart::SeqBits => parse_int_as_postgres(text) == Some(SEQ_BITS.get()),
            CheckedAtStart::LayoutName => layout_name() == text,
            CheckedAtStart::DefaultShard => parse_int_as_postgres(text) == Some(SHARD.get()),
            CheckedAtStart::Fence => fence_text() == text,
            CheckedAtStart::WalRmgrId => parse_int_as_postgres(text) == Some(WAL_RMGR_ID.get()),
            CheckedAtStart::LegacyWalRmgrId => parse_int_as_postgres(text) == Some(LEGACY_WAL_RMGR_ID.get()),
        }
    }

    /// Stops the server when PostgreSQL refused the configured `text` (the setting then kept
    /// its default). The refusal's reason is in the WARNING just before.
    fn stop_unless_applied(self, text: &str) {
        if !self.applied(text) {
            refuse_start(&self.name().to_string_lossy(), text);
        }
    }
}

/// Stops the server (an ERROR while preloading is fatal to the postmaster).
fn refuse_start(name: &str, text: &str) {
    ErrorReport::new(
        PgSqlErrorCode::ERRCODE_CONFIG_FILE_ERROR,
        format!("invalid value for parameter \"{name}\": \"{text}\""),
        "_PG_init",
    )
    .set_detail("snowflake_id will not start with a setting it cannot apply: the IDs would not follow the configured layout.")
    .set_hint(format!("Correct {name} in postgresql.conf (see the warning above for why it was refused), then start the server."))
    .report(PgLogLevel::ERROR);
}

/// The layout of this server's IDs, fixed at start (`check_split`).
#[inline]
pub fn layout() -> Layout {
    // SAFETY: see `FixedLayout`.
    unsafe { *LAYOUT.0.get() }
}

/// `snowflake_id.layout` as configured ('' for none).
pub fn layout_name() -> String {
    LAYOUT_NAME.get().map(|value| value.to_string_lossy().into_owned()).unwrap_or_default()
}

/// Gives the epoch and the widths of the named layout to those of the three settings not set
/// in the configuration: as PostgreSQL's own defaults computed at start are (wal_buffers),
/// with the lowest priority above the built-in default, so any value set explicitly wins.
fn apply_named_layout() {
    let Some(named) = layout::named_layout(&layout_name()) else { return };
    let values = [
        (EPOCH_NAME, utc::format_utc_ms(named.epoch_unix_ms())),
        (SHARD_BITS_NAME, named.shard_bits().to_string()),
        (SEQ_BITS_NAME, named.seq_bits().to_string()),
    ];
    for (name, value) in values {
        let value = CString::new(value).expect("no NUL in a number or a timestamp");
        // SAFETY: both strings are NUL-terminated; called while preloading, in the postmaster.
        unsafe {
            pg_sys::SetConfigOption(
                name.as_ptr(),
                value.as_ptr(),
                pg_sys::GucContext::PGC_POSTMASTER,
                pg_sys::GucSource::PGC_S_DYNAMIC_DEFAULT,
            )
        };
    }
}

/// Stops the server unless the epoch, shard_bits and seq_bits together make a usable layout:
/// at least 8 years of time bits (more than 4,459 would outlast what timestamps show), and
/// IDs left to issue after now. A usable one becomes the layout every call reads (`layout()`).
fn check_split() {
    let (epoch, shard_bits, seq_bits) =
        (EPOCH_UNIX_MS.load(Relaxed), read(&SHARD_BITS) as u32, read(&SEQ_BITS) as u32);
    let fail = |message: String, hint: String| {
        ErrorReport::new(PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE, message, "_PG_init")
            .set_detail(format!(
                "The time part of an ID gets what snowflake_id.shard_bits and snowflake_id.seq_bits leave of \
                 63 bits: here {}.",
                layout::ID_BITS as i64 - shard_bits as i64 - seq_bits as i64
            ))
            .set_hint(hint)
            .report(PgLogLevel::ERROR);
    };
    match Layout::try_new(epoch, shard_bits, seq_bits) {
        Err(SplitError::TimeBits { time_bits }) if time_bits < MIN_TIME_BITS as i64 => fail(
            format!(
                "snowflake_id.shard_bits = {shard_bits} and snowflake_id.seq_bits = {seq_bits} leave {time_bits} \
                 bits of time, less than 8 years of IDs"
            ),
            format!(
                "Lower snowflake_id.shard_bits or snowflake_id.seq_bits so that together they are at most {}.",
                layout::ID_BITS - MIN_TIME_BITS
            ),
        ),
        Err(SplitError::TimeBits { time_bits }) => fail(
            format!(
                "snowflake_id.shard_bits = {shard_bits} and snowflake_id.seq_bits = {seq_bits} leave {time_bits} \
                 bits of time, more than the 47 (4,459 years) that timestamps can show"
            ),
            format!(
                "Raise snowflake_id.shard_bits or snowflake_id.seq_bits so that together they are at least {}.",
                layout::ID_BITS - layout::MAX_TIME_BITS
            ),
        ),
        // Each width alone was checked against its range when it was set.
        Err(SplitError::ShardBits { .. } | SplitError::SeqBits { .. }) => {
            unreachable!("shard_bits and seq_bits are range-checked settings")
        }
        Ok(layout) if layout.last_unix_ms() < snowflake_core::clock::wall_clock_unix_ms() => {
            let ran_out = utc::format_utc_ms(layout.last_unix_ms());
            ErrorReport::new(
                PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
                format!("IDs with snowflake_id.epoch = '{}' and {} bits of time ran out on {ran_out}", utc::format_utc_ms(epoch), layout.time_bits()),
                "_PG_init",
            )
            .set_hint("Choose a later epoch, or a split that leaves more time bits.")
            .report(PgLogLevel::ERROR);
        }
        // SAFETY: see `FixedLayout`: still in `_PG_init`.
        Ok(layout) => unsafe { *LAYOUT.0.get() = layout },
    }
}

/// The current value of an integer setting, read on the hot path. `GucSetting::get` first
/// checks that the caller is the backend's main thread (a thread-local lookup each time);
/// the generators only ever run there, as every SQL function does, so it is skipped.
#[inline(always)]
fn read(setting: &GucSetting<i32>) -> i32 {
    // SAFETY: PostgreSQL writes the value only between statements, in this same thread.
    unsafe { *setting.as_ptr() }
}

/// `snowflake_id.shard`, if set.
#[inline]
pub fn default_shard() -> Option<i32> {
    let shard = read(&SHARD);
    (shard != SHARD_UNSET).then_some(shard)
}

/// Whether this process's shard fence lets it issue `shard` (a shard of the layout).
#[inline(always)]
pub fn fence_allows(shard: u32) -> bool {
    let fence = FENCE.load(Relaxed);
    // SAFETY: a non-null pointer is a fence leaked by `assign_shards`, replaced (and freed)
    // only between statements, in this same thread.
    fence.is_null() || unsafe { (*fence).allows(shard) }
}

/// This process's shard fence, parsed.
pub fn fence() -> ShardFence {
    // SAFETY: as in `fence_allows`.
    unsafe { FENCE.load(Relaxed).as_ref() }.cloned().unwrap_or(ShardFence::Open)
}

/// `snowflake_id.shards` as configured, for messages.
pub fn fence_text() -> String {
    SHARDS.get().map(|value| value.to_string_lossy().into_owned()).unwrap_or_default()
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

/// Hands PostgreSQL the reason for refusing a setting; it prints them with its own
/// "invalid value for parameter" message, at startup or at `SET`/`ALTER SYSTEM`.
fn refuse_setting(detail: &str, hint: &str) -> bool {
    // SAFETY: PostgreSQL reads these strings right after the check hook returns false;
    // `pstrdup` puts them in the current memory context, as its own macros do.
    unsafe {
        let detail = CString::new(detail).unwrap_or_default();
        let hint = CString::new(hint).unwrap_or_default();
        pg_sys::GUC_check_errdetail_string = pg_sys::pstrdup(detail.as_ptr());
        pg_sys::GUC_check_errhint_string = pg_sys::pstrdup(hint.as_ptr());
    }
    false
}

/// A string setting's value as hooks receive it; NULL (never set) reads as empty.
///
/// # Safety
/// `value` is NULL or points to a NUL-terminated string that outlives the returned text.
unsafe fn guc_text<'a>(value: *const c_char) -> std::borrow::Cow<'a, str> {
    // SAFETY: as the caller promises.
    unsafe { value.as_ref().map_or("".into(), |p| CStr::from_ptr(p).to_string_lossy()) }
}

/// The epoch must parse and lie in the past. Whether IDs are left after it depends on the
/// split too: `check_split` checks that once every width is known.
fn validate_epoch(text: &str) -> Result<i64, String> {
    let epoch = utc::parse_utc_ms(text)?;
    if epoch > snowflake_core::clock::wall_clock_unix_ms() {
        return Err(format!("The epoch {} is in the future.", utc::format_utc_ms(epoch)));
    }
    Ok(epoch)
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn check_layout_name(
    newval: *mut *mut c_char,
    _extra: *mut *mut c_void,
    _source: pg_sys::GucSource::Type,
) -> bool {
    // SAFETY: PostgreSQL passes a valid pointer to a string or to NULL.
    let text = unsafe { guc_text(*newval) };
    if text.is_empty() || layout::named_layout(&text).is_some() {
        return true;
    }
    refuse_setting(
        &format!("\"{text}\" is not a named layout."),
        &format!(
            "Use one of {} (lowercase), or '' and set snowflake_id.epoch, shard_bits and seq_bits.",
            layout::layout_names()
        ),
    )
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn check_epoch(
    newval: *mut *mut c_char,
    _extra: *mut *mut c_void,
    _source: pg_sys::GucSource::Type,
) -> bool {
    // SAFETY: PostgreSQL passes a valid pointer to a string or to NULL.
    let text = unsafe { guc_text(*newval) };
    match validate_epoch(&text) {
        Ok(_) => true,
        Err(reason) => refuse_setting(
            &reason,
            "Set snowflake_id.epoch to a past UTC timestamp such as '2024-01-01T00:00:00Z', the \
             same on every server of the fleet.",
        ),
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn assign_epoch(newval: *const c_char, _extra: *mut c_void) {
    // SAFETY: as in `check_epoch`; the value passed the check just before.
    if let Ok(epoch) = utc::parse_utc_ms(&unsafe { guc_text(newval) }) {
        EPOCH_UNIX_MS.store(epoch, Relaxed);
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
    let layout = layout();
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

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn check_shards(
    newval: *mut *mut c_char,
    _extra: *mut *mut c_void,
    _source: pg_sys::GucSource::Type,
) -> bool {
    // SAFETY: PostgreSQL passes a valid pointer to a string or to NULL.
    let text = unsafe { guc_text(*newval) };
    match ShardFence::parse(&text, layout().max_shard()) {
        Ok(_) => true,
        Err(reason) => refuse_setting(
            &reason,
            "List the shards this server owns, such as '0-5,9'; '' allows every shard, 'none' none.",
        ),
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn assign_shards(newval: *const c_char, _extra: *mut c_void) {
    // SAFETY: as in `check_shards`; the value passed the check just before.
    let fence = match ShardFence::parse(&unsafe { guc_text(newval) }, layout().max_shard()) {
        Ok(ShardFence::Open) | Err(_) => std::ptr::null_mut(),
        Ok(fence) => Box::into_raw(Box::new(fence)),
    };
    let old = FENCE.swap(fence, Relaxed);
    if !old.is_null() {
        // SAFETY: leaked by an earlier call of this hook, and no longer published.
        drop(unsafe { Box::from_raw(old) });
    }
}

/// `reserve_ms` at most `max_lead_ms + max_wait_ms`: a restart resumes at the reservation, up
/// to `reserve_ms` ahead of the clock, and a call waits at most `max_wait_ms` for the clock to
/// come within `max_lead_ms` of it; with a longer reservation every restart would refuse
/// calls until the clock caught up. `None` when they agree, else why not. Each hook checks its
/// new value against the other two settings' current ones; at start, `init` checks the three
/// once all are set.
fn reservation_too_long(max_lead_ms: i32, max_wait_ms: i32, reserve_ms: i32) -> Option<String> {
    let bound = i64::from(max_lead_ms) + i64::from(max_wait_ms);
    (i64::from(reserve_ms) > bound).then(|| {
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
