//! The lease (`snowflake_id.lease_url`, `snowflake_id.lease_ms`): a primary issues IDs only
//! while its HA manager says it is the leader. Here the HA manager is a stand-in on loopback that
//! answers `GET /primary` as Patroni's REST API does (200 on the leader, 503 elsewhere), or is
//! gone (its port closed, as when Patroni is killed). Checked: calls are refused with 55000 naming
//! the lease within the lease (plus the worker's asking interval) once the answer is no longer
//! 200, statements already running included; nothing is issued meanwhile; the fence lifts at
//! the next 200 and IDs go on above every earlier one; a server started while its HA manager
//! says no issues nothing. The Patroni kit's test does the same with the real thing
//! (`patroni.rs`).

use postgres::Client;
use snowflake_id_integration::{db_error, Answer, Cluster, HaStandIn};
use std::time::{Duration, Instant};

const LEASE_MS: u64 = 2000;

/// Calls `snowflake_nextval(1)` until it is refused; returns the IDs issued before, the refusal
/// and how long after `since` it came. Fails if it is not refused within `within`.
fn until_refused(
    client: &mut Client,
    since: Instant,
    within: Duration,
) -> (Vec<i64>, postgres::error::DbError, Duration) {
    let mut issued = Vec::new();
    loop {
        match client.query_one("SELECT snowflake_nextval(1)", &[]) {
            Ok(row) => issued.push(row.get(0)),
            Err(error) => {
                let error = error.as_db_error().expect("a database error").clone();
                return (issued, error, since.elapsed());
            }
        }
        assert!(
            since.elapsed() < within,
            "still issuing {:?} after the HA manager stopped saying yes",
            since.elapsed()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until `snowflake_nextval(1)` works again; returns its ID.
fn until_issuing(client: &mut Client, within: Duration) -> i64 {
    let started = Instant::now();
    loop {
        if let Ok(row) = client.query_one("SELECT snowflake_nextval(1)", &[]) {
            return row.get(0);
        }
        assert!(started.elapsed() < within, "not issuing {within:?} after the HA manager said yes again");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn assert_lease_refusal(error: &postgres::error::DbError) {
    assert_eq!(error.code().code(), "55000", "{error:?}");
    assert!(error.message().contains("cannot show that it is the primary"), "{error:?}");
    assert!(error.detail().unwrap_or_default().contains("snowflake_id.lease_ms = 2000"), "{error:?}");
}

#[test]
fn a_primary_without_its_lease_issues_nothing() {
    let ha = HaStandIn::start();
    let url = ha.lease_url_setting();
    let lease = format!("snowflake_id.lease_ms = {LEASE_MS}");
    let mut cluster = Cluster::start("lease", &[&url, &lease]);
    let mut client = cluster.connect();
    client.batch_execute("CREATE EXTENSION snowflake_id; CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake_nextval(1), n int)").unwrap();
    let first = until_issuing(&mut client, Duration::from_secs(5));

    // The HA manager says this node is a replica now (another was promoted): refused within the
    // lease and one asking interval (lease_ms / 5), plus the time of a call.
    let bound = Duration::from_millis(LEASE_MS + LEASE_MS / 5 + 1000);
    ha.answer(Answer::Replica);
    let (issued, error, after) = until_refused(&mut client, Instant::now(), bound);
    println!("lease: refused {} ms after the HA manager said 503 (lease {LEASE_MS} ms)", after.as_millis());
    assert_lease_refusal(&error);
    assert!(
        after >= Duration::from_millis(LEASE_MS / 2),
        "refused after {after:?}: before the lease ran out"
    );
    // Every call refused while it is lost, and the row's INSERT too: nothing issued.
    for _ in 0..20 {
        assert_lease_refusal(&db_error(&mut client, "INSERT INTO t (n) VALUES (1)"));
    }
    let fence: String = client.query_one("SELECT fence FROM snowflake_status()", &[]).unwrap().get(0);
    assert_eq!(fence, "none");

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
    assert_lease_refusal(&error);
    println!(
        "lease: a running INSERT stopped {} ms after the HA manager went",
        lost_at.elapsed().as_millis()
    );
    // 100 million rows take minutes: stopped, not finished (its time is printed above).
    assert!(
        lost_at.elapsed() < Duration::from_secs(30),
        "the running INSERT went on for {:?}",
        lost_at.elapsed()
    );
    let rows: i64 = client.query_one("SELECT count(*) FROM t", &[]).unwrap().get(0);
    assert_eq!(rows, 0, "the refused INSERT's rows are rolled back");

    // A server started while its HA manager says no issues nothing until it says yes.
    ha.answer(Answer::Replica);
    drop(client);
    cluster.stop("fast");
    cluster.start_with(&[]);
    let mut client = cluster.connect();
    std::thread::sleep(Duration::from_millis(500));
    assert_lease_refusal(&db_error(&mut client, "SELECT snowflake_nextval(1)"));
    ha.answer(Answer::Leader);
    let after_restart = until_issuing(&mut client, Duration::from_secs(3));
    assert!(after_restart > again);
    let log = cluster.log();
    assert!(log.contains("the lease is lost"), "the server log does not say the lease was lost");
    assert!(log.contains("the lease holds"), "the server log does not say the lease holds again");
}
