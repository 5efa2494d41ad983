//! snowflake_id on a real Citus cluster (docs/citus.md): a coordinator and two workers, each a
//! PostgreSQL server started by the test with `shared_preload_libraries = 'citus,snowflake_id'`,
//! joined over their Unix sockets (a node's name is its socket folder). Reported as skipped,
//! and passing, when Citus is not installed for the PostgreSQL under test.
//!
//! - `CREATE EXTENSION snowflake_id` on the coordinator reaches the workers already added, and a
//!   worker added later; deploy/sql/citus.sql's functions reach every node likewise.
//! - Each node issues the shard of its Citus group id, fenced by `snowflake_id.shards`
//!   (`snowflake_citus_fence()`): no number picked by hand.
//! - Writers on every node at once (query-from-any-node): single-row INSERTs into a table
//!   distributed by a tenant column, multi-row INSERTs into one distributed by the ID itself,
//!   single rows into a reference table, and a bigserial control; in three rounds: while a third
//!   worker is added and `citus_rebalance_start()` moves shards to it; while a worker is killed
//!   with SIGKILL; after it is back. Then COPY, INSERT … SELECT and `snowflake_nextvals` on
//!   every node.
//! - Checks: no ID acknowledged twice, and none twice in the tables; every ID decodes to the node
//!   that received its statement; each node's `snowflake_stats()` lists its own shard only; IDs
//!   sort by time across nodes (the bigserial control does not: its keys jump by node); the
//!   killed worker's IDs after the restart are above all it issued before.
//! - Refusals: a `DEFAULT snowflake_nextval(<constant>)` copied to every node issues on the
//!   node of that group only, and fails with 55000 on the others; a copy of a worker's data
//!   directory added as a node gets a new group id, and refuses until its fence is set.
//! - Reading: keyset pagination over a distributed table from a worker sees every row once, in
//!   order; the decoding functions run on the workers (EXPLAIN).
//!
//! Figures (rows per second through the coordinator and through every node, snowflake keys and
//! bigserial) are printed for docs/citus.md, never asserted:
//! `cargo test --release --manifest-path tests/integration/Cargo.toml --test citus -- --nocapture`

use postgres::Client;
use snowflake_id_integration::{
    column, count, db_error, major_of, pg_bin_dir, pg_dir, value, wait_until, Cluster, Write, Writers,
    JS53_LAYOUT, MAX_SAFE_INTEGER,
};
use std::collections::HashSet;
use std::io::Write as _;
use std::time::{Duration, Instant};

/// Node settings beside the harness's: Citus first in the preload list (it insists), logical
/// WAL for the rebalancer's shard moves, room for Citus's own connections and workers. A node
/// issues nothing until `snowflake_citus_fence()` gives it its shard.
const NODE_SETTINGS: &[&str] = &[
    "shared_preload_libraries = 'citus,snowflake_id'",
    "wal_level = logical",
    "max_connections = 120",
    "max_worker_processes = 24",
    "citus.node_conninfo = 'sslmode=disable'",
    "snowflake_id.shards = 'none'",
];

/// The distributed tables' shard count: small, so that the rebalance moves a few shards only.
const SHARD_COUNT: i32 = 8;

/// The test's tables, created on the coordinator: one distributed by a tenant column, one by
/// its snowflake key, a reference table, and the bigserial control. Each row has `ROW`.
fn schema() -> String {
    const KEY: &str = "bigint NOT NULL DEFAULT snowflake_nextval(snowflake_node_shard())";
    format!(
        "CREATE TABLE events (id {KEY}, tenant int NOT NULL, {ROW}, PRIMARY KEY (tenant, id));
         SELECT create_distributed_table('events', 'tenant');
         CREATE TABLE items (id {KEY} PRIMARY KEY, {ROW});
         SELECT create_distributed_table('items', 'id');
         CREATE TABLE kinds (id {KEY} PRIMARY KEY, {ROW});
         SELECT create_reference_table('kinds');
         CREATE TABLE serials (id bigserial PRIMARY KEY, {ROW});
         SELECT create_distributed_table('serials', 'id');"
    )
}

/// The columns of every test table beside its keys: `via`, the group id of the node the row's
/// statement was sent to (-1 for INSERT … SELECT, whose default Citus evaluates where it runs
/// the SELECT), `round`, the round of the load, and `at`, when the row was made.
const ROW: &str = "via int NOT NULL, round int NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp()";

/// The tables with snowflake keys, all checked alike.
const SNOWFLAKE_TABLES: [&str; 3] = ["events", "items", "kinds"];

/// Rows of one multi-row INSERT.
const MULTI_ROWS: usize = 10;

/// How far a key's decoded time may be from its row's `clock_timestamp()`, and how far back in
/// time a later key may go: the lead bound and a loaded machine's scheduling.
const TIME_SLACK_MS: f64 = 2000.0;

/// One Citus node: a server, and its name in Citus's metadata (its socket folder).
struct Node {
    cluster: Cluster,
    name: String,
}

impl Node {
    /// A new node with Citus created in it, not yet in any cluster, with `settings` beside
    /// NODE_SETTINGS (a layout).
    fn start(label: &str, settings: &[&str]) -> Node {
        let all: Vec<&str> = NODE_SETTINGS.iter().chain(settings).copied().collect();
        let mut cluster = Cluster::builder(&format!("citus-{label}")).settings(&all).create();
        let name = cluster.socket_dir().display().to_string();
        // Citus connects to the node itself (the rebalancer's background tasks) by this name.
        cluster.configure(&[&format!("citus.local_hostname = '{name}'")]);
        cluster.start_with(&[]);
        cluster.connect().batch_execute("CREATE EXTENSION citus").unwrap();
        Node { cluster, name }
    }

    fn connect(&self) -> Client {
        self.cluster.connect()
    }

    /// This node's Citus group id: the shard it issues.
    fn group(&self) -> i32 {
        value(&mut self.connect(), "SELECT groupid FROM pg_dist_local_group", &[])
    }

    fn has_extension(&self, name: &str) -> bool {
        value(&mut self.connect(), "SELECT count(*) > 0 FROM pg_extension WHERE extname = $1", &[&name])
    }

    /// Waits until the fence in force on this node lets it issue its own group's shard.
    fn wait_for_own_fence(&self) {
        let mut client = self.connect();
        wait_until(&format!("the fence of {} gave it its shard", self.name), || {
            value(&mut client, "SELECT snowflake_fence_allows(snowflake_node_shard())", &[])
        });
    }
}

/// Adds `node` to the cluster of `coordinator` and sets every node's fence; returns its group.
fn add_node(coordinator: &mut Client, node: &Node) -> i32 {
    coordinator.execute("SELECT citus_add_node($1, 5432)", &[&node.name]).unwrap();
    set_fences(coordinator);
    node.wait_for_own_fence();
    node.group()
}

/// `snowflake_citus_fence()`: every node's fence set to its group id.
fn set_fences(coordinator: &mut Client) {
    let set = coordinator.query("SELECT nodename, shard FROM snowflake_citus_fence()", &[]).unwrap();
    assert!(!set.is_empty(), "snowflake_citus_fence() set no node's fence");
}

/// The writes a node's connections repeat during a round, each returning the keys it wrote:
/// a single-row INSERT routed by tenant, a multi-row INSERT routed by the new IDs themselves,
/// a row of the reference table, and a row of the bigserial control.
fn node_writes(via: i32, round: i32) -> Vec<Write> {
    let values = ["($1, $2)"; MULTI_ROWS].join(", ");
    vec![
        Write::text(
            "INSERT INTO events (tenant, via, round) VALUES ((random() * 1000)::int, $1, $2) RETURNING id",
            &[via, round],
        ),
        Write::text(&format!("INSERT INTO items (via, round) VALUES {values} RETURNING id"), &[via, round]),
        Write::text("INSERT INTO kinds (via, round) VALUES ($1, $2) RETURNING id", &[via, round]),
        Write::text("INSERT INTO serials (via, round) VALUES ($1, $2) RETURNING id", &[via, round]),
    ]
}

/// Writers on every node of `nodes` at once, one set per node.
fn start_round(nodes: &[&Node], round: i32) -> Vec<(i32, Writers)> {
    nodes
        .iter()
        .map(|node| {
            let via = node.group();
            (via, Writers::start(&node.cluster, node_writes(via, round)))
        })
        .collect()
}

/// Waits until every node's writers acknowledged some rows.
fn wait_for_progress(round: &[(i32, Writers)], rows: usize) {
    for (_, writers) in round {
        writers.wait_for(rows);
    }
}

/// Snowflake keys and bigserial keys acknowledged by the writers of a round, and their errors.
#[derive(Default)]
struct Acknowledged {
    snowflake: Vec<(i32, i64)>,
    serial: Vec<i64>,
    errors: Vec<String>,
}

impl Acknowledged {
    /// Stops a round's writers and keeps what they acknowledged, by the node they wrote to.
    fn collect(&mut self, round: Vec<(i32, Writers)>) {
        for (via, writers) in round {
            let (keys, errors) = writers.finish();
            // node_writes: the snowflake tables first, the bigserial control last.
            let (serial, snowflake) = keys.split_last().unwrap();
            self.snowflake.extend(snowflake.iter().flatten().map(|&id| (via, id)));
            self.serial.extend(serial);
            self.errors.extend(errors);
        }
    }
}

/// The server's message in a writer's error (as `Writers` records it, `{error:?}`).
fn message_of(error: &str) -> &str {
    error.split_once("message: \"").map_or(error, |(_, rest)| rest.split('"').next().unwrap_or(rest))
}

/// Under the js53 layout each node issues its group's shard in 53 bits: a coordinator and a
/// worker, rows inserted through both into a table distributed by its key, every ID at or below
/// 2^53 - 1, of the node its statement was sent to, none twice; shard 64, which a node of a
/// later group would ask for, refused.
#[test]
fn citus_nodes_in_the_js53_layout_issue_their_group_in_53_bits() {
    if !citus_installed() {
        return;
    }
    let coordinator = Node::start("js53-coordinator", &[JS53_LAYOUT]);
    let worker = Node::start("js53-worker", &[JS53_LAYOUT]);
    let mut c = coordinator.connect();
    c.execute("SELECT citus_set_coordinator_host($1, 5432)", &[&coordinator.name]).unwrap();
    c.batch_execute("CREATE EXTENSION snowflake_id").unwrap();
    c.batch_execute(include_str!("../../../deploy/sql/citus.sql")).unwrap();
    add_node(&mut c, &worker);
    coordinator.wait_for_own_fence();
    c.batch_execute(
        "CREATE TABLE items (id bigint NOT NULL DEFAULT snowflake_nextval(snowflake_node_shard()) PRIMARY KEY,
                             via int NOT NULL);
         SELECT create_distributed_table('items', 'id');",
    )
    .unwrap();
    for node in [&coordinator, &worker] {
        let via = node.group();
        let mut client = node.connect();
        for _ in 0..20 {
            client
                .execute("INSERT INTO items (via) SELECT $1 FROM generate_series(1, 100)", &[&via])
                .unwrap();
        }
    }
    let row = c
        .query_one(
            "SELECT count(*), count(DISTINCT id), max(id), count(*) FILTER (WHERE snowflake_shard(id) <> via)
             FROM items",
            &[],
        )
        .unwrap();
    let (rows, distinct, max, foreign) =
        (row.get::<_, i64>(0), row.get::<_, i64>(1), row.get::<_, i64>(2), row.get::<_, i64>(3));
    assert_eq!((rows, distinct, foreign), (4000, 4000, 0), "4,000 rows, distinct, each of its node's group");
    assert!(max <= MAX_SAFE_INTEGER, "{max} is above 2^53 - 1");

    // Shard 64, above the layout's 63 (a node of group 64 would ask for it): refused.
    let error = db_error(&mut c, "SELECT snowflake_nextval(64)");
    assert_eq!(error.code().code(), "22023");
    println!("js53: a coordinator and a worker issued 4,000 IDs, the largest {max}");
}

/// Whether Citus is installed for the PostgreSQL under test; says that the test is skipped
/// when it is not.
fn citus_installed() -> bool {
    let installed = pg_dir("--pkglibdir").join("citus.so").is_file()
        && pg_dir("--sharedir").join("extension/citus.control").is_file();
    if !installed {
        println!(
            "skipped: Citus is not installed for PostgreSQL {} (scripts/citus-install.sh builds it from its source tarball; docs/citus.md)",
            major_of(pg_bin_dir())
        );
    }
    installed
}

#[test]
fn citus_cluster_issues_no_key_twice() {
    if !citus_installed() {
        return;
    }
    let major = major_of(pg_bin_dir());
    let started = Instant::now();
    let coordinator = Node::start("coordinator", &[]);
    let mut workers = [Node::start("worker1", &[]), Node::start("worker2", &[])];
    let mut c = coordinator.connect();
    c.execute("SELECT citus_set_coordinator_host($1, 5432)", &[&coordinator.name]).unwrap();

    // CREATE EXTENSION on the coordinator: run on the nodes already there at once, and on a
    // node added later when it joins.
    c.execute("SELECT citus_add_node($1, 5432)", &[&workers[0].name]).unwrap();
    c.batch_execute("CREATE EXTENSION snowflake_id").unwrap();
    assert!(
        workers[0].has_extension("snowflake_id"),
        "CREATE EXTENSION did not reach the worker already added"
    );
    assert!(!workers[1].has_extension("snowflake_id"));
    c.execute("SELECT citus_add_node($1, 5432)", &[&workers[1].name]).unwrap();
    assert!(
        workers[1].has_extension("snowflake_id"),
        "the extension was not created on a worker added later"
    );

    c.batch_execute(include_str!("../../../deploy/sql/citus.sql")).unwrap();
    set_fences(&mut c);
    let first_nodes = [&coordinator, &workers[0], &workers[1]];
    for node in first_nodes {
        node.wait_for_own_fence();
    }
    let groups: Vec<i32> = first_nodes.iter().map(|node| node.group()).collect();
    assert_eq!(groups, [0, 1, 2], "group ids, and so shards, of the coordinator and the workers");

    c.batch_execute(&format!("SET citus.shard_count = {SHARD_COUNT};\n{}", schema())).unwrap();
    println!(
        "PostgreSQL {major}: a coordinator and 2 workers up, tables distributed ({:.1?})",
        started.elapsed()
    );

    // A default naming a constant shard is copied to every node with the table: it issues on
    // the node of that group only.
    c.batch_execute(
        "CREATE TABLE fixed (id bigint PRIMARY KEY DEFAULT snowflake_nextval(1), note text);
         SELECT create_distributed_table('fixed', 'id');",
    )
    .unwrap();
    for node in [&coordinator, &workers[1]] {
        let error = db_error(&mut node.connect(), "INSERT INTO fixed (note) VALUES ('copied default')");
        assert_eq!(error.code().code(), "55000", "{error:?}");
        assert!(error.message().contains("shard 1 is not issued by this server"), "{error:?}");
    }
    workers[0].connect().batch_execute("INSERT INTO fixed (note) VALUES ('its own node')").unwrap();
    assert_eq!(count(&mut c, "SELECT count(*) FROM fixed"), 1);

    let mut acknowledged = Acknowledged::default();

    // Round 1: writers on every node while a third worker joins and shards move to it.
    let worker3 = Node::start("worker3", &[]);
    let round = start_round(&first_nodes, 1);
    wait_for_progress(&round, 50);
    let joined = Instant::now();
    let group3 = add_node(&mut c, &worker3);
    assert_eq!(group3, 3);
    c.batch_execute("SELECT citus_rebalance_start()").unwrap();
    c.batch_execute("SELECT citus_rebalance_wait()").unwrap();
    let moved = count(&mut c, "SELECT count(*) FROM pg_dist_placement WHERE groupid = 3");
    assert!(moved > 0, "the rebalance moved no shard to the new worker");
    println!(
        "round 1: worker3 added (group 3) and {moved} shard placements moved to it in {:.1?}, under writes from every node",
        joined.elapsed()
    );
    wait_for_progress(&round, 100);
    acknowledged.collect(round);
    // Shard moves block writes to the moving shards for a moment; none fails.
    assert!(acknowledged.errors.is_empty(), "writes failed during the rebalance: {:?}", acknowledged.errors);

    // Round 2: writers on all four nodes; worker2 is killed with SIGKILL in the middle.
    let round = start_round(&[&coordinator, &workers[0], &workers[1], &worker3], 2);
    wait_for_progress(&round, 30);
    workers[1].cluster.kill_postmaster();
    std::thread::sleep(Duration::from_millis(500));
    // Its own writers lost their connections, and the others' statements that touched its
    // shards failed: each stopped at its error. What they had acknowledged counts.
    acknowledged.collect(round);
    workers[1].cluster.start_with(&[]);
    workers[1].cluster.wait_until_accepting();
    workers[1].wait_for_own_fence();

    // Round 3: after the restart.
    let nodes = [&coordinator, &workers[0], &workers[1], &worker3];
    let round = start_round(&nodes, 3);
    wait_for_progress(&round, 100);
    acknowledged.collect(round);
    println!(
        "rounds 1-3: {} snowflake keys and {} bigserial keys acknowledged; {} writers stopped at an error (the kill): {:?}",
        acknowledged.snowflake.len(),
        acknowledged.serial.len(),
        acknowledged.errors.len(),
        acknowledged.errors.iter().map(|error| message_of(error)).collect::<HashSet<_>>()
    );

    // COPY, INSERT … SELECT and snowflake_nextvals on every node.
    for node in nodes {
        let via = node.group();
        let mut client = node.connect();
        let mut copy = client.copy_in("COPY events (tenant, via, round) FROM STDIN").unwrap();
        for tenant in 0..200 {
            writeln!(copy, "{tenant}\t{via}\t4").unwrap();
        }
        copy.finish().unwrap();
        let batch = client
            .execute(
                "INSERT INTO items (id, via, round) SELECT snowflake_nextvals(snowflake_node_shard(), 100), $1, 4",
                &[&via],
            )
            .unwrap();
        assert_eq!(batch, 100);
        client
            .execute(
                "INSERT INTO items (via, round) SELECT -1, 5 FROM events WHERE via = $1 LIMIT 50",
                &[&via],
            )
            .unwrap();
    }

    // A commit that the killed worker missed in its second phase (a statement writing to
    // several nodes commits with two-phase commit) stays prepared there until Citus recovers
    // it, by itself once a minute (citus.recover_2pc_interval): done now, on every node.
    c.batch_execute("SELECT * FROM run_command_on_all_nodes('SELECT recover_prepared_transactions()')")
        .unwrap();

    // No key acknowledged twice, none twice in the tables.
    let mut seen = HashSet::new();
    let repeated = acknowledged.snowflake.iter().filter(|(_, id)| !seen.insert(*id)).count();
    assert_eq!(repeated, 0, "{repeated} snowflake keys acknowledged twice");
    let all =
        SNOWFLAKE_TABLES.map(|table| format!("SELECT id, via, round, at FROM {table}")).join(" UNION ALL ");
    let row = c.query_one(&format!("SELECT count(*), count(DISTINCT id) FROM ({all}) k"), &[]).unwrap();
    let (rows, distinct): (i64, i64) = (row.get(0), row.get(1));
    assert_eq!(rows, distinct, "{} duplicate IDs in the tables", rows - distinct);
    let stored: HashSet<i64> =
        column(&mut c, &format!("SELECT id FROM ({all}) k"), &[]).into_iter().collect();
    let lost = acknowledged.snowflake.iter().filter(|(_, id)| !stored.contains(id)).count();
    assert_eq!(lost, 0, "{lost} acknowledged rows are not in the tables");

    // Every key decodes to the node its statement was sent to (INSERT … SELECT: to a node of
    // the cluster), also the acknowledged ones.
    let wrong =
        acknowledged.snowflake.iter().filter(|(via, id)| (id >> 12) & 1023 != i64::from(*via)).count();
    assert_eq!(wrong, 0, "{wrong} acknowledged keys decode to another node's shard");
    let wrong = count(
        &mut c,
        &format!("SELECT count(*) FROM ({all}) k WHERE snowflake_shard(id) <> via AND via >= 0 OR snowflake_shard(id) NOT IN (0, 1, 2, 3)"),
    );
    assert_eq!(wrong, 0, "{wrong} stored keys decode to another shard than their node's");
    for node in nodes {
        let group = node.group();
        let shards: Vec<i32> = column(&mut node.connect(), "SELECT shard FROM snowflake_stats()", &[]);
        assert!(shards.iter().all(|&shard| shard == group), "node of group {group} issued shards {shards:?}");
    }

    // After the restart, the killed worker's keys are above all it issued before.
    let killed = workers[1].group();
    let below = count(
        &mut c,
        &format!(
            "SELECT count(*) FROM ({all}) k WHERE snowflake_shard(id) = {killed} AND round < 3
               AND id >= (SELECT min(id) FROM ({all}) l WHERE snowflake_shard(id) = {killed} AND round >= 3)"
        ),
    );
    assert_eq!(below, 0, "the killed worker issued keys after its restart that are not above earlier ones");

    // Time order across nodes: a key's time is its row's, and a later key is never an earlier
    // row by more than the slack. The bigserial control's keys jump by node (each node's
    // sequence has a range of its own), so its later keys are rows of long before.
    let snowflake_drift: f64 = value(
        &mut c,
        &format!(
            "SELECT max(abs(extract(epoch FROM at - snowflake_timestamp(id)) * 1000))::float8 FROM ({all}) k"
        ),
        &[],
    );
    assert!(snowflake_drift < TIME_SLACK_MS, "a key's time is {snowflake_drift} ms from its row's");
    let lateness = |c: &mut Client, rows: &str| -> f64 {
        let query = format!(
            "SELECT coalesce(max(extract(epoch FROM latest - at) * 1000), 0)::float8
             FROM (SELECT at, max(at) OVER (ORDER BY id) AS latest FROM ({rows}) r) s"
        );
        value(c, &query, &[])
    };
    let snowflake_late = lateness(&mut c, &all);
    let serial_late = lateness(&mut c, "SELECT id, at FROM serials");
    println!(
        "time order: snowflake keys at most {snowflake_late:.0} ms out of time order (key time within {snowflake_drift:.0} ms of the row's); bigserial keys {serial_late:.0} ms"
    );
    assert!(snowflake_late < TIME_SLACK_MS, "a later snowflake key is a row {snowflake_late} ms older");
    assert!(
        serial_late > TIME_SLACK_MS,
        "the bigserial control sorted by time ({serial_late} ms): it should not"
    );
    let serial_nodes = count(&mut c, "SELECT count(DISTINCT id >> 48) FROM serials");
    assert!(serial_nodes >= 3, "bigserial keys from {serial_nodes} node ranges");

    // Keyset pagination from a worker: every row once, in order.
    let mut reader = workers[0].connect();
    let total = count(&mut reader, "SELECT count(*) FROM items");
    let (mut cursor, mut read, mut pages) = (0_i64, 0_i64, 0);
    loop {
        let ids: Vec<i64> =
            column(&mut reader, "SELECT id FROM items WHERE id > $1 ORDER BY id LIMIT 1000", &[&cursor]);
        let Some(&last) = ids.last() else { break };
        assert!(ids.windows(2).all(|pair| pair[0] < pair[1]) && ids[0] > cursor, "a page out of order");
        cursor = last;
        read += ids.len() as i64;
        pages += 1;
    }
    assert_eq!(read, total, "keyset pagination read {read} of {total} rows");
    let plan: Vec<String> = column(
        &mut reader,
        "EXPLAIN (VERBOSE, COSTS OFF) SELECT snowflake_shard(id), count(*) FROM items WHERE id > 0 GROUP BY 1",
        &[],
    );
    let pushed = plan.iter().any(|line| line.contains("Query:") && line.contains("snowflake_shard(id)"));
    assert!(pushed, "snowflake_shard() is not sent to the workers:\n{}", plan.join("\n"));
    println!("keyset pagination from a worker: {read} rows in {pages} pages, in order; decoding pushed down to the workers");

    // A copy of a worker's data directory (started beside it as a primary) added as a node: it
    // holds the worker's group id and fence until it joins; then it gets a new group id,
    // refuses to issue (its fence names the old one), and issues the new one once fenced.
    // A checkpoint first, so that pg_basebackup's own (spread over minutes) has little to write.
    workers[0].connect().batch_execute("CHECKPOINT").unwrap();
    let copy = Cluster::builder("citus-copy").copy_of(&workers[0].cluster).start();
    copy.wait_until_accepting();
    let copy = Node { name: copy.socket_dir().display().to_string(), cluster: copy };
    let mut copied = copy.connect();
    copied.batch_execute(&format!("ALTER SYSTEM SET citus.local_hostname = '{}'; ", copy.name)).unwrap();
    copied.batch_execute("SELECT pg_reload_conf()").unwrap();
    c.execute("SELECT citus_add_node($1, 5432)", &[&copy.name]).unwrap();
    let copy_group = copy.group();
    assert!(copy_group > group3, "the copy was given group {copy_group}");
    let error = db_error(&mut copy.connect(), "INSERT INTO items (via, round) VALUES (-2, 6)");
    assert_eq!(error.code().code(), "55000", "{error:?}");
    println!(
        "a copy of worker1 added as a node: group {copy_group}, refused until fenced: {}",
        error.message()
    );
    set_fences(&mut c);
    copy.wait_for_own_fence();
    let id: i64 =
        value(&mut copy.connect(), "INSERT INTO items (via, round) VALUES (-2, 6) RETURNING id", &[]);
    assert_eq!((id >> 12) & 1023, i64::from(copy_group));

    figures(&coordinator, &[&coordinator, &workers[0], &workers[1], &worker3, &copy]);
    println!("PostgreSQL {major}: Citus test done in {:.1?}", started.elapsed());
}

/// Rows per second of multi-row INSERTs, through the coordinator only and through every node,
/// into the snowflake table distributed by ID and into the bigserial control; printed only.
fn figures(coordinator: &Node, nodes: &[&Node]) {
    const FOR: Duration = Duration::from_secs(3);
    const CONNECTIONS: usize = 4;
    let values = ["(-3, 7)"; MULTI_ROWS].join(", ");
    for table in ["items", "serials"] {
        let insert = format!("INSERT INTO {table} (via, round) VALUES {values} RETURNING id");
        for (how, targets) in [("the coordinator", vec![coordinator]), ("every node", nodes.to_vec())] {
            let runs: Vec<Writers> = (0..CONNECTIONS)
                .map(|i| Writers::start(&targets[i % targets.len()].cluster, vec![Write::prepared(&insert)]))
                .collect();
            std::thread::sleep(FOR);
            let rows: usize = runs.into_iter().map(|run| run.finish().0.iter().flatten().count()).sum();
            println!(
                "figures: {table} ({}), {CONNECTIONS} connections through {how}: {:.0} rows/s",
                if table == "items" { "snowflake keys" } else { "bigserial" },
                rows as f64 / FOR.as_secs_f64()
            );
        }
    }
}
