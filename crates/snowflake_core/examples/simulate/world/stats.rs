//! What a run reached, counted (and summed over runs for the summary's coverage line).

/// Counts over a run (and, summed, over many): what the faults reached.
#[derive(Clone, Copy, Default, Debug)]
pub struct Stats {
    pub promotions: u64,
    pub guards: u64,
    pub clean_stops: u64,
    pub switchovers: u64,
    pub upgrades: u64,
    pub unconfirmed_refusals: u64,
    pub power_losses: u64,
    pub kills: u64,
    pub crashes_at_step: u64,
    pub crashes_in_promotion: u64,
    pub debts_found: u64,
    pub clock_set_backs: u64,
    pub set_backs_excluded: u64,
    pub failovers_excluded: u64,
    pub switchovers_excluded: u64,
    pub lowered_ceilings: u64,
    pub leads_kept: u64,
    pub enospc_failures: u64,
    pub worker_exits: u64,
    pub torn_restores: u64,
    pub claims: u64,
    pub refusals: u64,
    pub ids: u64,
    pub acked: u64,
    pub moves: u64,
    pub copies_made_again: u64,
    pub managers_dead: u64,
    pub pauses: u64,
    pub ha_failovers: u64,
    pub ha_excluded: u64,
    pub lease_refusals: u64,
    pub wal_panics: u64,
    pub observes: u64,
    pub observes_refused: u64,
    pub waits: u64,
    pub wait_ms: u64,
}

impl Stats {
    pub fn add(&mut self, other: &Stats) {
        macro_rules! sum { ($($f:ident),*) => { $(self.$f += other.$f;)* } }
        sum!(
            promotions,
            guards,
            clean_stops,
            switchovers,
            upgrades,
            unconfirmed_refusals,
            power_losses,
            kills,
            crashes_at_step,
            crashes_in_promotion,
            debts_found,
            clock_set_backs,
            set_backs_excluded,
            failovers_excluded,
            switchovers_excluded,
            lowered_ceilings,
            leads_kept,
            enospc_failures,
            worker_exits,
            torn_restores,
            claims,
            refusals,
            ids,
            acked,
            moves,
            copies_made_again,
            managers_dead,
            pauses,
            ha_failovers,
            ha_excluded,
            lease_refusals,
            wal_panics,
            observes,
            observes_refused,
            waits,
            wait_ms
        );
    }

    pub fn line(&self) -> String {
        format!(
            "promotions {} (guards {}, clean stops {}), switchovers {}, upgrades {} (unconfirmed refused {}), power \
             losses {}, kills {}, crashes at a recording step {}, crashes inside a promotion {}, debts found at \
             start {}, clock set back {} (excluded {}), failovers excluded {}, switchovers before the worker's start skipped {}, lowered ceilings {}, leads kept \
             {}, ENOSPC failures {}, workers exited alone {}, torn records restored {}, claims {} (refused {}), IDs {}, commits acknowledged {}, \
             shard moves {} (copies made again after a failover {}), HA managers dead alone {}, machines paused {}, \
             promotions with the old primary left running {} (not drawn into a failover, the lease off or another on its way: {}), calls refused \
             for the lease {}, PANICs at a full WAL disk {}, \
             observations {} (refused {}), calls that waited {} ({} ms in all)",
            self.promotions,
            self.guards,
            self.clean_stops,
            self.switchovers,
            self.upgrades,
            self.unconfirmed_refusals,
            self.power_losses,
            self.kills,
            self.crashes_at_step,
            self.crashes_in_promotion,
            self.debts_found,
            self.clock_set_backs,
            self.set_backs_excluded,
            self.failovers_excluded,
            self.switchovers_excluded,
            self.lowered_ceilings,
            self.leads_kept,
            self.enospc_failures,
            self.worker_exits,
            self.torn_restores,
            self.claims,
            self.refusals,
            self.ids,
            self.acked,
            self.moves,
            self.copies_made_again,
            self.managers_dead,
            self.pauses,
            self.ha_failovers,
            self.ha_excluded,
            self.lease_refusals,
            self.wal_panics,
            self.observes,
            self.observes_refused,
            self.waits,
            self.wait_ms,
        )
    }
}
