//! Recording a ceiling: its steps (WAL, the record file, publishing) in the order
//! `snowflake_core::resume` gives for each occasion (`RECORDING`, `RECORDING_GUARD`, ...).

use super::{lead_settings_in_force, wal, write_durably};
use crate::postgres::fixed_layout;
use snowflake_core::generator::{LeadSettings, Reservation};
use snowflake_core::resume;
use std::sync::atomic::Ordering::Relaxed;

/// Records a ceiling in `steps`' order (`resume::RECORDING` and its kin), with the lead settings
/// in force.
pub fn record(reservation: &Reservation, ceiling: u64, steps: &[resume::Step]) -> std::io::Result<()> {
    let lead = lead_settings_in_force(reservation);
    record_logging_lead(reservation, ceiling, steps, lead, lead)
}

/// As `record`, with the lead settings in force as the caller read them (`lead`, what the file
/// gets), and its WAL record carrying `logged_lead` (`resume::start_record_lead`).
pub fn record_logging_lead(
    reservation: &Reservation,
    ceiling: u64,
    steps: &[resume::Step],
    lead: LeadSettings,
    logged_lead: LeadSettings,
) -> std::io::Result<()> {
    let ceiling_unix_ms = fixed_layout::get().unix_ms(ceiling);
    for step in steps {
        match step {
            resume::Step::LogWal => {
                wal::log_ceiling(ceiling_unix_ms, logged_lead);
                // Published or not: `resume::renewal` holds a renewal below it (F13).
                reservation.last_logged.store(ceiling, Relaxed);
            }
            resume::Step::WriteFile => write_durably(ceiling_unix_ms, Some(lead))?,
            resume::Step::Publish => reservation.publish_ceiling(ceiling),
            resume::Step::ResumeAt => reservation.resume_at(ceiling),
        }
    }
    Ok(())
}
