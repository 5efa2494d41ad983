//! The registry, the servers that claim shards from it, the faults drawn by a seed, and the
//! checks. Time is virtual: ticks of 50 ms.

macro_rules! trace {
    ($world:expr, $($arg:tt)*) => {
        if $world.verbose {
            println!("  t={:>6} {}", $world.t, format!($($arg)*));
        }
    };
}

mod faults;
mod registry;
mod stats;
mod worker;

use crate::rng::Rng;
use faults::{schedule, Fault};
use registry::{Answer, Registry, Request};
use snowflake_core::registry::{self as rules, Claim, Holder, Verdict, WhenDown};
pub use stats::Stats;
use std::collections::BTreeMap;

const TICK_MS: i64 = 50;
const SHARDS: usize = 3;
/// IDs per millisecond of one shard: an ID is its time part (Unix ms) times this, plus a sequence.
const PER_MS: u64 = 16;
/// The faults' part of a run: 60 s.
const FAULT_TICKS: i64 = 1_200;
const START_UNIX_MS: i64 = 1_700_000_000_000;
/// Servers at most: the two configured ones, and the clones, standbys and misconfigured servers
/// the faults start beside them.
const MAX_SERVERS: usize = 7;
/// How far ahead of its clock a holder publishes its ceiling (the reservation's `reserve_ms`).
const RESERVE_MS: u64 = 250;

#[derive(Clone, Copy, Debug, Default)]
struct Held {
    revision: u64,
    /// The mark the registry accepted from this holder last: it never publishes past it.
    mark: u64,
}

#[derive(Clone, Copy, Debug, Default)]
struct ShardState {
    held: Option<Held>,
    /// A read found the claim free (or this server's to take over): its revision, taken next tick.
    to_take: Option<(u64, u64)>,
    /// Fenced while the registry does not answer (`WhenDown::Stop`).
    fenced: bool,
    /// The ceiling published: IDs lie below it.
    ceiling: u64,
    floor: u64,
    last_id: u64,
    renewed_at: i64,
    /// Every ID of this holding must lie above this (the highest ID issued before it was taken).
    above: Option<u64>,
}

struct Server {
    me: Holder,
    shards: Vec<usize>,
    offset_ms: i64,
    up: bool,
    /// Stopped for good (a clone or a misconfigured server taken away).
    retired: bool,
    restart_at: Option<i64>,
    paused_until: i64,
    when_down: WhenDown,
    /// Durable: the highest ceiling recorded per shard before it was published (survives every
    /// crash; copied by a clone and by a standby's base backup and replay).
    recorded: [u64; SHARDS],
    state: [ShardState; SHARDS],
}

pub struct World {
    t: i64,
    rng: Rng,
    verbose: bool,
    ttl_ms: i64,
    registry_reserve_ms: u64,
    lossy_percent: u64,
    registry: Registry,
    servers: Vec<Server>,
    schedule: Vec<(i64, Fault)>,
    /// Per shard, every ID issued, as intervals (first -> last): no two may overlap.
    issued: [BTreeMap<u64, u64>; SHARDS],
    next_system_identifier: u64,
    /// A check that failed inside the registry, reported at the end of the server's turn.
    violation: Option<String>,
    /// Clients take no IDs until then (a quiet spell: the ceilings stay where they were).
    idle_until: i64,
    /// What a promotion promises: the promoted server takes over the claims its old primary
    /// holds within a second, without waiting for their lease (server, shard, by when, the old
    /// primary). Dropped when a fault disturbs it (the registry, the clients, the server).
    promises: Vec<(usize, usize, i64, Holder)>,
    stats: Stats,
}

impl World {
    pub fn new(seed: u64, verbose: bool) -> Self {
        let mut config = Rng::new(seed, 1);
        let ttl_ms = [2_000, 5_000, 10_000][config.below(3) as usize];
        let registry_reserve_ms = [1_000, 5_000, 30_000][config.below(3) as usize];
        let lossy_percent = [10, 50][config.below(2) as usize];
        let when_down = |rng: &mut Rng| if rng.chance(50) { WhenDown::KeepToMark } else { WhenDown::Stop };
        let servers = vec![
            Server::new(
                Holder { system_identifier: 1, timeline: 1, incarnation: 1 },
                vec![0, 1],
                when_down(&mut config),
            ),
            Server::new(
                Holder { system_identifier: 2, timeline: 1, incarnation: 1 },
                vec![2],
                when_down(&mut config),
            ),
        ];
        let mut world = World {
            t: 0,
            rng: Rng::new(seed, 3),
            verbose,
            ttl_ms,
            registry_reserve_ms,
            lossy_percent,
            registry: Registry {
                claims: [None; SHARDS],
                marks: [0; SHARDS],
                marked_by: [None; SHARDS],
                mark_revisions: [0; SHARDS],
                revision: 0,
                down_until: 0,
                in_outage: false,
                lossy_until: 0,
            },
            servers,
            schedule: schedule(seed),
            issued: Default::default(),
            next_system_identifier: 3,
            violation: None,
            idle_until: 0,
            promises: vec![],
            stats: Stats { runs: 1, ..Stats::default() },
        };
        for (i, server) in world.servers.iter_mut().enumerate() {
            server.offset_ms = config.range(-30_000, 30_000);
            trace!(
                world,
                "server {i}: {:?} shards {:?} clock {:+} ms",
                server.me,
                server.shards,
                server.offset_ms
            );
        }
        trace!(
            world,
            "ttl {ttl_ms} ms, registry_reserve {registry_reserve_ms} ms, answers lost {lossy_percent}%"
        );
        world
    }

    /// The faults, then quiet until every shard a live server is configured with has issued again.
    pub fn run(mut self) -> Result<Stats, String> {
        let schedule = std::mem::take(&mut self.schedule);
        let mut next = schedule.iter().peekable();
        while self.t < FAULT_TICKS * TICK_MS {
            while let Some(&&(at, fault)) = next.peek() {
                if at > self.t {
                    break;
                }
                next.next();
                self.apply(fault);
            }
            self.tick()?;
        }
        self.quiet_end()?;
        Ok(self.stats)
    }

    fn clock(&self, i: usize) -> u64 {
        (START_UNIX_MS + self.t + self.servers[i].offset_ms) as u64
    }

    fn tick(&mut self) -> Result<(), String> {
        self.t += TICK_MS;
        let registry = &mut self.registry;
        if registry.in_outage && self.t >= registry.down_until {
            // etcd renews every lease when a new leader is elected: a claim outlives an outage
            // by one ttl from the moment the registry answers again.
            registry.in_outage = false;
            for stored in registry.claims.iter_mut().flatten() {
                stored.expires_at = stored.expires_at.max(self.t + self.ttl_ms);
            }
        }
        for stored in registry.claims.iter_mut() {
            if !registry.in_outage && stored.is_some_and(|stored| stored.expires_at <= self.t) {
                *stored = None;
            }
        }
        for i in 0..self.servers.len() {
            if !self.servers[i].up
                && !self.servers[i].retired
                && self.servers[i].restart_at.is_some_and(|at| at <= self.t)
            {
                self.start(i);
            }
        }
        let broken = self.promises.iter().find(|&&(i, shard, by, old)| {
            let server = &self.servers[i];
            let still_old = self.registry.claims[shard].is_some_and(|stored| stored.claim.holder == old);
            by <= self.t && server.up && server.paused_until <= self.t && still_old
        });
        if let Some(&(i, shard, ..)) = broken {
            return Err(format!(
                "t={}: server {i}, promoted, had not taken shard {shard}'s claim from its old primary a second after",
                self.t
            ));
        }
        self.promises.retain(|&(_, _, by, _)| by > self.t);
        // The servers in an order drawn each tick: whose request reaches the registry first.
        let mut order: Vec<usize> = (0..self.servers.len()).collect();
        for k in (1..order.len()).rev() {
            order.swap(k, self.rng.below(k as u64 + 1) as usize);
        }
        for i in order {
            let server = &self.servers[i];
            if !server.up || server.paused_until > self.t {
                continue;
            }
            for shard in server.shards.clone() {
                self.worker(i, shard);
                if let Some(violation) = self.violation.take() {
                    return Err(violation);
                }
                self.clients(i, shard)?;
            }
        }
        Ok(())
    }

    /// Clients take a few IDs of the shard, if this server may issue it: above the floor and the
    /// last ID, from the clock, below the ceiling.
    fn clients(&mut self, i: usize, shard: usize) -> Result<(), String> {
        let now = self.clock(i);
        let state = self.servers[i].state[shard];
        if state.held.is_none() || state.fenced || self.t < self.idle_until {
            return Ok(());
        }
        for _ in 0..1 + self.rng.below(3) {
            let state = self.servers[i].state[shard];
            let first = (state.last_id + 1).max(now.max(state.floor) * PER_MS);
            let last = (first + self.rng.below(20)).min((state.ceiling * PER_MS).saturating_sub(1));
            if last < first {
                return Ok(());
            }
            if self.t < self.registry.down_until {
                self.stats.issued_while_down += 1;
            }
            self.check(i, shard, first, last)?;
            self.servers[i].state[shard].last_id = last;
            self.stats.ids += last - first + 1;
        }
        Ok(())
    }

    /// No ID given twice; every ID of a holding above all issued before it was taken.
    fn check(&mut self, i: usize, shard: usize, first: u64, last: u64) -> Result<(), String> {
        let at = self.t;
        if let Some(above) = self.servers[i].state[shard].above {
            if first <= above {
                return Err(format!(
                    "t={at}: server {i} issued {first} on shard {shard}, not above {above}, issued before it took the claim"
                ));
            }
        }
        let issued = &mut self.issued[shard];
        let before = issued.range(..=last).next_back().map(|(&a, &b)| (a, b));
        if let Some((a, b)) = before.filter(|&(_, b)| b >= first) {
            return Err(format!(
                "t={at}: server {i} issued {first}..={last} on shard {shard}, given before ({a}..={b})"
            ));
        }
        issued.insert(first, last);
        Ok(())
    }

    /// Every fault healed: each shard a live server is configured with is issued again within
    /// the claim's lease (a dead or replaced holder's claim running out) and a few ticks more.
    fn quiet_end(&mut self) -> Result<(), String> {
        self.registry.down_until = 0;
        self.registry.lossy_until = 0;
        self.idle_until = 0;
        for i in 0..self.servers.len() {
            self.servers[i].paused_until = 0;
            if !self.servers[i].up && !self.servers[i].retired {
                self.servers[i].restart_at = Some(self.t);
            }
        }
        let start = self.t;
        let counts: Vec<usize> = self.issued.iter().map(BTreeMap::len).collect();
        let limit = self.ttl_ms + 3_000;
        while self.t - start <= limit {
            self.tick()?;
            // A shard is owed by the live servers configured with it that a promotion did not
            // replace (those refuse it for good, as documented, until they are made again).
            let served = (0..SHARDS).all(|shard| {
                let live = self.registry.claims[shard].map(|stored| stored.claim);
                let marked_by = self.registry.marked_by[shard];
                self.issued[shard].len() > counts[shard]
                    || !self.servers.iter().any(|server| {
                        let replaced =
                            matches!(rules::verdict(server.me, live, marked_by), Verdict::Replaced { .. });
                        !server.retired && server.shards.contains(&shard) && !replaced
                    })
            });
            if served {
                return Ok(());
            }
        }
        for (i, server) in self.servers.iter().enumerate() {
            trace!(
                self,
                "server {i}: up {} retired {} paused {} {:?} {:?}",
                server.up,
                server.retired,
                server.paused_until,
                server.shards,
                server.state
            );
        }
        trace!(self, "registry: {:?}", self.registry.claims);
        let waiting: Vec<usize> =
            (0..SHARDS).filter(|&shard| self.issued[shard].len() == counts[shard]).collect();
        Err(format!("liveness: {limit} ms after the faults stopped, shards {waiting:?} had not issued again"))
    }
}

impl Server {
    fn new(me: Holder, shards: Vec<usize>, when_down: WhenDown) -> Self {
        Server {
            me,
            shards,
            offset_ms: 0,
            up: true,
            retired: false,
            restart_at: None,
            paused_until: 0,
            when_down,
            recorded: [0; SHARDS],
            state: [ShardState::default(); SHARDS],
        }
    }
}
