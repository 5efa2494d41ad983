//! A lead kept larger than `snowflake_id.max_lead_ms` (`generator::lead_in_force`): taken on
//! when IDs this server must stay above lie further ahead of the clock than the setting allows
//! (after a promotion from a primary with a longer one, a lowered setting, a shard taken above
//! the registry's mark), and dropped once the clock has caught up.

use crate::postgres::{clock, fixed_layout, settings};
use snowflake_core::generator::{self, Reservation};
use snowflake_core::resume;
use std::sync::atomic::Ordering::Relaxed;

/// Keeps a `max_lead_ms` in force larger than the setting (`generator::lead_in_force`), as
/// `resume` decided (`resume::Lead::to_keep`): while IDs this server must stay above lie further
/// ahead of the clock than the setting allows, which would otherwise refuse every call until
/// the clock caught up. Says so once, with why (`origin`, which the value follows); the worker
/// drops it once spent (`forget_spent_lead`).
pub fn keep_lead(reservation: &Reservation, kept: Option<resume::KeepLead>, origin: &str) {
    let Some(resume::KeepLead { max_lead_ms, ahead_ms }) = kept else { return };
    reservation.inherited_max_lead_ms.fetch_max(max_lead_ms, Relaxed);
    pgrx::warning!(
        "snowflake_id: {origin} {max_lead_ms} ms while IDs are reserved up to {ahead_ms} ms ahead of the clock: \
         shards keep issuing under a lead of {max_lead_ms} ms until the clock is within snowflake_id.max_lead_ms \
         = {} ms of them, instead of refusing every call until then",
        settings::clock_policy().max_lead_ms
    );
}

/// Whether to keep `max_lead_ms` over IDs reserved up to `reserved_up_to` (`resume::Lead::to_keep`).
pub fn lead_to_keep(
    reservation: &Reservation,
    max_lead_ms: u64,
    reserved_up_to: u64,
) -> Option<resume::KeepLead> {
    let setting_ms = settings::clock_policy().max_lead_ms;
    let lead = resume::Lead {
        now_unix_ms: clock::wall_clock_unix_ms(),
        setting_ms,
        in_force_ms: generator::lead_in_force(setting_ms, reservation),
    };
    lead.to_keep(max_lead_ms, reserved_up_to, settings::reserve_ms(), &fixed_layout::get())
}

/// Drops a kept lead (`keep_lead`) once spent (`resume::forget_kept_lead`).
pub fn forget_spent_lead(reservation: &Reservation, now: u64) {
    let setting = settings::clock_policy().max_lead_ms;
    let kept = reservation.inherited_max_lead_ms.load(Relaxed);
    let ceiling = reservation.ceiling.load(Relaxed);
    match resume::forget_kept_lead(now, kept, ceiling, setting, settings::reserve_ms()) {
        resume::KeptLead::Keep => {}
        resume::KeptLead::Drop { logged } => {
            reservation.inherited_max_lead_ms.store(0, Relaxed);
            if logged {
                pgrx::log!(
                    "snowflake_id: the clock has caught up: snowflake_id.max_lead_ms = {setting} ms holds again \
                     (kept {kept} ms until now)"
                );
            }
        }
    }
}
