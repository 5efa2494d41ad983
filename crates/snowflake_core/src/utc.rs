//! UTC calendar arithmetic for the epoch setting and the JSON form of an ID.
//!
//! Pure Rust: the epoch is parsed while the postmaster loads the library, before any
//! PostgreSQL date machinery (time zones, `DateStyle`) may be relied on, and the JSON form
//! must not depend on the session's `TimeZone`. Algorithms: Howard Hinnant's
//! `days_from_civil` / `civil_from_days` (proleptic Gregorian calendar).

const MS_PER_DAY: i64 = 86_400_000;

/// Days since 1970-01-01 of a calendar date.
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = month as i64;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + day as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Calendar date of a day count since 1970-01-01.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if month <= 2 { yoe + era * 400 + 1 } else { yoe + era * 400 }, month, day)
}

fn days_in_month(year: i64, month: u32) -> u32 {
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Parses a UTC timestamp into Unix milliseconds. Accepted forms:
/// `YYYY-MM-DD`, optionally followed by `T` or a space and `HH:MM[:SS[.fff]]`,
/// optionally followed by `Z`, `+00` or `+00:00`. Other offsets are refused so that the
/// epoch of a cluster never depends on a server's time zone.
pub fn parse_utc_ms(text: &str) -> Result<i64, String> {
    let text = text.trim();
    let (body, offset) = split_offset(text);
    if let Some(offset) = offset {
        if !matches!(offset, "Z" | "z" | "+00" | "+00:00" | "+0000") {
            return Err(format!("time zone offset \"{offset}\" is not UTC"));
        }
    }
    let (date, time) = match body.find(['T', 't', ' ']) {
        Some(at) => (&body[..at], Some(&body[at + 1..])),
        None => (body, None),
    };
    let bad = || format!("\"{text}\" is not a timestamp of the form YYYY-MM-DD[THH:MM:SS[.fff]][Z]");

    let mut fields = date.split('-');
    let (Some(y), Some(m), Some(d), None) = (fields.next(), fields.next(), fields.next(), fields.next())
    else {
        return Err(bad());
    };
    let year = number(y, 4, 4).ok_or_else(bad)?;
    let month = number(m, 2, 2).ok_or_else(bad)? as u32;
    let day = number(d, 2, 2).ok_or_else(bad)? as u32;
    if !(1..=12).contains(&month) || day == 0 || day > days_in_month(year, month) {
        return Err(format!("{date} is not a date in the calendar"));
    }

    let mut ms_of_day = 0;
    if let Some(time) = time {
        let (hms, fraction) = match time.split_once('.') {
            Some((hms, fraction)) => (hms, Some(fraction)),
            None => (time, None),
        };
        let mut fields = hms.split(':');
        let hour = fields.next().and_then(|f| number(f, 2, 2)).ok_or_else(bad)?;
        let minute = fields.next().and_then(|f| number(f, 2, 2)).ok_or_else(bad)?;
        let second = match fields.next() {
            Some(f) => number(f, 2, 2).ok_or_else(bad)?,
            None => 0,
        };
        if fields.next().is_some() || hour > 23 || minute > 59 || second > 59 {
            return Err(bad());
        }
        let millis = match fraction {
            // Milliseconds are the precision of an ID; finer digits would be silently lost.
            Some(f) => {
                let digits = number(f, 1, 3).ok_or_else(bad)?;
                digits * 10_i64.pow(3 - f.len() as u32)
            }
            None => 0,
        };
        ms_of_day = ((hour * 60 + minute) * 60 + second) * 1000 + millis;
    }
    Ok(days_from_civil(year, month, day) * MS_PER_DAY + ms_of_day)
}

/// Splits a trailing `Z` or `+hh[:mm]`/`-hh[:mm]` offset off a timestamp.
fn split_offset(text: &str) -> (&str, Option<&str>) {
    if let Some(body) = text.strip_suffix(['Z', 'z']) {
        return (body, Some(&text[body.len()..]));
    }
    // An offset sign can only appear after the time's "HH:MM"; the date's own '-' come earlier.
    match text.rfind(['+', '-']) {
        Some(at) if at > 10 => (&text[..at], Some(&text[at..])),
        _ => (text, None),
    }
}

/// A field of `min..=max` ASCII digits.
fn number(field: &str, min: usize, max: usize) -> Option<i64> {
    let ok = (min..=max).contains(&field.len()) && field.bytes().all(|b| b.is_ascii_digit());
    ok.then(|| field.parse().ok()).flatten()
}

/// Formats Unix milliseconds as ISO 8601 in UTC, `2024-01-01T00:00:00.000Z`.
pub fn format_utc_ms(unix_ms: i64) -> String {
    let days = unix_ms.div_euclid(MS_PER_DAY);
    let ms_of_day = unix_ms.rem_euclid(MS_PER_DAY);
    let (year, month, day) = civil_from_days(days);
    let (seconds, millis) = (ms_of_day / 1000, ms_of_day % 1000);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        seconds / 3600,
        seconds / 60 % 60,
        seconds % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::DEFAULT_EPOCH_UNIX_MS;

    #[test]
    fn the_default_epoch_in_every_accepted_spelling() {
        for text in [
            "2024-01-01",
            "2024-01-01T00:00:00Z",
            "2024-01-01 00:00:00",
            "2024-01-01 00:00:00+00",
            "2024-01-01T00:00:00.000+00:00",
            "2024-01-01T00:00",
            " 2024-01-01 ",
        ] {
            assert_eq!(parse_utc_ms(text), Ok(DEFAULT_EPOCH_UNIX_MS), "{text}");
        }
    }

    #[test]
    fn known_instants() {
        assert_eq!(parse_utc_ms("1970-01-01"), Ok(0));
        assert_eq!(parse_utc_ms("2010-11-04T01:42:54.657Z"), Ok(1_288_834_974_657)); // Twitter's epoch
        assert_eq!(parse_utc_ms("2000-02-29T12:00:00.5Z"), Ok(951_825_600_500));
        assert_eq!(parse_utc_ms("1969-12-31T23:59:59.999Z"), Ok(-1));
    }

    #[test]
    fn refuses_what_is_not_a_utc_timestamp() {
        for text in [
            "",
            "yesterday",
            "2024-13-01",
            "2023-02-29",
            "2024-01-32",
            "2024-1-1",
            "2024-01-01T24:00:00",
            "2024-01-01T00:00:00.1234",
            "2024-01-01T00:00:00+02",
            "2024-01-01T00:00:00-05:00",
            "1704067200000",
        ] {
            assert!(parse_utc_ms(text).is_err(), "{text} was accepted");
        }
    }

    #[test]
    fn formats_and_parses_back() {
        assert_eq!(format_utc_ms(DEFAULT_EPOCH_UNIX_MS), "2024-01-01T00:00:00.000Z");
        assert_eq!(format_utc_ms(-1), "1969-12-31T23:59:59.999Z");
        for ms in [0, 951_825_600_500, 1_288_834_974_657, DEFAULT_EPOCH_UNIX_MS + (1 << 41) - 1] {
            assert_eq!(parse_utc_ms(&format_utc_ms(ms)), Ok(ms));
        }
    }
}
