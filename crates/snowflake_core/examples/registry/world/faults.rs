//! The faults a seed draws, and what each does to the servers and the registry.

use super::*;

#[derive(Clone, Copy, Debug)]
pub(super) enum Fault {
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

impl World {
    pub(super) fn start(&mut self, i: usize) {
        let incarnation = self.rng.next_u64();
        let server = &mut self.servers[i];
        server.me.incarnation = incarnation;
        server.up = true;
        server.restart_at = None;
        server.state = [ShardState::default(); SHARDS];
        trace!(self, "server {i} starts (incarnation {incarnation})");
    }

    pub(super) fn crash(&mut self, i: usize) {
        let server = &mut self.servers[i];
        server.up = false;
        server.state = [ShardState::default(); SHARDS];
    }

    /// A clean stop: each claim's last ceiling is in its mark already; the claims released.
    pub(super) fn clean_stop(&mut self, i: usize) {
        for shard in self.servers[i].shards.clone() {
            if let Some(held) = self.servers[i].state[shard].held {
                let _ = self.ask(i, shard, Request::Release { revision: held.revision });
            }
        }
        self.crash(i);
    }

    /// A new server from a copy of `i`'s data directory as it was `lag_ms` ago.
    pub(super) fn copy_of(&mut self, i: usize, lag_ms: u64, me: Holder) -> usize {
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

    pub(super) fn apply(&mut self, fault: Fault) {
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
}

/// The faults of a seed, drawn on a stream of their own.
pub(super) fn schedule(seed: u64) -> Vec<(i64, Fault)> {
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
