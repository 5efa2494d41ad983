//! The deployment kit (deploy/fleet.sh) for real: a router running PL/Proxy in front of three
//! shard servers holding 16 logical shards. Sixteen clients insert 200,000 posts through the
//! router, then every server is read directly: no ID twice across the fleet, every ID in the
//! schema of the shard it decodes to, every ID's time close to its row's insertion time, and
//! paging through the router returns every row once, in order. Then `fleet.sh add-server`
//! moves logical shards with their rows to a fourth server while nothing is lost or doubled,
//! and the moved shards' new IDs sort above their old ones.
//!
//! The rows per second reached through the router are printed for the notes, never asserted.
//!
//! Causal order (docs/causal-order.md): with node2's clock 150 ms behind node1's (libfaketime),
//! replies written on node2 to posts of node1 carry the post's ID as a causality token
//! (`fleet.insert_post(user, body, seen)`, which observes it first): every reply is above its
//! post; without the token, the control, some are below.

use postgres::{Client, Config, NoTls};
use snowflake_id_integration::engine::{self, Op, Paging, Reads, Route, Transaction, Workload, Writer};
use snowflake_id_integration::{
    apply_settings, column, count, db_error, restart_kit_server, value, wait_until, Cluster, FakeClock, Kit,
    Pick, PORT,
};
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const CLIENTS: usize = 16;
const USERS: usize = 1_600;
/// Posts inserted by the clients through the router before the new server is added.
const ROWS: usize = 200_000;
/// Posts per call of `fleet.insert_posts`: PL/Proxy splits each call's arrays by shard, so
/// every row is routed on its own, and one call costs one round trip per server.
const ROWS_PER_CALL: usize = 250;
/// Posts after the new server is added.
const ROWS_AFTER_MOVE: usize = 20_000;
/// Each client also inserts this many posts with one `fleet.insert_post` call each.
const SINGLE_ROWS_PER_CLIENT: usize = 50;
const PAGE: i32 = 5_000;
/// Clients writing through the router while logical shards move to a new server.
const MOVE_WRITERS: usize = 4;
/// How far an ID's decoded time may be from its row's `created_at` (`clock_timestamp()` when
/// the row was inserted): an ID's time is its server clock's millisecond, or later by at most
/// `snowflake_id.max_lead_ms`, 2 s by default, when a shard borrows time ahead. All servers
/// here read one clock, so a wrong shard's generator or a wrong time part would show.
const MAX_SKEW_SECONDS: f64 = 2.0;

/// A fleet started by `deploy/fleet.sh up` in a temporary folder, down and removed when
/// dropped (see `Kit`).
struct Fleet {
    kit: Kit,
}

impl Fleet {
    fn up(servers: usize) -> Fleet {
        // The extension is installed by the test command's earlier step.
        Fleet { kit: Kit::up("fleet", servers, &[("SNOWFLAKE_FLEET_SKIP_INSTALL", "1")]) }
    }

    /// Connection settings for database `fleet` of a server (`router`, `node1`, ...).
    fn config(&self, server: &str) -> Config {
        let mut config = Config::new();
        config.host_path(self.kit.dir().join(server)).port(PORT).user("postgres").dbname("fleet");
        // Bounds every statement, also a router call waiting for a shard server.
        config.options("-c statement_timeout=120s");
        config
    }

    fn connect(&self, server: &str) -> Client {
        self.config(server).connect(NoTls).unwrap_or_else(|e| panic!("connect to {server}: {e}"))
    }

    /// The shard servers, as the router knows them.
    fn servers(&self) -> Vec<String> {
        column(&mut self.connect("router"), "SELECT name FROM fleet.servers ORDER BY name", &[])
    }

    /// The router's map: logical shard -> server.
    fn shard_map(&self) -> BTreeMap<i32, String> {
        let rows = self.connect("router").query("SELECT shard, server FROM fleet.shard_map", &[]).unwrap();
        rows.iter().map(|row| (row.get(0), row.get(1))).collect()
    }
}

/// Users created through the router, placed by a hash of their names: (id, shard of the id).
fn create_users(router: &mut Client, names: Vec<String>) -> Vec<(i64, i32)> {
    let rows = router.query("SELECT id, snowflake_shard(id) FROM fleet.create_users($1)", &[&names]).unwrap();
    rows.iter().map(|row| (row.get(0), row.get(1))).collect()
}

/// A post as stored on a shard server.
struct Stored {
    /// The logical shard of the schema holding the row.
    schema_shard: i32,
    id: i64,
    id_shard: i32,
    user_shard: i32,
    /// Decoded time minus `created_at`, in seconds.
    skew: f64,
    body: String,
}

/// Every post of every logical shard of every server, read on the servers themselves, and
/// the ids of their users.
fn stored_rows(fleet: &Fleet) -> (Vec<Stored>, Vec<i64>) {
    let (mut posts, mut users) = (Vec::new(), Vec::new());
    for server in fleet.servers() {
        let mut client = fleet.connect(&server);
        for shard in column::<i32>(&mut client, "SELECT shard FROM fleet.owned_shards", &[]) {
            let schema = format!("s{shard:04}");
            let posts_of_shard = format!(
                "SELECT id, snowflake_shard(id), snowflake_shard(user_id),
                        extract(epoch FROM snowflake_timestamp(id) - created_at)::float8, body
                 FROM {schema}.posts"
            );
            let rows = client.query(&posts_of_shard, &[]).unwrap();
            posts.extend(rows.iter().map(|row| Stored {
                schema_shard: shard,
                id: row.get(0),
                id_shard: row.get(1),
                user_shard: row.get(2),
                skew: row.get(3),
                body: row.get(4),
            }));
            let users_of_shard = format!(
                "SELECT id, snowflake_shard(id), abs(extract(epoch FROM snowflake_timestamp(id) - created_at))::float8
                 FROM {schema}.users"
            );
            for row in client.query(&users_of_shard, &[]).unwrap() {
                let id: i64 = row.get(0);
                assert_eq!(row.get::<_, i32>(1), shard, "user {id} is in the schema of another shard");
                let skew: f64 = row.get(2);
                assert!(skew <= MAX_SKEW_SECONDS, "user {id}'s time is {skew:.3} s from its insertion time");
                users.push(id);
            }
        }
    }
    (posts, users)
}

/// No ID twice across all servers, tables and shards; every post in its own shard's schema,
/// beside its user. Returns the sorted post ids.
fn assert_consistent(posts: &[Stored], users: &[i64]) -> Vec<i64> {
    let mut seen = HashSet::with_capacity(posts.len() + users.len());
    let duplicates =
        posts.iter().map(|post| post.id).chain(users.iter().copied()).filter(|id| !seen.insert(*id)).count();
    assert_eq!(duplicates, 0, "{duplicates} duplicate IDs across the fleet");
    for post in posts {
        assert_eq!(
            post.id_shard, post.schema_shard,
            "post {} decodes to another shard than its schema's",
            post.id
        );
        assert_eq!(post.user_shard, post.schema_shard, "post {} is not on its user's shard", post.id);
    }
    sorted(posts.iter().map(|post| post.id).collect())
}

/// The largest distance between a post's decoded time and its insertion time.
fn max_skew<'a>(posts: impl Iterator<Item = &'a Stored>) -> f64 {
    posts.map(|post| post.skew.abs()).fold(0.0, f64::max)
}

/// Sixteen clients insert `rows` posts through the router for the given users, in calls of
/// ROWS_PER_CALL rows, then SINGLE_ROWS_PER_CLIENT one call each. Returns the acknowledged
/// ids and the time taken.
fn insert_through_router(fleet: &Fleet, users: &[i64], rows: usize, tag: &str) -> (Vec<i64>, Duration) {
    let per_client = rows / CLIENTS;
    let started = Instant::now();
    let ids = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..CLIENTS)
            .map(|client_no| {
                let config = fleet.config("router");
                scope.spawn(move || {
                    let mut client = config.connect(NoTls).unwrap();
                    let batch = client.prepare("SELECT fleet.insert_posts($1, $2)").unwrap();
                    let single = client.prepare("SELECT fleet.insert_post($1, $2)").unwrap();
                    // Each client writes for users all over the fleet, in its own order.
                    let user_of = |row: usize| users[(client_no * 7_919 + row * 104_729) % users.len()];
                    let mut ids = Vec::with_capacity(per_client + SINGLE_ROWS_PER_CLIENT);
                    for first in (0..per_client).step_by(ROWS_PER_CALL) {
                        let rows = first..(first + ROWS_PER_CALL).min(per_client);
                        let user_ids: Vec<i64> = rows.clone().map(user_of).collect();
                        let bodies: Vec<String> =
                            rows.map(|row| format!("{tag} {client_no} {row}")).collect();
                        let result = client.query(&batch, &[&user_ids, &bodies]).unwrap();
                        assert_eq!(result.len(), user_ids.len(), "rows acknowledged by one call");
                        ids.extend(result.iter().map(|row| row.get::<_, i64>(0)));
                    }
                    for row in per_client..per_client + SINGLE_ROWS_PER_CLIENT {
                        let body = format!("{tag} {client_no} {row}");
                        ids.push(client.query_one(&single, &[&user_of(row), &body]).unwrap().get(0));
                    }
                    ids
                })
            })
            .collect();
        workers.into_iter().flat_map(|worker| worker.join().unwrap()).collect::<Vec<i64>>()
    });
    (ids, started.elapsed())
}

/// A writer through the router, run by the workload engine: posts inserted one call each
/// until `stop`, a call that a shard server refuses while its shard moves tried again (55006
/// while it is frozen for the copy, 55000 when the call was routed by the map of just before
/// the switch). A refused call writes nothing.
struct Posting<'a> {
    fleet: &'a Fleet,
    users: &'a [i64],
    stop: &'a AtomicBool,
    writer: usize,
    started: Instant,
    /// The post of the next call: a refused one is tried again.
    row: Cell<usize>,
    insert: RefCell<Option<postgres::Statement>>,
}

/// A post: its user and body.
#[derive(Clone, Debug)]
struct Post {
    user: i64,
    body: String,
}

/// The refusals a call meets while its shard moves.
fn refused_by_a_move(op: &Op<Post>) -> bool {
    matches!(op.error.as_deref(), Some("55006" | "55000"))
}

impl Workload for Posting<'_> {
    type Kind = Post;
    type Hold<'b>
        = ()
    where
        Self: 'b;

    fn writing(&self) -> bool {
        !self.stop.load(Ordering::Relaxed)
    }

    fn origin(&self) -> Instant {
        self.started
    }

    fn kind(&self, _pick: &mut Pick) -> Post {
        let (writer, row) = (self.writer, self.row.get());
        Post {
            user: self.users[(writer * 31 + row * 7) % self.users.len()],
            body: format!("moving {writer} {row}"),
        }
    }

    fn route(&self, _post: &Post, _tag: i64) -> Option<(Route, i32, ())> {
        Some((Route::to("router", self.fleet.config("router")), 0, ()))
    }

    fn run(
        &self,
        client: &mut Client,
        _: &mut Pick,
        op: &mut Op<Post>,
        tx: &mut Transaction,
    ) -> Result<(), postgres::Error> {
        let insert = self.insert.borrow().clone().expect("prepared when connected");
        tx.sending_autocommit_insert();
        let id: i64 = client.query_one(&insert, &[&op.kind.user, &op.kind.body])?.get(0);
        tx.returned([id]);
        Ok(())
    }

    fn connected(&self, client: &mut Client) {
        *self.insert.borrow_mut() = Some(client.prepare("SELECT fleet.insert_post($1, $2)").unwrap());
    }

    fn recorded(&self, op: &mut Op<Post>, _client: Option<&mut Client>) {
        if !refused_by_a_move(op) {
            self.row.set(self.row.get() + 1);
        }
    }
}

/// Posts through the router until `stop` (see `Posting`); returns the acknowledged ids and
/// the number of refusals. Any other failure, or refusals for 120 s in a row, fails the test.
fn write_until(fleet: &Fleet, users: &[i64], stop: &AtomicBool, writer: usize) -> (Vec<i64>, usize) {
    let posting = Posting {
        fleet,
        users,
        stop,
        writer,
        started: Instant::now(),
        row: Cell::new(0),
        insert: RefCell::new(None),
    };
    let history = Writer::new(posting, writer, Pick::new(writer as u64)).run();
    let mut refused_since: Option<u64> = None;
    for op in &history {
        if refused_by_a_move(op) {
            let since = *refused_since.get_or_insert(op.start_ms);
            assert!(op.end_ms - since < 120_000, "writes refused for too long: {:?}", op.message);
        } else {
            assert!(op.succeeded(), "write during the move: {:?} {:?}", op.error, op.message);
            refused_since = None;
        }
    }
    let ids = history.iter().flat_map(|op| op.committed.iter().copied()).collect();
    (ids, history.iter().filter(|op| refused_by_a_move(op)).count())
}

/// All posts of the fleet, a page at a time through the router: `id > cursor ORDER BY id`.
fn page_through_router(fleet: &Fleet) -> Vec<i64> {
    let mut router = fleet.connect("router");
    let page = router.prepare("SELECT id FROM fleet.posts_after($1, $2)").unwrap();
    let (mut all, mut cursor) = (Vec::new(), 0i64);
    loop {
        let rows = router.query(&page, &[&cursor, &PAGE]).unwrap();
        all.extend(rows.iter().map(|row| row.get::<_, i64>(0)));
        match rows.last() {
            Some(last) if rows.len() == PAGE as usize => cursor = last.get(0),
            _ => return all,
        }
    }
}

fn assert_fleet_status_ok(fleet: &Fleet) {
    let bad = count(&mut fleet.connect("router"), "SELECT count(*) FROM fleet.status() WHERE NOT ok");
    assert_eq!(bad, 0, "logical shards not held as mapped:\n{}", fleet.kit.run(&["status"]));
}

/// Every shard server's fence (`snowflake_id.shards`) names exactly the logical shards the
/// router maps to it, and it refuses to issue any other: asked directly for a shard another
/// server holds, it raises 55000 and issues nothing.
fn assert_fenced(fleet: &Fleet) {
    let map = fleet.shard_map();
    for server in fleet.servers() {
        let held: Vec<String> =
            map.iter().filter(|(_, holder)| **holder == server).map(|(shard, _)| shard.to_string()).collect();
        let mut client = fleet.connect(&server);
        let fence: String = value(&mut client, "SHOW snowflake_id.shards", &[]);
        assert_eq!(fence, held.join(","), "the fence of {server}");
        let elsewhere = map.iter().find(|(_, holder)| **holder != server).map(|(shard, _)| *shard).unwrap();
        let error = db_error(&mut client, &format!("SELECT snowflake_nextval({elsewhere})"));
        assert_eq!(error.code().code(), "55000", "{server} issued shard {elsewhere}: {error:?}");
    }
}

fn sorted(mut ids: Vec<i64>) -> Vec<i64> {
    ids.sort_unstable();
    ids
}

#[test]
fn three_servers_behind_plproxy_then_a_fourth_added() {
    let fleet = Fleet::up(3);
    assert_fleet_status_ok(&fleet);
    assert_fenced(&fleet);
    let mut router = fleet.connect("router");
    let servers_of_map: HashSet<String> = fleet.shard_map().into_values().collect();
    assert_eq!(servers_of_map.len(), 3, "the 16 logical shards are spread over the 3 servers");

    // The example's rows, from `up`.
    let (example_posts, example_users) = stored_rows(&fleet);

    // Users, placed by a hash of their names; their ids carry their shard.
    let users = create_users(&mut router, (0..USERS).map(|n| format!("user{n}")).collect());
    assert_eq!(users.len(), USERS);
    let shards_with_users: HashSet<i32> = users.iter().map(|user| user.1).collect();
    assert_eq!(shards_with_users.len(), 16, "users land on every logical shard");
    let user_ids: Vec<i64> = users.iter().map(|user| user.0).collect();

    let (acknowledged, elapsed) = insert_through_router(&fleet, &user_ids, ROWS, "load");
    let total = acknowledged.len();
    assert_eq!(total, ROWS + CLIENTS * SINGLE_ROWS_PER_CLIENT);
    println!(
        "{total} posts through the router by {CLIENTS} clients in {:.2} s: {:.0} rows/s",
        elapsed.as_secs_f64(),
        total as f64 / elapsed.as_secs_f64()
    );

    // Read back on every server.
    let (posts, stored_users) = stored_rows(&fleet);
    assert_eq!(stored_users.len(), example_users.len() + USERS, "users stored vs created");
    let stored = assert_consistent(&posts, &stored_users);
    let expected =
        sorted(example_posts.iter().map(|post| post.id).chain(acknowledged.iter().copied()).collect());
    assert_eq!(stored.len(), expected.len(), "rows stored vs rows acknowledged (and the example's)");
    assert!(stored == expected, "the stored posts are not exactly the acknowledged ones");
    let skew = max_skew(posts.iter());
    println!("largest |decoded time - created_at| over {} posts: {:.3} s", posts.len(), skew);
    assert!(skew <= MAX_SKEW_SECONDS, "an ID's time is {skew:.3} s from its row's insertion time");

    // Paging through the router: every post once, in increasing order.
    let started = Instant::now();
    let paged = page_through_router(&fleet);
    println!(
        "paged through {} posts via the router in {:.2} s",
        paged.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(paged.windows(2).all(|pair| pair[0] < pair[1]), "pages are not in increasing id order");
    assert!(paged == stored, "paging returned {} posts, the servers hold {}", paged.len(), stored.len());

    // The guards against two servers generating for one shard.
    let (user_on_0, _) = *users.iter().find(|user| user.1 == 0).unwrap();
    let map = fleet.shard_map();
    let node_of_0 = map[&0].clone();
    let other_node = map.values().find(|server| **server != node_of_0).unwrap().clone();
    let error = db_error(
        &mut fleet.connect(&other_node),
        &format!("SELECT fleet.insert_post({user_on_0}, 'misrouted')"),
    );
    assert_eq!(error.code().code(), "55000", "a write for a shard the server does not hold: {error:?}");
    let error = db_error(&mut router, &format!("SELECT fleet.assign_shard(0, '{other_node}')"));
    assert_eq!(error.code().code(), "55000", "the map may not point at a server not holding it: {error:?}");
    let mut holder = fleet.connect(&node_of_0);
    holder.batch_execute("SELECT fleet.freeze_shard(0)").unwrap();
    let error = db_error(&mut router, &format!("SELECT fleet.insert_post({user_on_0}, 'while moving')"));
    assert_eq!(error.code().code(), "55006", "a write to a shard being moved, via the router: {error:?}");
    holder.batch_execute("SELECT fleet.thaw_shard(0)").unwrap();

    // A fourth server: logical shards move to it with their rows.
    let map_before = fleet.shard_map();
    let max_before: BTreeMap<i32, i64> = posts.iter().fold(BTreeMap::new(), |mut max, post| {
        let entry = max.entry(post.schema_shard).or_insert(post.id);
        *entry = (*entry).max(post.id);
        max
    });
    // Writers keep going through the router during the moves.
    let stop = AtomicBool::new(false);
    let (output, during, elapsed) = std::thread::scope(|scope| {
        let writers: Vec<_> = (0..MOVE_WRITERS)
            .map(|writer| {
                let (fleet, user_ids, stop) = (&fleet, &user_ids, &stop);
                scope.spawn(move || write_until(fleet, user_ids, stop, writer))
            })
            .collect();
        let started = Instant::now();
        let output = fleet.kit.run(&["add-server", "node4"]);
        stop.store(true, Ordering::Relaxed);
        let during = writers.into_iter().map(|writer| writer.join().unwrap()).collect::<Vec<_>>();
        (output, during, started.elapsed())
    });
    let written_during: Vec<i64> = during.iter().flat_map(|(ids, _)| ids.iter().copied()).collect();
    println!(
        "add-server took {:.2} s; meanwhile {MOVE_WRITERS} clients wrote {} posts one call each ({:.0} rows/s), \
         {} calls refused and retried",
        elapsed.as_secs_f64(),
        written_during.len(),
        written_during.len() as f64 / elapsed.as_secs_f64(),
        during.iter().map(|(_, refused)| refused).sum::<usize>()
    );
    let map_after = fleet.shard_map();
    let moved: Vec<i32> =
        map_after.iter().filter(|(shard, server)| map_before[shard] != **server).map(|(s, _)| *s).collect();
    assert_eq!(moved.len(), 4, "16 shards over 4 servers: 4 move to the new one\n{output}");
    assert!(moved.iter().all(|shard| map_after[shard] == "node4"));
    assert_fleet_status_ok(&fleet);
    assert_fenced(&fleet);
    let (posts_moved, users_moved) = stored_rows(&fleet);
    let stored = sorted(stored.into_iter().chain(written_during).collect());
    assert!(assert_consistent(&posts_moved, &users_moved) == stored, "rows lost or doubled by the move");
    assert_eq!(users_moved.len(), stored_users.len());

    // A shard whose generator ran ahead of the clock just before it moves (as a busy shard
    // may, within snowflake_id.max_lead_ms): the new server must continue above it. The lead
    // is made longer than the move takes, so the target's clock alone would not be enough.
    for server in [&node_of_0, &other_node] {
        apply_settings(&mut fleet.connect(server), &[("snowflake_id.max_lead_ms", "10s")]);
    }
    let ahead: i64 = value(
        &mut holder,
        "SELECT snowflake_advance(0, snowflake_compose(clock_timestamp() + interval '8 s', 0, 0))",
        &[],
    );
    let ahead_post: i64 = value(&mut router, "SELECT fleet.insert_post($1, 'ahead')", &[&user_on_0]);
    assert!(ahead_post > ahead);
    fleet.kit.run(&["move-shard", "0", &other_node]);
    assert_fenced(&fleet);
    let after_move: i64 = value(&mut router, "SELECT fleet.insert_post($1, 'after the move')", &[&user_on_0]);
    assert!(
        after_move > ahead_post,
        "shard 0 on {other_node} issued {after_move}, below {ahead_post} from {node_of_0}"
    );

    // More posts through the router, on moved and unmoved shards alike.
    let (acknowledged_after, elapsed) = insert_through_router(&fleet, &user_ids, ROWS_AFTER_MOVE, "after");
    println!(
        "{} posts through the router after the moves in {:.2} s: {:.0} rows/s",
        acknowledged_after.len(),
        elapsed.as_secs_f64(),
        acknowledged_after.len() as f64 / elapsed.as_secs_f64()
    );
    let (posts_final, users_final) = stored_rows(&fleet);
    let stored_final = assert_consistent(&posts_final, &users_final);
    let expected_final = sorted(
        stored
            .iter()
            .copied()
            .chain([ahead_post, after_move])
            .chain(acknowledged_after.iter().copied())
            .collect(),
    );
    assert!(stored_final == expected_final, "the stored posts are not exactly the acknowledged ones");
    for shard in moved.iter().chain([&0]) {
        let lowest_new = posts_final
            .iter()
            .filter(|post| post.schema_shard == *shard && post.body.starts_with("after"))
            .map(|post| post.id)
            .min()
            .unwrap();
        assert!(lowest_new > max_before[shard], "moved shard {shard} issued {lowest_new}, below its old IDs");
    }
    // Shard 0 was moved 8 s ahead on purpose; the others keep to the bound.
    let skew =
        max_skew(posts_final.iter().filter(|post| post.body.starts_with("after ") && post.schema_shard != 0));
    assert!(skew <= MAX_SKEW_SECONDS, "an ID's time is {skew:.3} s from its row's insertion time");
}

/// Reading in order across the fleet (docs/reading-in-order.md): one cursor per logical shard,
/// each read on the server that issues the shard, below that server's horizon for it
/// (`snowflake_horizon(shard)`). A post held uncommitted on one server while later posts of
/// its shard commit is read once it commits, not skipped; every post is read exactly once;
/// and a server refuses the horizon of a shard it does not issue (55000).
#[test]
fn a_cursor_per_shard_read_below_its_servers_horizon_skips_no_post() {
    let fleet = Fleet::up(2);
    let map = fleet.shard_map();
    let mut router = fleet.connect("router");
    let users = create_users(&mut router, (0..64).map(|n| format!("reader{n}")).collect());
    let (held_user, held_shard) = users[0];
    let held_server = map[&held_shard].clone();

    // A post taken on its server and held uncommitted while others commit after it.
    let mut holder = fleet.connect(&held_server);
    let mut held = holder.transaction().unwrap();
    let insert_held =
        format!("INSERT INTO s{held_shard:04}.posts (user_id, body) VALUES ($1, 'held') RETURNING id");
    let held_id: i64 = held.query_one(&insert_held, &[&held_user]).unwrap().get(0);

    let mut reader = ShardReader::new(&fleet, &map);
    let insert = router.prepare("SELECT fleet.insert_post($1, $2)").unwrap();
    for round in 0..5 {
        for (user, _) in &users {
            router.execute(&insert, &[user, &format!("round {round}")]).unwrap();
        }
        reader.poll();
        let cursor = reader.cursor(held_shard);
        assert!(
            cursor < held_id,
            "the reader of shard {held_shard} moved its cursor to {cursor}, past the uncommitted post {held_id}: it \
             would never read it"
        );
    }
    held.commit().unwrap();

    // Every post committed is read, exactly once, once the horizons pass it.
    let expected = sorted(stored_rows(&fleet).0.iter().map(|post| post.id).collect());
    let deadline = Instant::now() + Duration::from_secs(30);
    while reader.read.len() < expected.len() && Instant::now() < deadline {
        reader.poll();
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(reader.read.contains(&held_id), "the post held uncommitted, {held_id}, was never read");
    let mut read = sorted(reader.read.clone());
    let distinct = read.len();
    read.dedup();
    assert_eq!(distinct, read.len(), "{} posts were read twice", distinct - read.len());
    assert_eq!(read, expected, "the posts read are not exactly the posts committed");

    // A server refuses the horizon of a shard another server issues.
    let elsewhere = map.iter().find(|(_, server)| **server != held_server).map(|(shard, _)| *shard).unwrap();
    let error = db_error(&mut fleet.connect(&held_server), &format!("SELECT snowflake_horizon({elsewhere})"));
    assert_eq!(error.code().code(), "55000", "{error:?}");
    assert!(error.hint().is_some_and(|hint| hint.contains(&format!("shard {elsewhere}"))), "{error:?}");
}

/// A reader keeping one cursor per logical shard, each read on the shard's server with the
/// workload engine's poll (the documented loop and cursor rule).
struct ShardReader {
    clients: BTreeMap<String, Client>,
    shards: BTreeMap<i32, String>,
    reads: BTreeMap<i32, Reads>,
    read: Vec<i64>,
}

impl ShardReader {
    fn new(fleet: &Fleet, map: &BTreeMap<i32, String>) -> ShardReader {
        let clients = map.values().map(|server| (server.clone(), fleet.connect(server))).collect();
        let reads = map.keys().map(|shard| (*shard, Reads::default())).collect();
        ShardReader { clients, shards: map.clone(), reads, read: Vec::new() }
    }

    fn cursor(&self, shard: i32) -> i64 {
        self.reads[&shard].cursor
    }

    /// One round of the documented loop for every shard: the horizon, then, in a later
    /// statement, the rows above the cursor and below the horizon.
    fn poll(&mut self) {
        for (shard, server) in &self.shards {
            let client = self.clients.get_mut(server).unwrap();
            let reads = self.reads.get_mut(shard).unwrap();
            let before = reads.ids.len();
            // The posts have no tag column: the engine's reader is given one.
            let table = format!("(SELECT id, 0::bigint AS tag FROM s{shard:04}.posts) AS posts");
            engine::poll(client, &table, Paging::BelowHorizon { shard: Some(*shard) }, reads).unwrap();
            self.read.extend_from_slice(&reads.ids[before..]);
        }
    }
}

/// Posts and replies on two servers whose clocks disagree: a post by a user of node1, then a
/// reply by a user of node2, its clock 150 ms behind, with the post's ID as the causality token
/// and, for the control, without.
#[test]
fn a_reply_carrying_its_posts_id_sorts_after_it_on_a_server_with_a_slower_clock() {
    const POSTS: usize = 200;
    let fleet = Fleet::up(2);
    // node2 restarted on a clock 150 ms behind node1's.
    let folder = fleet.kit.dir().join("node2");
    let clock = FakeClock::in_folder(&folder);
    clock.set("-0.150");
    restart_kit_server(&folder, &clock.env());
    let map = fleet.shard_map();
    let mut node2 = fleet.connect("node2");
    let node2_shard = *map.iter().find(|(_, server)| *server == "node2").unwrap().0;
    // node2 resumes at its recorded reservation, ahead of its clock: once its IDs follow the
    // clock again, they lag node1's.
    wait_until("node2's IDs follow its clock", || {
        value(
            &mut node2,
            "SELECT snowflake_timestamp(snowflake_nextval($1)) <= clock_timestamp()",
            &[&node2_shard],
        )
    });
    let mut router = fleet.connect("router");
    let users = create_users(&mut router, (0..64).map(|n| format!("causal{n}")).collect());
    let on = |server: &str| users.iter().find(|(_, shard)| map[shard] == server).unwrap().0;
    let (poster, replier) = (on("node1"), on("node2"));
    let post = router.prepare("SELECT fleet.insert_post($1, 'post')").unwrap();
    let reply = router.prepare("SELECT fleet.insert_post($1, 'reply')").unwrap();
    let reply_after = router.prepare("SELECT fleet.insert_post($1, 'reply', $2)").unwrap();
    // How many of POSTS replies get an ID below their post's, with the token or without.
    let mut replies_below = |with_token: bool| {
        (0..POSTS)
            .filter(|_| {
                let post_id: i64 = router.query_one(&post, &[&poster]).unwrap().get(0);
                let reply_id: i64 = match with_token {
                    true => router.query_one(&reply_after, &[&replier, &post_id]),
                    false => router.query_one(&reply, &[&replier]),
                }
                .unwrap()
                .get(0);
                reply_id < post_id
            })
            .count()
    };
    // The control first: an observation raises node2's floor, which would lift the replies
    // without a token that follow it for as long as node2's clock lags.
    let below_without = replies_below(false);
    let below_with = replies_below(true);
    println!(
        "{POSTS} posts on node1, each replied to on node2 (clock 150 ms behind) through the router: without the \
         token {below_without} replies below their post, with it {below_with}"
    );
    assert_eq!(below_with, 0, "replies below the post whose ID they carried");
    assert!(below_without > 0, "the control shows no reply below its post: the test sees nothing");
}

/// Findings F3 and F2 of the fault campaign (docs/reliability.md), on the kit's move.
///
/// F3: just before the move the source handed out an ID it never stored (a bare call), ahead
/// of the clock: the target must continue above it, not only above the copied rows, or it
/// hands out the same ID again. F2: the target has a standby that has not replayed the copy
/// (its replay paused here, as a lagging standby's is behind): the source must keep its copy
/// until the standby has it, or a failover of the target loses the shard's rows. F8 (found by
/// the simulation): a second standby of the target, with a physical slot, is stopped during
/// the move, so that `pg_stat_replication` does not list it; its slot must hold the move too,
/// and the kit's refusal names it.
#[test]
fn a_move_continues_above_unstored_ids_and_keeps_the_source_until_the_targets_standby_has_the_copy() {
    let fleet = Fleet::up(2);
    let mut router = fleet.connect("router");
    let (user, shard) = create_users(&mut router, vec!["moved-shard-writer".to_string()])[0];
    let source = fleet.shard_map()[&shard].clone();
    let target = fleet.servers().into_iter().find(|server| *server != source).unwrap();
    for server in [&source, &target] {
        apply_settings(&mut fleet.connect(server), &[("snowflake_id.max_lead_ms", "10s")]);
    }
    let mut on_source = fleet.connect(&source);
    on_source
        .query_one(
            "SELECT snowflake_advance($1, snowflake_compose(clock_timestamp() + interval '8 s', 0, 0))",
            &[&shard],
        )
        .unwrap();
    let stored: i64 = value(&mut router, "SELECT fleet.insert_post($1, 'stored')", &[&user]);
    let bare: i64 = value(&mut on_source, "SELECT snowflake_nextval($1)", &[&shard]);
    assert!(bare > stored);
    drop(on_source);

    let target_dir = fleet.kit.dir().join(&target);
    let standby = Cluster::builder("fleet-standby").standby_through(&target_dir).start();
    standby.connect().batch_execute("SELECT pg_wal_replay_pause()").unwrap();
    // The second standby streams through its slot until it has everything so far, then stops.
    const SLOT: &str = "fleet_standby_slot";
    fleet
        .connect(&target)
        .query_one("SELECT pg_create_physical_replication_slot($1, true)", &[&SLOT])
        .unwrap();
    let slot_setting = format!("primary_slot_name = '{SLOT}'");
    let mut cut_off = Cluster::builder("fleet-standby-slot")
        .standby_through(&target_dir)
        .settings(&[&slot_setting])
        .start();
    let target_lsn =
        || value::<String>(&mut fleet.connect(&target), "SELECT pg_current_wal_lsn()::text", &[]);
    cut_off.wait_for_replay(&target_lsn());
    cut_off.stop("fast");
    let out = fleet
        .kit
        .command(&["move-shard", &shard.to_string(), &target])
        .env("SNOWFLAKE_FLEET_STANDBY_WAIT_S", "3")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the move finished while the target's standby lacked the copy");
    assert!(stderr.contains("keeps its copy"), "{stderr}");
    assert!(
        stderr.contains(&format!("slot {SLOT}")),
        "the stopped standby's slot did not hold the move: {stderr}"
    );
    let kept: i64 = value(
        &mut fleet.connect(&source),
        "SELECT count(*) FROM fleet.owned_shards WHERE shard = $1 AND state = 'frozen'",
        &[&shard],
    );
    assert_eq!(kept, 1, "the source dropped its copy of logical shard {shard}");

    let after_move: i64 = value(&mut router, "SELECT fleet.insert_post($1, 'after the move')", &[&user]);
    assert!(
        after_move > bare,
        "logical shard {shard} on {target} issued {after_move}, not above {bare} from {source}"
    );

    // Once both standbys have the copy, the source's copy goes, as the message says.
    standby.connect().batch_execute("SELECT pg_wal_replay_resume()").unwrap();
    cut_off.start_with(&[]);
    let lsn = target_lsn();
    standby.wait_for_replay(&lsn);
    cut_off.wait_for_replay(&lsn);
    fleet.connect(&source).query_one("SELECT fleet.drop_shard($1)", &[&shard]).unwrap();
    fleet.kit.run(&["status"]);
}
