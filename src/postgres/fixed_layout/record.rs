//! The layout this server issues IDs in, recorded in its data directory (`snowflake_id.layout`).
//!
//! `snowflake_id.epoch`, `snowflake_id.shard_bits`, `snowflake_id.seq_bits` and
//! `snowflake_id.id_bits` (set themselves or by `snowflake_id.layout`) decide what every ID
//! means. Changed on
//! a server that has issued IDs, the next IDs would be lower than the last ones (a later
//! epoch) and come again, or old IDs would decode to other shards. So the first start with
//! the library preloaded records the layout in `snowflake_id.layout`, beside the reservation,
//! and every later start compares: another layout stops the server, naming both.
//!
//! The file is a plain line, written durably (temporary file, fsync, rename): a crash leaves
//! it whole. pg_basebackup copies it, so a standby starts knowing its primary's layout.
//!
//! pg_upgrade does not carry it. A cluster made by pg_upgrade would record whatever its own
//! `postgresql.conf` says, and one lost `snowflake_id.epoch` line would issue IDs under
//! another layout than the old server's. So pg_upgrade's starts (binary-upgrade mode) note
//! the configured layout as unconfirmed, and the first real start refuses to run on an
//! unconfirmed layout until an operator copies the old server's file (the documented step,
//! docs/operations.md), which is then checked as usual, or confirms the noted one.

use crate::postgres::{compat, durable_file};
use pgrx::pg_sys::panic::ErrorReport;
use pgrx::{PgLogLevel, PgSqlErrorCode};
use snowflake_core::layout::{self, Layout};
use snowflake_core::utc;

/// The record file, relative to the data directory (the postmaster's working directory).
pub const FILE: &str = "snowflake_id.layout";
const TEMP_FILE: &str = "snowflake_id.layout.tmp";
const PREFIX: &str = "snowflake_id layout";
/// Ends the line noted under pg_upgrade (`check_or_record`).
const UNCONFIRMED: &str = compat::UNCONFIRMED_BY_PG_UPGRADE;

/// The file's one line, readable by people:
/// `snowflake_id layout epoch=2024-01-01T00:00:00.000Z shard_bits=10 seq_bits=12`, and
/// ` id_bits=53` after it for a narrow layout (a 63-bit layout's line is the one versions
/// before id_bits wrote, so they read it still; a narrow one they refuse, as they should).
fn format_record(layout: &Layout) -> String {
    format!("{PREFIX} {}\n", describe(layout))
}

/// A layout as the messages name it.
fn describe(layout: &Layout) -> String {
    let id_bits = match layout.id_bits() {
        layout::ID_BITS => String::new(),
        narrow => format!(" id_bits={narrow}"),
    };
    format!(
        "epoch={} shard_bits={} seq_bits={}{id_bits}",
        utc::format_utc_ms(layout.epoch_unix_ms()),
        layout.shard_bits(),
        layout.seq_bits()
    )
}

/// A recorded layout, and whether it was only noted under pg_upgrade (see the top).
fn parse_noted(text: &str) -> Result<(Layout, bool), String> {
    match text.strip_suffix('\n').and_then(|line| line.strip_suffix(UNCONFIRMED)) {
        Some(line) => parse_record(&format!("{line}\n")).map(|layout| (layout, false)),
        None => parse_record(text).map(|layout| (layout, true)),
    }
}

fn parse_record(text: &str) -> Result<Layout, String> {
    let fields = text
        .strip_suffix('\n')
        .and_then(|line| line.strip_prefix(PREFIX))
        .ok_or_else(|| format!("unexpected content {text:?}"))?;
    let (mut epoch, mut shard_bits, mut seq_bits, mut id_bits) = (None, None, None, Some(layout::ID_BITS));
    for field in fields.split_whitespace() {
        match field.split_once('=') {
            Some(("epoch", value)) => epoch = utc::parse_utc_ms(value).ok(),
            Some(("shard_bits", value)) => shard_bits = value.parse::<u32>().ok(),
            Some(("seq_bits", value)) => seq_bits = value.parse::<u32>().ok(),
            Some(("id_bits", value)) => id_bits = value.parse::<u32>().ok(),
            // A field of a later version: this one cannot know what the IDs mean.
            _ => return Err(format!("unknown field {field:?}")),
        }
    }
    let (Some(epoch), Some(shard_bits)) = (epoch, shard_bits) else {
        return Err(format!("missing or malformed epoch or shard_bits in {text:?}"));
    };
    // Recorded by 0.3.0, whose split was fixed: 41 bits of time, the sequence below the shard.
    let seq_bits = match seq_bits {
        Some(bits) => bits,
        None if fields.contains("seq_bits=") => return Err(format!("malformed seq_bits in {text:?}")),
        None => LEGACY_SHARD_AND_SEQ_BITS
            .checked_sub(shard_bits)
            .ok_or_else(|| format!("malformed shard_bits in {text:?}"))?,
    };
    let id_bits = id_bits.ok_or_else(|| format!("malformed id_bits in {text:?}"))?;
    Layout::try_new_narrow(epoch, shard_bits, seq_bits, id_bits)
        .map_err(|error| format!("{error:?} in {text:?}"))
}

/// Before seq_bits existed, shard and sequence shared the 22 bits below 41 of time.
const LEGACY_SHARD_AND_SEQ_BITS: u32 = 22;

/// Records the configured layout on the first start; on every later one, stops the server
/// unless the configured layout is the recorded one. Under pg_upgrade, notes it as
/// unconfirmed instead (see the top). Called by the postmaster when it creates shared
/// memory, before any ID can be issued.
pub fn check_or_record() {
    let configured = super::get();
    let binary_upgrade = compat::in_binary_upgrade();
    match std::fs::read_to_string(FILE) {
        Ok(text) => match parse_noted(&text) {
            Ok((recorded, _)) if recorded != configured => refuse_other_layout(&recorded, &configured),
            // pg_upgrade's later starts issue nothing either; its note stays.
            Ok((_, false)) if !binary_upgrade => refuse_unconfirmed(&configured),
            Ok(_) => {}
            Err(reason) => unreadable(&reason),
        },
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            let (line, what) = if binary_upgrade {
                (format!("{}{UNCONFIRMED}\n", format_record(&configured).trim_end()), "noted, unconfirmed,")
            } else {
                (format_record(&configured), "recorded")
            };
            if let Err(error) = durable_file::replace(FILE, TEMP_FILE, &line) {
                durable_file::not_recorded("the snowflake_id layout", FILE, "", error);
            }
            pgrx::log!(
                "snowflake_id: {what} the layout of this server's IDs in \"{FILE}\": {}",
                describe(&configured)
            );
        }
        Err(error) => unreadable(&error.to_string()),
    }
}

/// The first real start of a cluster made by pg_upgrade without the old server's layout file.
fn refuse_unconfirmed(configured: &Layout) -> ! {
    ErrorReport::new(
        PgSqlErrorCode::ERRCODE_CONFIG_FILE_ERROR,
        format!(
            "snowflake_id cannot tell whether this cluster made by pg_upgrade issues IDs in the old server's \
             layout: configured {}",
            describe(configured)
        ),
        "snowflake_id",
    )
    .set_detail(format!(
        "pg_upgrade does not carry \"{FILE}\", the record of the layout the old server issued IDs in; this \
         cluster noted its configured layout there as unconfirmed. Under another epoch or split than the old \
         server's, old IDs decode to other times and shards, and new IDs can repeat them."
    ))
    .set_hint(format!(
        "Copy \"{FILE}\" from the old cluster's data directory over this one's (as the pg_upgrade steps in \
         docs/operations.md do), then start again: a layout other than the old server's is then refused by \
         name. Or compare the old server's snowflake_id settings with the line in this one's \"{FILE}\", and \
         if they are the same, delete \"{}\" from the end of that line to confirm it.",
        UNCONFIRMED.trim_start()
    ))
    .report(PgLogLevel::ERROR);
    unreachable!("an ERROR report returns control to PostgreSQL")
}

fn refuse_other_layout(recorded: &Layout, configured: &Layout) -> ! {
    ErrorReport::new(
        PgSqlErrorCode::ERRCODE_CONFIG_FILE_ERROR,
        format!(
            "snowflake_id is configured with another layout than the one this server issued IDs in: \
             configured {}, recorded {}",
            describe(configured),
            describe(recorded)
        ),
        "snowflake_id",
    )
    .set_detail(format!(
        "The layout is recorded in \"{FILE}\" in the data directory. Under another epoch or split, IDs \
         already issued decode to other times and shards, and new IDs can repeat them."
    ))
    .set_hint(format!(
        "Set {} in postgresql.conf again ({}), or where an HA manager writes it, in \
         its configuration (Patroni: patronictl edit-config, postgresql.parameters). Only if \
         this server will never meet its old IDs again (no rows, no replicas, no other server with its \
         IDs), remove \"{FILE}\" from the data directory: the next start records the configured layout.",
        recorded_settings(recorded),
        match recorded.id_bits() {
            layout::ID_BITS => "snowflake_id.layout sets all three",
            _ => "snowflake_id.layout sets all four",
        }
    ))
    .report(PgLogLevel::ERROR);
    unreachable!("an ERROR report returns control to PostgreSQL")
}

/// The settings that give a recorded layout, as a hint names them: the width too when it is
/// not 63 (an operator who set back only the other three would be refused again).
fn recorded_settings(recorded: &Layout) -> String {
    let epoch = utc::format_utc_ms(recorded.epoch_unix_ms());
    let (shard_bits, seq_bits) = (recorded.shard_bits(), recorded.seq_bits());
    match recorded.id_bits() {
        layout::ID_BITS => format!(
            "snowflake_id.epoch = '{epoch}', snowflake_id.shard_bits = {shard_bits} and snowflake_id.seq_bits = {seq_bits}"
        ),
        id_bits => format!(
            "snowflake_id.epoch = '{epoch}', snowflake_id.shard_bits = {shard_bits}, snowflake_id.seq_bits = {seq_bits} \
             and snowflake_id.id_bits = {id_bits}"
        ),
    }
}

fn unreadable(reason: &str) -> ! {
    ErrorReport::new(
        PgSqlErrorCode::ERRCODE_DATA_CORRUPTED,
        format!("could not read the snowflake_id layout file \"{FILE}\": {reason}"),
        "snowflake_id",
    )
    .set_detail("The file records the epoch, shard_bits, seq_bits and id_bits of the IDs this server issued.")
    .set_hint(format!(
        "Restore the file from a backup, or write the line \"{}\" into it with this server's epoch, shard_bits, \
         seq_bits and id_bits (left out when 63).",
        format_record(&super::get()).trim_end()
    ))
    .report(PgLogLevel::ERROR);
    unreachable!("an ERROR report returns control to PostgreSQL")
}

#[cfg(test)]
mod tests {
    use super::*;
    use snowflake_core::layout::DEFAULT_EPOCH_UNIX_MS;

    #[test]
    fn the_record_round_trips_and_refuses_anything_else() {
        for layout in [
            Layout::new(DEFAULT_EPOCH_UNIX_MS, 10, 12),
            Layout::new(1_314_220_021_721, 13, 10),
            Layout::new(0, 0, 16),
            Layout::new_narrow(DEFAULT_EPOCH_UNIX_MS, 6, 6, 53),
        ] {
            assert_eq!(parse_record(&format_record(&layout)), Ok(layout));
        }
        // A 63-bit layout's line is the one earlier versions wrote and read; a narrow one says so.
        assert_eq!(
            format_record(&Layout::new(DEFAULT_EPOCH_UNIX_MS, 10, 12)),
            "snowflake_id layout epoch=2024-01-01T00:00:00.000Z shard_bits=10 seq_bits=12\n"
        );
        assert_eq!(
            format_record(&Layout::new_narrow(DEFAULT_EPOCH_UNIX_MS, 6, 6, 53)),
            "snowflake_id layout epoch=2024-01-01T00:00:00.000Z shard_bits=6 seq_bits=6 id_bits=53\n"
        );
        // Recorded by 0.3.0: no seq_bits, the sequence had the 22 bits the shard left.
        let old = "snowflake_id layout epoch=2024-01-01T00:00:00.000Z shard_bits=13\n";
        assert_eq!(parse_record(old), Ok(Layout::new(DEFAULT_EPOCH_UNIX_MS, 13, 9)));
        // Noted under pg_upgrade: the same layout, unconfirmed; confirmed once the mark is gone.
        let noted = "snowflake_id layout epoch=2024-01-01T00:00:00.000Z shard_bits=10 seq_bits=12 unconfirmed=pg_upgrade\n";
        let layout = Layout::new(DEFAULT_EPOCH_UNIX_MS, 10, 12);
        assert_eq!(parse_noted(noted), Ok((layout, false)));
        assert_eq!(parse_noted(&format_record(&layout)), Ok((layout, true)));
        assert!(parse_noted("snowflake_id layout epoch=2024-01-01T00:00:00.000Z unconfirmed=pg_upgrade\n")
            .is_err());
        for text in [
            "snowflake_id layout epoch=2024-01-01T00:00:00.000Z shard_bits=10 seq_bits=x\n",
            "snowflake_id layout epoch=2024-01-01T00:00:00.000Z shard_bits=16 seq_bits=12\n",
            "",
            "snowflake_id layout epoch=2024-01-01T00:00:00.000Z shard_bits=10",
            "snowflake_id layout epoch=2024-01-01T00:00:00.000Z\n",
            "snowflake_id layout epoch=2024-01-01T00:00:00.000Z shard_bits=17\n",
            "snowflake_id layout epoch=2024-01-01T00:00:00.000Z shard_bits=10 sequence_bits=12\n",
            "snowflake_id layout epoch=2024-01-01T00:00:00.000Z shard_bits=6 seq_bits=6 id_bits=52\n",
            "snowflake_id layout epoch=2024-01-01T00:00:00.000Z shard_bits=10 seq_bits=12 id_bits=x\n",
        ] {
            assert!(parse_record(text).is_err(), "{text:?}");
        }
    }
}
