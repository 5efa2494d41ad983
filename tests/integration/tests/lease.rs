//! The lease (`snowflake_id.lease_url`, `snowflake_id.lease_ms`): a primary issues IDs only
//! while its HA manager says it is the leader. Here the HA manager is a stand-in on loopback that
//! answers `GET /primary` as Patroni's REST API does (200 on the leader, 503 elsewhere), or is
//! gone (its port closed, as when Patroni is killed). Checked: calls are refused with 55000 naming
//! the lease within the lease (plus the worker's asking interval) once the answer is no longer
//! 200, statements already running included; nothing is issued meanwhile; the fence lifts at
//! the next 200 and IDs go on above every earlier one; a server started while its HA manager
//! says no issues nothing; with the reservation worker stopped (a machine paused, finding F11)
//! every call still stops at the lease's deadline on its own. The Patroni kit's test does the same with the real thing
//! (`patroni.rs`).
//!
//! Then as a hostile or broken peer would try it (each of these fooled 0.8.0): lease settings
//! PostgreSQL refuses at start (the server started with the lease off); answers that only look
//! like 200; a 503 or a 200 dribbled one byte every 240 ms (the fence closed seconds late, and
//! the worker, waiting on it, let the reservation run out); a listener of another OS user on
//! the HA manager's port.

use postgres::Client;
use snowflake_id_integration::{
    assert_setting_refused, count, db_error, log_of_refused_start, value, wait_for, Answer, Cluster,
    HaStandIn, StoppedWorker, LEADER_ANSWER, REPLICA_ANSWER,
};
use std::os::unix::process::CommandExt;
use std::time::{Duration, Instant};

const LEASE_MS: u64 = 2000;

/// Calls `snowflake_nextval(1)` until it is refused, reading before each call how far the
/// reservation runs ahead of the clock. Returns the IDs issued before, the refusal, how long it
/// took to come and the lowest reservation read (ms ahead). Fails, naming `what`, if it is not
/// refused within `within`.
fn until_refused(
    client: &mut Client,
    what: &str,
    within: Duration,
) -> (Vec<i64>, postgres::error::DbError, Duration, f64) {
    let since = Instant::now();
    let (mut issued, mut lowest_ahead) = (Vec::new(), f64::MAX);
    loop {
        lowest_ahead = lowest_ahead.min(reservation_ahead_ms(client));
        match client.query_one("SELECT snowflake_nextval(1)", &[]) {
            Ok(row) => issued.push(row.get(0)),
            Err(error) => {
                let error = error.as_db_error().expect("a database error").clone();
                return (issued, error, since.elapsed(), lowest_ahead);
            }
        }
        assert!(
            since.elapsed() < within,
            "{what}: still issuing {:?} later: the lease should have been lost by then",
            since.elapsed()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until `snowflake_nextval(1)` works again; returns its ID.
fn until_issuing(client: &mut Client, within: Duration) -> i64 {
    wait_for("snowflake_nextval(1) issues after the HA manager said yes", within, || {
        client.query_one("SELECT snowflake_nextval(1)", &[]).ok().map(|row| row.get(0))
    })
}

/// A server whose HA manager is asked at `url` (a `lease_url` setting), with a lease of
/// `LEASE_MS` and the `extra` settings, the extension created: its connection and first ID.
fn leased_server(name: &str, url: &str, extra: &[&str]) -> (Cluster, Client, i64) {
    let lease = format!("snowflake_id.lease_ms = {LEASE_MS}");
    let settings: Vec<&str> = [url, &lease].into_iter().chain(extra.iter().copied()).collect();
    let cluster = Cluster::builder(name).settings(&settings).setup("CREATE EXTENSION snowflake_id").start();
    let mut client = cluster.connect();
    let first = until_issuing(&mut client, Duration::from_secs(5));
    (cluster, client, first)
}

/// The lease's refusal, naming a lease of `lease_ms`.
fn assert_lease_refusal(error: &postgres::error::DbError, lease_ms: u64) {
    assert_eq!(error.code().code(), "55000", "{error:?}");
    assert!(error.message().contains("cannot show that it is the primary"), "{error:?}");
    let named = format!("snowflake_id.lease_ms = {lease_ms}");
    assert!(error.detail().unwrap_or_default().contains(&named), "{error:?}");
}

#[test]
fn a_primary_without_its_lease_issues_nothing() {
    let ha = HaStandIn::start();
    let (mut cluster, mut client, first) = leased_server("lease", &ha.lease_url_setting(), &[]);
    client
        .batch_execute("CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake_nextval(1), n int)")
        .unwrap();

    // The HA manager says this node is a replica now (another was promoted): refused within the
    // lease and one asking interval (lease_ms / 5), plus the time of a call.
    let bound = Duration::from_millis(LEASE_MS + LEASE_MS / 5 + 1000);
    ha.answer(Answer::Replica);
    let (issued, error, after, _) = until_refused(&mut client, "after a 503", bound);
    println!("lease: refused {} ms after the HA manager said 503 (lease {LEASE_MS} ms)", after.as_millis());
    assert_lease_refusal(&error, LEASE_MS);
    assert!(
        after >= Duration::from_millis(LEASE_MS / 2),
        "refused after {after:?}: before the lease ran out"
    );
    // Every call refused while it is lost, and the row's INSERT too: nothing issued.
    for _ in 0..20 {
        assert_lease_refusal(&db_error(&mut client, "INSERT INTO t (n) VALUES (1)"), LEASE_MS);
    }
    // The worker closes the fence for every shard at its next look at the lease; the calls may
    // be refused a moment before, by the lease's deadline each of them checks.
    let closing = Instant::now();
    loop {
        let fence: Option<String> = value(&mut client, "SELECT fence FROM snowflake_status()", &[]);
        if fence.as_deref() == Some("none") {
            break;
        }
        let waited = closing.elapsed();
        assert!(
            waited < Duration::from_millis(LEASE_MS + 2000),
            "the fence is {fence:?} {waited:?} after the refusals"
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    // Back: the fence lifts at the next 200, and IDs go on above every earlier one.
    ha.answer(Answer::Leader);
    let again = until_issuing(&mut client, Duration::from_secs(3));
    assert!(again > *issued.iter().max().unwrap_or(&first) && again > first);

    // A statement already running when the lease goes (its HA manager gone: the port closes
    // connections unanswered) stops with the lease's error: the fence reaches running
    // statements. (generate_series in the select list: streamed, where in FROM it would be
    // made whole first.)
    ha.answer(Answer::Gone);
    let lost_at = Instant::now();
    let error = db_error(&mut client, "INSERT INTO t (n) SELECT generate_series(1, 100000000)");
    let stopped_after = lost_at.elapsed();
    assert_lease_refusal(&error, LEASE_MS);
    println!("lease: a running INSERT stopped {} ms after the HA manager went", stopped_after.as_millis());
    // 100 million rows take minutes: stopped, not finished.
    assert!(stopped_after < Duration::from_secs(30), "the running INSERT went on for {stopped_after:?}");
    assert_eq!(count(&mut client, "SELECT count(*) FROM t"), 0, "the refused INSERT's rows are rolled back");

    // A server started while its HA manager says no issues nothing until it says yes.
    ha.answer(Answer::Replica);
    drop(client);
    cluster.stop("fast");
    cluster.start_with(&[]);
    let mut client = cluster.connect();
    std::thread::sleep(Duration::from_millis(500));
    assert_lease_refusal(&db_error(&mut client, "SELECT snowflake_nextval(1)"), LEASE_MS);
    ha.answer(Answer::Leader);
    let after_restart = until_issuing(&mut client, Duration::from_secs(3));
    assert!(after_restart > again);
    let log = cluster.log();
    assert!(log.contains("the lease is lost"), "the server log does not say the lease was lost");
    assert!(log.contains("the lease holds"), "the server log does not say the lease holds again");
}

/// F11 on a server: the reservation worker stopped (SIGSTOP: what a paused machine's worker is
/// until its first look after the wake, or a worker stuck in I/O), its reservation 20 s ahead,
/// so that calls need nothing of it and the fence it closes stays open. Every call still stops
/// at the lease's deadline (the last 200's request plus `lease_ms`, on the boot clock), on its
/// own, with the lease's error; nothing is issued while the worker stays stopped, and the
/// worker, let go, finds the lease and the IDs go on above. Without the per-call deadline (the
/// mutation `lease-deadline-per-call`) calls go on issuing under the held reservation.
#[test]
fn every_call_stops_at_the_lease_deadline_while_the_worker_cannot_close_the_fence() {
    let ha = HaStandIn::start();
    let extra = ["snowflake_id.max_lead_ms = '20s'", "snowflake_id.reserve_ms = '20s'"];
    let (cluster, mut client, first) = leased_server("lease-deadline", &ha.lease_url_setting(), &extra);
    wait_for("the worker reserves 10 s ahead", Duration::from_secs(10), || {
        (reservation_ahead_ms(&mut client) >= 10_000.0).then_some(())
    });

    let worker = StoppedWorker::stop(&cluster);
    // The last 200's request was sent before the stop: the deadline is within the lease.
    let bound = Duration::from_millis(LEASE_MS + 2000);
    let (issued, error, after, _) = until_refused(&mut client, "with the worker stopped", bound);
    println!(
        "lease: the worker stopped, calls refused {} ms later on their own (lease {LEASE_MS} ms, {} IDs before)",
        after.as_millis(),
        issued.len()
    );
    assert_lease_refusal(&error, LEASE_MS);
    for _ in 0..20 {
        assert_lease_refusal(&db_error(&mut client, "SELECT snowflake_nextval(1)"), LEASE_MS);
        std::thread::sleep(Duration::from_millis(100));
    }
    // The premise: the reservation still reaches ahead, and the fence is still open, so the
    // calls were refused by the deadline alone.
    let ahead_ms = reservation_ahead_ms(&mut client);
    assert!(ahead_ms > 5_000.0, "the reservation ran out ({ahead_ms:.0} ms ahead): the test shows nothing");
    let fence: Option<String> = value(&mut client, "SELECT fence FROM snowflake_status()", &[]);
    assert_eq!(fence, None, "the stopped worker closed the fence: the test shows nothing");
    let (_, _, lost, _) = lease_status(&mut client);
    assert!(lost, "snowflake_status() does not say since when the lease is lost");

    drop(worker);
    let again = until_issuing(&mut client, Duration::from_secs(5));
    assert!(again > *issued.iter().max().unwrap_or(&first) && again > first);
}

/// A lease setting that PostgreSQL refuses at start stops the server, naming it, instead of
/// starting with the lease off.
#[test]
fn a_lease_setting_that_cannot_be_used_stops_the_start() {
    let url = "snowflake_id.lease_url = 'http://127.0.0.1:8008/primary'";
    let lease = "snowflake_id.lease_ms = 2000";
    // The setting refused, and a valid one of the other.
    for (name, refused, other, reason) in [
        ("lease-https", "snowflake_id.lease_url = 'https://127.0.0.1:8008/primary'", lease, "without TLS"),
        (
            "lease-userinfo",
            "snowflake_id.lease_url = 'http://patroni:secret@127.0.0.1:8008/primary'",
            lease,
            "user information",
        ),
        ("lease-ms-range", "snowflake_id.lease_ms = 4000000", url, "outside the valid range"),
    ] {
        let log = log_of_refused_start(name, &[refused, other]);
        assert_setting_refused(&log, refused);
        assert!(log.contains(reason), "the refusal does not say why ({reason}):\n{log}");
        assert!(log.contains("the lease would be off"), "{log}");
        assert!(log.contains("HINT:  Correct snowflake_id."), "{log}");
    }
}

/// `ALTER SYSTEM {change}` (a SET or RESET), then a reload. One statement each: ALTER SYSTEM
/// refuses to run in a transaction block, as a multi-statement query is.
fn alter_system(client: &mut Client, change: &str) {
    client.batch_execute(&format!("ALTER SYSTEM {change}")).unwrap();
    client.batch_execute("SELECT pg_reload_conf()").unwrap();
}

/// The lease's columns of `snowflake_status()`: (url, lease_ms, lost since, last 200).
fn lease_status(client: &mut Client) -> (Option<String>, Option<i32>, bool, Option<f64>) {
    let row = client
        .query_one(
            "SELECT lease_url, lease_ms, lease_lost_since IS NOT NULL,
                    extract(epoch FROM clock_timestamp() - lease_last_200)::float8
             FROM snowflake_status()",
            &[],
        )
        .unwrap();
    (row.get(0), row.get(1), row.get(2), row.get(3))
}

/// How far the durable reservation runs ahead of the clock, in ms.
fn reservation_ahead_ms(client: &mut Client) -> f64 {
    value(client, "SELECT extract(epoch FROM reserved_until - clock_timestamp())::float8 * 1000 FROM snowflake_status()", &[])
}

/// Switches the stand-in to `answer` while the lease (of `lease_ms`) holds, and checks that the
/// fence closes within `lease_ms + 1 s` of the switch (the documented bound counts from the last
/// 200, which was sent before it), while the reservation worker keeps renewing (it never waits
/// on the HA manager).
fn refused_within(client: &mut Client, ha: &HaStandIn, answer: Answer, what: &str, lease_ms: u64) {
    ha.answer(Answer::Leader);
    until_issuing(client, Duration::from_secs(5));
    // One asking interval (lease_ms / 5) more, so that the last 200 is one asked for just now,
    // not one from before a reload that lengthened the lease.
    std::thread::sleep(Duration::from_millis(lease_ms / 5 + 200));
    ha.answer(answer);
    let (_, error, refused, lowest_ahead) = until_refused(client, what, Duration::from_secs(10));
    assert_lease_refusal(&error, lease_ms);
    println!("lease, {what}: refused {} ms after the switch; the reservation at least {lowest_ahead:.0} ms ahead meanwhile", refused.as_millis());
    assert!(
        refused <= Duration::from_millis(lease_ms + 1000),
        "{what}: refused {refused:?} after the last 200, past lease_ms + 1 s"
    );
    // The worker renews every 50 ms to keep 250 to 500 ms ahead; 0.8.0's, blocked by a dribble,
    // let it fall to a few ms.
    assert!(lowest_ahead >= 100.0, "{what}: the reservation fell to {lowest_ahead:.0} ms ahead");
}

#[test]
fn slow_foreign_and_lying_answers_never_hold_the_lease() {
    let ha = HaStandIn::start();
    // Any case of the scheme, and a fragment (never sent), are a URL the worker can ask.
    let url = format!("snowflake_id.lease_url = '{}#leader'", ha.lease_url().replace("http://", "HTTP://"));
    let (cluster, mut client, _) = leased_server("lease-hostile", &url, &[]);
    let (status_url, status_ms, lost, last_200_age) = lease_status(&mut client);
    assert!(status_url.unwrap().starts_with("HTTP://127.0.0.1:"));
    assert_eq!(status_ms, Some(LEASE_MS as i32));
    assert!(!lost, "the lease holds, yet snowflake_status() says lost");
    assert!(last_200_age.is_some_and(|age| age < 2.0), "last 200 {last_200_age:?} s ago");

    let dribble = |answer, every_ms| Answer::Dribble(answer, Duration::from_millis(every_ms));
    // What 0.8.0 took for 200.
    refused_within(&mut client, &ha, Answer::Raw("HTTP/1.1 2000 OK\r\n\r\n"), "HTTP/1.1 2000", LEASE_MS);
    refused_within(&mut client, &ha, Answer::Raw("HTTP/1.x 200 OK\r\n\r\n"), "HTTP/1.x 200", LEASE_MS);
    let (_, _, lost, _) = lease_status(&mut client);
    assert!(lost, "refused for the lease, yet snowflake_status() does not say it is lost");
    // A 503 dribbled one byte every 240 ms: 0.8.0 took each byte as a fresh 250 ms, and closed
    // the fence 5.7 s after the last 200.
    refused_within(&mut client, &ha, dribble(REPLICA_ANSWER, 240), "a dribbled 503", LEASE_MS);
    // A 200 dribbled so: no answer within the request's deadline, so no 200 (0.8.0 counted it,
    // late, and its worker waited on it while the reservation ran out).
    refused_within(&mut client, &ha, dribble(LEADER_ANSWER, 240), "a dribbled 200", LEASE_MS);

    // A 200 dribbled one byte every 100 ms under a 5 s lease: each answer's status line (13
    // bytes) would arrive whole in 1.3 s, well within the lease, if only each read were timed
    // (0.8.0's): every request would renew it, for ever. One deadline bounds the whole request,
    // so none counts.
    alter_system(&mut client, "SET snowflake_id.lease_ms = 5000");
    let what = "a 200 dribbled in 1.3 s under a 5 s lease";
    refused_within(&mut client, &ha, dribble(LEADER_ANSWER, 100), what, 5000);
    alter_system(&mut client, "RESET snowflake_id.lease_ms");

    // Back to plain 200: issuing again, above everything before.
    ha.answer(Answer::Leader);
    until_issuing(&mut client, Duration::from_secs(5));
    let log = cluster.log();
    assert!(
        log.contains("is not an HTTP/1 status line"),
        "the log does not say why an impostor's 200 did not count"
    );
}

/// Whoever else listens on the HA manager's port once it died does not speak for it: a 200
/// from a socket of another OS user (`nobody`) does not hold the lease.
#[test]
fn a_listener_of_another_os_user_does_not_hold_the_lease() {
    let ha = HaStandIn::start();
    let (cluster, mut client, _) = leased_server("lease-squatter", &ha.lease_url_setting(), &[]);

    // A squatter: another OS user's HTTP server answering 200 to everything, on a port of its own.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let squatter_code = format!(
        "import http.server\n\
         class H(http.server.BaseHTTPRequestHandler):\n    \
           def do_GET(self):\n        self.send_response(200); self.end_headers()\n    \
           def log_message(self, *a): pass\n\
         http.server.HTTPServer(('127.0.0.1', {port}), H).serve_forever()\n"
    );
    let nobody = |flag: &str| -> u32 {
        let out = std::process::Command::new("id").args([flag, "nobody"]).output().unwrap();
        String::from_utf8(out.stdout).unwrap().trim().parse().unwrap()
    };
    struct StopOnDrop(std::process::Child);
    impl Drop for StopOnDrop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let squatter = StopOnDrop(
        std::process::Command::new("python3")
            .args(["-c", &squatter_code])
            .uid(nobody("-u"))
            .gid(nobody("-g"))
            .spawn()
            .expect("python3 starts as nobody"),
    );
    let squatter_pid = squatter.0.id();
    // Wait until it answers (as root, this test's user, a plain GET).
    wait_for("the squatter listens", Duration::from_secs(10), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).ok()
    });
    alter_system(&mut client, &format!("SET snowflake_id.lease_url = 'http://127.0.0.1:{port}/primary'"));
    let (_, error, after, _) =
        until_refused(&mut client, "at another user's listener", Duration::from_millis(LEASE_MS + 2000));
    assert_lease_refusal(&error, LEASE_MS);
    println!("lease: refused {} ms after pointing at another user's listener", after.as_millis());
    // And it stays refused while the squatter answers 200.
    std::thread::sleep(Duration::from_millis(LEASE_MS));
    assert_lease_refusal(&db_error(&mut client, "SELECT snowflake_nextval(1)"), LEASE_MS);
    let log = cluster.log();
    assert!(
        log.contains("comes from a socket of OS user"),
        "the log does not say why the 200 did not count:\n{log}"
    );
    drop(squatter);
    println!("lease: the squatter (pid {squatter_pid}) stopped");

    // The real HA manager's address again: the lease holds.
    alter_system(&mut client, "RESET snowflake_id.lease_url");
    until_issuing(&mut client, Duration::from_secs(5));
}
