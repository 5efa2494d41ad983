//! The plumbing every `snowflake_id.*` setting shares: reading a value on the hot path,
//! refusing a value with PostgreSQL's own message, reading hooks' arguments, and stopping
//! the server when a configured value could not be applied. What each setting means lives
//! with what it governs (`fixed_layout`, `fence`, `settings`).

use pgrx::guc::GucSetting;
use pgrx::pg_sys::{self, panic::ErrorReport};
use pgrx::{PgLogLevel, PgSqlErrorCode};
use std::ffi::{c_char, CStr, CString};

/// The current value of an integer setting, read on the hot path. `GucSetting::get` first
/// checks that the caller is the backend's main thread (a thread-local lookup each time);
/// the generators only ever run there, as every SQL function does, so it is skipped.
#[inline(always)]
pub fn read(setting: &GucSetting<i32>) -> i32 {
    // SAFETY: PostgreSQL writes the value only between statements, in this same thread.
    unsafe { *setting.as_ptr() }
}

/// A string setting's value, '' when unset.
pub fn text(setting: &GucSetting<Option<CString>>) -> String {
    setting.get().map(|value| value.to_string_lossy().into_owned()).unwrap_or_default()
}

/// Hands PostgreSQL the reason for refusing a setting; it prints them with its own
/// "invalid value for parameter" message, at startup or at `SET`/`ALTER SYSTEM`.
pub fn refuse_setting(detail: &str, hint: &str) -> bool {
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
pub unsafe fn hook_text<'a>(value: *const c_char) -> std::borrow::Cow<'a, str> {
    // SAFETY: as the caller promises.
    unsafe { value.as_ref().map_or("".into(), |p| CStr::from_ptr(p).to_string_lossy()) }
}

/// A string setting's value as check hooks receive it, or why it is refused: a value that is
/// not valid UTF-8 (possible in a `SQL_ASCII` database) is refused whole, rather than checked
/// on a lossy copy that differs from what is then stored.
///
/// # Safety
/// As for `hook_text`.
pub unsafe fn hook_text_utf8<'a>(value: *const c_char) -> Result<&'a str, String> {
    // SAFETY: as the caller promises.
    let Some(value) = (unsafe { value.as_ref() }) else { return Ok("") };
    // SAFETY: as the caller promises.
    unsafe { CStr::from_ptr(value) }.to_str().map_err(|_| "The value is not valid UTF-8.".to_string())
}

/// A text setting's check hook, whole: `check` judges the value (`hook_text_utf8`), and a value
/// it refuses is refused with its reason and `hint` (`refuse_setting`).
///
/// # Safety
/// `newval` is what PostgreSQL passes a check hook of a string setting.
pub unsafe fn check_text<T>(
    newval: *mut *mut c_char,
    check: impl FnOnce(&str) -> Result<T, String>,
    hint: &str,
) -> bool {
    // SAFETY: as the caller promises.
    match unsafe { hook_text_utf8(*newval) }.and_then(check) {
        Ok(_) => true,
        Err(reason) => refuse_setting(&reason, hint),
    }
}

/// An HTTP URL setting's value: '' (off), or what `parse_url` accepts (the lease's and the
/// registry's).
pub fn url_or_off(text: &str) -> Result<(), String> {
    if text.is_empty() {
        Ok(())
    } else {
        snowflake_core::lease::parse_url(text).map(|_| ())
    }
}

/// An integer setting's text read the way PostgreSQL reads it (also `0x1A`, octal `012`
/// and surrounding spaces), so the comparison with the applied value never disagrees.
pub fn parse_int_as_postgres(text: &str) -> Option<i32> {
    parse_int_with_unit(text, 0)
}

/// As `parse_int_as_postgres`, for a setting of unit `unit_flags` (`GUC_UNIT_MS`: `2s` is 2000).
pub fn parse_int_with_unit(text: &str, unit_flags: u32) -> Option<i32> {
    let text = CString::new(text).ok()?;
    let mut value = 0;
    // SAFETY: `text` is NUL-terminated; the flags are a GUC unit, and no hint is asked for.
    let parsed =
        unsafe { pg_sys::parse_int(text.as_ptr(), &mut value, unit_flags as i32, std::ptr::null_mut()) };
    parsed.then_some(value)
}

/// A value in postgresql.conf that PostgreSQL refuses for a setting defined as late as ours
/// (while preloading) only earns a WARNING, and the setting keeps its default. For the
/// settings that decide which IDs are issued (the layout, the default shard, the fence, the
/// WAL ids) that would mean issuing other IDs than configured, so their configured text is
/// captured before they are defined and compared with the applied value after.
pub struct ConfiguredAtStart {
    name: &'static CStr,
    text: Option<String>,
}

impl ConfiguredAtStart {
    /// The text the setting was given in the configuration, if any. Called before it is
    /// defined, while it is still a placeholder holding the text.
    pub fn capture(name: &'static CStr) -> Self {
        // SAFETY: looks a setting up by name; NULL when it is not set anywhere.
        let value = unsafe { pg_sys::GetConfigOption(name.as_ptr(), true, false) };
        // SAFETY: a non-NULL result is a NUL-terminated string owned by the GUC machinery.
        let text = unsafe { value.as_ref().map(|p| CStr::from_ptr(p).to_string_lossy().into_owned()) };
        ConfiguredAtStart { name, text }
    }

    /// Stops the server when the setting was configured and `applied` says its value is not
    /// the configured text's, read as PostgreSQL reads it. The refusal's reason is in the
    /// WARNING just before.
    pub fn stop_unless_applied(&self, applied: impl FnOnce(&str) -> bool) {
        self.stop_unless_applied_because(
            "snowflake_id will not start with a setting it cannot apply: the IDs would not follow the configured \
             layout.",
            applied,
        )
    }

    /// As `stop_unless_applied`, with `detail` saying what starting anyway would do.
    pub fn stop_unless_applied_because(&self, detail: &str, applied: impl FnOnce(&str) -> bool) {
        let Some(text) = &self.text else { return };
        if applied(text) {
            return;
        }
        let name = self.name.to_string_lossy();
        // An ERROR while preloading is fatal to the postmaster.
        ErrorReport::new(
            PgSqlErrorCode::ERRCODE_CONFIG_FILE_ERROR,
            format!("invalid value for parameter \"{name}\": \"{text}\""),
            "_PG_init",
        )
        .set_detail(detail)
        .set_hint(format!(
            "Correct {name} in postgresql.conf (see the warning above for why it was refused), then start the server."
        ))
        .report(PgLogLevel::ERROR);
    }
}
