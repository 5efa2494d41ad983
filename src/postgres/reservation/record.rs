//! The reservation's record in the data directory, `snowflake_id.reservation`: one line that
//! says how far this server may have issued IDs, and whether WAL of versions up to 0.2.0 may
//! still have to be replayed here. `reservation` decides what to record and when.
//!
//! Since 0.5.0 the line ends with its CRC-32C, as `pg_control` does: a torn or bit-flipped
//! record that still parses would otherwise be trusted, and a ceiling read too low repeats
//! IDs. Lines written by 0.3.0 and 0.4.0 (no checksum) are still read, as written before 0.5.0.
//!
//! Since 0.8.1 a line may carry, after the flag, the lead settings its ceiling was reserved
//! under (` max_lead_ms=0000060000 reserve_ms=0000000250`), when they exceed the server's own
//! (`generator::lead_to_record`): a standby keeps there the lead its primary wrote into the WAL
//! record it replayed, so that its promotion after a restart (or a crash), whose recovery may
//! start past that WAL record, still covers the primary's lead and keeps issuing under it. A
//! line without them is the line 0.5.0 to 0.8.0 write, so they still read it; the longer line
//! they refuse (the server does not start, naming the file), as a layout's `id_bits` is refused
//! by the versions before it: only on a server whose primary, or its own kept lead, runs with
//! larger lead settings than its own, and until the next record without them.
//!
//! A line written by pg_upgrade's starts of a new cluster ends with a mark after its checksum
//! (`compat::UNCONFIRMED_BY_PG_UPGRADE`): its ceiling is only an estimate of the old server's,
//! and the first real start refuses it (`restore`) until the old server's line is copied over it
//! or the mark deleted, which leaves a line that reads as any other.
//!
//! Every line of one kind has the same length (the number is zero-padded to 20 characters, any
//! `i64`, the settings to 10, any `u32`; the flag and the checksum have fixed widths), so the
//! worker writes each one over the last in place with one fdatasync (`durable_file::overwrite`);
//! a line of the other kind replaces the file (rename), which happens only when the settings
//! come or go.

use crate::postgres::{compat, durable_file};
use snowflake_core::crc32c::crc32c;
use snowflake_core::generator::LeadSettings;

/// The record file, relative to the data directory (every server process's working
/// directory). pg_basebackup copies it, so a new standby starts with a lower bound too.
pub const FILE: &str = "snowflake_id.reservation";
const TEMP_FILE: &str = "snowflake_id.reservation.tmp";

/// The line's start, the same in every version: the ceiling follows it.
pub const PREFIX: &str = "snowflake_id reservation ceiling_unix_ms=";
const WAL128_FIELD: &str = " wal128=";
const MAX_LEAD_FIELD: &str = " max_lead_ms=";
const RESERVE_FIELD: &str = " reserve_ms=";
const CRC_FIELD: &str = " crc32c=";

/// What a record says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    /// Nothing was issued at or after this Unix ms time. In Unix ms, not as a time part, so
    /// the record means the same thing whatever the epoch.
    pub ceiling_unix_ms: i64,
    /// WAL records under resource manager id 128 (PostgreSQL's experimental id, which versions
    /// up to 0.2.0 wrote under) may still have to be replayed from this data directory's WAL:
    /// the record was written before 0.5.0 or says so (see `reservation::legacy_wal`).
    pub wal128: bool,
    /// The lead settings the ceiling was reserved under, kept because they exceed the server's
    /// own when it wrote the line (see the top); `None` in every line before 0.8.1.
    pub lead: Option<LeadSettings>,
}

/// A record, and whether pg_upgrade's starts wrote it without knowing the old server's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Noted {
    pub record: Record,
    pub unconfirmed: bool,
}

/// The record's one line.
pub fn format(record: Record) -> String {
    let Record { ceiling_unix_ms, wal128, lead } = record;
    let mut fields = format!("{PREFIX}{ceiling_unix_ms:020}{WAL128_FIELD}{}", u8::from(wal128));
    if let Some(LeadSettings { max_lead_ms, reserve_ms }) = lead {
        // GUC integers, within u32 (as in the WAL record they come from).
        let (max_lead_ms, reserve_ms) = (max_lead_ms.min(u32::MAX.into()), reserve_ms.min(u32::MAX.into()));
        fields.push_str(&format!("{MAX_LEAD_FIELD}{max_lead_ms:010}{RESERVE_FIELD}{reserve_ms:010}"));
    }
    format!("{fields}{CRC_FIELD}{:08x}\n", crc32c(fields.as_bytes()))
}

/// Reads a line of any version, marked by pg_upgrade or not, or says why it cannot be trusted.
pub fn parse_noted(text: &str) -> Result<Noted, String> {
    match text.strip_suffix('\n').and_then(|line| line.strip_suffix(compat::UNCONFIRMED_BY_PG_UPGRADE)) {
        Some(line) => parse(&format!("{line}\n")).map(|record| Noted { record, unconfirmed: true }),
        None => parse(text).map(|record| Noted { record, unconfirmed: false }),
    }
}

/// Reads a line of any version, or says why it cannot be trusted.
pub fn parse(text: &str) -> Result<Record, String> {
    let line = text.strip_suffix('\n').ok_or_else(|| format!("unexpected content {text:?}"))?;
    let Some((fields, crc)) = line.rsplit_once(CRC_FIELD) else {
        // Written by 0.4.0 (zero-padded) or earlier (not): no checksum, no flag.
        let ceiling_unix_ms = parse_ceiling(line).ok_or_else(|| format!("unexpected content {text:?}"))?;
        return Ok(Record { ceiling_unix_ms, wal128: true, lead: None });
    };
    let recorded = u32::from_str_radix(crc, 16).ok().filter(|_| crc.len() == 8);
    let computed = crc32c(fields.as_bytes());
    if recorded != Some(computed) {
        return Err(format!(
            "checksum mismatch: the line {line:?} has checksum {crc:?}, its content {computed:08x}: the record \
             is torn or damaged"
        ));
    }
    let unexpected = || format!("unexpected content {text:?}");
    let (ceiling, rest) = fields.split_once(WAL128_FIELD).ok_or_else(unexpected)?;
    let ceiling_unix_ms = parse_ceiling(ceiling).ok_or_else(unexpected)?;
    // The flag, then the lead settings in lines of 0.8.1 on that carry them.
    let (wal128, lead) = match rest.split_once(MAX_LEAD_FIELD) {
        Some((wal128, lead)) => (wal128, Some(parse_lead(lead).ok_or_else(unexpected)?)),
        None => (rest, None),
    };
    let wal128 = match wal128 {
        "0" => false,
        "1" => true,
        _ => return Err(unexpected()),
    };
    Ok(Record { ceiling_unix_ms, wal128, lead })
}

/// `0000060000 reserve_ms=0000000250`, what follows ` max_lead_ms=`.
fn parse_lead(field: &str) -> Option<LeadSettings> {
    let (max_lead_ms, reserve_ms) = field.split_once(RESERVE_FIELD)?;
    let number =
        |digits: &str| digits.bytes().all(|b| b.is_ascii_digit()).then(|| digits.parse().ok()).flatten();
    Some(LeadSettings { max_lead_ms: number(max_lead_ms)?, reserve_ms: number(reserve_ms)? })
}

fn parse_ceiling(field: &str) -> Option<i64> {
    field.strip_prefix(PREFIX)?.parse().ok()
}

/// The record in the data directory: `Ok(None)` when there is none, `Err` with the reason
/// when there is one that cannot be read or trusted.
pub fn read() -> Result<Option<Record>, String> {
    read_noted().map(|noted| noted.map(|noted| noted.record))
}

/// The record in the data directory with pg_upgrade's mark, as `read`.
pub fn read_noted() -> Result<Option<Noted>, String> {
    match std::fs::read_to_string(FILE) {
        Ok(text) => parse_noted(&text).map(Some),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(error.to_string()),
    }
}

/// Records so that a crash at any moment leaves the old or the new record, never a torn one.
pub fn write(record: Record) -> std::io::Result<()> {
    durable_file::overwrite(FILE, TEMP_FILE, &format(record))
}

/// Records, marked as written by pg_upgrade's starts (see the top), as `write`.
pub fn write_unconfirmed(record: Record) -> std::io::Result<()> {
    let line = format!("{}{}\n", format(record).trim_end(), compat::UNCONFIRMED_BY_PG_UPGRADE);
    durable_file::overwrite(FILE, TEMP_FILE, &line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_round_trips_with_the_same_length_and_refuses_anything_else() {
        let leads = [None, Some(LeadSettings { max_lead_ms: 60_000, reserve_ms: 250 })];
        for ceiling_unix_ms in [0, 1_704_067_200_000, -5, i64::MIN, i64::MAX] {
            for wal128 in [false, true] {
                for lead in leads {
                    let record = Record { ceiling_unix_ms, wal128, lead };
                    assert_eq!(parse(&format(record)), Ok(record));
                    let first = Record { ceiling_unix_ms: 0, wal128: false, lead };
                    assert_eq!(format(record).len(), format(first).len());
                }
            }
        }
        let largest = LeadSettings { max_lead_ms: u32::MAX.into(), reserve_ms: u32::MAX.into() };
        let record = Record { ceiling_unix_ms: 1, wal128: false, lead: Some(largest) };
        assert_eq!(parse(&format(record)), Ok(record));
        assert_eq!(format(record).len(), format(Record { lead: leads[1], ..record }).len());
        // 0.4.0 (padded) and 0.3.0 (unpadded) records still read, as written before 0.5.0.
        for old in [
            "snowflake_id reservation ceiling_unix_ms=00000001704067200000\n",
            "snowflake_id reservation ceiling_unix_ms=1704067200000\n",
        ] {
            assert_eq!(
                parse(old),
                Ok(Record { ceiling_unix_ms: 1_704_067_200_000, wal128: true, lead: None })
            );
        }
        for text in [
            "",
            "snowflake_id reservation ceiling_unix_ms=12",
            "ceiling=12\n",
            "snowflake_id reservation ceiling_unix_ms=x\n",
            "snowflake_id reservation ceiling_unix_ms=00000001704067200000 wal128=2 crc32c=00000000\n",
            "snowflake_id reservation ceiling_unix_ms=00000001704067200000 wal128=0 max_lead_ms=1 crc32c=00000000\n",
        ] {
            assert!(parse(text).is_err(), "{text:?}");
        }
    }

    #[test]
    fn a_line_without_lead_settings_is_the_line_of_0_5_0_to_0_8_0_and_one_with_them_is_checked_too() {
        // Written by 0.8.0 (and 0.5.0 on): read, and written the same when no lead is kept.
        let line = "snowflake_id reservation ceiling_unix_ms=00000001704067200000 wal128=0 crc32c=81574bf3\n";
        let record = Record { ceiling_unix_ms: 1_704_067_200_000, wal128: false, lead: None };
        assert_eq!(parse(line), Ok(record));
        assert_eq!(format(record), line);
        // With the lead settings a standby replayed from its primary, before the checksum.
        let lead = Some(LeadSettings { max_lead_ms: 60_000, reserve_ms: 250 });
        let line = "snowflake_id reservation ceiling_unix_ms=00000001704067200000 wal128=0 \
                    max_lead_ms=0000060000 reserve_ms=0000000250 crc32c=a72c6d7a\n";
        assert_eq!(parse(line), Ok(Record { lead, ..record }));
        assert_eq!(format(Record { lead, ..record }), line);
        // Fits one sector, so it is written in place like the shorter line.
        assert!(line.len() <= 512);
        // A damaged setting is refused like a damaged ceiling, and so is a signed one.
        let error = parse(&line.replacen("60000", "20000", 1)).unwrap_err();
        assert!(error.contains("checksum mismatch"), "{error}");
        let fields = "snowflake_id reservation ceiling_unix_ms=00000001704067200000 wal128=0 \
                      max_lead_ms=+000060000 reserve_ms=0000000250";
        assert!(parse(&format!("{fields}{CRC_FIELD}{:08x}\n", crc32c(fields.as_bytes()))).is_err());
        // And marked by pg_upgrade's starts, as any line.
        let marked = format!("{}{}\n", line.trim_end(), compat::UNCONFIRMED_BY_PG_UPGRADE);
        assert_eq!(parse_noted(&marked), Ok(Noted { record: Record { lead, ..record }, unconfirmed: true }));
    }

    #[test]
    fn pg_upgrade_marks_a_line_after_its_checksum_and_deleting_the_mark_confirms_it() {
        let record = Record { ceiling_unix_ms: 1_704_067_200_000, wal128: false, lead: None };
        let marked = format!("{}{}\n", format(record).trim_end(), compat::UNCONFIRMED_BY_PG_UPGRADE);
        assert_eq!(parse_noted(&marked), Ok(Noted { record, unconfirmed: true }));
        assert_eq!(parse_noted(&format(record)), Ok(Noted { record, unconfirmed: false }));
        // The mark is outside the checksum: the line without it is the plain record.
        assert_eq!(marked.replace(compat::UNCONFIRMED_BY_PG_UPGRADE, ""), format(record));
        // A damaged marked line is refused like any other.
        assert!(parse_noted(&marked.replacen("17040", "13040", 1)).is_err());
    }

    #[test]
    fn a_damaged_record_that_still_parses_is_refused() {
        let line = format(Record { ceiling_unix_ms: 1_704_067_200_000, wal128: false, lead: None });
        // One digit of the ceiling changed (a bit flip: '7' is 0x37, '3' is 0x33), and a
        // record torn between two writes (the new ceiling's first 15 digits, the old one's rest:
        // "000000017049999" + "00000"; both ceilings share their first 11 digits).
        let flipped = line.replacen("17040", "13040", 1);
        let newer = format(Record { ceiling_unix_ms: 1_704_999_999_999, wal128: false, lead: None });
        let cut = PREFIX.len() + 15;
        let torn = format!("{}{}", &newer[..cut], &line[cut..]);
        for damaged in [flipped, torn] {
            assert!(damaged.starts_with(PREFIX) && damaged != line);
            let error = parse(&damaged).unwrap_err();
            assert!(error.contains("checksum mismatch"), "{error}");
        }
        // And a checksum that is not one.
        assert!(parse(&line.replace("crc32c=", "crc32c=zz")).is_err());
    }
}
