//! The clients: writers issuing and storing IDs in every way an application does, a stray
//! statement that ignores the move's freeze, and one reader per shard paging below
//! `snowflake_horizon()`. Each records what it saw (the history); none judges it.

use super::schedule::Group;
use super::{all_shards, Endpoint, Shared, MOVABLE_SHARDS};
use crate::{connection_lost, Pick};
use postgres::fallible_iterator::FallibleIterator;
use postgres::{Client, NoTls};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
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

/// One statement or transaction of a writer, as the client saw it.
#[derive(Clone, Debug)]
pub struct Op {
    pub writer: usize,
    /// Also the `tag` column of every row it stored.
    pub tag: i64,
    pub shard: i32,
    pub kind: Kind,
    pub server: String,
    /// The failovers of the server's group before this op.
    pub epoch: u32,
    pub start_ms: u64,
    pub end_ms: u64,
    /// The real time when it ended, in Unix ms (the lead check adds the clock's offset).
    pub end_unix_ms: i64,
    /// IDs of acknowledged commits.
    pub committed: Vec<i64>,
    /// IDs returned in a transaction that then rolled back (or failed before its COMMIT).
    pub aborted: Vec<i64>,
    /// IDs returned in a transaction whose COMMIT was sent but not acknowledged.
    pub maybe: Vec<i64>,
    /// Rows of this tag may be stored with IDs the client never saw (an autocommit INSERT
    /// whose answer was lost).
    pub maybe_unseen: bool,
    /// IDs returned by a bare SELECT.
    pub bare: Vec<i64>,
    /// Of an acknowledged commit on the pair: the primary's WAL position read right after it
    /// (`pg_current_wal_lsn()`), at or past the end of its commit record. A failover whose
    /// promoted standby had the WAL up to here cannot have lost it.
    pub commit_lsn: Option<u64>,
    /// The SQLSTATE, or `lost` for a lost connection; `None` when it succeeded.
    pub error: Option<String>,
    pub message: Option<String>,
}

impl Op {
    /// Every ID the client was given.
    pub fn ids(&self) -> impl Iterator<Item = i64> + '_ {
        self.committed.iter().chain(&self.aborted).chain(&self.maybe).chain(&self.bare).copied()
    }
}

/// What a reader read, in order.
pub struct Reads {
    pub shard: i32,
    pub ids: Vec<i64>,
    /// The tag of each row read, beside `ids`: the op that wrote it.
    pub tags: Vec<i64>,
    /// The reader ran out of time before reaching the last committed row.
    pub gave_up: bool,
}

pub struct Clients {
    writers: Vec<JoinHandle<Vec<Op>>>,
    readers: Vec<JoinHandle<Reads>>,
    /// Each shard's highest final ID, once known: a reader stops when its cursor reaches it.
    targets: Arc<std::sync::Mutex<Option<BTreeMap<i32, i64>>>>,
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
            .map(|(writer, (shard, stray))| {
                let shared = shared.clone();
                std::thread::spawn(move || Writer::new(shared, seed, writer, shard, stray).run())
            })
            .collect();
        let targets = Arc::new(std::sync::Mutex::new(None));
        let readers = all_shards()
            .into_iter()
            .map(|shard| {
                let (shared, targets) = (shared.clone(), targets.clone());
                std::thread::spawn(move || read(&shared, shard, &targets))
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

/// Connects to `endpoint` as `user`, with a bounded wait.
fn connect(endpoint: &Endpoint, user: &str) -> Result<Client, postgres::Error> {
    let mut config = endpoint.config.clone();
    config.user(user).connect_timeout(Duration::from_secs(10));
    config.connect(NoTls)
}

/// How a failed statement is recorded: its SQLSTATE, or `lost`.
fn classify(error: &postgres::Error) -> (String, String) {
    let code = if connection_lost(error) {
        "lost".to_string()
    } else {
        error.code().map_or("lost", |code| code.code()).to_string()
    };
    let message = error.as_db_error().map_or_else(|| error.to_string(), |db| db.message().to_string());
    (code, message)
}

struct Writer {
    shared: Arc<Shared>,
    number: usize,
    shard: i32,
    stray: bool,
    pick: Pick,
    connection: Option<(String, Client)>,
    next_tag: i64,
    ops: Vec<Op>,
}

/// The state of one op's transaction, for recording its outcome when a statement fails.
#[derive(Default)]
struct Transaction {
    /// IDs that commit with it.
    pending: Vec<i64>,
    /// IDs rolled back to a savepoint.
    rolled_back: Vec<i64>,
    /// The COMMIT (or the autocommit statement, or COMMIT PREPARED) was sent.
    commit_sent: bool,
    /// The statement sent was an autocommit INSERT: rows may exist whose IDs never came back.
    autocommit_insert: bool,
}

impl Writer {
    fn new(shared: Arc<Shared>, seed: u64, number: usize, shard: i32, stray: bool) -> Writer {
        let pick = Pick::new(seed.wrapping_mul(1_000).wrapping_add(number as u64));
        let next_tag = number as i64 * 1_000_000_000;
        Writer { shared, number, shard, stray, pick, connection: None, next_tag, ops: Vec::new() }
    }

    fn run(mut self) -> Vec<Op> {
        self.shared.successes.lock().unwrap().insert(self.number, 0);
        while self.shared.writing() {
            let kind = if self.stray { Kind::Stray } else { self.pick_kind() };
            self.step(kind);
        }
        self.ops
    }

    fn pick_kind(&mut self) -> Kind {
        let total: usize = KINDS.iter().map(|(weight, _)| weight).sum();
        let mut at = self.pick.below(total);
        for (weight, kind) in KINDS {
            if at < weight {
                return kind;
            }
            at -= weight;
        }
        unreachable!()
    }

    /// One op: route, (re)connect, run, record.
    fn step(&mut self, kind: Kind) {
        let shared = self.shared.clone();
        // The stray statement ignores the freeze: the fence alone must stop it.
        let _freeze = (kind != Kind::Stray).then(|| shared.freezes[&self.shard].read().unwrap());
        let (group, endpoint, epoch) = shared.route_for(self.next_tag, self.shard);
        let Some(endpoint) = endpoint else {
            drop(_freeze);
            sleep(Duration::from_millis(100));
            return;
        };
        if self.connection.as_ref().is_none_or(|(name, _)| *name != endpoint.name) {
            self.connection = match connect(&endpoint, APP_ROLE) {
                Ok(client) => Some((endpoint.name.clone(), client)),
                Err(_) => {
                    // Unavailable (down, starting, or promoted but not yet accepting): the
                    // liveness check sees the gap in this writer's successes.
                    drop(_freeze);
                    sleep(Duration::from_millis(100));
                    return;
                }
            };
        }
        let tag = self.next_tag;
        self.next_tag += 1;
        let mut op = Op {
            writer: self.number,
            tag,
            shard: self.shard,
            kind,
            server: endpoint.name.clone(),
            epoch,
            start_ms: shared.now_ms(),
            end_ms: 0,
            end_unix_ms: 0,
            committed: Vec::new(),
            aborted: Vec::new(),
            maybe: Vec::new(),
            maybe_unseen: false,
            bare: Vec::new(),
            commit_lsn: None,
            error: None,
            message: None,
        };
        let mut transaction = Transaction::default();
        let (_, client) = self.connection.as_mut().unwrap();
        let result = run_op(client, &mut self.pick, &mut op, &mut transaction);
        op.end_ms = shared.now_ms();
        op.end_unix_ms = super::unix_ms();
        match result {
            Ok(()) => {
                if group == Group::Pair && !transaction.pending.is_empty() {
                    // Unknown when the connection is lost just after: then as if past the
                    // promoted standby's WAL.
                    op.commit_lsn = wal_position(client);
                }
                op.committed.append(&mut transaction.pending);
            }
            Err(error) => {
                let (code, message) = classify(&error);
                let lost = code == "lost";
                // 42704 at COMMIT PREPARED: the prepared transaction is gone because the
                // campaign finished it meanwhile (a move, a failover, the janitor): committed
                // then, as far as this client can tell it may be either (seed 202 on 18).
                let finished_by_another = code == "42704" && kind == Kind::Prepared;
                if (lost || finished_by_another) && transaction.commit_sent {
                    op.maybe.append(&mut transaction.pending);
                    op.maybe_unseen = transaction.autocommit_insert;
                } else {
                    op.aborted.append(&mut transaction.pending);
                }
                if lost || client.is_closed() {
                    self.connection = None;
                } else {
                    // End whatever transaction the failed statement left open.
                    let _ = client.batch_execute("ROLLBACK");
                }
                op.error = Some(code);
                op.message = Some(message);
            }
        }
        op.aborted.append(&mut transaction.rolled_back);
        let failed = op.error.is_some();
        if !failed {
            shared.successes.lock().unwrap().insert(self.number, op.end_ms);
        }
        self.ops.push(op);
        drop(_freeze);
        if failed {
            sleep(Duration::from_millis(50));
        }
    }
}

/// The server's WAL position now (`pg_current_wal_lsn()`), as a number.
fn wal_position(client: &mut Client) -> Option<u64> {
    let text: String = client.query_one("SELECT pg_current_wal_lsn()::text", &[]).ok()?.get(0);
    super::parse_lsn(&text)
}

/// `INSERT … RETURNING id` of `rows` rows of `shard`, IDs from the DEFAULT.
fn insert(client: &mut Client, shard: i32, tag: i64, rows: i32) -> Result<Vec<i64>, postgres::Error> {
    let sql = format!("INSERT INTO s{shard} (tag) SELECT $1 FROM generate_series(1, $2) RETURNING id");
    Ok(client.query(&sql, &[&tag, &rows])?.iter().map(|row| row.get(0)).collect())
}

fn pause(pick: &mut Pick, up_to_ms: usize) {
    sleep(Duration::from_millis(pick.below(up_to_ms) as u64));
}

fn run_op(
    client: &mut Client,
    pick: &mut Pick,
    op: &mut Op,
    tx: &mut Transaction,
) -> Result<(), postgres::Error> {
    let (shard, tag) = (op.shard, op.tag);
    match op.kind {
        Kind::InsertOne | Kind::InsertMany => {
            let rows = if op.kind == Kind::InsertOne { 1 } else { 2 + pick.below(30) as i32 };
            tx.commit_sent = true;
            tx.autocommit_insert = true;
            tx.pending = insert(client, shard, tag, rows)?;
        }
        Kind::Batch => {
            let count = 1 + pick.below(2_000) as i32;
            tx.commit_sent = true;
            tx.autocommit_insert = true;
            let sql = format!(
                "INSERT INTO s{shard} (id, tag) SELECT i, $1 FROM snowflake_nextvals({shard}, $2) i RETURNING id"
            );
            tx.pending = client.query(&sql, &[&tag, &count])?.iter().map(|row| row.get(0)).collect();
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
            tx.pending = insert(client, shard, tag, 1 + pick.below(5) as i32)?;
            match op.kind {
                Kind::LongTransaction => {
                    pause(pick, 1_500);
                    let more = insert(client, shard, tag, 1 + pick.below(5) as i32)?;
                    tx.pending.extend(more);
                }
                Kind::Savepoint => {
                    client.batch_execute("SAVEPOINT p")?;
                    let undone = insert(client, shard, tag, 1 + pick.below(5) as i32)?;
                    client.batch_execute("ROLLBACK TO SAVEPOINT p")?;
                    tx.rolled_back = undone;
                    let more = insert(client, shard, tag, 1)?;
                    tx.pending.extend(more);
                }
                Kind::Rollback => {
                    pause(pick, 200);
                    client.batch_execute("ROLLBACK")?;
                    tx.rolled_back = std::mem::take(&mut tx.pending);
                    return Ok(());
                }
                _ => {
                    let gid = prepared_gid(shard, tag);
                    tx.commit_sent = true;
                    client.batch_execute(&format!("PREPARE TRANSACTION '{gid}'"))?;
                    pause(pick, 300);
                    client.batch_execute(&format!("COMMIT PREPARED '{gid}'"))?;
                    return Ok(());
                }
            }
            tx.commit_sent = true;
            client.batch_execute("COMMIT")?;
        }
    }
    Ok(())
}

/// The name of an op's prepared transaction: its shard, so that a move can find the shard's,
/// and its tag, unique across servers.
pub fn prepared_gid(shard: i32, tag: i64) -> String {
    format!("c-{shard}-{tag}")
}

/// One reader: pages `shard` with the documented loop (the horizon in one statement, the rows
/// below it in the next), following the shard across failovers and moves, until it has read
/// the shard's last final row.
fn read(shared: &Shared, shard: i32, targets: &std::sync::Mutex<Option<BTreeMap<i32, i64>>>) -> Reads {
    let mut reads = Reads { shard, ids: Vec::new(), tags: Vec::new(), gave_up: false };
    let mut cursor = 0i64;
    let mut connection: Option<(String, Client)> = None;
    loop {
        if shared.give_up.load(Ordering::Relaxed) {
            reads.gave_up = true;
            return reads;
        }
        if let Some(ends) = targets.lock().unwrap().as_ref() {
            if cursor >= ends.get(&shard).copied().unwrap_or(0) {
                return reads;
            }
        }
        {
            let _freeze = shared.freezes[&shard].read().unwrap();
            let (_, endpoint, _) = shared.route(shard);
            if let Some(endpoint) = endpoint {
                if connection.as_ref().is_none_or(|(name, _)| *name != endpoint.name) {
                    connection =
                        connect(&endpoint, "postgres").ok().map(|client| (endpoint.name.clone(), client));
                }
            }
            if let Some((_, client)) = connection.as_mut() {
                let page = client.query_one("SELECT snowflake_horizon($1)", &[&shard]).and_then(|row| {
                    let horizon: i64 = row.get(0);
                    client.query(
                        &format!("SELECT id, tag FROM s{shard} WHERE id > $1 AND id < $2 ORDER BY id"),
                        &[&cursor, &horizon],
                    )
                });
                match page {
                    Ok(rows) => {
                        reads.ids.extend(rows.iter().map(|row| row.get::<_, i64>(0)));
                        reads.tags.extend(rows.iter().map(|row| row.get::<_, i64>(1)));
                        cursor = reads.ids.last().copied().unwrap_or(cursor);
                    }
                    Err(_) => connection = None,
                }
            }
        }
        sleep(Duration::from_millis(100));
    }
}
