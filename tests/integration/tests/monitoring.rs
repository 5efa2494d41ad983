//! The metrics of deploy/monitoring/queries.yaml, read as Prometheus reads them: the real
//! exporter (Debian's prometheus-postgres-exporter) started on a loopback port with the
//! queries file, connected over the server's Unix socket as a role that is only a member of
//! pg_monitor, and scraped with a plain HTTP GET while the server issues IDs, its clock steps
//! back (libfaketime), its reservation worker is terminated and its fence moves. A plain role
//! gets 42501 from every query of the file that reads the generator's state.

use snowflake_id_integration::{
    apply_settings, db_error, print_log_tail, run, value, wait_for, wait_until, Cluster, FakeClock, Registry,
    PORT,
};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const EXPORTER: &str = "prometheus-postgres-exporter";

fn queries_file() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/monitoring/queries.yaml")
}

/// The queries of the file, by key: the lines indented under each `query: |`.
fn queries() -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(queries_file()).unwrap();
    let (mut queries, mut key, mut in_query) = (BTreeMap::new(), String::new(), false);
    for line in text.lines() {
        if !line.starts_with(' ') && line.ends_with(':') {
            key = line.trim_end_matches(':').to_string();
        } else if line.trim() == "query: |" {
            in_query = true;
        } else if in_query && line.starts_with("    ") {
            queries.entry(key.clone()).or_insert_with(String::new).push_str(&format!("{line}\n"));
        } else {
            in_query = false;
        }
    }
    queries
}

/// The exporter, on a free loopback port; killed when dropped (its log printed on failure).
struct Exporter {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Exporter {
    /// Starts the exporter for the server's database `postgres`, as `role`. A port found free
    /// may be taken before the exporter binds it: then it exits, and another port is tried.
    fn start(cluster: &Cluster, role: &str) -> Exporter {
        let log = cluster.scratch_file("exporter.log", "");
        for _ in 0..5 {
            let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap().local_addr().unwrap().port();
            let child = Command::new(EXPORTER)
                .arg(format!("--extend.query-path={}", queries_file().display()))
                .arg(format!("--web.listen-address=127.0.0.1:{port}"))
                .env(
                    "DATA_SOURCE_NAME",
                    format!(
                        "host={} port={} user={role} dbname=postgres sslmode=disable",
                        cluster.socket_dir().display(),
                        PORT
                    ),
                )
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log).unwrap())
                .spawn()
                .unwrap_or_else(|e| {
                    panic!("{EXPORTER} could not start ({e}): ./scripts/setup.sh installs it")
                });
            let mut exporter = Exporter { child, port, log: log.clone() };
            // Exited: the port was taken, another is tried.
            let answered = wait_for("the exporter answers (or exits)", Duration::from_secs(20), || {
                match exporter.child.try_wait().unwrap() {
                    Some(_) => Some(false),
                    None => exporter.get("/").map(|_| true),
                }
            });
            if answered {
                return exporter;
            }
        }
        panic!("the exporter could not listen on a loopback port in 5 tries");
    }

    /// The body of an HTTP/1.0 GET (no chunks, connection closed at the end); None while
    /// nothing listens.
    fn get(&self, path: &str) -> Option<String> {
        let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, self.port)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).ok()?;
        let (head, body) = response.split_once("\r\n\r\n")?;
        assert!(head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"), "GET {path}: {head}");
        Some(body.to_string())
    }

    fn scrape(&self) -> Metrics {
        Metrics::parse(&self.get("/metrics").expect("the exporter stopped answering"))
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            print_log_tail("the exporter's log", &self.log, 20);
        }
    }
}

/// One scrape: each sample's name, labels and value, and each metric's TYPE.
struct Metrics {
    samples: Vec<(String, BTreeMap<String, String>, f64)>,
    types: BTreeMap<String, String>,
    text: String,
}

impl Metrics {
    fn parse(text: &str) -> Metrics {
        let (mut samples, mut types) = (Vec::new(), BTreeMap::new());
        for line in text.lines() {
            if let Some(declared) = line.strip_prefix("# TYPE ") {
                let (name, kind) = declared.split_once(' ').unwrap();
                types.insert(name.to_string(), kind.to_string());
            } else if !line.starts_with('#') && !line.is_empty() {
                let (series, value) = line.rsplit_once(' ').unwrap();
                let (name, labels) = match series.split_once('{') {
                    Some((name, labels)) => (name, labels.trim_end_matches('}')),
                    None => (series, ""),
                };
                let labels = labels
                    .split("\",")
                    .filter(|pair| !pair.is_empty())
                    .map(|pair| {
                        let (key, value) = pair.split_once("=\"").unwrap();
                        (key.to_string(), value.trim_end_matches('"').to_string())
                    })
                    .collect();
                samples.push((name.to_string(), labels, value.parse().unwrap()));
            }
        }
        Metrics { samples, types, text: text.to_string() }
    }

    /// The value of the one sample of `name` whose labels include `labels`, if any.
    fn find(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let mut found = self.samples.iter().filter(|(n, l, _)| {
            n == name && labels.iter().all(|(key, value)| l.get(*key).is_some_and(|v| v == value))
        });
        let value = found.next().map(|(_, _, value)| *value);
        assert!(found.next().is_none(), "more than one {name} with {labels:?}");
        value
    }

    fn get(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.find(name, labels).unwrap_or_else(|| {
            let ours: Vec<&str> = self.text.lines().filter(|l| l.starts_with("snowflake_id")).collect();
            panic!("no {name} with {labels:?} in the scrape; its snowflake_id lines:\n{}", ours.join("\n"))
        })
    }

    fn shard(&self, name: &str, shard: &str) -> f64 {
        self.get(name, &[("shard", shard)])
    }
}

fn unix_now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64()
}

#[test]
fn the_exporter_turns_the_generator_into_metrics() {
    // A lead bound of 3 s and waits of up to 3 s: a clock stepped back 5 s makes a call wait
    // about 2 s, then run 3 s ahead.
    let mut cluster = Cluster::builder("monitoring")
        .settings(&["snowflake_id.max_lead_ms = 3s", "snowflake_id.max_wait_ms = 3s"])
        .create();
    let clock = FakeClock::of(&cluster);
    clock.start(&mut cluster);
    let mut admin = cluster.connect();
    admin
        .batch_execute(
            "CREATE EXTENSION snowflake_id;
             CREATE ROLE watcher LOGIN; GRANT pg_monitor TO watcher;
             CREATE ROLE nobody LOGIN;",
        )
        .unwrap();

    // Privileges: every query of the file runs for a member of pg_monitor alone; a plain role
    // gets 42501 from each one that reads the generator's state (the layout is PUBLIC's).
    let queries = queries();
    assert_eq!(
        queries.keys().collect::<Vec<_>>(),
        [
            "snowflake_id",
            "snowflake_id_fence",
            "snowflake_id_horizon",
            "snowflake_id_layout",
            "snowflake_id_registry",
            "snowflake_id_registry_claim",
            "snowflake_id_reservation"
        ]
    );
    let mut watcher = cluster.config().user("watcher").connect(postgres::NoTls).unwrap();
    let mut nobody = cluster.config().user("nobody").connect(postgres::NoTls).unwrap();
    for (key, query) in &queries {
        watcher.query(query.as_str(), &[]).unwrap_or_else(|e| panic!("{key} as a pg_monitor member: {e}"));
        if key != "snowflake_id_layout" {
            let error = db_error(&mut nobody, query);
            assert_eq!(error.code().code(), "42501", "{key} as a plain role: {}", error.message());
        }
    }

    let exporter = Exporter::start(&cluster, "watcher");

    // Before any ID: the server's metrics, no shard's.
    let before = exporter.scrape();
    assert_eq!(before.get("snowflake_id_reservation_worker_up", &[]), 1.0);
    let worker = cluster.reservation_worker_pid().unwrap();
    assert_eq!(before.get("snowflake_id_reservation_worker_pid", &[]), worker as f64);
    let ahead = before.get("snowflake_id_reservation_ahead_seconds", &[]);
    assert!(ahead > 0.0 && ahead < 10.0, "reserved {ahead} s ahead");
    let layout = [
        ("epoch", "2024-01-01T00:00:00.000Z"),
        ("time_bits", "41"),
        ("shard_bits", "10"),
        ("seq_bits", "12"),
    ];
    assert_eq!(before.get("snowflake_id_layout_info", &layout), 1.0);
    // The default layout's last millisecond ends at 2093-09-06T15:47:35.552Z.
    let remaining = before.get("snowflake_id_layout_remaining_seconds", &layout);
    assert!((remaining - (3_903_090_455.552 - unix_now())).abs() < 60.0, "{remaining} s left");
    assert_eq!(before.get("snowflake_id_fence_info", &[("shards", "")]), 1.0);
    // No lease configured: off, not held, never lost, no 200.
    assert_eq!(before.get("snowflake_id_fence_lease_configured", &[("shards", "")]), 0.0);
    assert_eq!(before.get("snowflake_id_fence_lease_held", &[("shards", "")]), 0.0);
    assert_eq!(before.get("snowflake_id_fence_lease_lost_seconds", &[("shards", "")]), 0.0);
    assert_eq!(before.get("snowflake_id_fence_lease_last_200_age_seconds", &[("shards", "")]), -1.0);
    // No shard registry configured: off, never answered, no claim.
    assert_eq!(before.get("snowflake_id_registry_configured", &[]), 0.0);
    assert_eq!(before.get("snowflake_id_registry_last_answer_age_seconds", &[]), -1.0);
    assert_eq!(before.find("snowflake_id_registry_claim_held", &[]), None);
    assert_eq!(before.find("snowflake_id_issued_total", &[]), None);
    assert_eq!(before.find("snowflake_id_horizon_holders", &[]), None);
    // A transaction left open on shard 6: one holder, held about as long as it has been open.
    let mut idle = cluster.connect();
    idle.batch_execute("BEGIN; SELECT snowflake_nextval(6)").unwrap();
    let opened = Instant::now();
    std::thread::sleep(Duration::from_millis(1500));
    let held = exporter.scrape();
    assert_eq!(held.shard("snowflake_id_horizon_holders", "6"), 1.0);
    let seconds = held.shard("snowflake_id_horizon_held_seconds", "6");
    assert!(seconds >= 1.4 && seconds <= opened.elapsed().as_secs_f64() + 0.1, "held for {seconds} s");
    idle.batch_execute("COMMIT").unwrap();
    assert_eq!(exporter.scrape().find("snowflake_id_horizon_holders", &[]), None);
    // IDs issued: counted per shard, exactly.
    admin
        .batch_execute(
            "SELECT count(*) FROM snowflake_nextvals(1, 5000);
             SELECT snowflake_nextval(2) FROM generate_series(1, 100);",
        )
        .unwrap();
    let issued = exporter.scrape();
    assert_eq!(issued.shard("snowflake_id_issued_total", "1"), 5000.0);
    assert_eq!(issued.shard("snowflake_id_issued_total", "2"), 100.0);
    for (name, kind) in [
        ("snowflake_id_issued_total", "counter"),
        ("snowflake_id_waits_total", "counter"),
        ("snowflake_id_wait_seconds_total", "counter"),
        ("snowflake_id_clock_regressions_total", "counter"),
        ("snowflake_id_lead_seconds", "gauge"),
        ("snowflake_id_reservation_worker_up", "gauge"),
        ("snowflake_id_layout_info", "gauge"),
    ] {
        assert_eq!(issued.types.get(name).map(String::as_str), Some(kind), "the TYPE of {name}");
    }
    let last = issued.shard("snowflake_id_last_issued_timestamp_seconds", "1");
    assert!((last - unix_now()).abs() < 10.0, "last ID of shard 1 at {last}");
    assert_eq!(issued.shard("snowflake_id_max_lead_seconds", "1"), 3.0);
    assert_eq!(issued.shard("snowflake_id_in_fence", "1"), 1.0);
    assert_eq!(issued.shard("snowflake_id_waits_total", "2"), 0.0);
    assert_eq!(issued.shard("snowflake_id_clock_regressions_total", "2"), 0.0);

    // The clock steps back 5 s between two calls of one session on shard 4: the second call
    // sees the step, waits for the clock to come within the 3 s bound (about 2 s), and issues
    // an ID 3 s ahead of it.
    admin.batch_execute("SELECT snowflake_nextval(4)").unwrap();
    clock.set("-5");
    admin.batch_execute("SELECT snowflake_nextval(4)").unwrap();
    let stepped = exporter.scrape();
    clock.set("+0");
    assert_eq!(stepped.shard("snowflake_id_clock_regressions_total", "4"), 1.0);
    assert_eq!(stepped.shard("snowflake_id_waits_total", "4"), 1.0);
    let waited = stepped.shard("snowflake_id_wait_seconds_total", "4");
    assert!(waited > 0.5 && waited <= 3.0, "waited {waited} s");
    let lead = stepped.shard("snowflake_id_lead_seconds", "4");
    assert!(lead > 1.0 && lead <= 3.0, "shard 4 leads by {lead} s");
    assert_eq!(stepped.shard("snowflake_id_issued_total", "4"), 2.0);
    assert_eq!(stepped.shard("snowflake_id_clock_regressions_total", "1"), 0.0);

    // The worker terminated: a scrape between its exit and its restart (a second later) shows
    // it down; on a machine too slow to catch that window, the next termination is tried.
    let seen_down = (0..5).any(|_| {
        let old = cluster.reservation_worker_pid().unwrap();
        run(Command::new("kill").args(["-TERM", &old.to_string()]), "kill -TERM");
        let gone = Instant::now();
        while cluster.reservation_worker_pid() == Some(old) && gone.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(5));
        }
        let scrape = exporter.scrape();
        if scrape.get("snowflake_id_reservation_worker_up", &[]) == 0.0 {
            assert_eq!(scrape.get("snowflake_id_reservation_worker_pid", &[]), 0.0);
            return true;
        }
        wait_until("a new reservation worker", || {
            cluster.reservation_worker_pid().is_some_and(|new| new != old)
        });
        false
    });
    assert!(seen_down, "no scrape showed the terminated worker down");
    let new_worker =
        wait_for("a new reservation worker", Duration::from_secs(60), || cluster.reservation_worker_pid());
    let restarted = wait_for("a scrape shows the new worker up", Duration::from_secs(10), || {
        let scrape = exporter.scrape();
        (scrape.get("snowflake_id_reservation_worker_up", &[]) == 1.0).then_some(scrape)
    });
    assert_eq!(restarted.get("snowflake_id_reservation_worker_pid", &[]), new_worker as f64);
    assert_ne!(new_worker, worker);

    // The fence moves to shards 2-3: shards 1 and 4 issued IDs but are outside it now.
    apply_settings(&mut admin, &[("snowflake_id.shards", "2-3")]);
    wait_until("the worker applies the fence", || {
        value::<Option<String>>(&mut admin, "SELECT fence FROM snowflake_status()", &[]).as_deref()
            == Some("2-3")
    });
    admin.batch_execute("SELECT snowflake_nextval(2)").unwrap();
    let fenced = exporter.scrape();
    assert_eq!(fenced.get("snowflake_id_fence_info", &[("shards", "2-3")]), 1.0);
    assert_eq!(fenced.find("snowflake_id_fence_info", &[("shards", "")]), None);
    assert_eq!(fenced.shard("snowflake_id_in_fence", "1"), 0.0);
    assert_eq!(fenced.shard("snowflake_id_in_fence", "2"), 1.0);
    assert_eq!(fenced.shard("snowflake_id_in_fence", "4"), 0.0);
    assert_eq!(fenced.shard("snowflake_id_issued_total", "2"), 101.0);
    assert_eq!(fenced.shard("snowflake_id_issued_total", "1"), 5000.0);
}

/// With the shard registry on (a real etcd): each shard's claim, one held here and one another
/// data directory holds, and the registry silent once killed: what the registry's alerts read.
#[test]
fn the_exporter_shows_each_shards_claim_in_the_registry() {
    let mut registry = Registry::start("monitoring");
    // Shard 5's claim written by another data directory before this server starts.
    registry.steal_claim("/snowflake_id/", 5, 1);
    let url = format!("snowflake_id.registry_url = '{}'", registry.url());
    let mut cluster = Cluster::builder("monitoring-registry")
        .settings(&[&url, "snowflake_id.registry_ttl_ms = 2000", "snowflake_id.shards = '4,5'"])
        .setup("CREATE EXTENSION snowflake_id; CREATE ROLE watcher LOGIN; GRANT pg_monitor TO watcher;")
        .start();
    let exporter = Exporter::start(&cluster, "watcher");
    let held = [("shard", "4"), ("state", "held")];
    let scrape = wait_for("a scrape shows shard 4 held", Duration::from_secs(30), || {
        let scrape = exporter.scrape();
        (scrape.find("snowflake_id_registry_claim_held", &held) == Some(1.0)).then_some(scrape)
    });
    assert_eq!(
        scrape.get("snowflake_id_registry_claim_held", &[("shard", "5"), ("state", "held_elsewhere")]),
        0.0
    );
    // The mark lies registry_reserve_ms (30 s) ahead of the ceiling; none for a shard not held.
    let ahead = scrape.get("snowflake_id_registry_claim_mark_ahead_seconds", &held);
    assert!(ahead > 20.0 && ahead < 40.0, "shard 4's mark {ahead} s ahead");
    assert_eq!(scrape.get("snowflake_id_registry_claim_mark_ahead_seconds", &[("shard", "5")]), 0.0);
    assert_eq!(scrape.get("snowflake_id_registry_configured", &[]), 1.0);
    assert_eq!(scrape.get("snowflake_id_registry_ttl_seconds", &[]), 2.0);
    let age = scrape.get("snowflake_id_registry_last_answer_age_seconds", &[]);
    assert!((0.0..=2.0).contains(&age), "the registry last answered {age} s ago");

    // etcd killed: the age of its last answer grows past the lease (what
    // SnowflakeIdRegistryUnreachable fires on), while shard 4 goes on to its mark.
    registry.kill();
    let deadline = Instant::now() + Duration::from_secs(30);
    let silent = loop {
        let scrape = exporter.scrape();
        let age = scrape.get("snowflake_id_registry_last_answer_age_seconds", &[]);
        if age > 2.0 {
            break scrape;
        }
        assert!(
            Instant::now() < deadline,
            "the registry's last answer still {age} s old 30 s after its kill"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(silent.get("snowflake_id_registry_claim_held", &held), 1.0, "keep_to_mark fenced at once");
    drop(exporter);
    cluster.stop("fast");
}
