//! The layout of this server's IDs, fixed at start: its settings, the named-layout step, the
//! check of the split, the frozen layout every call reads (`get`), and its record in the data
//! directory (`record`).
//!
//! | setting | context | why |
//! |---|---|---|
//! | `epoch`, `shard_bits`, `seq_bits`, `id_bits` | postmaster | the layout of every ID: changing any on a running fleet would make old and new IDs collide or sort wrongly, so they are fixed at server start |
//! | `layout` | postmaster | names a scheme in use elsewhere, or `js53` (a named layout), and sets the other four, unless they are set themselves |
//!
//! At start, in this order (`define`): the five settings are defined; a named layout gives
//! its values to those of the four not configured; a configured value PostgreSQL refused
//! stops the server; the split is checked and frozen (`check_and_freeze`). When the
//! postmaster creates shared memory, `record::check_or_record` compares the frozen layout
//! with the one this server issued IDs in.

pub mod record;

use super::guc::{self, ConfiguredAtStart};
use pgrx::guc::{GucContext, GucFlags, GucRegistry, GucSetting};
use pgrx::pg_sys::{self, panic::ErrorReport};
use pgrx::{PgLogLevel, PgSqlErrorCode};
use snowflake_core::layout::{
    self, Layout, SplitError, DEFAULT_EPOCH_UNIX_MS, DEFAULT_SEQ_BITS, DEFAULT_SHARD_BITS, MAX_SEQ_BITS,
    MAX_SHARD_BITS, MIN_SEQ_BITS, MIN_SHARD_BITS, MIN_TIME_BITS,
};
use snowflake_core::utc;
use std::ffi::{c_char, c_void, CStr, CString};
use std::sync::atomic::{AtomicI64, Ordering::Relaxed};

const EPOCH_SETTING: &CStr = c"snowflake_id.epoch";
const SHARD_BITS_SETTING: &CStr = c"snowflake_id.shard_bits";
const SEQ_BITS_SETTING: &CStr = c"snowflake_id.seq_bits";
const ID_BITS_SETTING: &CStr = c"snowflake_id.id_bits";
const NAMED_LAYOUT_SETTING: &CStr = c"snowflake_id.layout";

const DEFAULT_EPOCH: &CStr = c"2024-01-01T00:00:00Z";

static EPOCH: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(Some(DEFAULT_EPOCH));
static SHARD_BITS: GucSetting<i32> = GucSetting::<i32>::new(DEFAULT_SHARD_BITS as i32);
static SEQ_BITS: GucSetting<i32> = GucSetting::<i32>::new(DEFAULT_SEQ_BITS as i32);
static ID_BITS: GucSetting<i32> = GucSetting::<i32>::new(layout::ID_BITS as i32);
/// `snowflake_id.layout`: the name of a scheme ('' for none).
static NAMED_LAYOUT: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(Some(c""));

/// The epoch in Unix ms, parsed once by the assign hook so no call parses a string.
static EPOCH_UNIX_MS: AtomicI64 = AtomicI64::new(DEFAULT_EPOCH_UNIX_MS);

/// The layout, frozen by `check_and_freeze` at start from settings that only a restart
/// changes: every call copies it from here, its shifts and bounds already worked out.
struct FrozenLayout(std::cell::UnsafeCell<Layout>);
// SAFETY: written once, in `_PG_init`, before this process runs any query or forks a backend;
// only read afterwards.
unsafe impl Sync for FrozenLayout {}
static FROZEN: FrozenLayout = FrozenLayout(std::cell::UnsafeCell::new(Layout::new(
    DEFAULT_EPOCH_UNIX_MS,
    DEFAULT_SHARD_BITS,
    DEFAULT_SEQ_BITS,
)));

/// The layout of this server's IDs, fixed at start.
#[inline]
pub fn get() -> Layout {
    // SAFETY: see `FrozenLayout`.
    unsafe { *FROZEN.0.get() }
}

/// Defines the layout's settings and fixes the layout; stops the server unless it is
/// usable. Called from `settings::init` while preloading, before any setting that depends
/// on the layout (the default shard, the fence) is defined.
pub fn define() {
    let configured =
        [EPOCH_SETTING, SHARD_BITS_SETTING, SEQ_BITS_SETTING, ID_BITS_SETTING, NAMED_LAYOUT_SETTING]
            .map(ConfiguredAtStart::capture);
    // SAFETY: the hooks are `#[pg_guard]`ed and only read their arguments.
    unsafe {
        GucRegistry::define_string_guc_with_hooks(
            EPOCH_SETTING,
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
        SHARD_BITS_SETTING,
        c"Bits of an ID given to the shard id. Fixed for a fleet: never change it.",
        c"10: 1,024 shards (Twitter). 13: 8,192 shards (Instagram). The time part gets what \
          shard_bits and seq_bits leave of id_bits (63).",
        &SHARD_BITS,
        MIN_SHARD_BITS as i32,
        MAX_SHARD_BITS as i32,
        GucContext::Postmaster,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        SEQ_BITS_SETTING,
        c"Bits of an ID given to the sequence within a millisecond. Fixed for a fleet: never change it.",
        c"12: 4,096 IDs per ms and shard (Twitter). 10: 1,024 (Instagram). The time part gets what \
          shard_bits and seq_bits leave of id_bits (63), and must keep at least 38 (8.7 years).",
        &SEQ_BITS,
        MIN_SEQ_BITS as i32,
        MAX_SEQ_BITS as i32,
        GucContext::Postmaster,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        ID_BITS_SETTING,
        c"Bits of an ID: 63, or fewer so that every ID stays below 2^id_bits. Fixed for a fleet: never change it.",
        c"63: every positive bigint. 53: every ID at or below 2^53 - 1, a number JavaScript and JSON \
          parsers that read doubles hold exactly (the js53 layout). Time, shard and sequence share them.",
        &ID_BITS,
        layout::MIN_ID_BITS as i32,
        layout::ID_BITS as i32,
        GucContext::Postmaster,
        GucFlags::default(),
    );
    // SAFETY: as above.
    unsafe {
        GucRegistry::define_string_guc_with_hooks(
            NAMED_LAYOUT_SETTING,
            c"A named ID layout: twitter, discord, instagram, mastodon or js53; empty for none.",
            c"Sets snowflake_id.epoch, shard_bits, seq_bits and id_bits to that layout's; any of them \
              set explicitly wins. Fixed for a fleet: never change it.",
            &NAMED_LAYOUT,
            GucContext::Postmaster,
            GucFlags::default(),
            Some(check_named_layout),
            None,
            None,
        );
    }
    apply_named_layout();
    let [epoch, shard_bits, seq_bits, id_bits, named_layout] = configured;
    epoch.stop_unless_applied(|text| utc::parse_utc_ms(text).ok() == Some(EPOCH_UNIX_MS.load(Relaxed)));
    shard_bits.stop_unless_applied(|text| guc::parse_int_as_postgres(text) == Some(SHARD_BITS.get()));
    seq_bits.stop_unless_applied(|text| guc::parse_int_as_postgres(text) == Some(SEQ_BITS.get()));
    id_bits.stop_unless_applied(|text| guc::parse_int_as_postgres(text) == Some(ID_BITS.get()));
    named_layout.stop_unless_applied(|text| guc::text(&NAMED_LAYOUT) == text);
    check_and_freeze();
}

/// Gives the epoch and the widths of the named layout to those of the four settings not set
/// in the configuration: as PostgreSQL's own defaults computed at start are (wal_buffers),
/// with the lowest priority above the built-in default, so any value set explicitly wins.
fn apply_named_layout() {
    let Some(named) = layout::named_layout(&guc::text(&NAMED_LAYOUT)) else { return };
    let values = [
        (EPOCH_SETTING, utc::format_utc_ms(named.epoch_unix_ms())),
        (SHARD_BITS_SETTING, named.shard_bits().to_string()),
        (SEQ_BITS_SETTING, named.seq_bits().to_string()),
        (ID_BITS_SETTING, named.id_bits().to_string()),
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

/// Stops the server unless the epoch, shard_bits, seq_bits and id_bits together make a usable
/// layout: at least 8 years of time bits (more than 4,459 would outlast what timestamps show),
/// and IDs left to issue after now. Freezes a usable one as the layout every call reads (`get`).
fn check_and_freeze() {
    let (epoch, shard_bits, seq_bits, id_bits) = (
        EPOCH_UNIX_MS.load(Relaxed),
        guc::read(&SHARD_BITS) as u32,
        guc::read(&SEQ_BITS) as u32,
        guc::read(&ID_BITS) as u32,
    );
    let fail = |message: String, hint: String| {
        ErrorReport::new(PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE, message, "_PG_init")
            .set_detail(format!(
                "The time part of an ID gets what snowflake_id.shard_bits and snowflake_id.seq_bits leave of \
                 snowflake_id.id_bits = {id_bits}: here {}.",
                id_bits as i64 - shard_bits as i64 - seq_bits as i64
            ))
            .set_hint(hint)
            .report(PgLogLevel::ERROR);
    };
    match Layout::try_new_narrow(epoch, shard_bits, seq_bits, id_bits) {
        Err(SplitError::TimeBits { time_bits }) if time_bits < MIN_TIME_BITS as i64 => fail(
            format!(
                "snowflake_id.shard_bits = {shard_bits} and snowflake_id.seq_bits = {seq_bits} leave {time_bits} \
                 bits of time, less than 8 years of IDs"
            ),
            format!(
                "Lower snowflake_id.shard_bits or snowflake_id.seq_bits so that together they are at most {}.",
                id_bits - MIN_TIME_BITS
            ),
        ),
        Err(SplitError::TimeBits { time_bits }) => fail(
            format!(
                "snowflake_id.shard_bits = {shard_bits} and snowflake_id.seq_bits = {seq_bits} leave {time_bits} \
                 bits of time, more than the 47 (4,459 years) that timestamps can show"
            ),
            format!(
                "Raise snowflake_id.shard_bits or snowflake_id.seq_bits so that together they are at least {}.",
                id_bits.saturating_sub(layout::MAX_TIME_BITS)
            ),
        ),
        // Each width alone was checked against its range when it was set.
        Err(SplitError::ShardBits { .. } | SplitError::SeqBits { .. } | SplitError::IdBits { .. }) => {
            unreachable!("shard_bits, seq_bits and id_bits are range-checked settings")
        }
        Ok(layout) if layout.last_unix_ms() < snowflake_core::clock::wall_clock_unix_ms() => {
            let ran_out = utc::format_utc_ms(layout.last_unix_ms());
            ErrorReport::new(
                PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
                format!(
                    "IDs with snowflake_id.epoch = '{}' and {} bits of time ran out on {ran_out}",
                    utc::format_utc_ms(epoch),
                    layout.time_bits()
                ),
                "_PG_init",
            )
            .set_hint("Choose a later epoch, or a split that leaves more time bits.")
            .report(PgLogLevel::ERROR);
        }
        // SAFETY: see `FrozenLayout`: still in `_PG_init`.
        Ok(layout) => unsafe { *FROZEN.0.get() = layout },
    }
}

/// The epoch must parse and lie in the past. Whether IDs are left after it depends on the
/// split too: `check_and_freeze` checks that once every width is known.
fn validate_epoch(text: &str) -> Result<i64, String> {
    let epoch = utc::parse_utc_ms(text)?;
    if epoch > snowflake_core::clock::wall_clock_unix_ms() {
        return Err(format!("The epoch {} is in the future.", utc::format_utc_ms(epoch)));
    }
    Ok(epoch)
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn check_named_layout(
    newval: *mut *mut c_char,
    _extra: *mut *mut c_void,
    _source: pg_sys::GucSource::Type,
) -> bool {
    // SAFETY: PostgreSQL passes a valid pointer to a string or to NULL.
    let text = unsafe { guc::hook_text(*newval) };
    if text.is_empty() || layout::named_layout(&text).is_some() {
        return true;
    }
    guc::refuse_setting(
        &format!("\"{text}\" is not a named layout."),
        &format!(
            "Use one of {} (lowercase), or '' and set snowflake_id.epoch, shard_bits, seq_bits and id_bits.",
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
    let text = unsafe { guc::hook_text(*newval) };
    match validate_epoch(&text) {
        Ok(_) => true,
        Err(reason) => guc::refuse_setting(
            &reason,
            "Set snowflake_id.epoch to a past UTC timestamp such as '2024-01-01T00:00:00Z', the \
             same on every server of the fleet.",
        ),
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn assign_epoch(newval: *const c_char, _extra: *mut c_void) {
    // SAFETY: as in `check_epoch`; the value passed the check just before.
    if let Ok(epoch) = utc::parse_utc_ms(&unsafe { guc::hook_text(newval) }) {
        EPOCH_UNIX_MS.store(epoch, Relaxed);
    }
}
