//! Who holds the horizon, and since when: every open transaction that took IDs (by its
//! backend's process id), and every prepared one, with the shards it took and the time part
//! of its lowest ID. What `snowflake_horizon_holders()` reports, for an operator looking for
//! the session that stalls a shard's readers.

use super::{compat, prepared, slots};
use pgrx::pg_sys;
use std::sync::atomic::Ordering::Relaxed;

/// One shard held by one transaction.
pub struct Hold {
    /// The backend's process id; `None` for a prepared transaction.
    pub pid: Option<i32>,
    /// A prepared transaction's xid (`pg_prepared_xacts.transaction`); `None` for a backend's.
    pub prepared_xid: Option<pg_sys::TransactionId>,
    pub shard: u32,
    /// The time part of the transaction's lowest ID (over all its shards).
    pub since: u64,
    /// When the backend's transaction started (`pg_stat_activity.xact_start`), if known.
    pub xact_start: Option<pg_sys::TimestampTz>,
}

/// Every hold now, by shard, oldest first. Read without the horizon's lock for the backends
/// (a report: a transaction that ends meanwhile may show or not), with it for the prepared.
pub fn now() -> Vec<Hold> {
    let starts = compat::transaction_starts();
    let slots = slots();
    let mut holds: Vec<Hold> = (0..slots.slots().len())
        .filter_map(|index| {
            let (since, shards) = slots.held(index)?;
            let pid = slots.slots()[index].pid.load(Relaxed) as i32;
            let xact_start = starts.iter().find(|(started, _)| *started == pid).map(|(_, start)| *start);
            Some(shards.into_iter().map(move |shard| Hold {
                pid: Some(pid),
                prepared_xid: None,
                shard,
                since,
                xact_start,
            }))
        })
        .flatten()
        .collect();
    for (fxid, since, shards) in prepared::held() {
        let xid = pg_sys::TransactionId::from_inner(fxid as u32);
        holds.extend(shards.into_iter().map(|shard| Hold {
            pid: None,
            prepared_xid: Some(xid),
            shard,
            since,
            xact_start: None,
        }));
    }
    holds.sort_by_key(|hold| (hold.shard, hold.since));
    holds
}
