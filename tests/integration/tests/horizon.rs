//! `snowflake_horizon()`: a reader paging by ID reads only below the horizon, and so reads
//! every committed row exactly once, however the writers' transactions interleave.
//!
//! The main test runs 16 writers on 4 shards for 20 s: short and long transactions (up to
//! 3 s), several INSERTs each, some through `snowflake_nextvals`, savepoints rolled back,
//! aborts, prepared transactions committed or rolled back later by another connection, and
//! one backend killed with kill -9 half-way (the postmaster then ends every backend: all
//! reconnect and go on), all run by the workload engine, whose history must agree with the
//! table (every acknowledged commit stored, nothing rolled back stored). Two readers poll with
//! the documented loop; at the end each has read the table's rows, each once. A reader paging
//! with `id > cursor` alone, beside them, misses rows: the test can fail. The focused tests
//! each hold one rule: an open transaction, a prepared one across restarts, parallel workers,
//! a clock stepped back, an idle server, an older snapshot, a commit waiting to become
//! visible, the refusals, a transaction that holds the horizons of its own shards only (open
//! or prepared), reported by `snowflake_horizon_holders()`, and another role's flood of calls
//! (and of xids), which sends no reader's poll back to the horizon of the start.

use postgres::{Client, Config, NoTls};
use snowflake_id_integration::engine::{
    self, Op, Paging, Reads, Route, Source, Transaction, Workload, Writer,
};
use snowflake_id_integration::{
    apply_settings, column, connection_lost, count, db_error, major_of, pg_bin_dir, value, wait_for,
    wait_until, Cluster, FakeClock, Pair, Pick,
};
use std::cell::Cell;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::sleep;
use std::time::{Duration, Instant};

/// The horizon, in a statement of its own.
fn horizon(client: &mut Client) -> i64 {
    horizon_of(client, None)
}

/// The horizon of `shard` (`None`: of every shard), in a statement of its own.
fn horizon_of(client: &mut Client, shard: Option<i32>) -> i64 {
    match shard {
        None => value(client, "SELECT snowflake_horizon()", &[]),
        Some(shard) => value(client, "SELECT snowflake_horizon($1)", &[&shard]),
    }
}

/// Polls the horizon of `shard` (`None`: of every shard) until it passes `id`; fails after
/// 15 s, saying `after` what it should have.
fn wait_for_horizon_above(client: &mut Client, shard: Option<i32>, id: i64, after: &str) -> i64 {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let horizon = horizon_of(client, shard);
        if horizon > id {
            return horizon;
        }
        assert!(
            Instant::now() < deadline,
            "the horizon stayed at {horizon}, at or below ID {id}, for 15 s after {after}"
        );
        sleep(Duration::from_millis(20));
    }
}

/// Asserts that the horizon of `shard` (`None`: of every shard) stays at or below `id` for
/// `during` (while the clock moves well past the millisecond of `id`, so an unheld horizon
/// would pass it), saying `while_` why.
fn assert_horizon_held(client: &mut Client, shard: Option<i32>, id: i64, during: Duration, while_: &str) {
    let until = Instant::now() + during;
    loop {
        let horizon = horizon_of(client, shard);
        assert!(horizon <= id, "the horizon {horizon} of {shard:?} passed ID {id} while {while_}");
        if Instant::now() >= until {
            return;
        }
        sleep(Duration::from_millis(50));
    }
}

/// A server with the extension and a table `t (id bigint)`.
fn server(name: &str, settings: &[&str]) -> Cluster {
    let setup = "CREATE EXTENSION snowflake_id; CREATE TABLE t (id bigint PRIMARY KEY)";
    Cluster::builder(name).settings(settings).setup(setup).start()
}

/// The process id of `client`'s backend.
fn backend_pid(client: &mut Client) -> i32 {
    value(client, "SELECT pg_backend_pid()", &[])
}

/// Opens a transaction on `client` that inserts one row of `shard` into `t`; returns its ID.
fn open_transaction_with_an_id(client: &mut Client, shard: i32) -> i64 {
    client.batch_execute("BEGIN").unwrap();
    value(client, "INSERT INTO t VALUES (snowflake_nextval($1)) RETURNING id", &[&shard])
}

// ---- The main test: writers, a crash, and readers paging by ID ---------------------------

const WRITERS: usize = 16;
const SHARDS: [i32; 4] = [1, 2, 3, 4];
const WRITING: Duration = Duration::from_secs(20);
/// When a writer's backend is killed, from the start of the writes.
const CRASH_AFTER: Duration = Duration::from_secs(8);
/// How long the readers have, once everything is committed, to read up to the last row.
const CATCH_UP_WITHIN: Duration = Duration::from_secs(30);
/// The longest a transaction sleeps between its statements, in all.
const LONGEST_SLEEP_MS: usize = 3000;
/// The writer whose every 4th transaction takes an ID and commits only once the naive reader
/// has read past it (or after `STRAGGLE_AT_MOST`): the naive reader misses that row for sure.
const STRAGGLER: usize = 0;
const STRAGGLE_AT_MOST: Duration = Duration::from_secs(5);

/// What the threads of the main test share.
#[derive(Default)]
struct Run {
    stop_writing: AtomicBool,
    writers_done: AtomicBool,
    /// Set once the writes are over and every prepared transaction resolved: the highest
    /// committed ID. A reader stops once its cursor reaches it.
    last_committed: OnceLock<i64>,
    /// Set when the readers ran out of time: they stop at once.
    give_up: AtomicBool,
    /// Readers that have polled once: the writers start after all have, so that no first
    /// call of a reader meets a busy server with no horizon given yet (it would get the
    /// horizon of the server's start, as documented, which is correct but says little).
    readers_ready: AtomicUsize,
    /// The naive reader's cursor, which the straggler waits to see pass its ID.
    naive_cursor: AtomicI64,
    /// Straggler transactions that committed after the naive reader had read past their ID.
    overtaken: AtomicUsize,
    /// The process ids of the writers' backends, newest last.
    backends: Mutex<Vec<u32>>,
    /// Prepared transactions to resolve: when, and their gid.
    prepared: Mutex<Vec<(Instant, String)>>,
    /// Errors of the committer no client expects: each fails the test.
    errors: Mutex<Vec<String>>,
}

/// The committer's connection, made again while the server restarts (at most 60 s).
fn connect(config: &Config) -> Client {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match config.connect(NoTls) {
            Ok(client) => return client,
            Err(error) => {
                assert!(Instant::now() < deadline, "the committer could not reconnect within 60 s: {error}")
            }
        }
        sleep(Duration::from_millis(100));
    }
}

/// One INSERT of a transaction: its shard, its rows, and whether they come from
/// `snowflake_nextvals` (a batch) or one `snowflake_nextval` call per row.
#[derive(Clone, Copy, Debug)]
struct Insert {
    shard: i32,
    rows: i32,
    batch: bool,
}

/// How a transaction ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    Commit,
    Rollback,
    /// PREPARE TRANSACTION, left to the committer (which commits 85 in 100).
    Prepare,
}

/// What one transaction of a writer does, drawn before it runs: 1 to 4 INSERTs of 1 to 40
/// rows on random shards (a quarter of them through `snowflake_nextvals`), an INSERT rolled
/// back to a savepoint in a quarter, a quarter of them long (sleeping up to 3 s between
/// statements); then committed, rolled back, or prepared. The straggler's takes one INSERT
/// and waits for the naive reader before its COMMIT.
#[derive(Clone, Debug)]
struct Plan {
    inserts: Vec<Insert>,
    /// After which INSERT a savepoint is taken, another INSERT made and rolled back to it.
    savepoint: Option<(usize, Insert)>,
    sleep_ms: u64,
    end: End,
    straggle: bool,
}

impl Plan {
    fn draw(pick: &mut Pick, straggle: bool) -> Plan {
        let insert = |pick: &mut Pick| {
            let shard = SHARDS[pick.below(SHARDS.len())];
            let batch = pick.chance(25);
            let rows = 1 + pick.below(if batch { 40 } else { 5 }) as i32;
            Insert { shard, rows, batch }
        };
        if straggle {
            return Plan {
                inserts: vec![insert(pick)],
                savepoint: None,
                sleep_ms: 0,
                end: End::Commit,
                straggle,
            };
        }
        let inserts: Vec<Insert> = (0..1 + pick.below(4)).map(|_| insert(pick)).collect();
        let sleep_ms =
            if pick.chance(25) { (pick.below(LONGEST_SLEEP_MS) / inserts.len()) as u64 } else { 0 };
        let savepoint = pick.chance(25).then(|| (pick.below(inserts.len()), insert(pick)));
        let end = match pick.below(100) {
            0..62 => End::Commit,
            62..75 => End::Rollback,
            _ => End::Prepare,
        };
        Plan { inserts, savepoint, sleep_ms, end, straggle }
    }

    fn batches(&self) -> usize {
        self.inserts
            .iter()
            .chain(self.savepoint.as_ref().map(|(_, insert)| insert))
            .filter(|i| i.batch)
            .count()
    }
}

/// One writer of the main test, run by the workload engine: its plans, on the one server.
struct Writing {
    run: Arc<Run>,
    /// When the test started: the history's origin.
    origin: Instant,
    config: Config,
    number: usize,
    /// Transactions drawn so far (the straggler straggles every 4th).
    drawn: Cell<usize>,
}

impl Workload for Writing {
    type Kind = Plan;
    type Hold<'a> = ();

    fn writing(&self) -> bool {
        !self.run.stop_writing.load(SeqCst)
    }

    fn origin(&self) -> Instant {
        self.origin
    }

    fn kind(&self, pick: &mut Pick) -> Plan {
        self.drawn.set(self.drawn.get() + 1);
        Plan::draw(pick, self.number == STRAGGLER && self.drawn.get().is_multiple_of(4))
    }

    fn route(&self, plan: &Plan, _tag: i64) -> Option<(Route, i32, ())> {
        Some((Route::to("server", self.config.clone()), plan.inserts[0].shard, ()))
    }

    fn run(
        &self,
        client: &mut Client,
        pick: &mut Pick,
        op: &mut Op<Plan>,
        tx: &mut Transaction,
    ) -> Result<(), postgres::Error> {
        let (plan, tag, writer) = (op.kind.clone(), op.tag, op.writer as i32);
        let insert = |client: &mut Client, insert: &Insert| -> Result<Vec<i64>, postgres::Error> {
            let sql = if insert.batch {
                "INSERT INTO events (id, writer, shard, tag) SELECT id, $2, $1, $4 FROM snowflake_nextvals($1, $3) AS id \
                 RETURNING id"
            } else {
                "INSERT INTO events (id, writer, shard, tag) SELECT snowflake_nextval($1), $2, $1, $4 \
                 FROM generate_series(1, $3) RETURNING id"
            };
            let rows = client.query(sql, &[&insert.shard, &writer, &insert.rows, &tag])?;
            Ok(rows.iter().map(|row| row.get(0)).collect())
        };
        client.batch_execute("BEGIN")?;
        for (number, planned) in plan.inserts.iter().enumerate() {
            let ids = insert(client, planned)?;
            let lowest = ids.iter().copied().min().unwrap();
            tx.returned(ids);
            if plan.straggle {
                // The ID taken first, committed only once the naive reader has read rows above it.
                let until = Instant::now() + STRAGGLE_AT_MOST;
                while self.run.naive_cursor.load(SeqCst) <= lowest && Instant::now() < until {
                    sleep(Duration::from_millis(5));
                }
                if self.run.naive_cursor.load(SeqCst) > lowest {
                    self.run.overtaken.fetch_add(1, SeqCst);
                }
            }
            if let Some((_, undone)) = plan.savepoint.filter(|(after, _)| *after == number) {
                client.batch_execute("SAVEPOINT s")?;
                let ids = insert(client, &undone)?;
                client.batch_execute("ROLLBACK TO SAVEPOINT s")?;
                tx.rolled_back_to_savepoint(ids);
            }
            sleep(Duration::from_millis(plan.sleep_ms));
        }
        match plan.end {
            End::Commit => {
                tx.sending_commit();
                client.batch_execute("COMMIT")
            }
            End::Rollback => {
                client.batch_execute("ROLLBACK")?;
                tx.rolled_back();
                Ok(())
            }
            End::Prepare => {
                let gid = format!("w{writer}-{tag}");
                tx.sending_commit();
                client.batch_execute(&format!("PREPARE TRANSACTION '{gid}'"))?;
                tx.prepared();
                let due = Instant::now() + Duration::from_millis(100 + pick.below(3000) as u64);
                self.run.prepared.lock().unwrap().push((due, gid));
                Ok(())
            }
        }
    }

    fn connected(&self, client: &mut Client) {
        if let Ok(row) = client.query_one("SELECT pg_backend_pid()", &[]) {
            self.run.backends.lock().unwrap().push(row.get::<_, i32>(0) as u32);
        }
    }
}

/// Resolves the prepared transactions when due (85 in 100 committed, the others rolled
/// back), from a connection of its own; once the writers are done, all that are left.
/// Returns how many it committed, rolled back, and found gone (resolved by a statement whose
/// answer the crash cut off: at most one).
fn committer(config: Config, run: &Run) -> (usize, usize, usize) {
    let (mut committed, mut rolled_back, mut gone) = (0, 0, 0);
    let mut pick = Pick::new(1000);
    let mut client = connect(&config);
    loop {
        let draining = run.writers_done.load(SeqCst);
        let due: Vec<String> = {
            let mut prepared = run.prepared.lock().unwrap();
            let now = Instant::now();
            let (due, later) = prepared.drain(..).partition(|(when, _)| draining || *when <= now);
            *prepared = later;
            due.into_iter().map(|(_, gid)| gid).collect()
        };
        if due.is_empty() && draining {
            return (committed, rolled_back, gone);
        }
        for gid in due {
            let commit = pick.chance(85);
            let statement = format!("{} PREPARED '{gid}'", if commit { "COMMIT" } else { "ROLLBACK" });
            let result = loop {
                match client.batch_execute(&statement) {
                    Err(error) if connection_lost(&error) => client = connect(&config),
                    result => break result,
                }
            };
            match result {
                Ok(()) if commit => committed += 1,
                Ok(()) => rolled_back += 1,
                // Resolved before a crash cut off the answer.
                Err(error) if error.code().is_some_and(|code| code.code() == "42704") => gone += 1,
                Err(error) => run.errors.lock().unwrap().push(format!("{statement}: {error}")),
            }
        }
        sleep(Duration::from_millis(20));
    }
}

/// A reader of the main test, on the one server, until the last committed ID is known and
/// read (or the test gives up).
struct Reading {
    run: Arc<Run>,
    config: Config,
    naive: bool,
}

impl Source for Reading {
    type Hold<'a> = ();

    fn route(&self) -> Option<(Route, ())> {
        Some((Route::to("server", self.config.clone()), ()))
    }

    fn end(&self) -> Option<i64> {
        self.run.last_committed.get().copied()
    }

    fn give_up(&self) -> bool {
        self.run.give_up.load(SeqCst)
    }

    fn polled(&self, reads: &Reads) {
        if reads.polls == 1 {
            self.run.readers_ready.fetch_add(1, SeqCst);
        }
        if self.naive {
            self.run.naive_cursor.store(reads.cursor, SeqCst);
        }
    }
}

/// How `read` differs from the committed rows `truth` (sorted): IDs read twice, IDs missed,
/// IDs read that are not committed.
fn compare(read: &[i64], truth: &[i64]) -> (Vec<i64>, Vec<i64>, Vec<i64>) {
    let mut seen = HashSet::new();
    let twice: Vec<i64> = read.iter().copied().filter(|id| !seen.insert(*id)).collect();
    let committed: HashSet<i64> = truth.iter().copied().collect();
    let missed: Vec<i64> = truth.iter().copied().filter(|id| !seen.contains(id)).collect();
    let extra: Vec<i64> = seen.iter().copied().filter(|id| !committed.contains(id)).collect();
    (twice, missed, extra)
}

fn first_few(ids: &[i64]) -> &[i64] {
    &ids[..ids.len().min(10)]
}

/// Asserts that there are no `ids`: `what` they would be.
fn assert_none(ids: &[i64], what: &str) {
    assert!(ids.is_empty(), "{} {what} (first {:?})", ids.len(), first_few(ids));
}

#[test]
fn readers_below_the_horizon_read_every_committed_row_once() {
    let cluster = Cluster::builder("horizon-readers")
        .settings(&["max_prepared_transactions = 100"])
        .setup(
            "CREATE EXTENSION snowflake_id;
             CREATE TABLE events (id bigint PRIMARY KEY, writer int NOT NULL, shard int NOT NULL, tag bigint NOT NULL)",
        )
        .start();
    let origin = Instant::now();
    let run = Arc::new(Run::default());
    // Told to give up when the test fails, so that no thread outlives the server.
    struct GiveUp(Arc<Run>);
    impl Drop for GiveUp {
        fn drop(&mut self) {
            self.0.give_up.store(true, SeqCst);
            self.0.stop_writing.store(true, SeqCst);
            self.0.writers_done.store(true, SeqCst);
        }
    }
    let _give_up = GiveUp(run.clone());

    let spawn_reader = |naive: bool| {
        let reading = Reading { run: run.clone(), config: cluster.config(), naive };
        let paging = if naive { Paging::Naive } else { Paging::BelowHorizon { shard: None } };
        std::thread::spawn(move || engine::read(&reading, "events", paging, Duration::from_millis(10)))
    };
    let readers = [spawn_reader(false), spawn_reader(false)];
    let naive = spawn_reader(true);
    let committer = {
        let (config, run) = (cluster.config(), run.clone());
        std::thread::spawn(move || committer(config, &run))
    };
    wait_for("the readers polled", Duration::from_secs(30), || {
        (run.readers_ready.load(SeqCst) >= 3).then_some(())
    });
    let started = Instant::now();
    let writers: Vec<_> = (0..WRITERS)
        .map(|number| {
            let (run, config) = (run.clone(), cluster.config());
            let workload = Writing { run, origin, config, number, drawn: Cell::new(0) };
            std::thread::spawn(move || Writer::new(workload, number, Pick::new(number as u64)).run())
        })
        .collect();

    sleep(CRASH_AFTER);
    let victim = *run.backends.lock().unwrap().last().expect("no writer connected");
    let crashed_at = started.elapsed();
    let crashed_at_ms = origin.elapsed().as_millis() as u64;
    cluster.kill_backend(victim);
    sleep(WRITING.saturating_sub(started.elapsed()));
    run.stop_writing.store(true, SeqCst);
    let histories: Vec<Vec<Op<Plan>>> = writers.into_iter().map(|writer| writer.join().unwrap()).collect();
    run.writers_done.store(true, SeqCst);
    let (prepared_committed, prepared_rolled_back, prepared_gone) = committer.join().unwrap();
    // Prepared transactions survive the crash: only one resolved as the crash struck may be gone.
    assert!(prepared_gone <= 1, "{prepared_gone} prepared transactions were gone when resolved");

    // Prepared transactions whose PREPARE was cut off by the crash, committed now: none is
    // left before the rows are counted.
    let mut client = cluster.connect();
    let leftover: Vec<String> = column(&mut client, "SELECT gid FROM pg_prepared_xacts", &[]);
    for gid in &leftover {
        client.batch_execute(&format!("COMMIT PREPARED '{gid}'")).unwrap();
    }
    let still_prepared = count(&mut client, "SELECT count(*) FROM pg_prepared_xacts");
    assert_eq!(still_prepared, 0, "prepared transactions remain");
    let truth: Vec<i64> = column(&mut client, "SELECT id FROM events ORDER BY id", &[]);
    let last = *truth.last().expect("no rows committed");
    let all_written = Instant::now();
    run.last_committed.set(last).unwrap();

    // The readers read up to the last row once the horizon passes it.
    while readers.iter().any(|reader| !reader.is_finished()) && all_written.elapsed() < CATCH_UP_WITHIN {
        sleep(Duration::from_millis(20));
    }
    let caught_up_in = all_written.elapsed();
    let timed_out = readers.iter().any(|reader| !reader.is_finished());
    run.give_up.store(true, SeqCst);
    let reads: Vec<Reads> = readers.into_iter().map(|reader| reader.join().unwrap()).collect();
    let naive = naive.join().unwrap();
    let cursors: Vec<String> = reads
        .iter()
        .map(|read| format!("cursor {}, last horizon {}", read.cursor, read.last_horizon))
        .collect();
    assert!(
        !timed_out,
        "the readers did not reach the last committed ID {last} within {CATCH_UP_WITHIN:?} of the last commit: {}",
        cursors.join("; ")
    );
    let ops: Vec<&Op<Plan>> = histories.iter().flatten().collect();
    let mut errors = run.errors.lock().unwrap().clone();
    errors.extend(ops.iter().filter(|op| !op.succeeded() && !op.lost()).map(|op| {
        format!(
            "writer {}: {} {}",
            op.writer,
            op.error.as_deref().unwrap_or(""),
            op.message.as_deref().unwrap_or("")
        )
    }));
    errors.extend(reads.iter().chain([&naive]).flat_map(|read| read.errors.iter().cloned()));
    assert!(errors.is_empty(), "unexpected errors: {errors:?}");

    // The history agrees with the table: every acknowledged commit stored, nothing rolled
    // back stored, and nothing stored that no transaction of a writer was given.
    let stored: HashSet<i64> = truth.iter().copied().collect();
    let lost_commits: Vec<i64> =
        ops.iter().flat_map(|op| &op.committed).copied().filter(|id| !stored.contains(id)).collect();
    assert_none(&lost_commits, "acknowledged IDs not stored");
    let undone: Vec<i64> =
        ops.iter().flat_map(|op| &op.aborted).copied().filter(|id| stored.contains(id)).collect();
    assert_none(&undone, "IDs of rolled back transactions stored");
    let given: HashSet<i64> =
        ops.iter().flat_map(|op| op.committed.iter().chain(&op.maybe)).copied().collect();
    let unknown: Vec<i64> = truth.iter().copied().filter(|id| !given.contains(id)).collect();
    assert_none(&unknown, "rows stored with IDs no writer was given");

    // The run was what it says: every kind of transaction, a crash every client survived.
    let ended = |end: End| ops.iter().filter(|op| op.succeeded() && op.kind.end == end).count();
    let drawn = |what: fn(&Plan) -> usize| ops.iter().map(|op| what(&op.kind)).sum::<usize>();
    let committed_after_crash = ops
        .iter()
        .filter(|op| op.succeeded() && op.kind.end == End::Commit && op.start_ms > crashed_at_ms)
        .count();
    let overtaken = run.overtaken.load(SeqCst);
    assert!(cluster.log().contains("was terminated by signal 9"), "the killed backend is not in the log");
    for (kind, count) in [
        ("committed", ended(End::Commit)),
        ("aborted", ended(End::Rollback)),
        ("prepared", ended(End::Prepare)),
        ("long", drawn(|plan| usize::from(plan.sleep_ms > 0))),
        ("batches", drawn(Plan::batches)),
        ("savepoints", drawn(|plan| usize::from(plan.savepoint.is_some()))),
        ("prepared then committed", prepared_committed),
        ("prepared then rolled back", prepared_rolled_back),
        ("straggler transactions overtaken", overtaken),
        ("committed after the crash", committed_after_crash),
    ] {
        assert!(count > 0, "no transactions {kind}");
    }
    for (number, history) in histories.iter().enumerate() {
        assert!(history.iter().any(|op| op.lost()), "writer {number} never lost its connection to the crash");
    }
    for (name, read) in [("reader 1", &reads[0]), ("reader 2", &reads[1]), ("the naive reader", &naive)] {
        assert!(read.lost >= 1, "{name} never lost its connection to the crash");
    }

    // Each reader below the horizon read every committed row, each once.
    for (number, read) in reads.iter().enumerate() {
        let (twice, missed, extra) = compare(&read.ids, &truth);
        assert!(
            twice.is_empty() && missed.is_empty() && extra.is_empty(),
            "reader {} read {} IDs of {} committed: {} read twice (first {:?}), {} missed (first {:?}), \
             {} read that are not committed (first {:?})",
            number + 1,
            read.ids.len(),
            truth.len(),
            twice.len(),
            first_few(&twice),
            missed.len(),
            first_few(&missed),
            extra.len(),
            first_few(&extra),
        );
    }
    // The naive reader, beside them, missed rows: the ones committed after it read past them.
    let (twice, missed, extra) = compare(&naive.ids, &truth);
    assert!(
        twice.is_empty() && extra.is_empty(),
        "the naive reader read {twice:?} twice, {extra:?} uncommitted"
    );
    assert!(
        !missed.is_empty(),
        "the naive reader missed no row: this run cannot tell a safe reader from one that is not"
    );

    let mut lags: Vec<i64> = reads.iter().flat_map(|read| read.lags_ms.iter().copied()).collect();
    lags.sort_unstable();
    println!(
        "horizon: {} committed rows from {WRITERS} writers on {} shards in {:.1} s ({} transactions committed, \
         {} rolled back, {} prepared: {prepared_committed} committed and {prepared_rolled_back} rolled back later, \
         {} after the writes; {} long, {} batches, {} savepoints rolled back); a backend killed -9 at {:.1} s, \
         {committed_after_crash} transactions committed after it",
        truth.len(),
        SHARDS.len(),
        WRITING.as_secs_f64(),
        ended(End::Commit),
        ended(End::Rollback),
        ended(End::Prepare),
        leftover.len(),
        drawn(|plan| usize::from(plan.sleep_ms > 0)),
        drawn(Plan::batches),
        drawn(|plan| usize::from(plan.savepoint.is_some())),
        crashed_at.as_secs_f64(),
    );
    println!(
        "horizon: 2 readers below the horizon read every committed row once ({} and {} polls); the horizon trailed \
         the clock by {} ms (median), {} ms (99th percentile) and {} ms (worst); the readers reached the last row \
         {} ms after the last commit",
        reads[0].polls,
        reads[1].polls,
        lags[lags.len() / 2],
        lags[lags.len() * 99 / 100],
        lags[lags.len() - 1],
        caught_up_in.as_millis(),
    );
    println!(
        "horizon: the naive reader (id > cursor, no horizon) missed {} of {} committed rows \
         ({overtaken} of them stragglers committed after it read past them)",
        missed.len(),
        truth.len(),
    );
}

// ---- Focused tests -----------------------------------------------------------------------

/// (a) An open transaction holds the horizon below its ID until it ends; a bare autocommit
/// call holds nothing once it has returned.
#[test]
fn an_open_transaction_holds_the_horizon_until_it_ends() {
    let cluster = server("horizon-open", &[]);
    let (mut writer, mut reader) = (cluster.connect(), cluster.connect());
    let before = horizon(&mut reader);

    let id = open_transaction_with_an_id(&mut writer, 1);
    assert!(id >= before, "ID {id} issued below the horizon {before} given before it");
    assert_horizon_held(&mut reader, None, id, Duration::from_millis(500), "its transaction is open");
    writer.batch_execute("COMMIT").unwrap();
    wait_for_horizon_above(&mut reader, None, id, "its transaction committed");

    let id = open_transaction_with_an_id(&mut writer, 1);
    assert_horizon_held(&mut reader, None, id, Duration::from_millis(300), "its transaction is open");
    writer.batch_execute("ROLLBACK").unwrap();
    wait_for_horizon_above(&mut reader, None, id, "its transaction rolled back");

    // The writer's connection stays open, idle.
    let id: i64 = value(&mut writer, "SELECT snowflake_nextval(1)", &[]);
    wait_for_horizon_above(&mut reader, None, id, "a bare SELECT snowflake_nextval(1) returned");
    let id: i64 = value(&mut writer, "INSERT INTO t VALUES (snowflake_nextval(2)) RETURNING id", &[]);
    wait_for_horizon_above(&mut reader, None, id, "an autocommit INSERT returned");
}

/// (b) A prepared transaction holds the horizon below its ID across a clean restart and a
/// crash (a backend killed -9), until COMMIT PREPARED.
#[test]
fn a_prepared_transaction_holds_the_horizon_across_restarts() {
    let mut cluster = server("horizon-prepared", &["max_prepared_transactions = 4"]);
    let mut writer = cluster.connect();
    let id = open_transaction_with_an_id(&mut writer, 3);
    writer.batch_execute("PREPARE TRANSACTION 'holds'").unwrap();
    // The writer's session goes on with other work, which must not release it.
    writer.batch_execute("BEGIN; SELECT snowflake_nextval(3); COMMIT").unwrap();
    drop(writer);
    let mut reader = cluster.connect();
    assert_horizon_held(&mut reader, None, id, Duration::from_millis(500), "its transaction is prepared");

    cluster.stop("fast");
    cluster.start_with(&[]);
    let mut reader = cluster.connect();
    assert_horizon_held(&mut reader, None, id, Duration::from_millis(300), "prepared, after a clean restart");

    // A backend killed while its connection is open (a closed one may be gone already).
    let mut victim = cluster.connect();
    let mut reader = cluster.kill_backend(backend_pid(&mut victim) as u32);
    drop(victim);
    assert_horizon_held(
        &mut reader,
        None,
        id,
        Duration::from_millis(300),
        "prepared, after a crash and recovery",
    );
    let gids = count(&mut reader, "SELECT count(*) FROM pg_prepared_xacts WHERE gid = 'holds'");
    assert_eq!(gids, 1, "the prepared transaction did not survive the crash");

    let mut other = cluster.connect();
    other.batch_execute("COMMIT PREPARED 'holds'").unwrap();
    wait_for_horizon_above(&mut reader, None, id, "COMMIT PREPARED");
    assert_eq!(value::<i64>(&mut reader, "SELECT count(*) FROM t WHERE id = $1", &[&id]), 1);
}

/// A PREPARE TRANSACTION whose IDs cannot be recorded for the horizon (a directory stands
/// where the file's new copy is written, as a full or failing disk would stop it) is refused
/// with 58030 (io_error), naming the file and the reason, not XX000; the transaction is rolled
/// back, and once the file can be written again a PREPARE goes through.
#[test]
fn a_prepare_whose_ids_cannot_be_recorded_is_refused_with_an_io_error() {
    let cluster = server("horizon-prepare-unrecorded", &["max_prepared_transactions = 4"]);
    let blocker = cluster.data_dir().join("snowflake_id.prepared.tmp");
    std::fs::create_dir(&blocker).unwrap();
    let mut writer = cluster.connect();
    let id = open_transaction_with_an_id(&mut writer, 3);
    let error = db_error(&mut writer, "PREPARE TRANSACTION 'unrecorded'");
    assert_eq!(error.code().code(), "58030", "{error:?}");
    assert!(error.message().contains("\"snowflake_id.prepared\""), "{error:?}");
    assert!(error.hint().is_some_and(|hint| hint.contains("disk")), "{error:?}");
    let _ = writer.batch_execute("ROLLBACK");
    assert_eq!(count(&mut writer, "SELECT count(*) FROM pg_prepared_xacts"), 0);
    let stored: i64 = value(&mut writer, "SELECT count(*) FROM t WHERE id = $1", &[&id]);
    assert_eq!(stored, 0, "the refused transaction's row is there");

    std::fs::remove_dir(&blocker).unwrap();
    open_transaction_with_an_id(&mut writer, 3);
    writer.batch_execute("PREPARE TRANSACTION 'recorded'").unwrap();
    writer.batch_execute("COMMIT PREPARED 'recorded'").unwrap();
}

/// (c) IDs issued by parallel workers hold their leader's transaction's horizon.
#[test]
fn ids_of_parallel_workers_hold_the_horizon() {
    let cluster = server("horizon-parallel", &[]);
    let mut leader = cluster.connect();
    let forced = if major_of(pg_bin_dir()) >= 16 { "debug_parallel_query" } else { "force_parallel_mode" };
    leader
        .batch_execute(&format!(
            "CREATE TABLE big AS SELECT g FROM generate_series(1, 200000) g;
             ANALYZE big;
             SET {forced} = on;
             SET parallel_setup_cost = 0;
             SET parallel_tuple_cost = 0;
             SET min_parallel_table_scan_size = 0;
             SET max_parallel_workers_per_gather = 2;
             SET parallel_leader_participation = off;"
        ))
        .unwrap();
    leader.batch_execute("BEGIN").unwrap();
    // EXPLAIN ANALYZE runs the statement: the table is made, by workers alone (the leader
    // only gathers), in the open transaction.
    let plan = column::<String>(
        &mut leader,
        "EXPLAIN (ANALYZE, VERBOSE, COSTS OFF, TIMING OFF)
         CREATE TABLE par_ids AS SELECT snowflake_nextval(1) AS id, g FROM big",
        &[],
    )
    .join("\n");
    let launched: usize = plan
        .lines()
        .find_map(|line| line.trim().strip_prefix("Workers Launched: "))
        .and_then(|count| count.parse().ok())
        .unwrap_or_else(|| panic!("no parallel workers in the plan:\n{plan}"));
    assert!(launched > 0, "no worker launched:\n{plan}");
    let scan = plan.find("Parallel Seq Scan").unwrap_or_else(|| panic!("no parallel scan:\n{plan}"));
    assert!(
        plan[scan..].contains("snowflake_nextval(1)"),
        "the workers do not call snowflake_nextval:\n{plan}"
    );
    let row = leader.query_one("SELECT min(id), max(id), count(*) FROM par_ids", &[]).unwrap();
    let (lowest, highest, count): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
    assert_eq!(count, 200_000);

    let mut reader = cluster.connect();
    assert_horizon_held(
        &mut reader,
        None,
        lowest,
        Duration::from_millis(500),
        "the IDs of parallel workers are uncommitted",
    );
    leader.batch_execute("COMMIT").unwrap();
    wait_for_horizon_above(&mut reader, None, highest, "the transaction whose workers issued IDs committed");
}

/// (d) A clock stepped back after a horizon was given: a shard that never issued starts at
/// or above that horizon, and the horizon never goes back.
#[test]
fn a_clock_stepped_back_issues_nothing_below_a_horizon_given() {
    // A lead bound wider than the step, so that the shard issues rather than refusing.
    let mut cluster =
        Cluster::builder("horizon-clock").settings(&["snowflake_id.max_lead_ms = 30s"]).create();
    let clock = FakeClock::of(&cluster);
    clock.start(&mut cluster);
    let mut client = cluster.connect();
    client.batch_execute("CREATE EXTENSION snowflake_id").unwrap();
    let mut given = horizon(&mut client);

    clock.set("-10");
    let clock_back: i64 = value(&mut client, "SELECT snowflake_min_id(clock_timestamp())", &[]);
    assert!(clock_back < given, "the clock did not step back: {clock_back} >= {given}");
    for shard in [7, 8] {
        let id: i64 = value(&mut client, "SELECT snowflake_nextval($1)", &[&shard]);
        assert!(id >= given, "shard {shard}, never used before, issued {id} below the horizon {given}");
    }
    for _ in 0..5 {
        let next = horizon(&mut client);
        assert!(next >= given, "the horizon went back from {given} to {next} with the clock");
        given = next;
        sleep(Duration::from_millis(50));
    }
    let id: i64 = value(&mut client, "SELECT snowflake_nextval(9)", &[]);
    assert!(id >= given, "shard 9 issued {id} below the horizon {given}");
}

/// (e) With no writers, the horizon follows the clock.
#[test]
fn an_idle_horizon_follows_the_clock() {
    // No autovacuum: nothing else ends a transaction meanwhile.
    let cluster = server("horizon-idle", &["autovacuum = off"]);
    let mut client = cluster.connect();
    let first = horizon(&mut client);
    sleep(Duration::from_millis(300));
    let row =
        client.query_one("SELECT snowflake_horizon(), snowflake_min_id(clock_timestamp())", &[]).unwrap();
    let (second, clock): (i64, i64) = (row.get(0), row.get(1));
    // The time part, in ms, of an ID of the default layout (10 shard bits, 12 sequence bits).
    let ms = |id: i64| id >> 22;
    assert!(
        ms(second) - ms(first) >= 250,
        "the horizon moved by {} ms in 300 ms of an idle server",
        ms(second) - ms(first)
    );
    // At or below the clock, and close to it (a generous bound for a loaded machine).
    assert!(second <= clock, "the horizon {second} is ahead of the clock {clock}");
    assert!(ms(clock) - ms(second) <= 1000, "the horizon trails the clock by {} ms", ms(clock) - ms(second));
}

/// (f') A commit not yet visible holds the horizon: a COMMIT waiting for a synchronous standby
/// (one that never answers) has passed PRE_COMMIT and written its commit record, but new
/// snapshots do not see its rows until it is done. The horizon stays at or below its ID until
/// then; released earlier, a reader would page past a row it cannot see yet and never read it.
#[test]
fn a_commit_waiting_to_become_visible_holds_the_horizon() {
    let cluster = server("horizon-commit-wait", &[]);
    let mut admin = cluster.connect();
    let mut writer = cluster.connect();
    let pid = backend_pid(&mut writer);
    apply_settings(&mut writer, &[("synchronous_standby_names", "nobody")]);
    let waiting =
        format!("SELECT count(*) FROM pg_stat_activity WHERE pid = {pid} AND wait_event = 'SyncRep'");
    // A COMMIT waits only once the checkpointer has applied the setting too (to the shared
    // flag commits look at), which can come after the sessions read it on a loaded machine:
    // one that ended at once is followed by another transaction, until one waits.
    let (id, commit) = loop {
        let id = open_transaction_with_an_id(&mut writer, 1);
        let commit = std::thread::spawn(move || writer.batch_execute("COMMIT").map(|()| writer));
        wait_until("the COMMIT waits for the synchronous standby, or ends", || {
            commit.is_finished() || count(&mut admin, &waiting) == 1
        });
        if !commit.is_finished() {
            break (id, commit);
        }
        writer = commit.join().unwrap().expect("a COMMIT before the setting applied");
    };

    let mut reader = cluster.connect();
    let visible = format!("SELECT count(*) FROM t WHERE id = {id}");
    assert_eq!(count(&mut reader, &visible), 0, "the waiting commit's row is visible already");
    let while_ = "its COMMIT waited to become visible";
    assert_horizon_held(&mut reader, None, id, Duration::from_secs(2), while_);
    assert_horizon_held(&mut reader, Some(1), id, Duration::from_millis(500), while_);

    admin.batch_execute("ALTER SYSTEM RESET synchronous_standby_names").unwrap();
    admin.batch_execute("SELECT pg_reload_conf()").unwrap();
    commit.join().unwrap().expect("the COMMIT, once no standby is waited for");
    wait_for_horizon_above(&mut reader, None, id, "the commit became visible");
    assert_eq!(count(&mut reader, &visible), 1, "the committed row");
}

/// (f) A statement's horizon holds for its own snapshot: a repeatable-read snapshot taken
/// while a transaction held IDs does not get a horizon past them after that one commits
/// (it cannot see those rows), while a new snapshot does.
#[test]
fn a_horizon_holds_for_the_snapshot_of_its_statement() {
    let cluster = server("horizon-snapshot", &[]);
    let (mut writer, mut snapshot, mut fresh) = (cluster.connect(), cluster.connect(), cluster.connect());
    let id = open_transaction_with_an_id(&mut writer, 5);
    snapshot.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1").unwrap();
    writer.batch_execute("COMMIT").unwrap();
    // Past the millisecond of the ID, so that the clock alone would give a horizon above it.
    let after_commit = wait_for_horizon_above(&mut fresh, None, id, "its transaction committed");
    for _ in 0..3 {
        let old = horizon(&mut snapshot);
        assert!(
            old <= id,
            "a snapshot taken before the commit of ID {id} got the horizon {old}: it cannot see that row, \
             and a reader would move past it (a new snapshot gets {after_commit})"
        );
        sleep(Duration::from_millis(50));
    }
    let visible: i64 = value(&mut snapshot, "SELECT count(*) FROM t WHERE id = $1", &[&id]);
    assert_eq!(visible, 0, "the repeatable-read snapshot sees the row committed after it");
    snapshot.batch_execute("COMMIT").unwrap();
    wait_for_horizon_above(&mut snapshot, None, id, "the old snapshot ended");
}

/// (g) The refusals: a shard outside the fence, a NULL shard, a shard outside the layout,
/// and a hot standby.
#[test]
fn the_horizon_refuses_what_it_cannot_answer_for() {
    let primary = server("horizon-refusals", &["snowflake_id.shards = '0-3'"]);
    let mut client = primary.connect();

    let error = db_error(&mut client, "SELECT snowflake_horizon(5)");
    assert_eq!(error.code().code(), "55000", "{}", error.message());
    assert_eq!(error.message(), "shard 5 is not issued by this server");
    assert_eq!(
        error.hint(),
        Some("Take the horizon of shard 5 on the server that issues it, and read that shard's rows there.")
    );
    let error = db_error(&mut client, "SELECT snowflake_horizon(NULL::integer)");
    assert_eq!(error.code().code(), "22004", "{}", error.message());
    let error = db_error(&mut client, "SELECT snowflake_horizon(5000)");
    assert_eq!(error.code().code(), "22023", "{}", error.message());
    // A shard of the fence: the server's horizon.
    let row = client.query_one("SELECT snowflake_horizon(2), snowflake_horizon()", &[]).unwrap();
    let (of_shard, of_server): (i64, i64) = (row.get(0), row.get(1));
    assert!(
        of_shard <= of_server && (of_server >> 22) - (of_shard >> 22) < 1000,
        "{of_shard} vs {of_server}"
    );

    let pair = Pair::of(primary, "horizon-refusals");
    let mut on_standby = pair.standby.connect();
    for (call, function) in [
        ("SELECT snowflake_horizon()", "snowflake_horizon"),
        ("SELECT snowflake_horizon(2)", "snowflake_horizon"),
    ] {
        let error = db_error(&mut on_standby, call);
        assert_eq!(error.code().code(), "25006", "{call}: {}", error.message());
        assert_eq!(error.message(), format!("cannot execute {function}() during recovery"));
    }
}

/// The holds `snowflake_horizon_holders()` reports: (pid, whether prepared, shard), sorted.
fn holders(client: &mut Client) -> Vec<(Option<i32>, bool, i32)> {
    let mut holders: Vec<_> = client
        .query(
            "SELECT pid, prepared_xid IS NOT NULL, shard FROM snowflake_horizon_holders()
             WHERE held_since <= clock_timestamp() AND (xact_start IS NOT NULL OR prepared_xid IS NOT NULL)",
            &[],
        )
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1), row.get(2)))
        .collect();
    holders.sort();
    holders
}

/// (h) One tenant cannot stall another: an idle transaction that took an ID of shard 5 holds
/// the horizons of shard 5 and of every shard, not that of shard 3, which moves past it while
/// it is open; `snowflake_horizon_holders()` names its backend and shard. A transaction that
/// takes shards 5 and 7 holds those two.
#[test]
fn an_idle_transaction_holds_only_the_horizons_of_its_shards() {
    let cluster = server("horizon-tenants", &[]);
    let (mut tenant, mut reader) = (cluster.connect(), cluster.connect());
    let pid = backend_pid(&mut tenant);
    let id = open_transaction_with_an_id(&mut tenant, 5);
    wait_for_horizon_above(&mut reader, Some(3), id, "only a transaction of shard 5 was open");
    for shard in [Some(5), None] {
        let during = Duration::from_millis(200);
        assert_horizon_held(&mut reader, shard, id, during, "a transaction of shard 5 is open");
    }
    assert_eq!(holders(&mut reader), [(Some(pid), false, 5)]);

    // The same transaction takes shard 7 too: 3 stays free.
    let id_7: i64 = value(&mut tenant, "INSERT INTO t VALUES (snowflake_nextval(7)) RETURNING id", &[]);
    wait_for_horizon_above(&mut reader, Some(3), id_7, "a transaction of shards 5 and 7 was open");
    for shard in [Some(5), Some(7)] {
        let during = Duration::from_millis(200);
        assert_horizon_held(&mut reader, shard, id, during, "a transaction of shards 5 and 7 is open");
    }
    assert_eq!(holders(&mut reader), [(Some(pid), false, 5), (Some(pid), false, 7)]);

    tenant.batch_execute("COMMIT").unwrap();
    wait_for_horizon_above(&mut reader, Some(5), id_7, "the transaction of shards 5 and 7 committed");
    wait_for_horizon_above(&mut reader, Some(7), id_7, "the transaction of shards 5 and 7 committed");
    assert_eq!(holders(&mut reader), []);

    // Its next transaction holds its own shard only.
    let id = open_transaction_with_an_id(&mut tenant, 3);
    wait_for_horizon_above(&mut reader, Some(7), id, "only a transaction of shard 3 was open");
    assert_eq!(holders(&mut reader), [(Some(pid), false, 3)]);
}

/// (i) A prepared transaction of shard 5 holds the horizon of shard 5, not that of shard 3,
/// before and after a restart (which reads its shards back from `snowflake_id.prepared`), and
/// is reported without a process; a role outside pg_read_all_stats may not list the holders.
#[test]
fn a_prepared_transaction_holds_only_the_horizons_of_its_shards() {
    let mut cluster = server("horizon-prepared-tenant", &["max_prepared_transactions = 4"]);
    let mut tenant = cluster.connect();
    let id = open_transaction_with_an_id(&mut tenant, 5);
    tenant.batch_execute("PREPARE TRANSACTION 'tenant 5'").unwrap();
    let mut reader = cluster.connect();
    for run in ["prepared", "prepared, after a clean restart"] {
        wait_for_horizon_above(&mut reader, Some(3), id, &format!("only a transaction of shard 5 was {run}"));
        assert_horizon_held(&mut reader, Some(5), id, Duration::from_millis(300), run);
        assert_eq!(holders(&mut reader), [(None, true, 5)], "{run}");
        let gid: String = value(
            &mut reader,
            "SELECT gid FROM snowflake_horizon_holders() JOIN pg_prepared_xacts ON transaction = prepared_xid",
            &[],
        );
        assert_eq!(gid, "tenant 5");
        cluster.stop("fast");
        cluster.start_with(&[]);
        reader = cluster.connect();
    }
    reader.batch_execute("CREATE ROLE tenant LOGIN").unwrap();
    let mut as_tenant = cluster.connect_as("tenant", "postgres");
    let error = db_error(&mut as_tenant, "SELECT * FROM snowflake_horizon_holders()");
    assert_eq!(error.code().code(), "42501", "{}", error.message());
    reader.batch_execute("GRANT pg_read_all_stats TO tenant").unwrap();
    as_tenant.batch_execute("SELECT * FROM snowflake_horizon_holders()").unwrap();

    reader.batch_execute("COMMIT PREPARED 'tenant 5'").unwrap();
    wait_for_horizon_above(&mut reader, Some(5), id, "COMMIT PREPARED");
    assert_eq!(holders(&mut reader), []);
}

// ---- One role cannot push another's horizons out -----------------------------------------

/// Sets its flag when dropped: the threads of a scope watching it stop, also when the test
/// fails half-way (a scope waits for its threads before the failure goes on).
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, SeqCst);
    }
}

/// Polls of each kind, and those that were not above a given ID.
#[derive(Default, Debug)]
struct Polls {
    of_shard: usize,
    of_shard_stuck: usize,
    of_every_shard: usize,
    of_every_shard_stuck: usize,
}

/// (j) One role cannot push another's horizons out (0.7.0 kept the last 256 horizons given,
/// by anyone, and a flood of calls sent other readers back to the horizon of the server's
/// start). carol, with LOGIN only, floods `snowflake_horizon()` from 6 connections: 4 with
/// `count(snowflake_horizon())` over 200,000 rows, one with statements that each assign an xid,
/// one with subtransactions that assign xids and end only with their transaction; beside one
/// writer committing rows of shard 1, bob's polls of `snowflake_horizon(1)` and
/// `snowflake_horizon()` all stay above the highest ID committed before the flood: the horizon
/// of the start is below every ID of this run, so a poll sent back to it is at or below.
#[test]
fn a_flood_of_horizon_calls_by_another_role_sends_no_poll_back_to_the_start() {
    const POLLS: usize = 3000;
    const POLLING_AT_MOST: Duration = Duration::from_secs(30);
    let cluster = server("horizon-flood", &[]);
    let mut admin = cluster.connect();
    admin.batch_execute("CREATE ROLE carol LOGIN; CREATE ROLE bob LOGIN").unwrap();
    let (stop, flooding) = (AtomicBool::new(false), AtomicBool::new(false));
    let committed = AtomicUsize::new(0);
    let flood_statements = AtomicUsize::new(0);
    let wait_for_commits = |more: usize| {
        let target = committed.load(SeqCst) + more;
        let what = format!("the writer committed {more} more rows");
        wait_for(&what, Duration::from_secs(15), || (committed.load(SeqCst) >= target).then_some(()));
    };
    let (polls, before) = std::thread::scope(|scope| {
        let _stop = StopOnDrop(&stop);
        let writer = scope.spawn(|| {
            let mut client = cluster.connect();
            while !stop.load(SeqCst) {
                client.batch_execute("INSERT INTO t VALUES (snowflake_nextval(1))").unwrap();
                committed.fetch_add(1, SeqCst);
            }
        });
        let floods: Vec<_> = (0..6)
            .map(|number| {
                let (stop, flooding, flood_statements, cluster) =
                    (&stop, &flooding, &flood_statements, &cluster);
                scope.spawn(move || {
                    let mut carol = cluster.connect_as("carol", "postgres");
                    let statement = match number {
                        0 => "SELECT pg_current_xact_id(), snowflake_horizon()",
                        1 => {
                            carol.batch_execute("CREATE TEMP TABLE junk (i int)").unwrap();
                            "DO $$ BEGIN FOR i IN 1..200 LOOP BEGIN INSERT INTO junk VALUES (i); \
                             PERFORM snowflake_horizon(); EXCEPTION WHEN division_by_zero THEN NULL; END; \
                             END LOOP; END $$; TRUNCATE junk"
                        }
                        _ => "SELECT count(snowflake_horizon()) FROM generate_series(1, 200000)",
                    };
                    while !flooding.load(SeqCst) && !stop.load(SeqCst) {
                        sleep(Duration::from_millis(5));
                    }
                    while !stop.load(SeqCst) {
                        carol.batch_execute(statement).unwrap();
                        flood_statements.fetch_add(1, SeqCst);
                    }
                })
            })
            .collect();

        wait_for_commits(20);
        let before: i64 = value(&mut admin, "SELECT max(id) FROM t", &[]);
        let mut bob = cluster.connect_as("bob", "postgres");
        // bob's polls before the flood, above `before`, then a commit after them: from then on
        // they hold for every snapshot.
        wait_for_horizon_above(&mut bob, Some(1), before, "the writer committed it");
        wait_for_horizon_above(&mut bob, None, before, "the writer committed it");
        wait_for_commits(2);
        flooding.store(true, SeqCst);
        // Once it has begun (a few statements; at most 10 s, as a failed one ends the test).
        let begun_by = Instant::now() + Duration::from_secs(10);
        while flood_statements.load(SeqCst) < 6 && Instant::now() < begun_by {
            sleep(Duration::from_millis(5));
        }
        let mut polls = Polls::default();
        let until = Instant::now() + POLLING_AT_MOST;
        for poll in (0..POLLS).take_while(|_| Instant::now() < until) {
            if poll % 2 == 0 {
                polls.of_shard += 1;
                polls.of_shard_stuck += usize::from(horizon_of(&mut bob, Some(1)) <= before);
            } else {
                polls.of_every_shard += 1;
                polls.of_every_shard_stuck += usize::from(horizon_of(&mut bob, None) <= before);
            }
        }
        stop.store(true, SeqCst);
        writer.join().expect("the writer failed");
        for flood in floods {
            flood.join().expect("a flood connection failed");
        }
        (polls, before)
    });
    eprintln!(
        "{polls:?} beside {} flood statements and {} rows committed",
        flood_statements.load(SeqCst),
        committed.load(SeqCst)
    );
    assert!(polls.of_shard + polls.of_every_shard >= 100, "bob polled only {polls:?} in 30 s");
    assert_eq!(
        (polls.of_shard_stuck, polls.of_every_shard_stuck),
        (0, 0),
        "polls of bob at or below ID {before}, committed before carol's flood (the horizon of the start): {polls:?}"
    );
}

/// (k) A reader's own poll is not taken away by another role's subtransactions: they assign
/// xids that end only with their transaction, so that every call, the reader's too, is given
/// with a next xid of its own, and carol's 400 calls push the reader's poll out of the shared
/// horizons. bob's poll above ID `before`, taken before a commit, still answers for his later
/// snapshot, taken before another transaction ends, after 20 more polls of his own.
#[test]
fn subtransactions_of_another_role_do_not_take_a_readers_own_poll() {
    // No autovacuum: no other transaction ends meanwhile.
    let cluster = server("horizon-subtransactions", &["autovacuum = off"]);
    let mut writer = cluster.connect();
    writer.batch_execute("CREATE ROLE carol LOGIN; CREATE ROLE bob LOGIN").unwrap();
    for _ in 0..3 {
        writer.batch_execute("INSERT INTO t VALUES (snowflake_nextval(1))").unwrap();
    }
    let before: i64 = value(&mut writer, "SELECT max(id) FROM t", &[]);
    let mut bob = cluster.connect_as("bob", "postgres");
    wait_for_horizon_above(&mut bob, Some(1), before, "the writer committed it");
    wait_for_horizon_above(&mut bob, None, before, "the writer committed it");
    // A transaction with an xid ends after bob's poll: that poll holds for every later snapshot.
    writer.batch_execute("INSERT INTO t VALUES (snowflake_nextval(1))").unwrap();
    // An xid that ends later, taking no ID (it holds no horizon).
    writer.batch_execute("BEGIN; SELECT pg_current_xact_id()").unwrap();

    let mut carol = cluster.connect_as("carol", "postgres");
    carol.batch_execute("CREATE TEMP TABLE junk (i int); BEGIN").unwrap();
    for _ in 0..20 {
        carol
            .batch_execute(
                "DO $$ BEGIN FOR i IN 1..20 LOOP BEGIN INSERT INTO junk VALUES (i); PERFORM snowflake_horizon(); \
                 EXCEPTION WHEN division_by_zero THEN NULL; END; END LOOP; END $$",
            )
            .unwrap();
        horizon_of(&mut bob, Some(1));
    }
    bob.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1").unwrap();
    writer.batch_execute("COMMIT").unwrap();
    let (of_shard, of_every_shard) = (horizon_of(&mut bob, Some(1)), horizon(&mut bob));
    assert!(
        of_shard > before && of_every_shard > before,
        "bob's snapshot, taken after his poll above ID {before} and its commit, got {of_shard} (shard 1) and \
         {of_every_shard} (every shard): the horizon of the start"
    );
    bob.batch_execute("COMMIT").unwrap();
    carol.batch_execute("COMMIT").unwrap();
}
