//! The HA manager and the lease (docs/high-availability.md): each server of the pair runs
//! under an HA manager (Patroni) whose leader key the primary's manager renews every
//! `loop_wait`; once it has not been renewed for `ttl`, a standby is promoted. With the lease on
//! (`snowflake_id.lease_ms`), the primary's reservation worker asks its own manager every
//! `lease::ask_interval_ms` and closes the fence of every shard once no request that got 200 was
//! *sent* within the last `lease_ms`, judged by the core's `LeaseJudge` on a clock that a pause
//! does not stop (CLOCK_BOOTTIME: the model's virtual time, which clock steps do not move).
//!
//! Two faults leave an old primary running while a standby is promoted, the case the lease is
//! for: its manager dies alone (killed, no watchdog), or its whole machine is paused (SIGSTOP, a
//! frozen VM) past the key's expiry. The old primary then runs on as a *zombie* until its
//! manager, restarted or woken, stops it (a few seconds); the docs promise that with
//! `lease_ms + 1 s < ttl - loop_wait` it has stopped issuing before the other is promoted, and
//! the model checks exactly that: a zombie issues no ID after the promotion. Without the lease
//! both faults are the split brain the docs warn of, and are not drawn into a failover.

use super::{World, START_UNIX_MS};
use snowflake_core::lease::{self, ask_interval_ms, LeaseJudge, Verdict};

/// What a server's reservation worker knows of the lease (gone with the process, like the
/// worker's asking thread: a new one starts with the fence closed).
pub struct LeaseKeeper {
    judge: LeaseJudge,
    /// The fence the worker last set for the lease: closed until the first 200.
    pub fenced: bool,
    next_ask_at: i64,
    /// A request in flight: when it was sent (boot clock), when its answer arrives, whether it
    /// is a 200 that arrives within the request's deadline.
    asking: Option<(u64, i64, bool)>,
}

impl Default for LeaseKeeper {
    fn default() -> Self {
        LeaseKeeper { judge: LeaseJudge::default(), fenced: true, next_ask_at: 0, asking: None }
    }
}

/// The request's deadline for all of it (`fence::lease_question::ANSWER_DEADLINE`).
const ANSWER_DEADLINE_MS: i64 = 250;

/// The HA side of the world: which managers are alive, the zombie, a promotion on its way.
pub struct Ha {
    /// A server's manager is dead (killed alone), until the zombie is stopped.
    pub manager_dead: Vec<bool>,
    /// A server's whole machine is paused until then.
    pub paused_until: Vec<i64>,
    /// The old primary left running after a promotion, and when its manager stops it.
    pub zombie: Option<(usize, i64)>,
    /// The old primary whose leader key expires, the standby the HA managers then promote,
    /// and when.
    failover_at: Option<(usize, u8, i64)>,
}

impl Ha {
    /// Every manager alive, no machine paused, for `servers` servers.
    pub fn new(servers: usize) -> Self {
        Ha {
            manager_dead: vec![false; servers],
            paused_until: vec![0; servers],
            zombie: None,
            failover_at: None,
        }
    }
}

impl World {
    /// Milliseconds on the boot clock: virtual time, which no clock step moves.
    fn boot_ms(&self) -> u64 {
        (self.t - START_UNIX_MS) as u64
    }

    pub(super) fn paused(&self, i: usize) -> bool {
        self.t < self.ha.paused_until[i]
    }

    /// The old primary left running after a promotion, while it runs.
    pub(super) fn zombie(&self) -> Option<usize> {
        self.ha.zombie.map(|(z, _)| z).filter(|&z| z != self.primary && self.up(z))
    }

    /// Server `i`'s PostgreSQL stopped (killed, powered off, stopped cleanly): the model takes
    /// its machine and its manager back to normal with it. A paused machine was woken or
    /// power-cycled first, a dead manager restarted (it renews its key: no promotion follows
    /// for it), and a zombie is a zombie no more (its manager starts it as a standby).
    pub(super) fn process_gone(&mut self, i: usize) {
        self.ha.paused_until[i] = 0;
        self.ha.manager_dead[i] = false;
        if self.ha.zombie.is_some_and(|(z, _)| z == i) {
            self.ha.zombie = None;
        }
        if self.ha.failover_at.is_some_and(|(p, ..)| p == i) {
            self.ha.failover_at = None;
        }
    }

    /// The lease at a turn of server `i`'s worker (`fence::lease::Keeper::look`): an answer
    /// that arrived is taken in, a new request sent when due, and the fence set by the verdict.
    pub(super) fn lease_tick(&mut self, i: usize) {
        let lease_ms = self.cfg.lease_ms;
        if lease_ms == 0 {
            return;
        }
        let now = self.boot_ms();
        // The manager answers 200 only on the node that holds the leader key and runs the
        // primary: alive, not paused, and not the zombie (whose key another has taken).
        let leader = !self.ha.manager_dead[i] && !self.paused(i) && i == self.primary;
        let latency = self.rng.range(0, self.cfg.max_answer_ms);
        let t = self.t;
        let Some(mem) = self.servers[i].mem.as_mut() else { return };
        let keeper = &mut mem.lease;
        if let Some((sent, arrives_at, yes)) = keeper.asking {
            if t >= arrives_at {
                if yes {
                    keeper.judge.yes_sent_at(sent);
                }
                keeper.asking = None;
            }
        }
        if keeper.asking.is_none() && t >= keeper.next_ask_at {
            let yes = leader && latency <= ANSWER_DEADLINE_MS;
            keeper.asking = Some((now, t + latency.min(ANSWER_DEADLINE_MS), yes));
            keeper.next_ask_at = t + ask_interval_ms(lease_ms, keeper.fenced) as i64;
        }
        let fenced = keeper.judge.verdict(now, lease_ms) == Verdict::Lost;
        if fenced != keeper.fenced {
            keeper.fenced = fenced;
            trace!(self, "server {i}: lease {}", if fenced { "lost: every shard fenced" } else { "held" });
        }
    }

    /// Whether the lease's fence refuses server `i`'s calls now.
    pub(super) fn lease_fenced(&self, i: usize) -> bool {
        self.cfg.lease_ms > 0 && self.servers[i].mem.as_ref().is_some_and(|mem| mem.lease.fenced)
    }

    /// The leader key's expiry: `ttl` after the dead or paused manager's last renewal, which
    /// came at most `loop_wait` before.
    fn key_expires_at(&mut self) -> i64 {
        self.t - self.rng.range(0, self.cfg.loop_wait_ms) + self.cfg.ttl_ms
    }

    /// The primary's HA manager dies alone; PostgreSQL runs on. With the lease on, `standby`
    /// is promoted once the key expires; without it, excluded (the split brain the docs warn of).
    pub(super) fn manager_dies(&mut self, standby: u8) {
        let p = self.primary;
        // A paused machine's manager does not die apart from it (it is paused too).
        let busy = self.ha.failover_at.is_some() || self.zombie().is_some() || self.paused(p);
        if self.cfg.lease_ms == 0 || busy || !self.up(p) {
            self.stats.ha_excluded += 1;
            return;
        }
        self.ha.manager_dead[p] = true;
        let at = self.key_expires_at();
        self.ha.failover_at = Some((p, standby, at));
        self.stats.managers_dead += 1;
        trace!(self, "server {p}: HA manager dies; standby {standby} promoted at {}", at - START_UNIX_MS);
    }

    /// The primary's whole machine paused for `ms` (its manager too). Past the key's expiry,
    /// and with the lease on, `standby` is promoted meanwhile.
    pub(super) fn pause(&mut self, standby: u8, ms: i64) {
        let p = self.primary;
        if !self.up(p) || self.paused(p) || self.ha.failover_at.is_some() || self.zombie().is_some() {
            return;
        }
        self.ha.paused_until[p] = self.t + ms;
        self.stats.pauses += 1;
        let expires_at = self.key_expires_at();
        trace!(
            self,
            "server {p}: paused for {ms} ms (its leader key expires at {})",
            expires_at - START_UNIX_MS
        );
        if expires_at < self.t + ms {
            if self.cfg.lease_ms == 0 {
                self.stats.ha_excluded += 1;
            } else {
                self.ha.failover_at = Some((p, standby, expires_at));
            }
        }
    }

    /// At each tick: the promotion once the key expired, and the zombie stopped by its manager.
    pub(super) fn ha_tick(&mut self) {
        if let Some((p, standby, at)) = self.ha.failover_at {
            if self.t >= at {
                self.ha.failover_at = None;
                // Another failover first (the old primary killed meanwhile): nothing left to do.
                if p == self.primary && self.up(p) && self.failover_leaving_running(standby) {
                    // Woken or restarted, its manager finds another leader and stops it.
                    let stop_at = self.ha.paused_until[p].max(self.t) + self.rng.range(500, 5_000);
                    self.ha.zombie = Some((p, stop_at));
                    self.stats.ha_failovers += 1;
                } else {
                    self.ha.zombie = None;
                    self.ha.manager_dead[p] = false;
                }
            }
        }
        if let Some((z, stop_at)) = self.ha.zombie {
            if self.t >= stop_at && self.up(z) && z != self.primary {
                trace!(self, "server {z}: the zombie stopped by its manager");
                self.crash(z, false);
                self.servers[z].restart_at = Some(self.t + self.rng.range(0, 3_000));
            }
        }
    }

    /// At the quiet end: every machine running again, every manager alive, no promotion on its
    /// way, and a zombie stopped now.
    pub(super) fn ha_quiet(&mut self) {
        self.ha.failover_at = None;
        self.ha.paused_until.iter_mut().for_each(|until| *until = 0);
        self.ha.manager_dead.iter_mut().for_each(|dead| *dead = false);
        if let Some((z, _)) = self.ha.zombie {
            if self.up(z) && z != self.primary {
                self.crash(z, false);
                self.servers[z].restart_at = Some(self.t);
            }
        }
        self.ha.zombie = None;
    }

    /// The lease's deadline, as every call checks it after its claim (`lease::deadline_holds`):
    /// `lease_ms` after the last 200's request was sent, on the boot clock. A new process has
    /// none until its first 200.
    pub(super) fn lease_deadline_holds(&self, i: usize) -> bool {
        let lease_ms = self.cfg.lease_ms;
        if lease_ms == 0 {
            return true;
        }
        let Some(mem) = self.servers[i].mem.as_ref() else { return false };
        let deadline = mem.lease.judge.deadline_ms(lease_ms);
        deadline.is_some_and(|deadline| lease::deadline_holds(deadline, self.boot_ms()))
    }

    /// The lease's promise, for a claim of `server` that issued: an old primary left running
    /// (its manager dead, or its machine paused and woken) issues nothing once another server
    /// has been promoted.
    pub(super) fn lease_promise_kept(&mut self, server: usize) {
        if self.zombie() != Some(server) {
            return;
        }
        let message = format!(
            "server {server}, left running after its standby's promotion (its HA manager dead or its machine \
             paused), issued an ID with the lease on: lease_ms {} ms, ttl {} ms, loop_wait {} ms",
            self.cfg.lease_ms, self.cfg.ttl_ms, self.cfg.loop_wait_ms
        );
        self.violate("lease", message);
    }
}
