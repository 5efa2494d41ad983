//! High availability as users run it: deploy/patroni.sh's three Patroni nodes on etcd, the
//! extension's settings in the DCS, one writer through a libpq multi-host connection string
//! (`target_session_attrs=read-write`) inserting rows with `DEFAULT snowflake_nextval(1)` and
//! recording every ID acknowledged to it, reconnecting whenever its server goes away. Under it:
//! planned switchovers (`patronictl switchover`); a crash failover (the leader's Patroni and
//! PostgreSQL killed -9 together), the old leader rejoining through pg_rewind and a switchover
//! back to it; the leader run seconds ahead of its clock (`snowflake_advance`, then a
//! `snowflake_nextvals` batch), killed -9 with its Patroni at once, asynchronous and with
//! `synchronous_mode`.
//!
//! Checked: every acknowledged ID distinct, and the first ID acknowledged after each promotion
//! above every ID acknowledged before it (one writer, so: the IDs rise in the order they were
//! acknowledged). Printed, never asserted: how long writes stopped at each switchover and
//! failover, and how far ahead of the clock each new leader resumed.
//!
//! Patroni's smallest ttl is 20 s (it raises a smaller one), so a crash failover takes about
//! that; loop_wait 2 s keeps the rest quick. About 2.5 minutes.

use postgres::{Client, Config, NoTls};
use snowflake_id_integration::engine::{Op, Route, Transaction, Workload, Writer as EngineWriter};
use snowflake_id_integration::{column, count, print_log_tail, value, wait_for, wait_until, Kit, Pick};
use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// deploy/patroni.sh run for real in a temporary folder; down and removed when dropped, also
/// when the test fails (the end of each node's Patroni log printed then).
struct Patroni {
    kit: Kit,
    /// Held until the kit is down (fields drop in order: the kit first).
    _one_at_a_time: std::sync::MutexGuard<'static, ()>,
}

impl Patroni {
    /// One kit at a time: two at once (each test's) share the loopback's free ports, which each
    /// picks and only later listens on, and the machine's two cores; once, both kits' first
    /// node then failed to become the leader within the kit's 120 s. `_one_at_a_time` holds it.
    fn up(env: &[(&str, &str)]) -> Patroni {
        static ONE_KIT: Mutex<()> = Mutex::new(());
        let one_at_a_time = ONE_KIT.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut all = vec![
            // The extension is installed by the test command's earlier step.
            ("SNOWFLAKE_PATRONI_SKIP_INSTALL", "1"),
            ("SNOWFLAKE_PATRONI_LOOP_WAIT", "2"),
            ("SNOWFLAKE_PATRONI_RETRY_TIMEOUT", "5"),
        ];
        all.extend_from_slice(env);
        Patroni { kit: Kit::up("patroni", 3, &all), _one_at_a_time: one_at_a_time }
    }

    fn run(&self, args: &[&str]) -> String {
        self.kit.run(args).trim().to_string()
    }

    fn leader(&self) -> Option<String> {
        let out = self.kit.command(&["leader"]).output().expect("run patroni.sh leader");
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// Waits until a node other than `old` leads; returns it.
    fn new_leader(&self, old: &str) -> String {
        wait_for(&format!("a leader other than {old}"), Duration::from_secs(60), || {
            self.leader().filter(|leader| !leader.is_empty() && leader != old)
        })
    }

    /// Waits until a leader runs with `standbys` streaming standbys (one of them synchronous
    /// with `synchronous_mode`).
    fn wait_for_standbys(&self, standbys: usize, synchronous: bool) {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let status = self.run(&["status"]);
            let streaming = status.matches("| streaming |").count();
            let sync = status.contains("Sync Standby");
            if streaming >= standbys && self.leader().is_some() && (!synchronous || sync) {
                return;
            }
            assert!(Instant::now() < deadline, "the nodes did not all run:\n{status}");
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// The libpq connection string of every node (or of one).
    fn config(&self, node: Option<&str>) -> Config {
        let text = self.run(&[&["connstr"], node.as_slice()].concat());
        Config::from_str(&text).unwrap_or_else(|e| panic!("connection string {text}: {e}"))
    }

    fn connect(&self, node: &str) -> Client {
        self.config(Some(node)).connect(NoTls).unwrap_or_else(|e| panic!("connect to {node}: {e}"))
    }

    fn patroni_log(&self, node: &str) -> PathBuf {
        self.kit.dir().join(node).join("patroni.log")
    }
}

impl Drop for Patroni {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for node in ["node1", "node2", "node3"] {
                print_log_tail(&format!("the Patroni log of {node}"), &self.patroni_log(node), 25);
            }
        }
    }
}

/// An ID acknowledged to the writer.
#[derive(Clone, Copy)]
struct Ack {
    at: Instant,
    unix_ms: i64,
    id: i64,
    port: i32,
}

/// The writer's op: one row. `port` is the server that answered (`inet_server_port()`), once
/// it has.
#[derive(Clone, Copy, Debug, Default)]
struct Insert {
    port: Option<i32>,
}

/// The writer's workload: one connection through the multi-host string (the engine connects
/// again after each error), one row per statement.
struct Inserting {
    config: Config,
    started: Instant,
    stop: Arc<AtomicBool>,
    acknowledged: Arc<AtomicUsize>,
}

impl Workload for Inserting {
    type Kind = Insert;
    type Hold<'a> = ();

    fn writing(&self) -> bool {
        !self.stop.load(Ordering::Relaxed)
    }

    fn origin(&self) -> Instant {
        self.started
    }

    fn kind(&self, _pick: &mut Pick) -> Insert {
        Insert::default()
    }

    fn route(&self, _kind: &Insert, _tag: i64) -> Option<(Route, i32, ())> {
        Some((Route::to("the leader", self.config.clone()), 1, ()))
    }

    fn run(
        &self,
        client: &mut Client,
        _: &mut Pick,
        op: &mut Op<Insert>,
        tx: &mut Transaction,
    ) -> Result<(), postgres::Error> {
        tx.sending_autocommit_insert();
        let row = client.query_one("INSERT INTO ids DEFAULT VALUES RETURNING id, inet_server_port()", &[])?;
        tx.returned([row.get(0)]);
        op.kind.port = Some(row.get(1));
        Ok(())
    }

    fn recorded(&self, op: &mut Op<Insert>, _client: Option<&mut Client>) {
        if op.succeeded() {
            self.acknowledged.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The writer, run by the workload engine on a thread of its own.
struct Writing {
    started: Instant,
    stop: Arc<AtomicBool>,
    acknowledged: Arc<AtomicUsize>,
    thread: Option<std::thread::JoinHandle<Vec<Op<Insert>>>>,
}

impl Writing {
    fn start(mut config: Config) -> Writing {
        config.connect_timeout(Duration::from_secs(2)).options("-c statement_timeout=10s");
        let (started, stop, acknowledged) =
            (Instant::now(), Arc::new(AtomicBool::new(false)), Arc::default());
        let workload =
            Inserting { config, started, stop: Arc::clone(&stop), acknowledged: Arc::clone(&acknowledged) };
        let thread = std::thread::spawn(move || EngineWriter::new(workload, 0, Pick::new(0)).run());
        Writing { started, stop, acknowledged, thread: Some(thread) }
    }

    fn count(&self) -> usize {
        self.acknowledged.load(Ordering::Relaxed)
    }

    /// Waits until `n` more rows are acknowledged.
    fn wait_for_more(&self, n: usize) {
        let target = self.count() + n;
        wait_until(&format!("{target} acknowledged rows"), || self.count() >= target);
    }

    /// Stops the writer; returns its acknowledged IDs in order, and its errors ("connection
    /// lost", or the SQLSTATE and message).
    fn finish(mut self) -> (Vec<Ack>, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        let history = self.thread.take().unwrap().join().unwrap();
        let acks = history
            .iter()
            .filter(|op| op.succeeded())
            .map(|op| Ack {
                at: self.started + Duration::from_millis(op.end_ms),
                unix_ms: op.end_unix_ms,
                id: op.committed[0],
                port: op.kind.port.unwrap(),
            })
            .collect();
        let errors = history
            .iter()
            .filter_map(|op| match op.error.as_deref()? {
                "lost" => Some("connection lost".to_string()),
                code => Some(format!("{code}: {}", op.message.as_deref().unwrap_or(""))),
            })
            .collect();
        (acks, errors)
    }
}

impl Drop for Writing {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Decodes an ID's time part, in Unix ms, by the server's layout.
struct Layout {
    epoch_ms: i64,
    shift: u32,
}

impl Layout {
    fn of(client: &mut Client) -> Layout {
        let row = client
            .query_one(
                "SELECT (extract(epoch FROM epoch) * 1000)::bigint, shard_bits + seq_bits FROM snowflake_layout()",
                &[],
            )
            .unwrap();
        Layout { epoch_ms: row.get(0), shift: row.get::<_, i32>(1) as u32 }
    }

    fn unix_ms(&self, id: i64) -> i64 {
        self.epoch_ms + (id >> self.shift)
    }
}

/// A change of leader the test caused, at `at`.
struct Event {
    what: String,
    at: Instant,
}

/// Checks the history and prints the figures of each event: how long writes stopped (the last
/// acknowledgement from the old leader to the first from the new one) and how far ahead of the
/// writer's clock, and of the highest ID before, the new leader's first ID was.
fn judge(acks: &[Ack], extra_ids: &[(Instant, i64)], events: &[Event], layout: &Layout) {
    let mut seen = HashSet::new();
    for id in acks.iter().map(|ack| ack.id).chain(extra_ids.iter().map(|&(_, id)| id)) {
        assert!(seen.insert(id), "ID {id} acknowledged twice");
    }
    for pair in acks.windows(2) {
        assert!(
            pair[1].id > pair[0].id,
            "ID {} (port {}) acknowledged after {} (port {}): not above it",
            pair[1].id,
            pair[1].port,
            pair[0].id,
            pair[0].port
        );
    }
    println!("{} acknowledged IDs, all distinct, each above every one before it", acks.len());
    for event in events {
        let after = acks.partition_point(|ack| ack.at < event.at);
        let Some(first) = (after..acks.len()).find(|&i| i > 0 && acks[i].port != acks[i - 1].port) else {
            panic!("no write reached a new leader after: {}", event.what);
        };
        let (last, next) = (acks[first - 1], acks[first]);
        let earlier_extra = extra_ids.iter().filter(|&&(at, _)| at < next.at).map(|&(_, id)| id);
        let highest_before = acks[..first].iter().map(|ack| ack.id).chain(earlier_extra).max().unwrap();
        assert!(
            next.id > highest_before,
            "{}: the new leader's first ID is not above every ID before",
            event.what
        );
        println!(
            "{}: writes stopped {:.2} s; the new leader's first ID {} ms ahead of the clock, {} ms above the highest ID before",
            event.what,
            (next.at - last.at).as_secs_f64(),
            layout.unix_ms(next.id) - next.unix_ms,
            layout.unix_ms(next.id) - layout.unix_ms(highest_before),
        );
    }
}

/// Runs the leader `ahead_ms` ahead of its clock (within max_lead_ms, raised in the DCS at the
/// start), kills it with its Patroni at once, and returns the IDs it handed out ahead (a batch
/// of `snowflake_nextvals`).
fn run_ahead_and_kill(kit: &Patroni, leader: &str, ahead_ms: i64) -> Vec<i64> {
    let mut client = kit.connect(leader);
    let _: i64 = value(
        &mut client,
        "SELECT snowflake_advance(1, snowflake_compose(clock_timestamp() + make_interval(secs => $1::float8 / 1000), 1, 0))",
        &[&(ahead_ms as f64)],
    );
    let ids = column(&mut client, "SELECT snowflake_nextvals(1, 10000)", &[]);
    kit.run(&["kill-node", leader]);
    ids
}

#[test]
fn patroni_switchovers_and_failovers() {
    let kit = Patroni::up(&[]);
    let first = kit.leader().expect("a leader after up");
    let mut client = kit.connect(&first);
    client
        .batch_execute("CREATE TABLE ids (id bigint PRIMARY KEY DEFAULT snowflake_nextval(1), at timestamptz DEFAULT clock_timestamp())")
        .unwrap();
    let layout = Layout::of(&mut client);
    drop(client);
    // Room for (d), below: max_lead_ms raised in the DCS, for every node, seen by each.
    kit.run(&["edit-config", "postgresql.parameters.snowflake_id.max_lead_ms=10s"]);
    for node in ["node1", "node2", "node3"] {
        wait_until(&format!("max_lead_ms 10s on {node}"), || {
            value::<String>(&mut kit.connect(node), "SHOW snowflake_id.max_lead_ms", &[]) == "10s"
        });
    }

    let writer = Writing::start(kit.config(None));
    let mut events = Vec::new();
    let mut extra_ids = Vec::new();
    writer.wait_for_more(500);

    // (b) Planned switchovers.
    for _ in 0..2 {
        let old = kit.leader().unwrap();
        let at = Instant::now();
        let new = kit.run(&["switchover"]);
        events.push(Event { what: format!("switchover {old} -> {new}"), at });
        writer.wait_for_more(500);
    }

    // (c) A crash failover: the leader's Patroni and PostgreSQL killed together. Its Patroni,
    // started again, rejoins it as a standby of the new leader, through pg_rewind where its WAL
    // went past the point the new leader was promoted at; then a switchover back to it.
    let old = kit.leader().unwrap();
    let at = Instant::now();
    kit.run(&["kill-node", &old]);
    let new = kit.new_leader(&old);
    events.push(Event { what: format!("crash failover {old} -> {new}"), at });
    writer.wait_for_more(500);
    kit.run(&["restart-patroni", &old]);
    kit.wait_for_standbys(2, false);
    let rewound =
        std::fs::read_to_string(kit.patroni_log(&old)).unwrap_or_default().contains("pg_rewind exit code=0");
    println!(
        "{old} rejoined as a standby of {new} ({})",
        if rewound { "rewound by pg_rewind" } else { "no rewind needed" }
    );
    let at = Instant::now();
    let back = kit.run(&["switchover", &old]);
    assert_eq!(back, old);
    events.push(Event { what: format!("switchover back {new} -> {old}"), at });
    writer.wait_for_more(500);

    // (d) The leader run ahead of its clock, then killed with its Patroni: asynchronous, then
    // with synchronous_mode (max_lead_ms was raised in the DCS at the start).
    for synchronous in [false, true] {
        if synchronous {
            kit.run(&["edit-config", "synchronous_mode=true"]);
            kit.wait_for_standbys(1, true);
        }
        let mode = if synchronous { "synchronous_mode" } else { "asynchronous" };
        let old = kit.leader().unwrap();
        writer.wait_for_more(200);
        let at = Instant::now();
        let issued = run_ahead_and_kill(&kit, &old, 5_000);
        extra_ids.extend(issued.into_iter().map(|id| (at, id)));
        let new = kit.new_leader(&old);
        events.push(Event { what: format!("leader 5 s ahead killed, {mode}: {old} -> {new}"), at });
        writer.wait_for_more(500);
        // Started again, but not waited for: a leader killed while it wrote was seen to stay in
        // a start loop ("requested timeline is not a child of this server's history") instead
        // of being rewound; the synchronous round runs with the remaining standby.
        kit.run(&["restart-patroni", &old]);
        kit.wait_for_standbys(1, synchronous);
    }

    let (acks, errors) = writer.finish();
    let mut kinds = BTreeMap::new();
    for error in errors {
        *kinds.entry(error).or_insert(0) += 1;
    }
    println!("the writer's errors (it reconnected after each): {kinds:?}");
    judge(&acks, &extra_ids, &events, &layout);
    // The table holds every acknowledged row, once (none lost at a switchover; at a crash
    // failover an asynchronous standby may lack the last commits, which it would count here).
    let leader = kit.leader().unwrap();
    let stored = count(&mut kit.connect(&leader), "SELECT count(*) FROM ids");
    println!("{stored} rows stored, {} acknowledged", acks.len());
}

/// The lease: Patroni of the leader killed alone (no watchdog), PostgreSQL running on as a
/// primary. With `snowflake_id.lease_ms` = 5000, each node asking its own Patroni's `/primary`,
/// the old primary must refuse every ID (55000 naming the lease) within about 5 s, well before
/// another node is promoted (ttl 20), so that no ID is issued by both.
///
#[test]
fn patroni_killed_alone_with_a_lease() {
    let kit = Patroni::up(&[("SNOWFLAKE_PATRONI_LEASE_MS", "5000")]);
    let old = kit.leader().expect("a leader after up");
    let mut probe = kit.connect(&old);
    let mut issued_by_old: Vec<i64> = Vec::new();
    // An ID taken into `into`, or the error: (SQLSTATE, message) from the server, None without.
    let take = |client: &mut Client, into: &mut Vec<i64>| {
        let error =
            client.query_one("SELECT snowflake_nextval(1)", &[]).map(|row| into.push(row.get(0))).err()?;
        Some(error.as_db_error().map(|db| (db.code().code().to_string(), db.message().to_string())))
    };
    assert!(take(&mut probe, &mut issued_by_old).is_none(), "the leader issues before the kill");

    let killed = Instant::now();
    kit.run(&["kill-patroni", &old]);
    // The old primary goes on running; within the lease it refuses, with 55000 naming it.
    let refused_after = loop {
        match take(&mut probe, &mut issued_by_old) {
            None => {}
            Some(Some((code, message))) => {
                assert_eq!(code, "55000", "{message}");
                assert!(
                    message.contains("cannot show that it is the primary"),
                    "the refusal is not the lease's: {message}"
                );
                break killed.elapsed();
            }
            Some(None) => panic!("the old primary went away: its PostgreSQL must run on"),
        }
        assert!(
            killed.elapsed() < Duration::from_secs(8),
            "the old primary still issues 8 s after its Patroni died"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    println!("the old primary refused {:.2} s after its Patroni died", refused_after.as_secs_f64());

    // Another node is promoted once the leader key expires; the old primary, still writable,
    // refuses every ID meanwhile, and the new one issues above it.
    let new = loop {
        assert!(take(&mut probe, &mut issued_by_old).is_some(), "the old primary issued after refusing");
        let new_leader = kit.leader().filter(|leader| *leader != old);
        assert!(killed.elapsed() < Duration::from_secs(90), "no new leader");
        if let Some(new) = new_leader {
            break new;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    println!("{new} promoted {:.1} s after the kill", killed.elapsed().as_secs_f64());
    let mut on_new = kit.connect(&new);
    let issued_by_new: Vec<i64> = (0..50)
        .flat_map(|_| {
            assert!(take(&mut probe, &mut Vec::new()).is_some(), "the old primary issued while another led");
            column::<i64>(&mut on_new, "SELECT snowflake_nextvals(1, 100)", &[])
        })
        .collect();
    let old_ids: HashSet<i64> = issued_by_old.iter().copied().collect();
    let repeated = issued_by_new.iter().filter(|id| old_ids.contains(id)).count();
    assert_eq!(repeated, 0, "IDs issued by both the old and the new primary");
    let highest_old = issued_by_old.iter().max().unwrap();
    assert!(
        issued_by_new.iter().all(|id| id > highest_old),
        "the new primary issued below the old one's IDs"
    );
    println!(
        "{} IDs on the old primary, {} on the new, none repeated",
        issued_by_old.len(),
        issued_by_new.len()
    );
    // The old primary's Patroni, back, demotes and rewinds it.
    kit.run(&["restart-patroni", &old]);
    kit.wait_for_standbys(2, false);
}
