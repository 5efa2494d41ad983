//! The registry, the servers that claim shards from it, the faults drawn by a seed, and the
//! checks. Time is virtual: ticks of 50 ms.

use crate::rng::Rng;
use snowflake_core::registry::{self, Claim, Holder, Verdict, WhenDown};
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

/// A claim as the registry stores it: the holder, the revision its write got (what every later
/// write of the holder compares), and when its lease runs out.
#[derive(Clone, Copy, Debug)]
struct Stored {
    claim: Claim,
    revision: u64,
    expires_at: i64,
}

/// The registry: per shard, the live claim and the mark beside it (a mark outlives claims).
struct Registry {
    claims: [Option<Stored>; SHARDS],
    marks: [u64; SHARDS],
    revision: u64,
    down_until: i64,
    /// Down, and not yet back: no lease runs out meanwhile.
    in_outage: bool,
    lossy_until: i64,
}

enum Request {
    Read,
    /// Take the claim if its revision is still `expected` (0: none).
    Take {
        expected: u64,
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
enum Answer {
    Current { live: Option<Claim>, revision: u64 },
    Taken { revision: u64, mark: u64 },
    Renewed { mark: u64 },
    Lost { live: Option<Claim> },
    Released,
}

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
    to_take: Option<u64>,
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

#[derive(Clone, Copy, Debug)]
enum Fault {
    ClockStep {
        server: usize,
        delta_ms: i64,
    },
    Kill {
        server: usize,
        restart_after_ticks: i64,
    },
    CleanRestart {
        server: usize,
    },
    /// The data directory copied (as it was `lag_ms` ago) and started beside the original.
    Clone {
        server: usize,
        lag_ms: u64,
    },
    /// A standby of `server` promoted, its replay `lag_ms` behind; the old primary killed or
    /// left running (its HA manager dead).
    Promote {
        server: usize,
        lag_ms: u64,
        old_left_running: bool,
    },
    /// A server of another data directory configured with `shard`.
    Misconfigured {
        shard: usize,
    },
    Retire {
        server: usize,
    },
    Pause {
        server: usize,
        ms: i64,
    },
    RegistryDown {
        ticks: i64,
    },
    Lossy {
        ticks: i64,
    },
    /// No client asks for IDs for a while: ceilings and IDs stay where they were while clocks
    /// move (or are stepped back).
    Idle {
        ticks: i64,
    },
}

#[derive(Clone, Debug, Default)]
pub struct Stats {
    runs: u64,
    ids: u64,
    takes: u64,
    take_overs: u64,
    replaced: u64,
    waits: u64,
    held_elsewhere: u64,
    lost: u64,
    clones: u64,
    promotions: u64,
    registry_down: u64,
    issued_while_down: u64,
}

impl Stats {
    pub fn add(&mut self, other: &Stats) {
        self.runs += other.runs;
        self.ids += other.ids;
        self.takes += other.takes;
        self.take_overs += other.take_overs;
        self.replaced += other.replaced;
        self.waits += other.waits;
        self.held_elsewhere += other.held_elsewhere;
        self.lost += other.lost;
        self.clones += other.clones;
        self.promotions += other.promotions;
        self.registry_down += other.registry_down;
        self.issued_while_down += other.issued_while_down;
    }

    pub fn line(&self) -> String {
        format!(
            "claims taken {} (taken over by a promotion {}); reads that found this server replaced {}, a copy or an \
             earlier start holding {}, another server holding {}; claims lost {}, clones {}, promotions {}, registry outages {}, IDs {} ({} issued while the registry was down)",
            self.takes,
            self.take_overs,
            self.replaced,
            self.waits,
            self.held_elsewhere,
            self.lost,
            self.clones,
            self.promotions,
            self.registry_down,
            self.ids,
            self.issued_while_down
        )
    }
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

macro_rules! trace {
    ($world:expr, $($arg:tt)*) => {
        if $world.verbose {
            println!("  t={:>6} {}", $world.t, format!($($arg)*));
        }
    };
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

    /// A request to the registry; `None` when no answer comes (the registry down, the request or
    /// its answer lost: a lost answer's request may have been applied).
    fn ask(&mut self, i: usize, shard: usize, request: Request) -> Option<Answer> {
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
            },
            Request::Take { expected } if current.map_or(0, |stored| stored.revision) == expected => {
                // What the registry is for: a live claim goes only to its own holder again, or
                // to a promoted standby of it (a later timeline of the same data directory);
                // never to a copy of its holder, nor to another server.
                if let Some(stored) = current {
                    let held = stored.claim.holder;
                    let own = held == me;
                    let promoted =
                        held.system_identifier == me.system_identifier && held.timeline < me.timeline;
                    if !own && !promoted {
                        stolen = Some(held);
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
        if let Some(held) = stolen {
            self.violation = Some(format!(
                "t={}: server {i} ({me:?}) took shard {shard}'s live claim from {held:?}",
                self.t
            ));
        }
        if lossy && self.rng.chance(self.lossy_percent / 2) {
            return None;
        }
        Some(answer)
    }

    /// One turn of the reservation worker for one shard: keep the claim (renew, raise the mark,
    /// publish within it), or ask for it.
    fn worker(&mut self, i: usize, shard: usize) {
        let now = self.clock(i);
        let server = &self.servers[i];
        let me = server.me;
        let state = server.state[shard];
        let Some(held) = state.held else {
            self.ask_for(i, shard, state.to_take);
            return;
        };
        // Ahead of the clock, or of the floor, or of the IDs already issued: a holder that
        // resumed at a mark ahead of its clock borrows time until its clock catches up (it keeps
        // the lead, as a promotion keeps the old primary's).
        let wanted = now.max(state.floor).max((state.last_id + 1) / PER_MS) + RESERVE_MS;
        let keepalive_due = self.t - state.renewed_at >= self.ttl_ms / 3;
        let mut mark = held.mark;
        if keepalive_due || registry::mark_due(now, wanted, held.mark, self.registry_reserve_ms) {
            let new_mark = registry::mark_to_record(now, wanted, held.mark, self.registry_reserve_ms);
            match self.ask(i, shard, Request::Renew { revision: held.revision, mark: new_mark }) {
                Some(Answer::Renewed { mark: accepted }) => {
                    mark = accepted;
                    let state = &mut self.servers[i].state[shard];
                    state.held = Some(Held { mark, ..held });
                    state.renewed_at = self.t;
                    state.fenced = false;
                }
                Some(Answer::Lost { live }) => {
                    self.stats.lost += 1;
                    let verdict = registry::verdict(me, live);
                    trace!(self, "server {i} shard {shard}: claim lost ({verdict:?}); fenced at its ceiling");
                    self.servers[i].state[shard] =
                        ShardState { floor: state.floor, last_id: state.last_id, ..Default::default() };
                    return;
                }
                Some(other) => unreachable!("a renewal answered {other:?}"),
                None => {
                    match registry::ceiling_while_down(self.servers[i].when_down, wanted, held.mark) {
                        None => self.servers[i].state[shard].fenced = true,
                        Some(ceiling) => self.publish(i, shard, ceiling),
                    }
                    return;
                }
            }
        }
        let ceiling = registry::ceiling_within_mark(wanted, mark);
        self.publish(i, shard, ceiling);
    }

    /// Records the ceiling durably, then publishes it (a ceiling only rises).
    fn publish(&mut self, i: usize, shard: usize, ceiling: u64) {
        let server = &mut self.servers[i];
        if ceiling > server.state[shard].ceiling {
            server.recorded[shard] = server.recorded[shard].max(ceiling);
            server.state[shard].ceiling = ceiling;
        }
    }

    /// A shard not held: take the claim a read of the last tick found free, or read it.
    fn ask_for(&mut self, i: usize, shard: usize, to_take: Option<u64>) {
        let me = self.servers[i].me;
        if let Some(expected) = to_take {
            self.servers[i].state[shard].to_take = None;
            match self.ask(i, shard, Request::Take { expected }) {
                Some(Answer::Taken { revision, mark }) => {
                    let own = self.servers[i].recorded[shard];
                    let floor = registry::resume_floor(own, Some(mark));
                    let above = self.issued[shard].iter().next_back().map(|(_, &last)| last);
                    trace!(
                        self,
                        "server {i} shard {shard}: claim taken (revision {revision}), resumes at {floor} (own {own}, mark {mark}); IDs so far below {above:?}"
                    );
                    self.stats.takes += 1;
                    let state = &mut self.servers[i].state[shard];
                    *state = ShardState {
                        held: Some(Held { revision, mark }),
                        floor,
                        ceiling: floor,
                        last_id: state.last_id,
                        renewed_at: self.t,
                        above,
                        ..Default::default()
                    };
                }
                Some(Answer::Lost { .. }) | None => {}
                Some(other) => unreachable!("a take answered {other:?}"),
            }
            return;
        }
        let Some(Answer::Current { live, revision }) = self.ask(i, shard, Request::Read) else { return };
        match registry::verdict(me, live) {
            Verdict::Take | Verdict::Renew => self.servers[i].state[shard].to_take = Some(revision),
            Verdict::TakeOver => {
                self.stats.take_overs += 1;
                self.servers[i].state[shard].to_take = Some(revision);
            }
            Verdict::Replaced { .. } => self.stats.replaced += 1,
            Verdict::WaitForExpiry { .. } => self.stats.waits += 1,
            Verdict::HeldElsewhere { .. } => self.stats.held_elsewhere += 1,
        }
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

    fn start(&mut self, i: usize) {
        let incarnation = self.rng.next_u64();
        let server = &mut self.servers[i];
        server.me.incarnation = incarnation;
        server.up = true;
        server.restart_at = None;
        server.state = [ShardState::default(); SHARDS];
        trace!(self, "server {i} starts (incarnation {incarnation})");
    }

    fn crash(&mut self, i: usize) {
        let server = &mut self.servers[i];
        server.up = false;
        server.state = [ShardState::default(); SHARDS];
    }

    /// A clean stop: each claim's last ceiling is in its mark already; the claims released.
    fn clean_stop(&mut self, i: usize) {
        for shard in self.servers[i].shards.clone() {
            if let Some(held) = self.servers[i].state[shard].held {
                let _ = self.ask(i, shard, Request::Release { revision: held.revision });
            }
        }
        self.crash(i);
    }

    /// A new server from a copy of `i`'s data directory as it was `lag_ms` ago.
    fn copy_of(&mut self, i: usize, lag_ms: u64, me: Holder) -> usize {
        let original = &self.servers[i];
        let recorded = original.recorded.map(|ceiling| ceiling.saturating_sub(lag_ms));
        let mut copy = Server::new(me, original.shards.clone(), original.when_down);
        copy.recorded = recorded;
        copy.offset_ms = self.rng.range(-30_000, 30_000);
        self.servers.push(copy);
        let j = self.servers.len() - 1;
        self.start(j);
        j
    }

    fn apply(&mut self, fault: Fault) {
        let n = self.servers.len();
        trace!(self, "FAULT {fault:?}");
        match fault {
            Fault::RegistryDown { .. } | Fault::Lossy { .. } | Fault::Idle { .. } => self.promises.clear(),
            Fault::Kill { server, .. }
            | Fault::CleanRestart { server }
            | Fault::Pause { server, .. }
            | Fault::Retire { server } => self.promises.retain(|&(i, ..)| i != server % n),
            _ => {}
        }
        match fault {
            Fault::ClockStep { server, delta_ms } => {
                let server = &mut self.servers[server % n];
                server.offset_ms = (server.offset_ms + delta_ms).clamp(-30_000, 30_000);
            }
            Fault::Kill { server, restart_after_ticks } => {
                let i = server % n;
                if self.servers[i].up {
                    self.crash(i);
                    self.servers[i].restart_at = Some(self.t + restart_after_ticks * TICK_MS);
                }
            }
            Fault::CleanRestart { server } => {
                let i = server % n;
                if self.servers[i].up {
                    self.clean_stop(i);
                    self.start(i);
                }
            }
            Fault::Clone { server, lag_ms } if n < MAX_SERVERS => {
                let i = server % n;
                let me = Holder { incarnation: 0, ..self.servers[i].me };
                self.copy_of(i, lag_ms, me);
                self.stats.clones += 1;
            }
            Fault::Promote { server, lag_ms, old_left_running } if n < MAX_SERVERS => {
                let i = server % n;
                if !self.servers[i].up {
                    return;
                }
                let me = Holder {
                    timeline: self.servers[i].me.timeline + 1,
                    incarnation: 0,
                    ..self.servers[i].me
                };
                let j = self.copy_of(i, lag_ms, me);
                self.stats.promotions += 1;
                let quiet = self.t >= self.registry.down_until
                    && self.t >= self.registry.lossy_until
                    && self.t >= self.idle_until;
                for shard in self.servers[j].shards.clone() {
                    let held_by_old = self.registry.claims[shard]
                        .is_some_and(|stored| stored.claim.holder == self.servers[i].me);
                    if quiet && held_by_old {
                        self.promises.push((j, shard, self.t + 1_000, self.servers[i].me));
                    }
                }
                if !old_left_running {
                    self.crash(i);
                    self.servers[i].retired = true;
                }
            }
            Fault::Misconfigured { shard } if n < MAX_SERVERS => {
                // Another data directory, on a timeline of its own.
                let timeline = 1 + self.rng.below(3) as u32;
                let me = Holder { system_identifier: self.next_system_identifier, timeline, incarnation: 0 };
                self.next_system_identifier += 1;
                let when_down = if self.rng.chance(50) { WhenDown::KeepToMark } else { WhenDown::Stop };
                let mut server = Server::new(me, vec![shard % SHARDS], when_down);
                server.offset_ms = self.rng.range(-30_000, 30_000);
                self.servers.push(server);
                self.start(n);
            }
            Fault::Clone { .. } | Fault::Promote { .. } | Fault::Misconfigured { .. } => {}
            Fault::Retire { server } => {
                // Never the last two configured servers: the shards must stay served.
                let i = server % n;
                if i >= 2 && self.servers[i].up {
                    self.clean_stop(i);
                    self.servers[i].retired = true;
                }
            }
            Fault::Pause { server, ms } => self.servers[server % n].paused_until = self.t + ms,
            Fault::RegistryDown { ticks } => {
                self.registry.down_until = self.t + ticks * TICK_MS;
                self.registry.in_outage = true;
                self.stats.registry_down += 1;
            }
            Fault::Lossy { ticks } => self.registry.lossy_until = self.t + ticks * TICK_MS,
            Fault::Idle { ticks } => self.idle_until = self.t + ticks * TICK_MS,
        }
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
            let served = (0..SHARDS).all(|shard| {
                self.issued[shard].len() > counts[shard]
                    || !self.servers.iter().any(|server| !server.retired && server.shards.contains(&shard))
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

/// The faults of a seed, drawn on a stream of their own.
fn schedule(seed: u64) -> Vec<(i64, Fault)> {
    let mut rng = Rng::new(seed, 2);
    let mut at = 0;
    let mut out = vec![];
    loop {
        at += rng.range(0, 40) * TICK_MS;
        if at >= FAULT_TICKS * TICK_MS {
            return out;
        }
        let server = rng.below(MAX_SERVERS as u64) as usize;
        let fault = match rng.weighted(&[4, 4, 2, 3, 3, 2, 2, 2, 3, 2, 2]) {
            0 => Fault::ClockStep { server, delta_ms: rng.range(-30_000, 30_000) },
            1 => Fault::Kill { server, restart_after_ticks: rng.range(0, 60) },
            2 => Fault::CleanRestart { server },
            3 => Fault::Clone { server, lag_ms: [0, 0, 2_000, 20_000][rng.below(4) as usize] },
            4 => Fault::Promote {
                server,
                lag_ms: [0, 500, 5_000][rng.below(3) as usize],
                old_left_running: rng.chance(50),
            },
            5 => Fault::Misconfigured { shard: rng.below(SHARDS as u64) as usize },
            6 => Fault::Retire { server },
            7 => Fault::Pause { server, ms: rng.range(500, 30_000) },
            8 => Fault::RegistryDown { ticks: rng.range(1, 400) },
            9 => Fault::Lossy { ticks: rng.range(1, 200) },
            _ => Fault::Idle { ticks: rng.range(1, 200) },
        };
        out.push((at, fault));
    }
}
