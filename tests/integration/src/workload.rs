//! The load the tests put on a server: writers inserting over and over on connections of
//! their own, and what each was acknowledged (on the workload engine, `crate::engine`).

use crate::cluster::Cluster;
use crate::engine::{Op, Pick, Route, Transaction, Workload, Writer};
use crate::process::poll_within;
use postgres::types::ToSql;
use postgres::Client;
use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Rows inserted by a `Load`: one table, no unique index, so that a duplicate ID would show.
pub const LOAD_TABLE: &str = "CREATE TABLE ids (id bigint NOT NULL, shard int NOT NULL, round int NOT NULL)";

/// What one of `Writers` runs over and over: a statement returning the keys it wrote (a
/// `bigint` in its first column), with its parameters.
pub struct Write {
    sql: String,
    params: Vec<i32>,
    prepared: bool,
}

impl Write {
    /// Sent as text at every run.
    pub fn text(sql: &str, params: &[i32]) -> Write {
        Write { sql: sql.to_string(), params: params.to_vec(), prepared: false }
    }

    /// Prepared once by its connection and run as that prepared statement, as an
    /// application's connection pool does (PostgreSQL plans it again when a table it uses
    /// changes).
    pub fn prepared(sql: &str) -> Write {
        Write { sql: sql.to_string(), params: Vec::new(), prepared: true }
    }
}

/// Connections writing at once, each with a connection of its own, until told to stop or
/// until its first error (a crash cutting it off, a refusal), which is recorded. Each is a
/// writer of the workload engine (`crate::engine`) with one kind of op: its write.
pub struct Writers {
    shared: Arc<Repeated>,
    workers: Vec<std::thread::JoinHandle<Vec<Op<()>>>>,
}

/// What the connections of `Writers` share.
#[derive(Default)]
struct Repeated {
    stop: AtomicBool,
    rows: AtomicUsize,
    backends: Mutex<Vec<u32>>,
    errors: Mutex<Vec<String>>,
}

/// One connection of `Writers`: its write, run until the first error.
struct Repeat {
    shared: Arc<Repeated>,
    write: Write,
    config: postgres::Config,
    started: Instant,
    /// The write, prepared by the connection (for `Write::prepared`).
    statement: RefCell<Option<postgres::Statement>>,
    failed: Cell<bool>,
}

impl Repeat {
    fn fail(&self, error: String) {
        self.failed.set(true);
        self.shared.errors.lock().unwrap().push(error);
    }
}

impl Workload for Repeat {
    type Kind = ();
    type Hold<'a> = ();

    fn writing(&self) -> bool {
        !self.shared.stop.load(Ordering::Relaxed) && !self.failed.get()
    }

    fn origin(&self) -> Instant {
        self.started
    }

    fn kind(&self, _pick: &mut Pick) {}

    fn route(&self, _kind: &(), _tag: i64) -> Option<(Route, i32, ())> {
        Some((Route::to("server", self.config.clone()), 0, ()))
    }

    fn run(
        &self,
        client: &mut Client,
        _: &mut Pick,
        _: &mut Op<()>,
        tx: &mut Transaction,
    ) -> Result<(), postgres::Error> {
        let params: Vec<&(dyn ToSql + Sync)> =
            self.write.params.iter().map(|param| param as &(dyn ToSql + Sync)).collect();
        tx.sending_autocommit_insert();
        let written = match self.statement.borrow().as_ref() {
            Some(statement) => client.query(statement, &params),
            None => client.query(self.write.sql.as_str(), &params),
        }
        // The server went away (or refused): this connection is done. Its error is kept
        // whole (SQLSTATE, message, hint), as tests read it.
        .inspect_err(|error| self.fail(format!("{error:?}")))?;
        tx.returned(written.iter().map(|row| row.get::<_, i64>(0)));
        Ok(())
    }

    fn connected(&self, client: &mut Client) {
        if let Ok(row) = client.query_one("SELECT pg_backend_pid()", &[]) {
            self.shared.backends.lock().unwrap().push(row.get::<_, i32>(0) as u32);
        }
        if self.write.prepared {
            match client.prepare(&self.write.sql) {
                Ok(statement) => *self.statement.borrow_mut() = Some(statement),
                Err(error) => self.fail(format!("{error:?}")),
            }
        }
    }

    fn recorded(&self, op: &mut Op<()>, _client: Option<&mut Client>) {
        self.shared.rows.fetch_add(op.committed.len(), Ordering::Relaxed);
    }
}

impl Writers {
    /// Starts one connection per entry of `writes`, each running its write over and over.
    pub fn start(cluster: &Cluster, writes: Vec<Write>) -> Writers {
        let shared = Arc::new(Repeated::default());
        let workers = writes
            .into_iter()
            .enumerate()
            .map(|(number, write)| {
                let repeat = Repeat {
                    shared: shared.clone(),
                    write,
                    config: cluster.config(),
                    started: Instant::now(),
                    statement: RefCell::new(None),
                    failed: Cell::new(false),
                };
                std::thread::spawn(move || Writer::new(repeat, number, Pick::new(number as u64)).run())
            })
            .collect();
        Writers { shared, workers }
    }

    /// Rows acknowledged so far.
    pub fn rows(&self) -> usize {
        self.shared.rows.load(Ordering::Relaxed)
    }

    /// Waits until at least `rows` were acknowledged (at most a minute).
    pub fn wait_for(&self, rows: usize) {
        let reached = poll_within(Duration::from_secs(60), Duration::from_millis(10), || {
            (self.rows() >= rows).then_some(())
        });
        assert!(reached.is_some(), "the load reached only {} rows; errors: {:?}", self.rows(), self.errors());
    }

    /// The errors the connections stopped at so far (each stops at its first).
    pub fn errors(&self) -> Vec<String> {
        self.shared.errors.lock().unwrap().clone()
    }

    /// Process ids of the writers' backends.
    pub fn backends(&self) -> Vec<u32> {
        self.shared.backends.lock().unwrap().clone()
    }

    /// Stops (or collects, after a crash) the connections; returns each one's keys, in the
    /// order of `writes` and each in the order they were returned, and every error.
    pub fn finish(self) -> (Vec<Vec<i64>>, Vec<String>) {
        self.shared.stop.store(true, Ordering::Relaxed);
        let keys = self
            .workers
            .into_iter()
            .map(|worker| worker.join().unwrap().into_iter().flat_map(|op| op.committed).collect())
            .collect();
        (keys, self.shared.errors.lock().unwrap().clone())
    }
}

/// Connections inserting IDs concurrently until told to stop or cut off by a crash.
pub struct Load {
    writers: Writers,
    shards: Vec<i32>,
}

impl Load {
    /// Starts one connection per entry of `shards`, each inserting batches of rows with
    /// `snowflake_nextval(its shard)` tagged with `round`, one transaction per batch.
    pub fn start(cluster: &Cluster, shards: &[i32], round: i32) -> Load {
        let insert = "INSERT INTO ids (id, shard, round) \
                      SELECT snowflake_nextval($1), $1, $2 FROM generate_series(1, 250) RETURNING id";
        let writes = shards.iter().map(|&shard| Write::text(insert, &[shard, round])).collect();
        Load { writers: Writers::start(cluster, writes), shards: shards.to_vec() }
    }

    /// Rows acknowledged so far.
    pub fn inserted(&self) -> usize {
        self.writers.rows()
    }

    /// Waits until at least `rows` were acknowledged (at most a minute).
    pub fn wait_for(&self, rows: usize) {
        self.writers.wait_for(rows)
    }

    /// The errors the connections stopped at so far (each stops at its first).
    pub fn errors(&self) -> Vec<String> {
        self.writers.errors()
    }

    /// Process ids of the load's backends.
    pub fn backends(&self) -> Vec<u32> {
        self.writers.backends()
    }

    /// Stops (or collects, after a crash) the connections; returns every acknowledged
    /// `(shard, id)`.
    pub fn finish(self) -> Vec<(i32, i64)> {
        let (keys, _) = self.writers.finish();
        self.shards
            .into_iter()
            .zip(keys)
            .flat_map(|(shard, ids)| ids.into_iter().map(move |id| (shard, id)))
            .collect()
    }
}
