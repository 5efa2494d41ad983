//! The active-active kit (deploy/mesh.sh) for real: three PostgreSQL nodes that all take
//! writes to the same table and replicate them to each other by logical replication, in a full
//! mesh (`origin = none`, PostgreSQL 16 or later), each node issuing the keys of its own shard.
//!
//! Twelve writers, four per node, run for 12 s: each transaction inserts rows, updates and
//! deletes rows its writer inserted earlier (so always rows of its own node), and, apart, one
//! row into a bigserial control table that is published on subscriptions of its own. In the
//! middle, one node's postmaster is killed with SIGKILL, the survivors' writers keep writing,
//! and the node is started again with `mesh.sh start`; its writers reconnect. Then:
//!
//! - every node converges to the same rows (count and checksum of every key and value);
//! - no key was acknowledged twice, across all nodes;
//! - every key decodes to the shard of the node that wrote it (stored in the row);
//! - on each node, a key is above every key of an insert that had returned before it was sent
//!   (IDs of one shard increase in the order they are issued), across the crash too;
//! - the killed node's keys after the restart are above every key it committed before the crash;
//! - the snowflake table's subscriptions count no conflict (`pg_stat_subscription_stats`, 18),
//!   while the bigserial control's count some (a key inserted on two nodes at once, beside
//!   what the load's colliding sequences made): the test sees what it guards against.
//!
//! Rows, rates and conflict counts are printed for the notes, never asserted as speeds.
//!
//! Causal order (docs/causal-order.md): with node2's clock 150 ms behind the others
//! (libfaketime), a writer posts on node1 and a replier replies on node2 as soon as the post
//! is visible there. With the kit's trigger, which observes every key node2 applies, every
//! reply's key is above its post's; with the trigger disabled, the control, some are below.

use postgres::{Client, Config, NoTls};
use snowflake_id_integration::engine::{Op, Route, Transaction, Workload, Writer};
use snowflake_id_integration::{
    children_of, count, kill_9, major_of, pg_bin_dir, restart_kit_server, value, wait_until, FakeClock, Kit,
    Pick,
};
use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

const NODES: usize = 3;
const WRITERS_PER_NODE: usize = 4;
/// The load runs at least this long in all.
const LOAD: Duration = Duration::from_secs(12);
/// When the node is killed, after the load started.
const KILL_AFTER: Duration = Duration::from_secs(4);
/// The load goes on at least this long after the killed node is back.
const AFTER_RESTART: Duration = Duration::from_secs(3);
/// The node killed in the middle of the load (node<i> issues shard i).
const KILLED: usize = 2;
/// Rows inserted by one statement; then UPDATES rows updated and one deleted, in one transaction.
const ROWS_PER_INSERT: i32 = 20;
const UPDATES: usize = 3;
/// The key of the control row inserted on two nodes at once, to make a conflict for certain:
/// below every key a bigserial issues.
const SURE_CONFLICT_KEY: i64 = -1;
/// The first node's port; the kit's sockets are in the test's own folder.
const FIRST_PORT: u16 = 5461;
/// Generous bounds, for a loaded machine: replication catching up, a node coming back.
const CONVERGE_WITHIN: Duration = Duration::from_secs(150);
const BACK_WITHIN: Duration = Duration::from_secs(90);

/// The test's tables, created with `mesh.sh ddl` (logical replication does not carry DDL): in
/// schema app, replicated over the mesh, and in schema control, on the control's subscriptions.
const SCHEMA: &str = "
CREATE TABLE app.load (
    id bigint PRIMARY KEY DEFAULT snowflake_nextval(),
    node text NOT NULL DEFAULT current_setting('cluster_name'),
    writer int NOT NULL,
    round int NOT NULL,
    n int NOT NULL,
    updates int NOT NULL DEFAULT 0,
    payload text NOT NULL
);
CREATE TABLE control.load (
    id bigserial PRIMARY KEY,
    node text NOT NULL DEFAULT current_setting('cluster_name'),
    writer int NOT NULL,
    n int NOT NULL
);
";

/// The tables of the causal test: posts written on node1, replies on node2.
const CAUSAL_SCHEMA: &str = "
CREATE TABLE app.posts (
    id bigint PRIMARY KEY DEFAULT snowflake_nextval(),
    body text NOT NULL
);
CREATE TABLE app.replies (
    id bigint PRIMARY KEY DEFAULT snowflake_nextval(),
    post_id bigint NOT NULL,
    body text NOT NULL
);
";
/// Posts with their replies, with the trigger and without it (the control).
const POSTS: usize = 200;
/// How far node2's clock is behind the others', in seconds as libfaketime reads it.
const BEHIND: &str = "-0.150";

fn node_name(node: usize) -> String {
    format!("node{node}")
}

/// A mesh started by `deploy/mesh.sh up` in a temporary folder, down and removed when
/// dropped (see `Kit`).
struct Mesh {
    kit: Kit,
    major: u32,
    /// Held until the kit is down (fields drop in order: the kit first).
    _one_at_a_time: MutexGuard<'static, ()>,
}

impl Mesh {
    /// Once no other test of this file runs a mesh (the causal test's replication lag must not
    /// be the other's load); `None`, the test skipped, before PostgreSQL 16.
    fn up(nodes: usize) -> Option<Mesh> {
        static ONE_MESH_AT_A_TIME: Mutex<()> = Mutex::new(());
        let turn = ONE_MESH_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let major = major_of(pg_bin_dir());
        if major < 16 {
            println!("skipped: the mesh needs PostgreSQL 16 or later (subscriptions with origin = none); this is {major}");
            return None;
        }
        // The extension is installed by the test command's earlier step; the kit runs the
        // PostgreSQL under test.
        let (port, pg_major) = (FIRST_PORT.to_string(), major.to_string());
        let env = [
            ("SNOWFLAKE_MESH_PORT", port.as_str()),
            ("SNOWFLAKE_MESH_SKIP_INSTALL", "1"),
            ("SNOWFLAKE_MESH_EXAMPLE", "0"),
            ("PG_MAJOR", pg_major.as_str()),
        ];
        Some(Mesh { kit: Kit::up("mesh", nodes, &env), major, _one_at_a_time: turn })
    }

    /// Runs `mesh.sh args`; returns whether it succeeded, and what it printed, whether or not.
    fn output(&self, args: &[&str]) -> (bool, String) {
        let out = self.kit.command(args).output().expect("run mesh.sh");
        (
            out.status.success(),
            format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
        )
    }

    /// Writes `sql` into the file `name` of the mesh's folder, and returns its path, for `mesh.sh ddl`.
    fn sql_file(&self, name: &str, sql: &str) -> String {
        let file = self.kit.dir().join(name);
        std::fs::write(&file, sql).unwrap();
        file.display().to_string()
    }

    /// Node i's folder: its socket, `data` and `server.log`.
    fn node_dir(&self, node: usize) -> PathBuf {
        self.kit.dir().join(node_name(node))
    }

    fn log(&self, node: usize) -> String {
        std::fs::read_to_string(self.node_dir(node).join("server.log")).unwrap()
    }

    fn config(&self, node: usize) -> Config {
        let mut config = Config::new();
        config
            .host_path(self.node_dir(node))
            .port(FIRST_PORT + node as u16 - 1)
            .user("postgres")
            .dbname("mesh")
            .options("-c statement_timeout=120s")
            .connect_timeout(Duration::from_secs(10));
        config
    }

    fn connect(&self, node: usize) -> Client {
        self.connect_as(node, "postgres")
    }

    fn connect_as(&self, node: usize, user: &str) -> Client {
        self.config(node)
            .user(user)
            .connect(NoTls)
            .unwrap_or_else(|e| panic!("connect to {} as {user}: {e}", node_name(node)))
    }

    /// Stops a node and starts it again on `clock`, then waits until its subscriptions stream.
    fn restart_on(&self, node: usize, clock: &FakeClock) {
        restart_kit_server(&self.node_dir(node), &clock.env());
        self.kit.run(&["start"]);
    }
}

/// What a writer's op does, drawn before it runs.
#[derive(Clone, Debug)]
enum MeshOp {
    /// One transaction: ROWS_PER_INSERT rows inserted (numbered from `first`, in the load's
    /// `round`), the rows `updated` updated and the row `deleted` deleted, all inserted by
    /// this writer before.
    Write { round: i32, first: i32, updated: Vec<i64>, deleted: Option<i64> },
    /// The control after it: one row into the bigserial table, on its own (a refusal must not
    /// undo the rows above).
    Control { first: i32 },
}

struct Shared {
    started: Instant,
    stop: AtomicBool,
    /// Set by a writer that failed (its panic message says why), so that the test stops at once.
    writer_failed: AtomicBool,
    /// 0 until the killed node is down, then 1: the round stored in the rows.
    round: AtomicI32,
    /// Transactions committed per node.
    committed: Vec<AtomicUsize>,
}

/// Sets `writer_failed` when its writer panics.
struct FailureFlag<'a>(&'a Shared);

impl Drop for FailureFlag<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.writer_failed.store(true, Ordering::SeqCst);
        }
    }
}

/// Tells the writers to stop when dropped: at the end, or when the test fails (before the
/// mesh goes down under them).
struct StopWriters(Arc<Shared>);

impl Drop for StopWriters {
    fn drop(&mut self) {
        self.0.stop.store(true, Ordering::SeqCst);
    }
}

impl Shared {
    /// Fails the test if a writer failed.
    fn check(&self) {
        assert!(!self.writer_failed.load(Ordering::SeqCst), "a writer failed (its message is above)");
    }

    fn committed(&self, node: usize) -> usize {
        self.committed[node - 1].load(Ordering::Relaxed)
    }

    /// Waits until `done` holds while the writers write, failing at once if one failed, and
    /// after `within` with the message `failure` makes then.
    fn wait_until(&self, within: Duration, done: impl Fn() -> bool, failure: impl Fn() -> String) {
        let deadline = Instant::now() + within;
        while !done() {
            assert!(Instant::now() < deadline, "{}", failure());
            self.check();
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A writer on `node`, run by the workload engine until told to stop: a transaction, then
/// the control, over and over. Its node may be killed under it: the engine then reconnects
/// until the node is back. An error elsewhere fails the test.
struct Writing {
    shared: Arc<Shared>,
    config: Config,
    node: usize,
    /// Rows this writer inserted and has not deleted: what it updates and deletes.
    live: RefCell<Vec<i64>>,
    /// The number of its next row.
    next_row: Cell<i32>,
    /// The control comes next (after a transaction that committed).
    control_next: Cell<Option<i32>>,
}

impl Workload for Writing {
    type Kind = MeshOp;
    type Hold<'a> = ();

    fn writing(&self) -> bool {
        !self.shared.stop.load(Ordering::Relaxed)
    }

    fn origin(&self) -> Instant {
        self.shared.started
    }

    fn kind(&self, pick: &mut Pick) -> MeshOp {
        if let Some(first) = self.control_next.take() {
            return MeshOp::Control { first };
        }
        let mut live = self.live.borrow_mut();
        let updated: Vec<i64> = (0..UPDATES.min(live.len())).map(|_| live[pick.below(live.len())]).collect();
        let count = live.len();
        let deleted = (count > 50).then(|| live.swap_remove(pick.below(count)));
        let first = self.next_row.get();
        self.next_row.set(first + ROWS_PER_INSERT);
        MeshOp::Write { round: self.shared.round.load(Ordering::SeqCst), first, updated, deleted }
    }

    fn route(&self, kind: &MeshOp, _tag: i64) -> Option<(Route, i32, ())> {
        // The round is the node's epoch: 1 from its crash on.
        let epoch = match kind {
            MeshOp::Write { round, .. } => *round as u32,
            MeshOp::Control { .. } => self.shared.round.load(Ordering::SeqCst) as u32,
        };
        let route = Route { server: node_name(self.node), config: self.config.clone(), epoch };
        Some((route, self.node as i32, ()))
    }

    fn run(
        &self,
        client: &mut Client,
        _pick: &mut Pick,
        op: &mut Op<MeshOp>,
        tx: &mut Transaction,
    ) -> Result<(), postgres::Error> {
        let writer = op.writer as i32;
        match &op.kind {
            MeshOp::Write { round, first, updated, deleted } => {
                client.batch_execute("BEGIN")?;
                let rows = client.query(
                    "INSERT INTO app.load (writer, round, n, payload)
                     SELECT $1, $2, n, md5(random()::text) FROM generate_series($3::int, $4::int) n ORDER BY n
                     RETURNING id",
                    &[&writer, round, first, &(first + ROWS_PER_INSERT - 1)],
                )?;
                tx.returned(rows.iter().map(|row| row.get(0)));
                client.execute(
                    "UPDATE app.load SET updates = updates + 1, payload = md5(payload) WHERE id = ANY($1)",
                    &[updated],
                )?;
                if let Some(id) = deleted {
                    let count = client.execute("DELETE FROM app.load WHERE id = $1", &[id])?;
                    assert_eq!(count, 1, "writer {writer} deleted its row {id}, which is gone");
                }
                tx.sending_commit();
                client.batch_execute("COMMIT")
            }
            MeshOp::Control { first } => client
                .execute("INSERT INTO control.load (writer, n) VALUES ($1, $2)", &[&writer, first])
                .map(|_| ()),
        }
    }

    fn recorded(&self, op: &mut Op<MeshOp>, _client: Option<&mut Client>) {
        let _flag = FailureFlag(&self.shared);
        match (&op.kind, op.error.as_deref()) {
            (MeshOp::Write { first, .. }, None) => {
                self.live.borrow_mut().extend(&op.committed);
                self.control_next.set(Some(*first));
                self.shared.committed[self.node - 1].fetch_add(1, Ordering::Relaxed);
            }
            // The control refused on its own node: its sequence issued a key a row replicated
            // from another node already holds.
            (MeshOp::Control { .. }, Some("23505")) => {}
            // Only the killed node's writers may lose their connection, before its restart;
            // the outcome of their transaction is then unknown.
            (_, Some(error)) => assert!(
                self.node == KILLED && op.epoch == 0,
                "writer {} on node{}: {error} {}",
                op.writer,
                self.node,
                op.message.as_deref().unwrap_or("")
            ),
            (MeshOp::Control { .. }, None) => {}
        }
    }
}

/// What the writers did, read from their history.
struct Written<'a> {
    ops: Vec<&'a Op<MeshOp>>,
}

impl Written<'_> {
    /// The acknowledged transactions.
    fn transactions(&self) -> impl Iterator<Item = &Op<MeshOp>> + '_ {
        self.ops.iter().copied().filter(|op| op.succeeded() && matches!(op.kind, MeshOp::Write { .. }))
    }

    /// The rows deleted by an acknowledged transaction, and by one whose COMMIT was cut off.
    fn deleted(&self) -> (HashSet<i64>, HashSet<i64>) {
        let deleted_by = |op: &Op<MeshOp>| match op.kind {
            MeshOp::Write { deleted, .. } => deleted,
            MeshOp::Control { .. } => None,
        };
        let acknowledged = self.transactions().filter_map(deleted_by).collect();
        let in_doubt =
            self.ops.iter().filter(|op| !op.maybe.is_empty()).filter_map(|op| deleted_by(op)).collect();
        (acknowledged, in_doubt)
    }

    fn count(&self, what: impl Fn(&Op<MeshOp>) -> bool) -> usize {
        self.ops.iter().filter(|op| what(op)).count()
    }
}

/// The conflicts counted on `node` by the subscriptions of a publication (`app`, `control`).
fn conflicts(client: &mut Client, publication: &str) -> i64 {
    value(
        client,
        "SELECT coalesce(sum(confl_insert_exists + confl_update_origin_differs + confl_update_exists
                + confl_update_missing + confl_delete_origin_differs + confl_delete_missing
                + confl_multiple_unique_conflicts), 0)::bigint
         FROM pg_stat_subscription_stats WHERE subname LIKE $1 || '\\_%'",
        &[&publication],
    )
}

/// Apply errors of the `app` subscriptions on a node (the lost connections of the crash).
fn apply_errors(client: &mut Client) -> i64 {
    count(
        client,
        "SELECT coalesce(sum(apply_error_count), 0)::bigint FROM pg_stat_subscription_stats
         WHERE subname LIKE 'app\\_%'",
    )
}

/// Kills the node's postmaster with SIGKILL, as a crash would; its children, left without
/// it, exit by themselves (any still there after 30 s are killed too). Waits until all are gone.
fn kill_node(mesh: &Mesh, node: usize) -> usize {
    let pid_file = std::fs::read_to_string(mesh.node_dir(node).join("data/postmaster.pid")).unwrap();
    let postmaster: u32 = pid_file.lines().next().unwrap().trim().parse().unwrap();
    // Each child with its start time (field 22 of /proc/<pid>/stat): a pid the system has
    // since given to another process is not one of them, and is never signalled.
    let started = |pid: u32| {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let (_, rest) = stat.rsplit_once(')')?;
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // A process that exited but is not reaped yet is a zombie ('Z'): gone for us.
        (fields.first() != Some(&"Z")).then(|| fields.get(19).map(|field| field.to_string()))?
    };
    let children: Vec<(u32, String)> =
        children_of(postmaster).into_iter().filter_map(|pid| Some((pid, started(pid)?))).collect();
    kill_9(postmaster);
    let alive = |(pid, start): &(u32, String)| started(*pid).as_ref() == Some(start);
    let deadline = Instant::now() + Duration::from_secs(30);
    while children.iter().any(alive) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let stragglers: Vec<u32> = children.iter().filter(|child| alive(child)).map(|(pid, _)| *pid).collect();
    for &child in &stragglers {
        kill_9(child);
    }
    wait_until("the killed node's processes exited", || {
        !children.iter().any(alive) && started(postmaster).is_none()
    });
    stragglers.len()
}

/// Count and checksum of every row of app.load on a node.
fn fingerprint(client: &mut Client) -> (i64, String) {
    let row = client
        .query_one(
            "SELECT count(*), coalesce(md5(string_agg(t::text, ',' ORDER BY t.id)), '') FROM app.load t",
            &[],
        )
        .unwrap();
    (row.get(0), row.get(1))
}

/// Waits until every node holds the same rows, failing at once if a snowflake subscription
/// counts a conflict (it would never converge). Returns the row count and the seconds it took.
fn wait_converged(mesh: &Mesh, conflicts_counted: bool) -> (i64, f64) {
    let started = Instant::now();
    let mut clients: Vec<Client> = (1..=NODES).map(|node| mesh.connect(node)).collect();
    loop {
        let prints: Vec<(i64, String)> = clients.iter_mut().map(fingerprint).collect();
        if prints.iter().all(|print| *print == prints[0]) {
            return (prints[0].0, started.elapsed().as_secs_f64());
        }
        if conflicts_counted {
            for (node, client) in (1..).zip(&mut clients) {
                let count = conflicts(client, "app");
                assert!(
                    count == 0,
                    "node{node} counts {count} conflicts on snowflake keys:\n{}",
                    status(mesh)
                );
            }
        }
        let counts: Vec<i64> = prints.iter().map(|print| print.0).collect();
        assert!(
            started.elapsed() < CONVERGE_WITHIN,
            "the nodes did not converge within {CONVERGE_WITHIN:?}: rows {counts:?}\n{}",
            status(mesh)
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// What `mesh.sh status` prints, whether or not it finds the mesh healthy.
fn status(mesh: &Mesh) -> String {
    mesh.output(&["status"]).1
}

/// On each node, a key is above every key of the transactions on that node that had
/// returned before its own was sent: the node's IDs increase in the order it issues them.
/// (Times in whole ms: a transaction counts as before another only when it returned in an
/// earlier millisecond than the other was sent.)
fn assert_issue_order(written: &Written) {
    for node in 1..=NODES {
        let mut by_done: Vec<&Op<MeshOp>> =
            written.transactions().filter(|op| op.shard == node as i32).collect();
        by_done.sort_by_key(|op| op.end_ms);
        // The largest key of the transactions up to each one (by return time).
        let mut highest = Vec::with_capacity(by_done.len());
        let mut max = i64::MIN;
        for op in &by_done {
            assert!(
                op.committed.windows(2).all(|pair| pair[0] < pair[1]),
                "one statement's keys do not increase"
            );
            max = max.max(*op.committed.last().unwrap());
            highest.push(max);
        }
        for op in &by_done {
            let before = by_done.partition_point(|earlier| earlier.end_ms < op.start_ms);
            if before > 0 {
                let lowest = op.committed[0];
                assert!(
                    highest[before - 1] < lowest,
                    "node{node} issued {lowest} after a transaction that had returned {}",
                    highest[before - 1]
                );
            }
        }
    }
}

#[test]
fn three_nodes_active_active_with_a_node_killed() {
    let Some(mesh) = Mesh::up(NODES) else { return };
    // Conflict counters came in 18; before, a conflict shows only as a halted subscription.
    let conflicts_counted = mesh.major >= 18;

    mesh.kit.run(&["ddl", &mesh.sql_file("load.sql", SCHEMA)]);
    for node in 1..=NODES {
        let fence: String = value(&mut mesh.connect(node), "SHOW snowflake_id.shards", &[]);
        assert_eq!(fence, node.to_string(), "the fence of node{node}");
    }

    let shared = Arc::new(Shared {
        started: Instant::now(),
        stop: AtomicBool::new(false),
        writer_failed: AtomicBool::new(false),
        round: AtomicI32::new(0),
        committed: (0..NODES).map(|_| AtomicUsize::new(0)).collect(),
    });
    let stop_writers = StopWriters(shared.clone());
    let started = Instant::now();
    let workers: Vec<_> = (0..NODES * WRITERS_PER_NODE)
        .map(|index| {
            let node = index % NODES + 1;
            let workload = Writing {
                shared: shared.clone(),
                config: mesh.config(node),
                node,
                live: RefCell::new(Vec::new()),
                next_row: Cell::new(0),
                control_next: Cell::new(None),
            };
            std::thread::spawn(move || {
                let shared = workload.shared.clone();
                let _flag = FailureFlag(&shared);
                Writer::new(workload, index, Pick::new(index as u64)).run()
            })
        })
        .collect();
    let committed = |node: usize| shared.committed(node);

    // The crash, in the middle of the load (once every node has committed some).
    std::thread::sleep(KILL_AFTER);
    shared.check();
    shared.wait_until(
        Duration::from_secs(60),
        || (1..=NODES).all(|node| committed(node) >= 20),
        || format!("the writers did not get going: {:?}", (1..=NODES).map(committed).collect::<Vec<_>>()),
    );
    // A crash discards the node's statistics, its conflict counters with them: those before
    // it are read now (and every node's log is searched for conflicts at the end).
    let conflicts_before_crash =
        if conflicts_counted { conflicts(&mut mesh.connect(KILLED), "app") } else { 0 };
    let killed_at = Instant::now();
    let stragglers = kill_node(&mesh, KILLED);
    shared.round.store(1, Ordering::SeqCst);
    let at_kill: Vec<usize> = (1..=NODES).map(committed).collect();
    // The survivors keep writing while the node is down.
    shared.wait_until(
        Duration::from_secs(60),
        || (1..=NODES).all(|node| node == KILLED || committed(node) >= at_kill[node - 1] + 20),
        || format!("the surviving nodes stopped writing while node{KILLED} was down"),
    );
    let during_outage: Vec<usize> = (1..=NODES).map(|node| committed(node) - at_kill[node - 1]).collect();
    mesh.kit.run(&["start"]);
    let down_for = killed_at.elapsed();
    // Its writers reconnect and write again.
    let back = committed(KILLED);
    shared.wait_until(
        BACK_WITHIN,
        || committed(KILLED) >= back + WRITERS_PER_NODE * 5,
        || format!("the writers of node{KILLED} did not write again after its restart"),
    );
    let restarted_at = Instant::now();
    while started.elapsed() < LOAD || restarted_at.elapsed() < AFTER_RESTART {
        shared.check();
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(stop_writers);
    let histories: Vec<Vec<Op<MeshOp>>> = workers.into_iter().map(|worker| worker.join().unwrap()).collect();
    let written = Written { ops: histories.iter().flatten().collect() };
    let seconds = started.elapsed().as_secs_f64();

    // No key acknowledged twice, over all nodes; on each node, keys in issue order.
    let mut seen = HashSet::new();
    let duplicates =
        written.transactions().flat_map(|op| &op.committed).filter(|id| !seen.insert(**id)).count();
    assert_eq!(duplicates, 0, "{duplicates} keys acknowledged twice across the nodes");
    assert_issue_order(&written);

    let (rows, converge_seconds) = wait_converged(&mesh, conflicts_counted);

    // Every node holds every acknowledged row that was not deleted, with the node that wrote
    // it; beyond them, only rows of the killed node's transactions cut off by the crash.
    let (deleted, maybe_deleted) = written.deleted();
    let expected: HashMap<i64, usize> = written
        .transactions()
        .flat_map(|op| op.committed.iter().map(move |id| (*id, op.shard as usize)))
        .filter(|(id, _)| !deleted.contains(id))
        .collect();
    for node in 1..=NODES {
        let mut client = mesh.connect(node);
        let stored: HashMap<i64, (String, i32)> = client
            .query("SELECT id, node, round FROM app.load", &[])
            .unwrap()
            .iter()
            .map(|row| (row.get(0), (row.get(1), row.get(2))))
            .collect();
        for (id, writer_node) in &expected {
            match stored.get(id) {
                Some((stored_node, _)) => {
                    assert_eq!(*stored_node, node_name(*writer_node), "the node of row {id}")
                }
                None => assert!(
                    maybe_deleted.contains(id),
                    "node{node} lacks row {id}, written on node{writer_node}"
                ),
            }
        }
        for (id, (stored_node, round)) in &stored {
            assert!(
                expected.contains_key(id) || (*stored_node == node_name(KILLED) && *round == 0),
                "node{node} holds row {id} of {stored_node}, round {round}, which no writer acknowledged"
            );
        }
        // Every key decodes to the shard of the node that wrote it (node<i> issues shard i).
        let wrong = count(
            &mut client,
            "SELECT count(*) FROM app.load WHERE snowflake_shard(id) <> substr(node, 5)::int",
        );
        assert_eq!(wrong, 0, "node{node} holds {wrong} rows whose key is not of their writer's shard");
        // The killed node's keys after the restart are above every key it committed before.
        let row = client
            .query_one(
                "SELECT max(id) FILTER (WHERE round = 0), min(id) FILTER (WHERE round = 1),
                        count(*) FILTER (WHERE round = 1)
                 FROM app.load WHERE node = $1",
                &[&node_name(KILLED)],
            )
            .unwrap();
        let (before, after, after_rows): (Option<i64>, Option<i64>, i64) =
            (row.get(0), row.get(1), row.get(2));
        assert!(after_rows > 0, "no row of node{KILLED} after its restart");
        assert!(
            after > before,
            "node{KILLED} issued {after:?} after the crash, not above {before:?} from before it"
        );
    }

    // Conflicts: none on the snowflake table, some on the bigserial control.
    let on_all_nodes = |publication: &str| -> i64 {
        (1..=NODES).map(|node| conflicts(&mut mesh.connect(node), publication)).sum()
    };
    let snowflake_conflicts =
        conflicts_before_crash + if conflicts_counted { on_all_nodes("app") } else { 0 };
    let errors: i64 = (1..=NODES).map(|node| apply_errors(&mut mesh.connect(node))).sum();
    assert_eq!(snowflake_conflicts, 0, "conflicts on snowflake keys:\n{}", status(&mesh));
    // The apply workers log every conflict they detect (PostgreSQL 18), whatever the counters.
    for node in 1..=NODES {
        let log = mesh.log(node);
        let logged: Vec<&str> =
            log.lines().filter(|line| line.contains("conflict detected on relation \"app.")).collect();
        assert!(logged.is_empty(), "node{node} logged conflicts on snowflake keys: {logged:?}");
    }
    let control_conflicts = if conflicts_counted {
        // The counters must be able to count, or the zero above says nothing. The load's
        // bigserial keys collide, but whether a collision is counted (a replicated row meets a
        // committed local one) or refused on its own node (the local insert meets a replicated
        // row: 23505, no conflict) is a race the load may lose every time. So one conflict is
        // made for certain: node1 and node3 insert the same key in transactions open on both at
        // once, so that each commits before the other's row arrives to meet it. (A control
        // subscription between them halted by an earlier conflict has counted that one.)
        let load_conflicts = on_all_nodes("control");
        let sure = [1, 3].map(|node| {
            let mut client = mesh.connect(node);
            client
                .batch_execute(&format!(
                    "BEGIN; INSERT INTO control.load (id, writer, n) VALUES ({SURE_CONFLICT_KEY}, -1, {node})"
                ))
                .unwrap();
            client
        });
        for mut client in sure {
            client.batch_execute("COMMIT").unwrap();
        }
        println!("the bigserial control's conflicts counted during the load: {load_conflicts}");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let counted = on_all_nodes("control");
            if counted > 0 {
                break counted;
            }
            assert!(
                Instant::now() < deadline,
                "the bigserial control counts no conflict, not even the key inserted on node1 and node3 at \
                 once:\n{}",
                status(&mesh)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    } else {
        println!(
            "PostgreSQL {} counts no conflicts (pg_stat_subscription_stats has confl_* from 18)",
            mesh.major
        );
        0
    };
    println!("{}", mesh.kit.run(&["status"]));

    let inserted: usize = written.transactions().map(|op| op.committed.len()).sum();
    let updated: usize = written
        .transactions()
        .map(|op| match &op.kind {
            MeshOp::Write { updated, .. } => updated.len(),
            MeshOp::Control { .. } => 0,
        })
        .sum();
    let control = |error: Option<&str>| {
        written.count(|op| matches!(op.kind, MeshOp::Control { .. }) && op.error.as_deref() == error)
    };
    println!(
        "{} writers ({WRITERS_PER_NODE} per node) for {seconds:.1} s: {} transactions, {inserted} rows inserted \
         ({:.0} rows/s), {updated} updated, {} deleted; {rows} rows on every node after {converge_seconds:.1} s of \
         catching up",
        histories.len(),
        written.transactions().count(),
        inserted as f64 / seconds,
        deleted.len(),
    );
    println!(
        "node{KILLED} killed (SIGKILL to its postmaster, {stragglers} children left to kill) after {:.1} s, back after \
         {:.1} s; transactions committed while it was down, per node: {during_outage:?}; its writers lost {} \
         operations to it",
        KILL_AFTER.as_secs_f64(),
        down_for.as_secs_f64(),
        written.count(|op| op.lost()),
    );
    println!(
        "conflicts: {snowflake_conflicts} on snowflake keys, {control_conflicts} on the bigserial control \
         ({} control rows inserted, {} refused on their own node by a key replicated there first); \
         {errors} apply errors of the snowflake subscriptions (connections lost in the crash)",
        control(None),
        control(Some("23505")),
    );
}

/// Posts `POSTS` posts on node1; each is replied to on node2 as soon as node2 shows it. Returns
/// how many replies got a key below their post's, and the mean milliseconds until a post was
/// visible on node2.
fn posts_and_replies(node1: &mut Client, node2: &mut Client, round: &str) -> (usize, f64) {
    let (mut below, mut waited) = (0, Duration::ZERO);
    for n in 0..POSTS {
        let post: i64 =
            value(node1, "INSERT INTO app.posts (body) VALUES ($1) RETURNING id", &[&format!("{round} {n}")]);
        let posted = Instant::now();
        wait_until(&format!("post {post} reached node2"), || {
            node2.query_opt("SELECT 1 FROM app.posts WHERE id = $1", &[&post]).unwrap().is_some()
        });
        waited += posted.elapsed();
        let reply: i64 =
            value(node2, "INSERT INTO app.replies (post_id, body) VALUES ($1, 're') RETURNING id", &[&post]);
        below += usize::from(reply < post);
    }
    (below, waited.as_secs_f64() * 1000.0 / POSTS as f64)
}

#[test]
fn replies_sort_after_their_posts_with_a_clock_behind() {
    let Some(mesh) = Mesh::up(NODES) else { return };
    let ddl = mesh.kit.run(&["ddl", &mesh.sql_file("causal.sql", CAUSAL_SCHEMA)]);
    assert!(ddl.contains("app.posts app.replies"), "mesh.sh ddl put no trigger on the new tables: {ddl}");
    let clock = FakeClock::in_folder(&mesh.node_dir(2));
    clock.set(BEHIND);
    mesh.restart_on(2, &clock);
    let (mut node1, mut node2) = (mesh.connect(1), mesh.connect(2));
    // node2 resumes at its recorded reservation, ahead of its clock: once its keys follow the
    // clock again, they lag node1's.
    wait_until("node2's keys follow its clock", || {
        value(&mut node2, "SELECT snowflake_timestamp(snowflake_nextval()) <= clock_timestamp()", &[])
    });
    const NOW: &str = "SELECT extract(epoch FROM clock_timestamp())::float8";
    let at1: f64 = value(&mut node1, NOW, &[]);
    let offset_ms = (value::<f64>(&mut node2, NOW, &[]) - at1) * 1000.0;
    assert!(offset_ms < -100.0, "node2's clock is not behind node1's: {offset_ms:.0} ms");

    // The control first: the trigger disabled on node2, replies get keys from its clock alone.
    node2.batch_execute("ALTER TABLE app.posts DISABLE TRIGGER mesh_observe_applied").unwrap();
    let (below_without, lag_without) = posts_and_replies(&mut node1, &mut node2, "without");
    node2.batch_execute("ALTER TABLE app.posts ENABLE REPLICA TRIGGER mesh_observe_applied").unwrap();
    let (below_with, lag_with) = posts_and_replies(&mut node1, &mut node2, "with");
    println!(
        "node2's clock {offset_ms:.0} ms from node1's; {POSTS} posts on node1, each replied to on node2 once \
         visible there: without observation {below_without} replies below their post (posts visible after \
         {lag_without:.1} ms on average), with the kit's trigger {below_with} (after {lag_with:.1} ms)"
    );
    assert_eq!(below_with, 0, "replies below their posts although node2 observes the keys it applies");
    assert!(below_without > 0, "the control shows no reply below its post: the test sees nothing");
    const REFUSED: &str = "without observing its key";
    assert!(!mesh.log(2).contains(REFUSED), "node2 refused to observe a key it applied");

    // A key further ahead of node2's clock than the lead bound (2 s) is refused there, and the
    // row applied all the same, with a WARNING: replication goes on.
    let future: i64 = value(
        &mut node1,
        "INSERT INTO app.posts (id, body)
         VALUES (snowflake_compose(clock_timestamp() + interval '10 s', 1, 0), 'ahead') RETURNING id",
        &[],
    );
    let after: i64 = value(&mut node1, "INSERT INTO app.posts (body) VALUES ('after') RETURNING id", &[]);
    wait_until("the rows after the refused key reached node2", || {
        let rows = node2.query("SELECT 1 FROM app.posts WHERE id IN ($1, $2)", &[&future, &after]).unwrap();
        rows.len() == 2
    });
    assert!(mesh.log(2).contains(REFUSED), "no WARNING on node2 for the key 10 s ahead");
    let lead: f64 = value(
        &mut node2,
        "SELECT extract(epoch FROM snowflake_timestamp(snowflake_nextval()) - clock_timestamp())::float8",
        &[],
    );
    assert!(lead < 5.0, "node2's keys moved {lead:.1} s ahead after the refused observation");
    mesh.kit.run(&["status"]);
}

/// Whether role `eve` is a superuser.
fn eve_is_superuser(admin: &mut Client) -> bool {
    value(admin, "SELECT rolsuper FROM pg_roles WHERE rolname = 'eve'", &[])
}

/// The names of subscriptions are catalog text that whoever creates a subscription chooses:
/// since PostgreSQL 16 a role granted pg_create_subscription, with CREATE on the database. The
/// operator runs `mesh.sh status` and `mesh.sh ddl` as the superuser; 0.8.0 pasted those names
/// into the SQL they run, and this role, eve, made itself superuser with each (form feeds pass
/// the shell's word splitting, and PostgreSQL takes them for white space):
///
/// - `status` put every name into a string literal (`WHERE s.slot_name = '<name>'`, on the
///   publisher the name's `<publication>_<node>_to_` part names): the name
///   `app_node1_to_x';ALTER<FF>ROLE<FF>eve<FF>SUPERUSER;--` closed the literal;
/// - `ddl` put the names of the enabled subscriptions bare into `ALTER SUBSCRIPTION <name>
///   REFRESH ...`: the name `eve_x<FF>DISABLE;ALTER<FF>ROLE<FF>eve<FF>SUPERUSER;--`, enabled
///   by eve, made `ALTER SUBSCRIPTION eve_x DISABLE` one statement (eve's subscription eve_x)
///   and the ALTER ROLE the next.
///
/// And the kit's own statements must not resolve names in a schema eve can create: schema
/// `postgres` is first on the superuser's default search_path ("$user"), and eve puts there a
/// `format(text, name)`, a better match for `format('%I', subname)` than pg_catalog's.
///
/// With the names as psql variables or quoted by the server (`format('%I')`, `\gexec`) and the
/// kit's statements on search_path = pg_catalog, pg_temp, eve stays what she is; `ddl` leaves
/// her enabled subscription alone (a refresh connects where its owner says) and says so.
#[test]
fn subscription_names_never_reach_sql() {
    let Some(mesh) = Mesh::up(2) else { return };
    let mut admin = mesh.connect(1);
    admin
        .batch_execute(
            "CREATE ROLE eve LOGIN; GRANT pg_create_subscription TO eve; GRANT CREATE ON DATABASE mesh TO eve",
        )
        .unwrap();
    let mut eve = mesh.connect_as(1, "eve");
    // Not connected (connect = false): nothing is checked but the connection string's form (a
    // role that is not superuser must give a password).
    const CONNINFO: &str = "host=/nonexistent dbname=mesh user=eve password=x";
    let subscribe = |eve: &mut Client, name: &str| {
        eve.batch_execute(&format!(
            "CREATE SUBSCRIPTION \"{name}\" CONNECTION '{CONNINFO}' PUBLICATION app WITH (connect = false)"
        ))
        .unwrap()
    };
    subscribe(&mut eve, "app_node1_to_x';ALTER\x0cROLE\x0ceve\x0cSUPERUSER;--");
    // The look-alike a superuser's statement would find first on the default search_path.
    eve.batch_execute(
        "CREATE SCHEMA postgres;
         CREATE FUNCTION postgres.format(text, name) RETURNS text LANGUAGE plpgsql AS $$
         BEGIN
             ALTER ROLE eve SUPERUSER;
             RETURN pg_catalog.format($1, $2);
         END $$",
    )
    .unwrap();

    let report = status(&mesh);
    let after_status = eve_is_superuser(&mut admin);
    admin.batch_execute("ALTER ROLE eve NOSUPERUSER").unwrap();
    assert!(
        report.contains("app_node1_to_x';ALTER"),
        "mesh.sh status does not show eve's subscription:\n{report}"
    );

    let ddl_name = "eve_x\x0cDISABLE;ALTER\x0cROLE\x0ceve\x0cSUPERUSER;--";
    subscribe(&mut eve, "eve_x");
    subscribe(&mut eve, ddl_name);
    eve.batch_execute(&format!("ALTER SUBSCRIPTION \"{ddl_name}\" ENABLE")).unwrap();
    let file = mesh
        .sql_file("more.sql", "CREATE TABLE app.more (id bigint PRIMARY KEY DEFAULT snowflake_nextval());\n");
    let (ddl_ok, printed) = mesh.output(&["ddl", &file]);
    let after_ddl = eve_is_superuser(&mut admin);
    println!("mesh.sh status, with eve's subscription:\n{report}\nmesh.sh ddl:\n{printed}");
    assert!(
        !after_status && !after_ddl,
        "eve, granted pg_create_subscription and CREATE on the database, made herself superuser through \
         the names of her subscriptions or a look-alike function: with mesh.sh status {after_status}, \
         with mesh.sh ddl {after_ddl}"
    );
    assert!(ddl_ok, "mesh.sh ddl failed:\n{printed}");
    assert!(
        printed.contains("owned by a role that is not superuser, so not refreshed"),
        "mesh.sh ddl does not say it left eve's subscription alone:\n{printed}"
    );
    // The kit's own subscriptions took the new table.
    let taken = count(
        &mut mesh.connect(2),
        "SELECT count(*) FROM pg_subscription_rel r JOIN pg_subscription s ON s.oid = r.srsubid
         WHERE r.srrelid = 'app.more'::regclass",
    );
    assert_eq!(taken, 1, "node2's subscription to node1's app publication did not take app.more");
}
