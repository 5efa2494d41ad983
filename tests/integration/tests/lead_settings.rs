//! A setting never stops writes, and a promoted standby's bound covers a primary that ran with
//! larger lead settings than its own (`generator::lead_in_force`, `reservation::LeadSettings`).
//!
//! * `max_lead_ms` lowered on reload under a shard already further ahead than the new value:
//!   the shard keeps issuing where it was (a WARNING says why), where the setting alone would
//!   refuse every call until the clock caught up; once it has, the setting holds again.
//! * A standby with the default `max_lead_ms` (2 s), promoted after its primary (60 s) ran a
//!   shard 30 s ahead, asynchronous replication, the primary killed with `kill -9`: the
//!   promotion resumes the bound of the primary's settings ahead (60.75 s, not 2.75 s), since
//!   the ceilings' WAL records carry them, and the first call is served.

use postgres::Client;
use snowflake_id_integration::{apply_settings, db_error, next_id_ahead_ms, wait_until, Cluster};

/// Moves `shard` so that its next ID lies `ahead_ms` ahead of the clock.
fn run_ahead(client: &mut Client, shard: i32, ahead_ms: i64) {
    client
        .execute(
            "SELECT snowflake_advance($1, snowflake_compose(clock_timestamp() + make_interval(secs => $2::float8 / 1000), $1, 0))",
            &[&shard, &(ahead_ms as f64)],
        )
        .unwrap();
}

#[test]
fn a_lowered_max_lead_keeps_a_shard_that_runs_ahead_issuing() {
    let cluster = Cluster::start("lowered-lead", &["snowflake_id.max_lead_ms = 60000"]);
    let mut client = cluster.connect();
    client.batch_execute("CREATE EXTENSION snowflake_id").unwrap();
    run_ahead(&mut client, 1, 8_000);
    apply_settings(&mut client, &[("snowflake_id.max_lead_ms", "2s")]);
    // The worker reacts to the reload within milliseconds; give it a moment, as an operator's
    // next statement would.
    wait_until("the worker kept the lead", || {
        cluster.log().contains("snowflake_id.max_lead_ms was lowered from 60000 ms")
    });
    let (ahead_ms, first) = next_id_ahead_ms(&mut client, 1);
    println!("lowered max_lead_ms: the shard goes on {ahead_ms:.0} ms ahead of the clock");
    assert!(ahead_ms > 6_000.0, "the shard moved back: {ahead_ms:.0} ms ahead");
    // Every other shard issues at the clock, as before.
    let (other_ahead_ms, _) = next_id_ahead_ms(&mut client, 2);
    assert!(other_ahead_ms < 1_000.0, "shard 2 runs {other_ahead_ms:.0} ms ahead");
    // Once the clock has caught up, the setting holds again, and nothing moved back.
    wait_until("the clock caught up with the kept lead", || {
        cluster.log().contains("snowflake_id.max_lead_ms = 2000 ms holds again")
    });
    let (_, later) = next_id_ahead_ms(&mut client, 1);
    assert!(later > first);
    // The setting now refuses a shard moved beyond it, as it always did.
    let refused = db_error(
        &mut client,
        "SELECT snowflake_advance(1, snowflake_compose(clock_timestamp() + '8 s', 1, 0))",
    );
    assert_eq!(refused.code().code(), "55000", "{refused:?}");
}

#[test]
fn a_standby_with_a_shorter_lead_resumes_above_its_primary_and_issues() {
    let mut primary = Cluster::start("drift-primary", &["snowflake_id.max_lead_ms = 60000"]);
    let mut client = primary.connect();
    client
        .batch_execute(
            "CREATE EXTENSION snowflake_id;
             CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake_nextval(1));",
        )
        .unwrap();
    // The standby's own postgresql.conf says 2 s: a later line than the copied 60 s.
    let standby = Cluster::start_standby_of(&primary, "drift-standby", &["snowflake_id.max_lead_ms = 2000"]);
    run_ahead(&mut client, 1, 30_000);
    for _ in 0..4 {
        client.batch_execute("INSERT INTO t SELECT FROM generate_series(1, 1000)").unwrap();
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
    let highest: i64 = client.query_one("SELECT max(id) FROM t", &[]).unwrap().get(0);
    let lsn: String = client.query_one("SELECT pg_current_wal_insert_lsn()::text", &[]).unwrap().get(0);
    standby.wait_for_replay(&lsn);
    drop(client);
    primary.kill_postmaster();
    standby.promote();
    let mut client = standby.wait_until_accepting();
    let (ahead_ms, first) = next_id_ahead_ms(&mut client, 1);
    println!("settings drift: the promoted standby's first ID is {ahead_ms:.0} ms ahead of the clock");
    assert!(first > highest, "the first ID {first} is not above the old primary's {highest}");
    // Its own settings' bound is 2,751 + 500 ms; the primary's 60,251 + 500 ms.
    assert!(ahead_ms > 55_000.0, "resumed only {ahead_ms:.0} ms ahead: the primary's settings were not used");
    assert!(
        standby.log().contains("the old primary ran with snowflake_id.max_lead_ms = 60000 ms"),
        "not logged"
    );
    // Other shards issue too, at the resumed position.
    let (_, second) = next_id_ahead_ms(&mut client, 2);
    assert!(second > 0);
}
