//! The registry's claims in the reservation worker's loop (`registry::keeper`, opt-in): a shard
//! taken from another holder resumes above the mark that holder left, recorded before it is
//! published in the fence.

use super::lead::{keep_lead, lead_to_keep};
use super::record::FILE;
use super::recording::record;
use crate::postgres::{clock, fixed_layout, registry, settings, shmem};
use snowflake_core::generator::{self, Reservation};
use snowflake_core::resume;
use std::sync::atomic::Ordering::Relaxed;

/// One turn of the registry (`registry::keeper`, opt-in): each shard newly held is resumed above
/// the mark its last holder left, then published in the fence; shards no longer held are
/// closed by the keeper.
pub fn keep_claims(reservation: &Reservation, claims: &mut registry::keeper::Keeper) {
    let layout = fixed_layout::get();
    let ceiling_unix_ms = |reservation: &Reservation| {
        let wanted = reservation.ceiling.load(Relaxed).max(reservation.wanted.load(Relaxed));
        layout.unix_ms(wanted).max(0) as u64
    };
    for taken in claims.look(ceiling_unix_ms(reservation)) {
        let resumed =
            taken.above_unix_ms.is_none_or(|mark| resume_above_mark(reservation, taken.shard, mark));
        if resumed {
            claims.publish(taken.shard, layout.unix_ms(reservation.ceiling.load(Relaxed)).max(0) as u64);
        }
    }
}

/// Moves a shard taken from another holder above the mark that holder left (`mark_unix_ms`),
/// before it is published: the floor recorded (WAL and file, as a promotion's guard, so that a
/// restart and a promoted standby resume above it too), then the shard's counter moved, so
/// that a call that sees the shard published claims above it (`fence::shared::set_claimed`).
/// The mark may lie up to `registry_reserve_ms` ahead of this server's clock (further when the
/// clocks disagree): the lead it takes is kept until the clock catches up, as after a promotion.
/// Returns whether the shard may be published.
fn resume_above_mark(reservation: &Reservation, shard: u32, mark_unix_ms: u64) -> bool {
    let layout = fixed_layout::get();
    let (Ok(mark), Ok(now)) =
        (layout.time_part(mark_unix_ms as i64), layout.time_part(clock::wall_clock_unix_ms()))
    else {
        return false;
    };
    if mark > reservation.floor.load(Relaxed) {
        let max_lead_ms = mark.saturating_sub(now) + settings::clock_policy().max_lead_ms;
        let kept = lead_to_keep(reservation, max_lead_ms, mark);
        keep_lead(reservation, kept, "the registry's mark of a shard taken from another holder needs");
        let ceiling = mark.max(reservation.ceiling.load(Relaxed));
        if let Err(error) = record(reservation, ceiling, resume::RECORDING_GUARD) {
            pgrx::warning!(
                "could not record the snowflake_id reservation above the registry's mark of shard {shard} in \
                 \"{FILE}\": {error}; the shard stays fenced"
            );
            return false;
        }
    }
    let Some(slot) = shmem::slot(shard) else { return false };
    // Moved whether or not the ceiling covers it yet: claims above the ceiling wait for it.
    let _ = generator::advance(slot, reservation, layout.counter_at(mark), &layout);
    true
}
