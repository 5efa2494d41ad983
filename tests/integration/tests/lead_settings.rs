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
//! * The same after the standby went down (restarted, or crashed) between its last ceiling and
//!   its promotion (0.8.1): its recovery replays no ceiling, and only its record file says what
//!   the primary ran with. Its first call is served, above the primary's IDs and within the
//!   primary's bound (0.8.0 refused every call for about a minute: "would carry ... 57 s ahead").
//!   Restarted once more after the promotion, it still issues under the lead it keeps.

use postgres::Client;
use snowflake_id_integration::{
    apply_settings, db_error, next_id_ahead_ms, value, wait_until, Cluster, Pair,
};

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
    let cluster = Cluster::builder("lowered-lead").settings(&["snowflake_id.max_lead_ms = 60000"]).start();
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
    // The standby's own postgresql.conf says 2 s: a later line than the copied 60 s.
    let Pair { mut primary, standby } = Pair::builder("drift")
        .settings(&["snowflake_id.max_lead_ms = 60000"])
        .standby_settings(&["snowflake_id.max_lead_ms = 2000"])
        .start();
    let mut client = primary.connect();
    run_ahead(&mut client, 1, 30_000);
    for _ in 0..4 {
        client.batch_execute("INSERT INTO t SELECT FROM generate_series(1, 1000)").unwrap();
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
    let highest: i64 = value(&mut client, "SELECT max(id) FROM t", &[]);
    let lsn: String = value(&mut client, "SELECT pg_current_wal_insert_lsn()::text", &[]);
    standby.wait_for_replay(&lsn);
    drop(client);
    primary.kill_postmaster();
    let ahead_ms = promote_above(&standby, highest, "settings drift");
    // Its own settings' bound is 2,751 + 500 ms; the primary's 60,251 + 500 ms.
    assert!(ahead_ms > 55_000.0, "resumed only {ahead_ms:.0} ms ahead: the primary's settings were not used");
}

/// Promotes `standby`, whose primary (`max_lead_ms = 60000`) issued up to `highest` and was
/// killed: its first call must be served, above `highest`, under the primary's lead (its log
/// says so), and other shards issue too. Returns how far ahead of the clock the first ID lies.
fn promote_above(standby: &Cluster, highest: i64, name: &str) -> f64 {
    standby.promote();
    let mut client = standby.wait_until_accepting();
    let first = client.query_one(
        "SELECT id, extract(epoch FROM snowflake_timestamp(id) - clock_timestamp())::float8 * 1000
         FROM (SELECT snowflake_nextval(1) AS id) AS issued",
        &[],
    );
    let first =
        first.unwrap_or_else(|error| panic!("the promoted standby refused its first call: {error:?}"));
    let (first, ahead_ms): (i64, f64) = (first.get(0), first.get(1));
    println!("{name}: the promoted standby's first ID is {ahead_ms:.0} ms ahead of the clock");
    assert!(first > highest, "the first ID {first} is not above the old primary's {highest}");
    assert!(
        standby.log().contains("the old primary ran with snowflake_id.max_lead_ms = 60000 ms"),
        "the promotion did not keep the primary's lead"
    );
    // Other shards issue too, at the resumed position.
    let (_, second) = next_id_ahead_ms(&mut client, 2);
    assert!(second > first);
    ahead_ms
}

/// How the standby goes down before its promotion, after a restartpoint past the last ceiling
/// record it replayed.
enum Down {
    /// `pg_ctl stop -m fast`, then a start.
    Restarted,
    /// Every process killed with SIGKILL at once (`kill -9`, as a machine crash), then a start.
    Crashed,
}

/// The primary runs with `max_lead_ms = 60000` set by ALTER SYSTEM after its standby was made
/// (so the standby keeps the default 2 s) and issues 40 s ahead; the standby replays it, passes
/// it with a restartpoint, and goes down as told while the primary is killed; started again and
/// promoted, its first call must be served above the primary's IDs, within the primary's bound.
fn a_standby_down_before_promotion_keeps_its_primarys_lead(name: &str, down: Down) -> Cluster {
    let Pair { mut primary, mut standby } = Pair::builder(name).start();
    let mut client = primary.connect();
    // On the primary only: ALTER SYSTEM writes postgresql.auto.conf, which is not replicated.
    apply_settings(&mut client, &[("snowflake_id.max_lead_ms", "1min")]);
    run_ahead(&mut client, 1, 40_000);
    client.batch_execute("INSERT INTO t SELECT FROM generate_series(1, 1000)").unwrap();
    let highest: i64 = value(&mut client, "SELECT max(id) FROM t", &[]);
    // The primary's worker writes no ceiling for the next 40 s (the one it has lies ahead of
    // the shard): after this checkpoint and the standby's restartpoint, a restarted standby's
    // recovery replays none.
    client.batch_execute("CHECKPOINT").unwrap();
    let lsn: String = value(&mut client, "SELECT pg_current_wal_insert_lsn()::text", &[]);
    standby.wait_for_replay(&lsn);
    standby.connect().batch_execute("CHECKPOINT").unwrap();
    drop(client);
    let record = std::fs::read_to_string(standby.data_dir().join("snowflake_id.reservation")).unwrap();
    println!("the standby's record before it goes down: {}", record.trim_end());
    primary.kill_postmaster();
    match down {
        Down::Restarted => standby.stop("fast"),
        Down::Crashed => standby.kill_postmaster(),
    }
    standby.start_with(&[]);
    drop(standby.wait_until_accepting());
    let ahead_ms = promote_above(&standby, highest, name);
    // The primary's bound: 60,000 + 1 + 500 ms (reserve_ms), and max_clock_skew_ms (250 ms) on top.
    assert!(ahead_ms <= 60_751.0, "resumed {ahead_ms:.0} ms ahead, beyond the primary's bound");
    standby
}

#[test]
fn a_standby_restarted_before_its_promotion_keeps_its_primarys_longer_lead() {
    let mut promoted =
        a_standby_down_before_promotion_keeps_its_primarys_lead("restarted-lead", Down::Restarted);
    // Restarted again, now as a primary, before the clock has caught up: the lead it keeps is
    // in its record too, and its calls are still served.
    let (_, before) = next_id_ahead_ms(&mut promoted.connect(), 1);
    promoted.stop("fast");
    promoted.start_with(&[]);
    let mut client = promoted.wait_until_accepting();
    let after = client.query_one("SELECT snowflake_nextval(1)", &[]);
    let after: i64 = after.unwrap_or_else(|error| panic!("refused after a restart: {error:?}")).get(0);
    assert!(after > before);
    assert!(
        promoted.log().contains("the reservation was recorded under snowflake_id.max_lead_ms = 60000 ms"),
        "the restart did not keep the lead"
    );
}

#[test]
fn a_standby_crashed_before_its_promotion_keeps_its_primarys_longer_lead() {
    a_standby_down_before_promotion_keeps_its_primarys_lead("crashed-lead", Down::Crashed);
}
