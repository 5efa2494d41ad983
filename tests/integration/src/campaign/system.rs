//! The system under test and what the nemesis does to it. The pair: a primary and a
//! streaming hot standby, synchronous or not; the second server: other shards. Every server
//! runs on a clock faked with libfaketime (the group's offset), and every server's log is
//! kept, also of those a failover replaced.

use super::clients::APP_ROLE;
use super::schedule::{BadStart, BeforePromotion, Group, Schedule, LARGER_LEAD_MS, POWER_LOSS_CLOCK_HOLD};
use super::shared::{Endpoint, Shared, MOVABLE_SHARDS, PAIR_SHARDS, SECOND_SHARDS};
use crate::cluster::{apply_settings, pg_upgrade, Cluster, Disk};
use crate::faults::FakeClock;
use crate::ha::{Answer, HaStandIn};
use crate::install::{major_of, pg_bin_dir};
use crate::pair::{Member, Pair, ReplayWatch};
use crate::process::{wait_for, wait_until};
use crate::queries::{column, value};
use crate::registry::Registry;
use postgres::Client;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Settings of every server. Calls may wait 2 s for the clock (the first after a promotion
/// wait `reserve_ms + max_clock_skew_ms`, on a loaded machine); prepared transactions are on.
const SETTINGS: [&str; 5] = [
    "max_prepared_transactions = 30",
    "restart_after_crash = on",
    "snowflake_id.max_wait_ms = 2s",
    "wal_keep_size = '512MB'",
    "log_line_prefix = '%m [%p] '",
];

/// What every server's data directory lies on: a disk that can lose power when LazyFS is built
/// (else the power losses are kill -9 alone: `lose_power`).
fn disk() -> Disk {
    if crate::power_loss::available() {
        Disk::PowerLoss
    } else {
        Disk::Plain
    }
}

/// The lease of the pair's servers (`snowflake_id.lease_ms`): each asks a stand-in HA manager
/// of its own. Well above the worker's asking interval (a fifth of it) on a loaded machine.
pub const LEASE_MS: u64 = 3_000;
/// How long after its HA manager died a primary's standby is promoted: the lease and a margin,
/// as an HA manager's ttl is kept above the lease (docs/high-availability.md).
const MANAGER_TTL: Duration = Duration::from_millis(LEASE_MS + 2_000);
/// How long the old primary runs beside the promoted one, half of the pair's writers on it: past
/// the promotion bound (2.75 s, 5.75 s with the larger lead), so that without the lease the two
/// would issue the same milliseconds of the same shards.
const SPLIT_BRAIN: Duration = Duration::from_secs(8);
/// With the registry (`Schedule::registry`): the claims' lease, the shortest the setting
/// allows, so that a server restarted after a crash (a new postmaster, which must wait out its
/// old claim) issues again within seconds; and how far ahead the marks are recorded, below the
/// longest outage the schedule draws (8 s), so that an outage reaches them.
const REGISTRY_TTL_MS: u64 = 2_000;
const REGISTRY_RESERVE_MS: u64 = 3_000;
/// The registry's keys.
pub const REGISTRY_PREFIX: &str = "/snowflake_id/campaign/";

/// How much further ahead of its clock than its lead bound a server may issue with the registry
/// on: a server that takes a shard (after a crash restart, a move, a claim stolen and given
/// back) resumes above the mark its last holder recorded, up to `REGISTRY_RESERVE_MS` ahead of
/// that holder's ceiling (itself up to the larger lead and `reserve_ms` ahead of its clock),
/// and that holder's clock may have been off by the schedule's largest step; it keeps that lead
/// until its clock catches up (docs/registry.md). The lead check allows that much more.
pub fn registry_kept_lead_ms(schedule: &Schedule) -> i64 {
    (REGISTRY_RESERVE_MS + super::schedule::DEFAULT_RESERVE_MS) as i64
        + LARGER_LEAD_MS
        + schedule.largest_step_ms()
}

/// How long the pair's standby may replay nothing while its primary writes before the harness
/// rebuilds it (`rebuild_standby_if_stuck`): far above any lag seen on a loaded machine
/// (recoveries of 75 s under three campaigns), so that only a standby that will never move is.
const STUCK_REPLAY: Duration = Duration::from_secs(120);

pub struct Server {
    pub name: String,
    pub cluster: Cluster,
    pub clock: FakeClock,
    /// The pair's servers: the stand-in HA manager its lease asks (always "leader" but when its
    /// death is the fault).
    pub ha: Option<HaStandIn>,
}

impl Member for Server {
    fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    fn cluster_mut(&mut self) -> &mut Cluster {
        &mut self.cluster
    }

    /// Starts it (stopped) on its clock, and waits until it accepts connections.
    fn start(&mut self) {
        if let Err(log) = self.try_start() {
            panic!("the server did not start\n--- server log ---\n{log}");
        }
        self.cluster.wait_until_accepting();
    }
}

impl Server {
    fn endpoint(&self) -> Endpoint {
        Endpoint { name: self.name.clone(), config: self.cluster.config() }
    }

    /// Starts it (stopped) on its clock; on a refusal, the server log.
    pub fn try_start(&mut self) -> Result<(), String> {
        let _steady = super::shared::clocks_steady();
        self.clock.try_start(&mut self.cluster)
    }
}

pub struct System {
    shared: Arc<Shared>,
    synchronous: bool,
    larger_lead_on_standby: bool,
    second_without_wal_records: bool,
    /// The pair: its primary issues the pair's shards.
    pub pair: Pair<Server>,
    pub second: Server,
    /// Servers of the pair made so far, for their names.
    built: u32,
    /// Which shards each group issues (its fence).
    pub shards: [Vec<i32>; 2],
    /// The logs of servers a failover replaced: (name, log).
    pub old_logs: Vec<(String, String)>,
    /// The `bin` folder of the next major, for the pg_upgrade of the second server.
    upgrade_bin: Option<PathBuf>,
    /// Whether the pair's standby still replays (`rebuild_standby_if_stuck`).
    replay_watch: ReplayWatch,
    /// The registry every server claims its shards from, with `Schedule::registry`: shared
    /// with the nemesis's environment lane, which takes it down while the process lane holds
    /// the system.
    pub registry: Option<Arc<Mutex<Registry>>>,
}

/// `snowflake_id.shards` for a list of shards.
fn fence(shards: &[i32]) -> String {
    if shards.is_empty() {
        return "none".into();
    }
    shards.iter().map(|shard| shard.to_string()).collect::<Vec<_>>().join(",")
}

/// The table of a shard: IDs from the DEFAULT, no unique index (a duplicate would be stored
/// and found), the op's tag.
fn create_table(client: &mut Client, shard: i32) {
    client
        .batch_execute(&format!(
            "CREATE TABLE s{shard} (id bigint NOT NULL DEFAULT snowflake_nextval({shard}), tag bigint NOT NULL);
             CREATE INDEX ON s{shard} (id);
             GRANT SELECT, INSERT ON s{shard} TO {APP_ROLE};"
        ))
        .unwrap();
}

impl System {
    pub fn start(shared: Arc<Shared>, schedule: &Schedule, upgrade_bin: Option<PathBuf>) -> System {
        let shards = [PAIR_SHARDS.to_vec(), SECOND_SHARDS.to_vec()];
        let registry = schedule.registry.then(|| Registry::start("campaign"));
        let registry_url = registry.as_ref().map(Registry::url);
        let url = registry_url.as_deref();
        let mut primary =
            new_server(&shared, Group::Pair, "pair-1", &server_settings(&shards[0], false, url), None);
        let second_settings = server_settings(&shards[1], schedule.second_without_wal_records, url);
        let mut second = new_server(&shared, Group::Second, "second", &second_settings, None);
        for (server, group) in [(&mut primary, Group::Pair), (&mut second, Group::Second)] {
            server.start();
            let mut client = server.cluster.connect();
            client
                .batch_execute(&format!(
                    "CREATE EXTENSION snowflake_id; CREATE ROLE {APP_ROLE} LOGIN;
                     GRANT EXECUTE ON FUNCTION snowflake_nextvals(integer, integer) TO {APP_ROLE};"
                ))
                .unwrap();
            for &shard in &shards[group.index()] {
                create_table(&mut client, shard);
            }
        }
        let mut system = System {
            shared: shared.clone(),
            synchronous: schedule.synchronous,
            larger_lead_on_standby: schedule.larger_lead_on_standby,
            second_without_wal_records: schedule.second_without_wal_records,
            pair: Pair { standby: new_standby(&shared, &primary, "pair-2"), primary },
            second,
            built: 2,
            shards,
            old_logs: Vec::new(),
            upgrade_bin,
            replay_watch: ReplayWatch::new(STUCK_REPLAY),
            registry: registry.map(|registry| Arc::new(Mutex::new(registry))),
        };
        system.configure_standby();
        let mut directory = shared.directory.write().unwrap();
        directory.primary = [Some(system.pair.primary.endpoint()), Some(system.second.endpoint())];
        directory.home.extend(PAIR_SHARDS.map(|shard| (shard, Group::Pair)));
        directory.home.extend(SECOND_SHARDS.map(|shard| (shard, Group::Second)));
        drop(directory);
        system
    }

    /// The server that accepts writes for `group`.
    pub fn server(&mut self, group: Group) -> &mut Server {
        match group {
            Group::Pair => &mut self.pair.primary,
            Group::Second => &mut self.second,
        }
    }

    /// The settings the standby differs in, and synchronous replication to it.
    fn configure_standby(&mut self) {
        if self.larger_lead_on_standby {
            let mut client = self.pair.standby.cluster.wait_until_accepting();
            apply_settings(
                &mut client,
                &[("snowflake_id.max_lead_ms", &format!("{}s", LARGER_LEAD_MS / 1000))],
            );
        }
        if self.synchronous {
            let mut client = self.pair.primary.cluster.connect();
            apply_settings(&mut client, &[("synchronous_standby_names", "*")]);
        }
    }

    /// Marks `group` unavailable to the clients (before stopping its primary) or available.
    fn publish(&mut self, group: Group, available: bool) {
        let endpoint = available.then(|| self.server(group).endpoint());
        self.shared.directory.write().unwrap().primary[group.index()] = endpoint;
    }

    pub fn kill_postmaster(&mut self, group: Group) {
        self.server(group).cluster.kill_postmaster();
        self.server(group).start();
    }

    /// Starts the standby again if it stopped by itself: a write that fails while it replays
    /// (the record of a ceiling, as PostgreSQL's own files) stops its startup process, and
    /// PostgreSQL then shuts the standby down; an operator starts it once the disk is fixed
    /// (until then a synchronous primary's commits wait). The fault's lane does it when the
    /// fault ends; the system does it too before what needs the standby: a failover (which
    /// promotes it), its restart, a move's freeze (whose writers' synchronous commits wait for
    /// it), as the other lane may hold the system when the fault ends (the 18 long run, seed
    /// 7475: a failover promoted a standby stopped 6 s before).
    pub fn revive_standby(&mut self) {
        self.pair.start_standby_if_stopped();
    }

    /// The standby's promotion, as an HA manager does it (`Pair::promote_until_promoted`: a
    /// standby that stops during its promotion is started again and promoted again; the 15 long
    /// run with seed 3550, 372 s: a failing fsync of the standby's replay, drawn as the failover
    /// began, PANICked the startup process right after the promotion request). Each repeat is
    /// said in the summary, so that a run whose failovers needed it is seen. Returns where its
    /// WAL switched from the old primary's.
    fn promote_standby(&mut self) -> u64 {
        let promoted = self.pair.promote_until_promoted();
        for why in promoted.stopped {
            let said = format!(
                "{:.1} s: {} stopped during its promotion and was promoted again: {why}",
                self.shared.now_ms() as f64 / 1000.0,
                self.pair.standby.name,
            );
            println!("campaign: promotion repeated: {said}");
            self.shared.repeated_promotions.lock().unwrap().push(said);
        }
        promoted.switched_at
    }

    /// `Fault::PowerLoss`. With the clock behind, the issued IDs lie ahead of it: only what the
    /// disk kept of the reservation keeps the shards above them.
    pub fn power_loss(&mut self, group: Group, clock_behind_ms: i64) {
        lose_power(&mut self.server(group).cluster);
        if clock_behind_ms != 0 {
            self.shared.set_offset(group, -clock_behind_ms);
        }
        self.server(group).start();
        if clock_behind_ms != 0 {
            std::thread::sleep(POWER_LOSS_CLOCK_HOLD);
            self.shared.set_offset(group, 0);
        }
    }

    /// `pg_ctl stop -m mode` (fast or immediate), then a start.
    pub fn restart(&mut self, group: Group, mode: &str) {
        self.server(group).cluster.stop(mode);
        self.server(group).start();
    }

    /// SIGKILL of the reservation worker: PostgreSQL resets every process of the server.
    pub fn kill_worker(&mut self, group: Group) {
        let cluster = &self.server(group).cluster;
        let pid = cluster.reservation_worker_pid().expect("no reservation worker runs");
        cluster.kill_backend(pid);
    }

    pub fn term_worker(&mut self, group: Group) {
        self.server(group).cluster.restart_reservation_worker();
    }

    /// SIGKILL of a writer's backend (of any backend when no writer is connected).
    pub fn kill_backend(&mut self, group: Group, choice: usize) {
        let cluster = &self.server(group).cluster;
        let mut client = cluster.connect();
        let pids: Vec<i32> = column(
            &mut client,
            "SELECT pid FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()
             ORDER BY usename <> $1, pid",
            &[&APP_ROLE],
        );
        let pid = if pids.is_empty() {
            value(&mut client, "SELECT pg_backend_pid()", &[])
        } else {
            pids[choice % pids.len()]
        };
        drop(client);
        cluster.kill_backend(pid as u32);
    }

    pub fn restart_standby(&mut self) {
        self.revive_standby();
        self.pair.standby.cluster.stop("fast");
        self.pair.standby.start();
    }

    /// Kills the pair's primary, promotes the standby (after doing `before` to it), and
    /// rebuilds the old primary as the new standby from a base backup.
    pub fn failover(&mut self, before: BeforePromotion) {
        self.revive_standby();
        // Taken where the standby stops receiving, kept to the end (see pair_clock_held).
        let mut _pair_clock_held = None;
        // A clock run ahead that the standby could not be seen to replay under is set back only
        // after the promotion (see `pair_clock_ahead_then_back`).
        let mut set_back_after_promotion = false;
        match before {
            BeforePromotion::Nothing => self.kill_primary(),
            BeforePromotion::ManagerDied => {
                // Nothing answers for the primary any more; it runs on, its clients with it,
                // and must stop issuing within the lease, before the promotion below.
                self.pair
                    .primary
                    .ha
                    .as_ref()
                    .expect("the pair's servers have a stand-in")
                    .answer(Answer::Gone);
                std::thread::sleep(MANAGER_TTL);
            }
            // Down while the primary goes on issuing (and, when replication is asynchronous,
            // committing) for a moment, then the primary dies, and the standby comes back with
            // only what it had: its restartpoint, its record.
            BeforePromotion::RestartStandby => {
                _pair_clock_held = Some(self.primary_dies_while_standby_down(false))
            }
            // Its disk keeps only what it fsynced: the WAL it received and had flushed (what it
            // told the primary), the files of its last restartpoint.
            BeforePromotion::StandbyLostPower => {
                _pair_clock_held = Some(self.primary_dies_while_standby_down(true))
            }
            BeforePromotion::AheadThenStandbyRestarted { ms, hold } => {
                // The primary issues ahead while the standby replays its ceilings, reading
                // its own clock ahead too; set back; then the standby's restart and the
                // promotion must keep what it read (F1's guard).
                set_back_after_promotion = !self.pair_clock_ahead_then_back(ms, hold);
                _pair_clock_held = Some(self.primary_dies_while_standby_down(false));
            }
            BeforePromotion::AheadThenSetBack { ms, hold } => {
                // The primary issues ahead, the standby replaying its ceilings; the clock set
                // back, the primary dies at once, its last IDs ahead of both clocks.
                set_back_after_promotion = !self.pair_clock_ahead_then_back(ms, hold);
                self.kill_primary();
            }
            BeforePromotion::StandbyCutOff { hold, .. } => {
                // The standby keeps running and serving, its WAL receiver gone: it replays
                // nothing the primary writes meanwhile. The primary dies at the end of it.
                // Up first (a fault may have it restarting), so that the clock is held from
                // the moment it is cut off, not while it starts.
                self.pair.standby.cluster.wait_until_accepting();
                _pair_clock_held = Some(super::shared::pair_clock_held());
                self.pair.cut_off();
                std::thread::sleep(hold);
                self.kill_primary();
            }
            BeforePromotion::KillStandbyBackend => {
                let mut client = self.pair.standby.cluster.wait_until_accepting();
                let pid: i32 = value(&mut client, "SELECT pg_backend_pid()", &[]);
                self.pair.standby.cluster.kill_backend(pid as u32);
                self.kill_primary();
            }
        }
        // Again: the environment lane's faults overlap a failover, and its standby may have
        // stopped by itself since the start (the 18 long run, seed 1738: a replay fsync fault
        // queued behind a standby restart took effect during the failover's wait for the
        // standby's replay, and the promotion found no server). Started again, it replays what
        // it has and is promoted, as an HA manager would do it.
        self.revive_standby();
        let switched_at = if let BeforePromotion::StandbyCutOff { power_lost_at_its_end: true, .. } = before {
            self.pair.promote_losing_power_at_its_end()
        } else {
            self.promote_standby()
        };
        let mut client = self.pair.standby.cluster.wait_until_accepting();
        let ended = self.shared.directory.read().unwrap().epoch[Group::Pair.index()];
        self.shared.switchpoints.lock().unwrap().insert(ended, switched_at);
        // Its copied settings name itself as a synchronous standby: none until it has one.
        apply_settings(&mut client, &[("synchronous_standby_names", "")]);
        if let BeforePromotion::StandbyCutOff { .. } = before {
            // Its emptied primary_conninfo would be copied into the next standby.
            // One statement each: ALTER SYSTEM refuses to run inside a transaction block.
            client.batch_execute("ALTER SYSTEM RESET primary_conninfo").unwrap();
            client.batch_execute("SELECT pg_reload_conf()").unwrap();
        }
        drop(client);
        self.pair.swap_roles();
        // The old primary's prepared transactions came over without their hold on the
        // horizon (its snowflake_id.prepared is its own): finished before anyone reads here,
        // as docs/reading-in-order.md says. Their clients lost their connections with the old
        // primary, so they are "maybe" in the history.
        self.resolve_prepared(Group::Pair, None, Duration::ZERO);
        self.shared.directory.write().unwrap().epoch[Group::Pair.index()] = ended + 1;
        self.publish(Group::Pair, true);
        if before == BeforePromotion::ManagerDied {
            // The split brain: both primaries run, half of the writers on the old one, until
            // the old one is killed (as Patroni does once it is back and finds another leader).
            self.shared.directory.write().unwrap().split = Some((self.pair.standby.endpoint(), ended));
            std::thread::sleep(SPLIT_BRAIN);
            self.shared.directory.write().unwrap().split = None;
            self.pair.standby.cluster.kill_postmaster();
        }
        self.replace_standby();
        drop(_pair_clock_held);
        if set_back_after_promotion {
            self.shared.set_offset(Group::Pair, 0);
        }
    }

    /// The pair's clock run `ms` ahead for `hold`, then set back if the standby has replayed
    /// the primary's WAL up to where it is now, waiting up to 30 s; whether it was set back.
    /// Only then did the standby read its clock ahead as it replayed the ceilings written
    /// meanwhile, and the promotion is documented to cover a clock set back only then (README,
    /// guarantee 3): an asynchronous standby lagging by more than the time ahead (seconds, on a
    /// loaded machine: seed 5146 on 18) saw none of it, and a set back before its promotion
    /// would repeat IDs by design. Not caught up, the clock stays ahead through the promotion,
    /// which then covers it.
    fn pair_clock_ahead_then_back(&self, ms: i64, hold: Duration) -> bool {
        self.shared.set_offset(Group::Pair, ms);
        std::thread::sleep(hold);
        let replayed = self.pair.replays_within(Duration::from_secs(30));
        if replayed {
            self.shared.set_offset(Group::Pair, 0);
        }
        replayed
    }

    /// The standby stopped (or its power lost), the primary killed 2 s later, the standby
    /// started again; the pair's clock held from the moment the standby stopped receiving.
    fn primary_dies_while_standby_down(&mut self, power_lost: bool) -> MutexGuard<'static, ()> {
        let held = super::shared::pair_clock_held();
        if power_lost {
            lose_power(&mut self.pair.standby.cluster);
        } else {
            self.pair.standby.cluster.stop("fast");
        }
        std::thread::sleep(Duration::from_secs(2));
        self.kill_primary();
        self.pair.standby.start();
        held
    }

    /// Rebuilds the pair's standby from a new base backup when its replay has stood still for
    /// `STUCK_REPLAY` while its primary wrote past it, as an operator would once they saw it.
    /// The 15 long run (seed 1614) had one: a standby on LazyFS read back WAL it had received
    /// and flushed as zeros, so PostgreSQL's startup process asked the primary for it again and
    /// ended each new WAL receiver at once, for ever, and the synchronous primary's commits
    /// (a move's among them) waited with it until the run was stopped. Not a finding (neither
    /// the extension's nor one the campaign can tell from the disk's); the summary counts it.
    /// A standby down or not answering is left to the faults that stopped it.
    pub fn rebuild_standby_if_stuck(&mut self) {
        let Some(stuck) = self.replay_watch.stuck(&self.pair) else { return };
        let said = format!(
            "{:.1} s: {} replayed nothing for {} s, at {:X}/{:X} while its primary had written to {:X}/{:X}",
            self.shared.now_ms() as f64 / 1000.0,
            self.pair.standby.name,
            STUCK_REPLAY.as_secs(),
            stuck.replayed >> 32,
            stuck.replayed & 0xFFFF_FFFF,
            stuck.written >> 32,
            stuck.written & 0xFFFF_FFFF
        );
        println!("campaign: standby rebuilt: {said}");
        self.shared.rebuilt_standbys.lock().unwrap().push(said);
        self.replace_standby();
    }

    /// A new standby of the pair's primary, from a base backup, in place of the current one
    /// (retired: its log kept, it stopped).
    fn replace_standby(&mut self) {
        self.built += 1;
        let name = format!("pair-{}", self.built);
        let old = self.pair.replace_standby(new_standby(&self.shared, &self.pair.primary, &name));
        self.retire(Group::Pair, old);
        self.configure_standby();
    }

    /// `Fault::Copy`'s copy, started on the pair's clock with an HA stand-in of its own; the
    /// pair's writers send every other statement to it until `end_copy`.
    pub fn start_copy(&mut self) -> Server {
        self.built += 1;
        let name = format!("copy-{}", self.built);
        let ha = HaStandIn::start();
        let cluster = Cluster::builder(&format!("campaign-{name}"))
            .copy_of(&self.pair.primary.cluster)
            .settings(&[&ha.lease_url_setting()])
            .create();
        let clock = FakeClock::of(&cluster);
        self.shared.add_clock(Group::Pair, &name, clock.offset_file().to_path_buf(), 0);
        let mut copy = Server { name, cluster, clock, ha: Some(ha) };
        copy.start();
        // Its copied settings name the pair's standby as synchronous (ALTER SYSTEM, over the
        // builder's): none, or its commits would wait for ever.
        apply_settings(&mut copy.cluster.connect(), &[("synchronous_standby_names", "")]);
        self.shared.directory.write().unwrap().copy = Some(copy.endpoint());
        copy
    }

    /// The copy killed, as the operator who finds it would, and retired; what it wrote stays in
    /// its data directory (`checker`: rows committed on a copy are not the pair's).
    pub fn end_copy(&mut self, mut copy: Server) {
        self.shared.directory.write().unwrap().copy = None;
        copy.cluster.kill_postmaster();
        self.retire(Group::Pair, copy);
    }

    /// The pair's primary killed, its clients told there is none until a promotion.
    fn kill_primary(&mut self) {
        self.publish(Group::Pair, false);
        self.pair.primary.cluster.kill_postmaster();
    }

    /// Keeps a replaced server's log and stops it.
    fn retire(&mut self, group: Group, server: Server) {
        self.shared.remove_clock(group, server.clock.offset_file());
        self.old_logs.push((server.name.clone(), server.cluster.log()));
    }

    /// Moves a shard to the other group: freeze, fence the source, copy the rows, advance
    /// the target above everything the source issued, open the target's fence, route the
    /// clients there, drop the source's table (several-servers.md, "A move never has two
    /// writers"; the kit's freeze is the clients' lock here).
    /// With `target_lost_power`, the target loses power once the advance returned, and starts
    /// again before the clients come: the advance must have recorded what it reserved.
    pub fn move_shard(&mut self, choice: usize, target_lost_power: bool) {
        let shard = MOVABLE_SHARDS[choice % MOVABLE_SHARDS.len()];
        let from = self.shared.directory.read().unwrap().home[&shard];
        let to = from.other();
        let shared = self.shared.clone();
        // The writes in flight may wait for a synchronous standby that a failed write of its
        // replay stopped, which the fault's lane cannot start again while this move holds the
        // system (the long run on 15, seed 5030, waited for ever): an operator waiting for the
        // freeze would start it, and so does the move.
        let _freeze = shared.freeze(shard, || self.revive_standby());
        self.shards[from.index()].retain(|&s| s != shard);
        self.apply_fence(from);
        let source_clock_ms = shared.offset(from) + shared.skew_of(&self.server(from).name);
        let (fenced_at_ms, fenced_clock_unix_ms) =
            (shared.now_ms(), crate::engine::unix_ms() + source_clock_ms);
        std::thread::sleep(super::shared::FENCE_REACTION);
        let mut source = self.server(from).cluster.connect();
        let last_id_at_fence: Option<i64> = source
            .query_opt("SELECT last_id FROM snowflake_stats() WHERE shard = $1", &[&shard])
            .unwrap()
            .and_then(|row| row.get(0));
        self.resolve_prepared(from, Some(shard), Duration::ZERO);
        let rows = source.query(&format!("SELECT id, tag FROM s{shard}"), &[]).unwrap();
        let (ids, tags): (Vec<i64>, Vec<i64>) =
            rows.iter().map(|row| (row.get::<_, i64>(0), row.get::<_, i64>(1))).unzip();
        // Above everything the source could have issued for the shard: its stored IDs, and
        // the IDs it handed out with nothing stored (bare calls, rollbacks), also before its
        // last restart or promotion, all below its durable reservation. (Its
        // `snowflake_stats().last_id` forgets those of before a restart.)
        let ceiling: i64 = value(
            &mut source,
            "SELECT snowflake_compose(reserved_until, $1, 0) FROM snowflake_status()",
            &[&shard],
        );
        let highest = ids.iter().copied().chain([ceiling]).max().unwrap_or(0);
        let mut target = self.server(to).cluster.connect();
        // The target may still hold the shard's table from an earlier move away from it whose
        // DROP a failover lost (asynchronous replication: the promoted standby had not
        // received it; the 15 long run with seed 3550 stopped here on 42P07, "relation
        // already exists"). Every row it holds was copied by that move, so it goes.
        target.batch_execute(&format!("DROP TABLE IF EXISTS s{shard}")).unwrap();
        create_table(&mut target, shard);
        target
            .execute(
                &format!("INSERT INTO s{shard} (id, tag) SELECT * FROM unnest($1::bigint[], $2::bigint[])"),
                &[&ids, &tags],
            )
            .unwrap();
        self.shards[to.index()].push(shard);
        self.apply_fence(to);
        shared.moves.lock().unwrap().push(super::shared::Move {
            shard,
            from,
            to,
            fenced_at_ms,
            fenced_clock_unix_ms,
            opened_at_ms: shared.now_ms(),
            last_id_at_fence,
        });
        // The source may have run ahead of the target's clock: the advance is refused
        // (55000) until the target's clock is near enough.
        let deadline = Instant::now() + Duration::from_secs(300);
        while let Err(error) = target.query_one("SELECT snowflake_advance($1, $2)", &[&shard, &highest]) {
            assert!(
                Instant::now() < deadline,
                "snowflake_advance({shard}, {highest}) refused for 5 minutes: {error}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        if to == Group::Pair {
            // The copy must be on the target's standby before the source's table goes: with
            // asynchronous replication a failover right after the move would lose it, and the
            // rows with it (several-servers.md's move has no standbys to wait for).
            let lsn: String = value(&mut target, "SELECT pg_current_wal_lsn()::text", &[]);
            // Meanwhile a standby whose replay stands still is rebuilt, as the janitor would
            // (which cannot while the move holds the system): the 15 long run with seed 3550
            // had the move wait its 5 minutes on one, rebuilt only after the move had failed.
            wait_for("the standby replayed the moved rows", Duration::from_secs(300), || {
                self.revive_standby();
                self.pair.standby.cluster.wait_until_accepting();
                let replayed = self.pair.standby.cluster.replayed_within(&lsn, Duration::from_secs(5));
                if !replayed {
                    self.rebuild_standby_if_stuck();
                }
                replayed.then_some(())
            });
        }
        if target_lost_power {
            drop(target);
            lose_power(&mut self.server(to).cluster);
            self.server(to).start();
        }
        self.shared.directory.write().unwrap().home.insert(shard, to);
        source.batch_execute(&format!("DROP TABLE s{shard}")).unwrap();
    }

    /// Sets `group`'s fence to its shards, on every server of the group (ALTER SYSTEM is not
    /// replicated; a standby promoted later must have it too), and waits until each server's
    /// reservation worker has applied it (from then on no statement issues a fenced shard).
    fn apply_fence(&mut self, group: Group) {
        let value = fence(&self.shards[group.index()]);
        if group == Group::Pair {
            let mut client = self.pair.standby.cluster.wait_until_accepting();
            apply_settings(&mut client, &[("snowflake_id.shards", &value)]);
        }
        let cluster = &self.server(group).cluster;
        // The worker logs each fence it applies (the setting as written).
        let applied = "snowflake_id: the shard fence is now";
        let before = cluster.log().matches(applied).count();
        let mut client = cluster.wait_until_accepting();
        apply_settings(&mut client, &[("snowflake_id.shards", &value)]);
        wait_until("the reservation worker applied the fence", || {
            cluster.log().matches(applied).count() > before
        });
    }

    /// Commits the prepared transactions of `group`'s primary (of `shard` only, if given)
    /// older than `age`: those whose client lost its connection after PREPARE. Their rows are
    /// "maybe" in the history already.
    pub fn resolve_prepared(&mut self, group: Group, shard: Option<i32>, age: Duration) {
        let pattern = shard.map_or("c-%".to_string(), |shard| format!("c-{shard}-%"));
        let mut client = self.server(group).cluster.wait_until_accepting();
        let gids: Vec<String> = column(
            &mut client,
            // Any age, when none is given: `prepared` is the old primary's clock, which may read
            // ahead of this one's after a clock fault.
            "SELECT gid FROM pg_prepared_xacts
             WHERE gid LIKE $1 AND ($2::float8 = 0 OR prepared < now() - make_interval(secs => $2::float8))",
            &[&pattern, &age.as_secs_f64()],
        );
        for gid in gids {
            // The writer may have committed it meanwhile.
            let _ = client.batch_execute(&format!("COMMIT PREPARED '{gid}'"));
        }
    }

    /// A start that must be refused: the server stopped, something changed, started (it
    /// must not start), the change undone, started again. `Err` if it started.
    pub fn refused_start(&mut self, group: Group, what: BadStart) -> Result<(), String> {
        self.publish(group, false);
        let server = self.server(group);
        server.cluster.stop("fast");
        let file = match what {
            BadStart::ChangedLayout => "postgresql.conf",
            BadStart::DamagedRecord => "snowflake_id.reservation",
        };
        let original = std::fs::read(server.cluster.data_dir().join(file)).unwrap();
        let changed = match what {
            BadStart::ChangedLayout => [&original[..], b"snowflake_id.shard_bits = 11\n"].concat(),
            BadStart::DamagedRecord => damage(&original),
        };
        server.cluster.write_data_file(file, &changed);
        let log_before = server.cluster.log().len();
        let started = server.try_start();
        if started.is_ok() {
            server.cluster.stop("immediate");
        }
        // Refused for the reason the fault is about: a damaged record by its checksum.
        let log = server.cluster.log();
        let refused_by_checksum = log.get(log_before..).is_some_and(|new| new.contains("checksum mismatch"));
        server.cluster.write_data_file(file, &original);
        server.start();
        self.publish(group, true);
        match started {
            Ok(()) => Err(format!("the server started with {what:?}")),
            Err(_) if what == BadStart::DamagedRecord && !refused_by_checksum => {
                Err("the start with a damaged record was refused, but not by the record's checksum".into())
            }
            Err(_) => Ok(()),
        }
    }

    /// `Fault::Upgrade` by the documented procedure: prepared transactions finished (pg_upgrade
    /// refuses them), stopped, pg_upgrade into a new cluster (copy mode), the old reservation
    /// and layout files copied into it, started in its place. `Err` if the start of a
    /// `forgotten` record (on pg_upgrade's estimate of the reservation) was not refused.
    pub fn upgrade_second(&mut self, forgotten: bool) -> Result<(), String> {
        let bin = self.upgrade_bin.clone().expect("a schedule with pg_upgrade has its next major");
        self.publish(Group::Second, false);
        // Stopped first: the sessions still in a transaction end (the clients see no server
        // to reconnect to until the new one is published).
        self.second.cluster.stop("fast");
        self.second.start();
        self.resolve_prepared(Group::Second, None, Duration::ZERO);
        if major_of(self.second.cluster.bin_dir()) == 15 {
            // See major_upgrade.rs: Debian's 15 writes a column option newer majors'
            // pg_upgrade refuses to restore.
            self.second
                .cluster
                .connect()
                .batch_execute("UPDATE pg_attribute SET attoptions = NULL WHERE attrelid >= 16384 AND attoptions IS NOT NULL")
                .unwrap();
        }
        self.second.cluster.stop("fast");
        let registry_url = self.registry.as_ref().map(|registry| registry.lock().unwrap().url());
        let settings = server_settings(
            &self.shards[Group::Second.index()],
            self.second_without_wal_records,
            registry_url.as_deref(),
        );
        let mut upgraded = new_server(&self.shared, Group::Second, "second-upgraded", &settings, Some(&bin));
        pg_upgrade(&self.second.cluster, &upgraded.cluster, &[]);
        let from = self.second.cluster.data_dir().to_path_buf();
        let copy = |upgraded: &Server, file: &str| {
            // Written, not copied: a copy keeps the old file's mode. Fsynced, as cp and sync.
            upgraded.cluster.write_data_file(file, &std::fs::read(from.join(file)).unwrap());
        };
        copy(&upgraded, "snowflake_id.layout");
        let mut result = Ok(());
        if forgotten && upgraded.try_start().is_ok() {
            upgraded.cluster.stop("immediate");
            result =
                Err("the cluster made by pg_upgrade started without the old server's reservation record"
                    .into());
        }
        copy(&upgraded, "snowflake_id.reservation");
        upgraded.start();
        let old = std::mem::replace(&mut self.second, upgraded);
        self.retire(Group::Second, old);
        self.publish(Group::Second, true);
        result
    }

    /// Every row each shard holds at the end, on the server that issues it.
    pub fn final_rows(&mut self) -> BTreeMap<i32, Vec<(i64, i64)>> {
        let mut rows = BTreeMap::new();
        for group in Group::ALL {
            let shards = self.shards[group.index()].clone();
            let mut client = self.server(group).cluster.wait_until_accepting();
            for shard in shards {
                let found = client.query(&format!("SELECT id, tag FROM s{shard}"), &[]).unwrap();
                rows.insert(shard, found.iter().map(|row| (row.get(0), row.get(1))).collect());
            }
        }
        rows
    }

    /// The log of every server, those replaced included, and stops them all.
    pub fn shutdown(mut self) -> Vec<(String, String)> {
        let mut logs = std::mem::take(&mut self.old_logs);
        for server in [&self.pair.primary, &self.pair.standby, &self.second] {
            logs.push((server.name.clone(), server.cluster.log()));
        }
        logs
    }
}

/// A power loss of `cluster`, or where LazyFS is not built, a kill -9 (said once per run).
fn lose_power(cluster: &mut Cluster) {
    if disk() == Disk::PowerLoss {
        cluster.lose_power();
    } else {
        static SAID: std::sync::Once = std::sync::Once::new();
        SAID.call_once(|| {
            println!(
                "campaign: LazyFS is not built (scripts/lazyfs-install.sh): power losses are kill -9 alone"
            )
        });
        cluster.kill_postmaster();
    }
}

/// A copy of a reservation record with one digit of its ceiling changed.
fn damage(record: &[u8]) -> Vec<u8> {
    // The digit of the ceiling's tens of seconds, one lower (one higher when it is 0): the
    // line still parses, 10 s off, so only its checksum can refuse it. (A leading digit
    // changed makes a number too large to parse, and the checksum never decides.)
    let mut damaged = record.to_vec();
    let field = b" wal128=";
    if let Some(end) = damaged.windows(field.len()).position(|window| window == field) {
        let at = end - 5;
        damaged[at] = match damaged[at] {
            b'0' => b'1',
            digit => digit - 1,
        };
    }
    damaged
}

/// The settings of a new server issuing `shards`, without WAL records of its reservation when
/// `without_wal_records` (`Schedule::second_without_wal_records`), claiming them from the
/// registry at `registry_url` when given.
fn server_settings(shards: &[i32], without_wal_records: bool, registry_url: Option<&str>) -> Vec<String> {
    let mut settings: Vec<String> = SETTINGS.iter().map(|line| line.to_string()).collect();
    settings.push(format!("snowflake_id.shards = '{}'", fence(shards)));
    if without_wal_records {
        settings.push("snowflake_id.wal_rmgr_id = 0".into());
    }
    if let Some(url) = registry_url {
        settings.extend([
            format!("snowflake_id.registry_url = '{url}'"),
            format!("snowflake_id.registry_prefix = '{REGISTRY_PREFIX}'"),
            format!("snowflake_id.registry_ttl_ms = {REGISTRY_TTL_MS}"),
            format!("snowflake_id.registry_reserve_ms = {REGISTRY_RESERVE_MS}"),
        ]);
    }
    settings
}

/// A new server of `group` (not started), on the group's clock, of the PostgreSQL in `bin` if
/// given (the next major, for pg_upgrade).
fn new_server(shared: &Shared, group: Group, name: &str, settings: &[String], bin: Option<&Path>) -> Server {
    let mut settings = settings.to_vec();
    // The pair runs under an HA manager, with the lease on; the second server under none.
    let ha = (group == Group::Pair).then(HaStandIn::start);
    if let Some(ha) = &ha {
        settings.push(ha.lease_url_setting());
        settings.push(format!("snowflake_id.lease_ms = {LEASE_MS}"));
    }
    let settings: Vec<&str> = settings.iter().map(String::as_str).collect();
    let cluster = Cluster::builder(&format!("campaign-{name}"))
        .disk(disk())
        .bin(bin.unwrap_or(pg_bin_dir()))
        .settings(&settings)
        .create();
    let clock = FakeClock::of(&cluster);
    shared.add_clock(group, name, clock.offset_file().to_path_buf(), 0);
    Server { name: name.to_string(), cluster, clock, ha }
}

/// A standby of `primary` from a base backup, started on the pair's clock, skewed from the
/// primary's by the seed's `pair_skew_ms` (the skew the primary lacks, so that the two always
/// disagree by it). Its copied configuration is the primary's; it asks for no synchronous
/// standby of its own.
fn new_standby(shared: &Shared, primary: &Server, name: &str) -> Server {
    // Its own stand-in: the copied lease_url is the primary's.
    let ha = HaStandIn::start();
    let cluster = Cluster::builder(&format!("campaign-{name}"))
        .standby_of(&primary.cluster)
        .disk(disk())
        .settings(&["synchronous_standby_names = ''", &ha.lease_url_setting()])
        .create();
    let clock = FakeClock::of(&cluster);
    let skew_ms = if shared.skew_of(&primary.name) == 0 { shared.pair_skew_ms } else { 0 };
    shared.add_clock(Group::Pair, name, clock.offset_file().to_path_buf(), skew_ms);
    let mut server = Server { name: name.to_string(), cluster, clock, ha: Some(ha) };
    server.start();
    server
}

#[cfg(test)]
mod tests {
    use super::damage;

    #[test]
    fn a_damaged_record_still_parses_10_s_off() {
        for (ceiling, changed) in
            [(1_764_221_012_345_i64, 1_764_221_002_345_i64), (1_764_221_002_345, 1_764_221_012_345)]
        {
            let line =
                format!("snowflake_id reservation ceiling_unix_ms={ceiling:020} wal128=0 crc32c=0badf00d\n");
            let damaged = String::from_utf8(damage(line.as_bytes())).unwrap();
            assert_eq!(damaged, line.replace(&format!("{ceiling:020}"), &format!("{changed:020}")));
        }
    }
}
