//! Readers that page by ID (docs/reading-in-order.md): now and then one asks the pair's
//! primary for its horizon (`horizon::compute`, what `snowflake_horizon()` runs). README's
//! promise: an ID below which every ID *this server* issued or will issue belongs to an ended
//! transaction. So every ID a server issues afterwards, on any shard and in any later run of it
//! (clock steps back, crash restarts, clean restarts, pg_upgrade), is at or above the highest
//! horizon it gave. Another server (a promoted standby, a re-cloned one) is not bound by it: a
//! reader that follows a failover keeps its cursor, below which the new primary issues nothing
//! (the order check). The model's commits end at once, so no pending transaction holds a
//! horizon down.

use super::{World, START_UNIX_MS};
use crate::check::Violation;
use snowflake_core::horizon::{self, PendingSlots};

impl World {
    /// A reader asks the primary for its horizon of every shard.
    pub(super) fn ask_horizon(&mut self, p: usize) {
        let now = self.clock(p);
        let Ok(now_tp) = self.layout.time_part(now) else { return };
        let Some(mem) = self.servers[p].mem.as_ref() else { return };
        let horizons =
            horizon::compute(now_tp, &mem.res, &PendingSlots::new(&[], &[], super::MOVED + 1), None);
        let given = &mut self.servers[p].horizon_given;
        if given.is_none_or(|(highest, _)| horizons.every_shard > highest) {
            *given = Some((horizons.every_shard, self.t - START_UNIX_MS));
        }
        // A horizon reads the clock, and may stand ahead of it (at a floor), as an ID does: what
        // confirming pg_upgrade's estimate assumes of both.
        self.note_ahead(now, horizons.every_shard as i64 - now_tp as i64);
    }

    /// A claim of server `p` whose first counter is `first`: at or above every horizon it gave.
    pub(super) fn check_horizon(&mut self, p: usize, shard: u32, first: u64) {
        let Some((given, at_ms)) = self.servers[p].horizon_given else { return };
        let time_part = self.layout.counter_time_part(first);
        if time_part < given {
            let message = format!(
                "server {p}: shard {shard} issued time part {time_part}, below the horizon {given} it gave a reader at \
                 t={at_ms} ms"
            );
            self.violation.get_or_insert(Violation {
                kind: "horizon",
                message,
                at_ms: self.t - START_UNIX_MS,
            });
        }
    }
}
