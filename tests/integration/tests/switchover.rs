//! A planned switchover resumes where the old primary stopped (`reservation::switchover`): the
//! primary stopped cleanly (`pg_ctl stop -m fast`, as Patroni's switchover does), the standby
//! replays up to its shutdown checkpoint and is promoted, and its first ID is within the
//! reservation's headroom of the clock, above every ID of the old primary; where the promotion
//! guard alone puts it `max_lead_ms + reserve_ms + max_clock_skew_ms` ahead (2.75 s by default).
//! The control: the same after an immediate stop (no shutdown checkpoint) resumes that bound
//! ahead, as before.

use snowflake_id_integration::{as_server_owner, next_id_ahead_ms, run, wait_until, Cluster};

/// The primary and its standby, the primary having issued IDs; returns them and the highest ID.
fn pair(name: &str) -> (Cluster, Cluster, i64) {
    let primary = Cluster::start(&format!("{name}-primary"), &[]);
    let mut client = primary.connect();
    client
        .batch_execute(
            "CREATE EXTENSION snowflake_id;
             CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake_nextval(1));
             INSERT INTO t SELECT FROM generate_series(1, 10000);",
        )
        .unwrap();
    let standby = Cluster::start_standby_of(&primary, &format!("{name}-standby"), &[]);
    // More IDs, some after the standby runs, and a pause so that the worker renews its ceiling
    // (a record the standby replays) while IDs are issued.
    for _ in 0..5 {
        client.batch_execute("INSERT INTO t SELECT FROM generate_series(1, 2000)").unwrap();
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
    let highest: i64 = client.query_one("SELECT max(id) FROM t", &[]).unwrap().get(0);
    (primary, standby, highest)
}

/// The server's clock, in Unix ms.
fn clock_ms(client: &mut postgres::Client) -> i64 {
    client.query_one("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::int8", &[]).unwrap().get(0)
}

/// The location of the last checkpoint in a stopped cluster's control file.
fn latest_checkpoint(cluster: &Cluster) -> String {
    let mut controldata = as_server_owner(cluster.bin_dir().join("pg_controldata"));
    controldata.arg(cluster.data_dir());
    let output = String::from_utf8_lossy(&run(&mut controldata, "pg_controldata").stdout).into_owned();
    output
        .lines()
        .find_map(|line| line.strip_prefix("Latest checkpoint location:"))
        .expect("pg_controldata prints the latest checkpoint")
        .trim()
        .to_string()
}

#[test]
fn a_planned_switchover_resumes_where_the_old_primary_stopped() {
    let (mut primary, standby, highest) = pair("switchover");
    primary.stop("fast");
    let checkpoint = latest_checkpoint(&primary);
    // The standby has replayed the shutdown checkpoint (its end is past its start).
    let mut on_standby = standby.connect();
    wait_until(&format!("the standby replayed the shutdown checkpoint at {checkpoint}"), || {
        on_standby
            .query_one("SELECT pg_last_wal_replay_lsn() > $1::text::pg_lsn", &[&checkpoint])
            .unwrap()
            .get(0)
    });
    drop(on_standby);
    standby.promote();
    let mut client = standby.wait_until_accepting();
    let (ahead_ms, first) = next_id_ahead_ms(&mut client, 1);
    println!("switchover: after a clean stop, the first ID is {ahead_ms:.0} ms ahead of the clock");
    assert!(first > highest, "the first ID {first} is not above the old primary's {highest}");
    // The last ceiling lies at most the reservation's headroom (0.5 s by default) ahead; the
    // guard's bound is 2.75 s.
    assert!(ahead_ms < 1000.0, "the first ID is {ahead_ms:.0} ms ahead: resumed at the guard's bound");
    assert!(standby.log().contains("recovery ended on the old primary's clean stop"), "not logged");
}

#[test]
fn a_promotion_after_a_crash_keeps_the_guard() {
    let (mut primary, standby, highest) = pair("unclean");
    // No shutdown checkpoint: the standby cannot know what the primary did after its last record.
    primary.stop("immediate");
    // The guard's bound is max_lead_ms + reserve_ms + max_clock_skew_ms = 2,750 ms past the
    // worker's clock reading after the promotion, so past this reading by as much at least,
    // however long the promotion and the first call take on a loaded machine.
    let before_promotion_ms = clock_ms(&mut standby.connect());
    standby.promote();
    let mut client = standby.wait_until_accepting();
    let (ahead_ms, first) = next_id_ahead_ms(&mut client, 1);
    let first_ms: i64 = client
        .query_one("SELECT (extract(epoch FROM snowflake_timestamp($1)) * 1000)::int8", &[&first])
        .unwrap()
        .get(0);
    let past_ms = first_ms - before_promotion_ms;
    println!(
        "switchover: after an immediate stop, the first ID is {ahead_ms:.0} ms ahead of the clock, \
         {past_ms} ms past a reading before the promotion"
    );
    assert!(first > highest);
    assert!(past_ms >= 2_740, "the first ID is only {past_ms} ms past the promotion after an unclean stop");
    assert!(!standby.log().contains("recovery ended on the old primary's clean stop"));
}
