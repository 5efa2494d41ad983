//! The clients: writers issuing and storing IDs in every way an application does, a stray
//! statement that ignores the move's freeze, and one reader per shard paging below
//! `snowflake_horizon()`, all run by the workload engine (`crate::engine`), which records
//! what each saw (the history); none judges it.

use super::schedule::{weighted, Group};
use super::shared::{all_shards, Endpoint, Shared, MOVABLE_SHARDS};
use crate::engine::{self, Paging, Pick, Route, Source, Transaction, Workload, Writer};
use postgres::fallible_iterator::FallibleIterator;
use postgres::Client;
use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, RwLockReadGuard};
use std::thread::{sleep, JoinHandle};
use std::time::{Duration, Instant};

/// The role the writers connect as: not a superuser, granted `snowflake_nextvals` and the
/// tables, as an application's is.
pub const APP_ROLE: &str = "app";

/// The statements a writer picks from, with their weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// One row, its ID from the column's DEFAULT.
    InsertOne,
    /// Several rows in one INSERT, IDs from the DEFAULT.
    InsertMany,
    /// A batch from `snowflake_nextvals`, stored.
    Batch,
    /// `SELECT snowflake_nextval(…)`: acknowledged, never stored.
    Bare,
    /// Two INSERTs with a pause between them.
    LongTransaction,
    Rollback,
    /// An INSERT, a savepoint, an INSERT rolled back to it, another INSERT, COMMIT.
    Savepoint,
    /// PREPARE TRANSACTION, a pause, COMMIT PREPARED.
    Prepared,
    /// The stray statement: bare IDs for seconds, outside the move's freeze.
    Stray,
}

const KINDS: [(usize, Kind); 8] = [
    (20, Kind::InsertOne),
    (14, Kind::InsertMany),
    (10, Kind::Batch),
    (14, Kind::Bare),
    (8, Kind::LongTransaction),
    (8, Kind::Rollback),
    (8, Kind::Savepoint),
    (8, Kind::Prepared),
];

/// One statement or transaction of a campaign's writer, as the client saw it.
pub type Op = engine::Op<Kind>;

/// What the reader of one shard read, in order (`gave_up`: it ran out of time before reaching
/// the last committed row).
pub struct Reads {
    pub shard: i32,
    pub read: engine::Reads,
}

pub struct Clients {
    writers: Vec<JoinHandle<Vec<Op>>>,
    readers: Vec<JoinHandle<Reads>>,
    /// Each shard's highest final ID, once known: a reader stops when its cursor reaches it.
    targets: Arc<Mutex<Option<BTreeMap<i32, i64>>>>,
}

/// Writers: one per shard, plus one more on each of the first two (at least 8 in all), and
/// the stray on the first movable shard.
fn writer_shards() -> Vec<(i32, bool)> {
    let shards = all_shards();
    let mut writers: Vec<(i32, bool)> = shards.iter().map(|&shard| (shard, false)).collect();
    writers.extend(shards.iter().take(2).map(|&shard| (shard, false)));
    writers.push((MOVABLE_SHARDS[0], true));
    writers
}

impl Clients {
    pub fn start(shared: Arc<Shared>, seed: u64) -> Clients {
        let writers = writer_shards()
            .into_iter()
            .enumerate()
            .map(|(number, (shard, stray))| {
                shared.successes.lock().unwrap().insert(number, 0);
                let workload =
                    Writing { shared: shared.clone(), number, shard, stray, group: Cell::new(Group::Pair) };
                let pick = Pick::new(seed.wrapping_mul(1_000).wrapping_add(number as u64));
                std::thread::spawn(move || Writer::new(workload, number, pick).run())
            })
            .collect();
        let targets = Arc::new(Mutex::new(None));
        let readers = all_shards()
            .into_iter()
            .map(|shard| {
                let reading = Reading { shared: shared.clone(), shard, targets: targets.clone() };
                std::thread::spawn(move || {
                    let paging = Paging::BelowHorizon { shard: Some(shard) };
                    let read =
                        engine::read(&reading, &format!("s{shard}"), paging, Duration::from_millis(100));
                    Reads { shard, read }
                })
            })
            .collect();
        Clients { writers, readers, targets }
    }

    /// Stops the writers (set `stop_writing` first) and returns their history, ordered by
    /// start. A writer still stuck after `within` is a finding, and its history is lost.
    pub fn stop_writers(&mut self, shared: &Shared, within: Duration) -> Vec<Op> {
        let deadline = Instant::now() + within;
        let mut ops = Vec::new();
        for (writer, handle) in std::mem::take(&mut self.writers).into_iter().enumerate() {
            while !handle.is_finished() && Instant::now() < deadline {
                sleep(Duration::from_millis(50));
            }
            if handle.is_finished() {
                ops.extend(handle.join().unwrap());
            } else {
                shared.finding(format!(
                    "liveness: writer {writer} still in a statement {} s after the end",
                    within.as_secs()
                ));
            }
        }
        ops.sort_by_key(|op| op.start_ms);
        ops
    }

    /// Tells the readers where each shard ends and waits until they have read up to it (or
    /// until `within`); returns what each read.
    pub fn finish_readers(self, shared: &Shared, ends: BTreeMap<i32, i64>, within: Duration) -> Vec<Reads> {
        *self.targets.lock().unwrap() = Some(ends);
        let deadline = Instant::now() + within;
        while self.readers.iter().any(|reader| !reader.is_finished()) && Instant::now() < deadline {
            sleep(Duration::from_millis(50));
        }
        shared.give_up.store(true, Ordering::Relaxed);
        self.readers.into_iter().map(|reader| reader.join().unwrap()).collect()
    }
}

/// The route to `endpoint`, connecting as `user` with a bounded wait.
fn route_to(endpoint: Endpoint, user: &str, epoch: u32) -> Route {
    let mut config = endpoint.config;
    config.user(user).connect_timeout(Duration::from_secs(10));
    Route { server: endpoint.name, config, epoch }
}

/// What one campaign writer does: the kinds above on its shard (or the stray statement),
/// routed by the directory, each op holding the shard's freeze.
struct Writing {
    shared: Arc<Shared>,
    number: usize,
    shard: i32,
    stray: bool,
    /// The group of the op being run (set by `route`).
    group: Cell<Group>,
}

impl Workload for Writing {
    type Kind = Kind;
    type Hold<'a> = Option<RwLockReadGuard<'a, ()>>;

    fn writing(&self) -> bool {
        self.shared.writing()
    }

    fn origin(&self) -> Instant {
        self.shared.started
    }

    fn kind(&self, pick: &mut Pick) -> Kind {
        if self.stray {
            Kind::Stray
        } else {
            weighted(pick, &KINDS)
        }
    }

    fn route(&self, kind: &Kind, tag: i64) -> Option<(Route, i32, Self::Hold<'_>)> {
        // The stray statement ignores the freeze: the fence alone must stop it.
        let freeze = if *kind == Kind::Stray { None } else { Some(self.shared.enter(self.shard)?) };
        let (group, endpoint, epoch) = self.shared.route_for(tag, self.shard);
        self.group.set(group);
        Some((route_to(endpoint?, APP_ROLE, epoch), self.shard, freeze))
    }

    fn run(
        &self,
        client: &mut Client,
        pick: &mut Pick,
        op: &mut Op,
        tx: &mut Transaction,
    ) -> Result<(), postgres::Error> {
        let (shard, tag) = (op.shard, op.tag);
        match op.kind {
            Kind::InsertOne | Kind::InsertMany => {
                let rows = if op.kind == Kind::InsertOne { 1 } else { 2 + pick.below(30) as i32 };
                tx.sending_autocommit_insert();
                tx.returned(insert(client, shard, tag, rows)?);
            }
            Kind::Batch => {
                let count = 1 + pick.below(2_000) as i32;
                tx.sending_autocommit_insert();
                let sql = format!(
                    "INSERT INTO s{shard} (id, tag) SELECT i, $1 FROM snowflake_nextvals({shard}, $2) i RETURNING id"
                );
                tx.returned(client.query(&sql, &[&tag, &count])?.iter().map(|row| row.get(0)));
            }
            Kind::Bare => {
                let rows = client.query(
                    "SELECT snowflake_nextval($1) FROM generate_series(1, 1 + $2::int % 50)",
                    &[&shard, &(tag as i32)],
                )?;
                op.bare = rows.iter().map(|row| row.get(0)).collect();
            }
            Kind::Stray => {
                // About 3 s of IDs, one per millisecond, in one statement. Read as they come: when
                // the fence stops it half-way, the IDs it returned before its error count too.
                let mut rows = client.query_raw(
                    "SELECT snowflake_nextval($1), pg_sleep(0.001) FROM generate_series(1, 2500)",
                    [&shard],
                )?;
                while let Some(row) = rows.next()? {
                    op.bare.push(row.get(0));
                }
            }
            Kind::LongTransaction | Kind::Rollback | Kind::Savepoint | Kind::Prepared => {
                client.batch_execute("BEGIN")?;
                tx.returned(insert(client, shard, tag, 1 + pick.below(5) as i32)?);
                match op.kind {
                    Kind::LongTransaction => {
                        pause(pick, 1_500);
                        tx.returned(insert(client, shard, tag, 1 + pick.below(5) as i32)?);
                    }
                    Kind::Savepoint => {
                        client.batch_execute("SAVEPOINT p")?;
                        let undone = insert(client, shard, tag, 1 + pick.below(5) as i32)?;
                        client.batch_execute("ROLLBACK TO SAVEPOINT p")?;
                        tx.rolled_back_to_savepoint(undone);
                        tx.returned(insert(client, shard, tag, 1)?);
                    }
                    Kind::Rollback => {
                        pause(pick, 200);
                        client.batch_execute("ROLLBACK")?;
                        tx.rolled_back();
                        return Ok(());
                    }
                    _ => {
                        let gid = prepared_gid(shard, tag);
                        tx.sending_commit();
                        client.batch_execute(&format!("PREPARE TRANSACTION '{gid}'"))?;
                        pause(pick, 300);
                        client.batch_execute(&format!("COMMIT PREPARED '{gid}'"))?;
                        return Ok(());
                    }
                }
                tx.sending_commit();
                client.batch_execute("COMMIT")?;
            }
        }
        Ok(())
    }

    /// 42704 at COMMIT PREPARED: the prepared transaction is gone because the campaign
    /// finished it meanwhile (a move, a failover, the janitor): committed then, as far as this
    /// client can tell it may be either (seed 202 on 18).
    fn finished_elsewhere(&self) -> Option<&'static str> {
        Some("42704")
    }

    fn recorded(&self, op: &mut Op, client: Option<&mut Client>) {
        if op.succeeded() && !op.committed.is_empty() && self.group.get() == Group::Pair {
            // Unknown when the connection is lost just after: then as if past the promoted
            // standby's WAL.
            op.commit_lsn = client.and_then(wal_position);
        }
        if op.succeeded() {
            self.shared.successes.lock().unwrap().insert(self.number, op.end_ms);
        }
    }
}

/// The server's WAL position now (`pg_current_wal_lsn()`), as a number.
fn wal_position(client: &mut Client) -> Option<u64> {
    let text: String = client.query_one("SELECT pg_current_wal_lsn()::text", &[]).ok()?.get(0);
    crate::pair::parse_lsn(&text)
}

/// `INSERT … RETURNING id` of `rows` rows of `shard`, IDs from the DEFAULT.
fn insert(client: &mut Client, shard: i32, tag: i64, rows: i32) -> Result<Vec<i64>, postgres::Error> {
    let sql = format!("INSERT INTO s{shard} (tag) SELECT $1 FROM generate_series(1, $2) RETURNING id");
    Ok(client.query(&sql, &[&tag, &rows])?.iter().map(|row| row.get(0)).collect())
}

fn pause(pick: &mut Pick, up_to_ms: usize) {
    sleep(Duration::from_millis(pick.below(up_to_ms) as u64));
}

/// The name of an op's prepared transaction: its shard, so that a move can find the shard's,
/// and its tag, unique across servers.
pub fn prepared_gid(shard: i32, tag: i64) -> String {
    format!("c-{shard}-{tag}")
}

/// One shard's reader: the documented loop against whichever server issues the shard now
/// (following it across failovers and moves), as the superuser, each poll under the shard's
/// freeze, until it has read the shard's last final row.
struct Reading {
    shared: Arc<Shared>,
    shard: i32,
    targets: Arc<Mutex<Option<BTreeMap<i32, i64>>>>,
}

impl Source for Reading {
    type Hold<'a> = RwLockReadGuard<'a, ()>;

    fn route(&self) -> Option<(Route, Self::Hold<'_>)> {
        let freeze = self.shared.enter(self.shard)?;
        let (_, endpoint, epoch) = self.shared.route(self.shard);
        Some((route_to(endpoint?, "postgres", epoch), freeze))
    }

    fn end(&self) -> Option<i64> {
        let targets = self.targets.lock().unwrap();
        targets.as_ref().map(|ends| ends.get(&self.shard).copied().unwrap_or(0))
    }

    fn give_up(&self) -> bool {
        self.shared.give_up.load(Ordering::Relaxed)
    }
}
