//! The load the tests put on a server: writers inserting over and over on connections of
//! their own, what each was acknowledged, and the seeded random choices of a workload.

use crate::Cluster;
use postgres::types::ToSql;
use postgres::NoTls;
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
/// until its first error (a crash cutting it off, a refusal), which is recorded.
pub struct Writers {
    stop: Arc<AtomicBool>,
    rows: Arc<AtomicUsize>,
    backends: Arc<Mutex<Vec<u32>>>,
    errors: Arc<Mutex<Vec<String>>>,
    workers: Vec<std::thread::JoinHandle<Vec<i64>>>,
}

impl Writers {
    /// Starts one connection per entry of `writes`, each running its write over and over.
    pub fn start(cluster: &Cluster, writes: Vec<Write>) -> Writers {
        let stop = Arc::new(AtomicBool::new(false));
        let rows = Arc::new(AtomicUsize::new(0));
        let backends = Arc::new(Mutex::new(Vec::new()));
        let errors = Arc::new(Mutex::new(Vec::new()));
        let workers = writes
            .into_iter()
            .map(|write| {
                let (stop, rows, backends) = (stop.clone(), rows.clone(), backends.clone());
                let errors = errors.clone();
                let config = cluster.config();
                std::thread::spawn(move || {
                    let mut keys = Vec::new();
                    let fail = |error: String| errors.lock().unwrap().push(error);
                    let mut client = match config.connect(NoTls) {
                        Ok(client) => client,
                        Err(error) => {
                            fail(error.to_string());
                            return keys;
                        }
                    };
                    if let Ok(row) = client.query_one("SELECT pg_backend_pid()", &[]) {
                        backends.lock().unwrap().push(row.get::<_, i32>(0) as u32);
                    }
                    let params: Vec<&(dyn ToSql + Sync)> =
                        write.params.iter().map(|param| param as &(dyn ToSql + Sync)).collect();
                    let prepared = match write.prepared.then(|| client.prepare(&write.sql)) {
                        None => None,
                        Some(Ok(statement)) => Some(statement),
                        Some(Err(error)) => {
                            fail(format!("{error:?}"));
                            return keys;
                        }
                    };
                    while !stop.load(Ordering::Relaxed) {
                        let result = match &prepared {
                            Some(statement) => client.query(statement, &params),
                            None => client.query(write.sql.as_str(), &params),
                        };
                        match result {
                            Ok(written) => {
                                keys.extend(written.iter().map(|row| row.get::<_, i64>(0)));
                                rows.fetch_add(written.len(), Ordering::Relaxed);
                            }
                            Err(error) => {
                                // The server went away (or refused): this connection is done.
                                fail(format!("{error:?}"));
                                break;
                            }
                        }
                    }
                    keys
                })
            })
            .collect();
        Writers { stop, rows, backends, errors, workers }
    }

    /// Rows acknowledged so far.
    pub fn rows(&self) -> usize {
        self.rows.load(Ordering::Relaxed)
    }

    /// Waits until at least `rows` were acknowledged (at most a minute).
    pub fn wait_for(&self, rows: usize) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.rows() < rows {
            let errors = self.errors();
            assert!(
                Instant::now() < deadline,
                "the load reached only {} rows; errors: {errors:?}",
                self.rows()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The errors the connections stopped at so far (each stops at its first).
    pub fn errors(&self) -> Vec<String> {
        self.errors.lock().unwrap().clone()
    }

    /// Process ids of the writers' backends.
    pub fn backends(&self) -> Vec<u32> {
        self.backends.lock().unwrap().clone()
    }

    /// Stops (or collects, after a crash) the connections; returns each one's keys, in the
    /// order of `writes` and each in the order they were returned, and every error.
    pub fn finish(self) -> (Vec<Vec<i64>>, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        let keys = self.workers.into_iter().map(|worker| worker.join().unwrap()).collect();
        let errors = self.errors.lock().unwrap().clone();
        (keys, errors)
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

/// A small deterministic generator for the random choices of a workload (no dependency for
/// it): xorshift, seeded so that each seed gives its own sequence.
pub struct Pick(u64);

impl Pick {
    /// A generator of its own for each `seed` (a writer's number, say).
    pub fn new(seed: u64) -> Pick {
        Pick(0x9E37_79B9_7F4A_7C15 ^ (seed + 1).wrapping_mul(0x2545_F491_4F6C_DD1D))
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }

    /// True `percent` times in 100.
    pub fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
}

/// Whether a connection is gone (the server crashed, restarted, or is still starting), as
/// opposed to a statement the server refused: a client that reconnects may go on.
pub fn connection_lost(error: &postgres::Error) -> bool {
    // 57P01 admin_shutdown, 57P02 crash_shutdown, 57P03 cannot_connect_now.
    let server_went_away =
        error.code().is_some_and(|code| ["57P01", "57P02", "57P03"].contains(&code.code()));
    let io = std::error::Error::source(error).is_some_and(|source| source.is::<std::io::Error>());
    server_went_away || error.is_closed() || io
}
