//! The registry: per shard, a claim bound to a lease and a mark beside it; each request applied
//! at once (etcd's transactions are linearizable), its answer perhaps lost.

use super::*;

/// A claim as the registry stores it: the holder, the revision its write got (what every later
/// write of the holder compares), and when its lease runs out.
#[derive(Clone, Copy, Debug)]
pub(super) struct Stored {
    pub(super) claim: Claim,
    pub(super) revision: u64,
    pub(super) expires_at: i64,
}

/// The registry: per shard, the live claim and the mark beside it (a mark outlives claims).
pub(super) struct Registry {
    pub(super) claims: [Option<Stored>; SHARDS],
    pub(super) marks: [u64; SHARDS],
    /// Who wrote each mark last: it outlives the claim, and tells an old primary it was replaced.
    pub(super) marked_by: [Option<Holder>; SHARDS],
    /// The revision of each mark's last write (0: never written).
    pub(super) mark_revisions: [u64; SHARDS],
    pub(super) revision: u64,
    pub(super) down_until: i64,
    /// Down, and not yet back: no lease runs out meanwhile.
    pub(super) in_outage: bool,
    pub(super) lossy_until: i64,
}

pub(super) enum Request {
    Read,
    /// Take the claim if it and the mark are still as a read found them: the claim's revision
    /// `expected` (0: none), the mark's `expected_mark` (0: none). A read goes stale while a
    /// server is paused: a successor may have held the shard and written the mark meanwhile.
    Take {
        expected: u64,
        expected_mark: u64,
    },
    /// Keep the claim's lease and raise the mark, if the claim is still the one of `revision`.
    Renew {
        revision: u64,
        mark: u64,
    },
    Release {
        revision: u64,
    },
}

#[derive(Debug)]
pub(super) enum Answer {
    Current { live: Option<Claim>, revision: u64, marked_by: Option<Holder>, mark_revision: u64 },
    Taken { revision: u64, mark: u64 },
    Renewed { mark: u64 },
    Lost { live: Option<Claim> },
    Released,
}

impl World {
    /// A request to the registry; `None` when no answer comes (the registry down, the request or
    /// its answer lost: a lost answer's request may have been applied).
    pub(super) fn ask(&mut self, i: usize, shard: usize, request: Request) -> Option<Answer> {
        if self.t < self.registry.down_until {
            return None;
        }
        let lossy = self.t < self.registry.lossy_until;
        if lossy && self.rng.chance(self.lossy_percent / 2) {
            return None;
        }
        let me = self.servers[i].me;
        let mut stolen = None;
        let registry = &mut self.registry;
        let current = registry.claims[shard];
        let answer = match request {
            Request::Read => Answer::Current {
                live: current.map(|stored| stored.claim),
                revision: current.map_or(0, |stored| stored.revision),
                marked_by: registry.marked_by[shard],
                mark_revision: registry.mark_revisions[shard],
            },
            Request::Take { expected, expected_mark }
                if current.map_or(0, |stored| stored.revision) == expected
                    && registry.mark_revisions[shard] == expected_mark =>
            {
                // What the registry is for: a live claim goes only to its own holder again, or
                // to a promoted standby of it (a later timeline of the same data directory);
                // never to a copy of its holder, nor to another server.
                if let Some(stored) = current {
                    let held = stored.claim.holder;
                    let own = held == me;
                    let promoted =
                        held.system_identifier == me.system_identifier && held.timeline < me.timeline;
                    if !own && !promoted {
                        stolen = Some(format!("took shard {shard}'s live claim from {held:?}"));
                    }
                }
                // Nor, once free, to an old primary whose successor (a later timeline of its
                // data directory) held it and wrote the mark last: its data has diverged.
                if let Some(writer) = registry.marked_by[shard].filter(|_| current.is_none()) {
                    if writer.system_identifier == me.system_identifier && writer.timeline > me.timeline {
                        stolen = Some(format!("took shard {shard} back from its successor {writer:?}"));
                    }
                }
                registry.revision += 1;
                let claim = Claim { holder: me, since_unix_ms: START_UNIX_MS + self.t };
                registry.claims[shard] =
                    Some(Stored { claim, revision: registry.revision, expires_at: self.t + self.ttl_ms });
                Answer::Taken { revision: registry.revision, mark: registry.marks[shard] }
            }
            Request::Renew { revision, mark }
                if current.is_some_and(|stored| stored.revision == revision) =>
            {
                let stored = registry.claims[shard].as_mut().expect("compared");
                stored.expires_at = self.t + self.ttl_ms;
                // A put, as etcd's transaction makes it: the rules keep a mark from going down.
                registry.marks[shard] = mark;
                registry.marked_by[shard] = Some(me);
                registry.revision += 1;
                registry.mark_revisions[shard] = registry.revision;
                Answer::Renewed { mark }
            }
            Request::Release { revision } if current.is_some_and(|stored| stored.revision == revision) => {
                registry.claims[shard] = None;
                Answer::Released
            }
            Request::Take { .. } | Request::Renew { .. } | Request::Release { .. } => {
                Answer::Lost { live: current.map(|stored| stored.claim) }
            }
        };
        if let Some(what) = stolen {
            self.violation = Some(format!("t={}: server {i} ({me:?}) {what}", self.t));
        }
        if lossy && self.rng.chance(self.lossy_percent / 2) {
            return None;
        }
        Some(answer)
    }
}
