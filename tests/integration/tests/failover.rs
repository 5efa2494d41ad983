//! A streaming standby promoted after its primary is killed resumes above everything the old
//! primary committed, even IDs it issued ahead of the clock: the reservation travels in WAL.

use snowflake_id_integration::{
    apply_settings, assert_no_duplicates, first_id_once_issuing, value, wait_until, Cluster, Disk, Load,
    Pair, LOAD_TABLE,
};

#[test]
fn a_promoted_standby_resumes_above_the_killed_primary() {
    // IDs may lead the clock by 10 s here, so that shard 1 can borrow further ahead than a
    // promotion takes (below). Calls may wait 10 s for the reservation: the promoted
    // standby's first ones wait for its worker's first record, behind the promotion's
    // checkpoint on a loaded machine.
    let Pair { mut primary, standby } = Pair::builder("failover")
        .settings(&["snowflake_id.max_lead_ms = 10s", "snowflake_id.max_wait_ms = 10s"])
        .setup(&format!("CREATE EXTENSION snowflake_id; {LOAD_TABLE}"))
        // Once promoted, the standby must not wait for a standby of its own.
        .standby_settings(&["synchronous_standby_names = ''"])
        .start();
    // Synchronous replication (remote_apply): every commit acknowledged to a client is on the
    // standby, so "above every acknowledged ID" is a check that can be made exactly.
    let settings = [("synchronous_standby_names", "*"), ("synchronous_commit", "remote_apply")];
    apply_settings(&mut primary.connect(), &settings);

    let mut shards: Vec<i32> = (0..12).map(|i| if i < 6 { 1 } else { 200 + i }).collect();
    let load = Load::start(&primary, &shards, 0);
    load.wait_for(100_000);
    // Shard 1 borrows about 5 s ahead of the clock and commits the ID above the batch:
    // promotion takes less than that, so only the replayed reservation keeps shard 1 above it.
    primary
        .connect()
        .execute(
            "WITH batch AS (SELECT snowflake_nextvals(1, 20000000) LIMIT 1)
             INSERT INTO ids SELECT snowflake_nextval(1), 1, 0 FROM batch",
            &[],
        )
        .unwrap();
    primary.kill_postmaster();
    let mut acknowledged = load.finish();
    standby.promote();

    let mut client = standby.wait_until_accepting();
    acknowledged.push((1, value(&mut client, "SELECT max(id) FROM ids WHERE shard = 1", &[])));
    shards.dedup();
    for &shard in &shards {
        client
            .execute(
                "INSERT INTO ids SELECT snowflake_nextval($1), $1, 1 FROM generate_series(1, 2000)",
                &[&shard],
            )
            .unwrap();
        let first_new: i64 =
            value(&mut client, "SELECT min(id) FROM ids WHERE shard = $1 AND round = 1", &[&shard]);
        let highest_old = acknowledged.iter().filter(|(s, _)| *s == shard).map(|(_, id)| *id).max().unwrap();
        assert!(
            first_new > highest_old,
            "shard {shard}: new ID {first_new} is not above the old primary's {highest_old}"
        );
    }
    let rows = assert_no_duplicates(&mut client);
    assert!(rows as usize >= acknowledged.len(), "acknowledged commits are missing on the promoted standby");
    println!("failover: {rows} rows, {} acknowledged by the killed primary, all below the promoted standby's new IDs, 0 duplicates", acknowledged.len());
}

/// Asynchronous replication: the standby was down while the primary borrowed 15 s ahead of
/// its clock, so it never received that ceiling nor the rows. Promoted after the primary is
/// killed, it still resumes above the old primary's highest ID: it resumes max_lead_ms +
/// reserve_ms + max_clock_skew_ms ahead of its clock (both servers share one clock here).
#[test]
fn a_standby_promoted_behind_its_primary_resumes_above_it() {
    let settings = ["snowflake_id.max_lead_ms = 60s", "snowflake_id.max_wait_ms = 10s"];
    let pair = Pair::builder("async").settings(&settings).start();
    // The standby has everything so far; then it is down while the primary moves on.
    pair.insert_and_replay();
    let Pair { mut primary, mut standby } = pair;
    standby.stop("fast");

    let highest = issue_ahead_and_kill(&mut primary, "15 s");

    // The standby comes back with only the WAL it had, and is promoted.
    standby.start_with(&[]);
    standby.promote();
    let mut client = standby.wait_until_accepting();
    assert_eq!(
        value::<i64>(&mut client, "SELECT count(*) FROM t WHERE id >= $1", &[&highest]),
        0,
        "the standby received the borrowed row: the test does not test what it says"
    );
    let first: i64 = value(&mut client, "INSERT INTO t DEFAULT VALUES RETURNING id", &[]);
    assert!(first > highest, "the promoted standby issued {first}, not above the old primary's {highest}");
    let log = standby.log();
    assert!(log.contains("snowflake_id: recovery ended; shards resume at"), "{log}");
}

/// A standby cut off from its primary (a partition: its WAL receiver stopped, the server
/// running) for longer than its promotion bound, while the primary issued 9 s ahead of its
/// clock; the primary dies and the standby is promoted. The floor it replayed holds the bound
/// (10.6 s here) above its clock reading at its last replay, 12 s before: below the primary's
/// IDs. Only the promotion guard, the bound above the clock at the promotion itself, resumes
/// above them (the floor alone: `tests/mutations/promotion-guard.patch`).
#[test]
fn a_standby_cut_off_for_longer_than_its_bound_resumes_above_its_primary() {
    let mut pair = Pair::builder("partitioned").settings(&CUT_OFF_SETTINGS).start();
    let highest = cut_off_while_the_primary_runs_ahead(&mut pair);

    let first = first_id_once_issuing(&mut pair.promote());
    assert!(
        first > highest,
        "the standby promoted after its cut-off issued {first}, not above the old primary's {highest}"
    );
    let log = pair.standby.log();
    assert!(log.contains("snowflake_id: recovery ended; shards resume at"), "{log}");
}

/// The machine of a standby being promoted loses power right after PostgreSQL removed
/// `standby.signal` (LazyFS kills itself at that unlink), before the end-of-recovery record,
/// before the worker could start: the start that follows is a crash recovery with no signal
/// file left. It still owes the promotion guard (`snowflake_id.promotion_pending`, written
/// when the standby started) and records it before it issues anything: above the old
/// primary's IDs that never reached it. Without the file, that start resumed at what the
/// standby's file held: the promotion's bound (10.6 s here) above its clock reading at its
/// last replay, 12 s before the primary, its standby cut off, issued 9 s ahead of its clock.
#[test]
fn a_promotion_cut_by_a_power_loss_at_its_end_still_records_its_guard() {
    let mut pair = Pair::builder("cut").settings(&CUT_OFF_SETTINGS).standby_disk(Disk::PowerLoss).start();
    assert!(
        pair.standby.data_dir().join("snowflake_id.promotion_pending").exists(),
        "a standby's start did not write that it owes a promotion guard"
    );
    let highest = cut_off_while_the_primary_runs_ahead(&mut pair);
    let standby = &mut pair.standby;

    let postmaster = standby.lose_power_right_after("unlink", r"standby\.signal");
    standby.request_promotion();
    standby.restore_power(postmaster);
    let log = standby.log();
    assert!(
        !standby.data_dir().join("standby.signal").exists() && !log.contains("snowflake_id: recovery ended"),
        "the power loss did not come between the signal file's removal and the guard: the test does not \
         test what it says\n{log}"
    );

    standby.start_with(&[]);
    let first = first_id_once_issuing(&mut standby.wait_until_accepting());
    assert!(
        first > highest,
        "the server whose promotion a power loss cut issued {first}, not above the old primary's {highest}"
    );
    let log = standby.log();
    assert!(log.contains("snowflake_id: recovery ended; shards resume at"), "{log}");
    wait_until("the settled debt's file is removed", || {
        !standby.data_dir().join("snowflake_id.promotion_pending").exists()
    });
}

/// The pair's settings for a cut-off: a promotion bound of 10.6 s (`max_lead_ms` + 1 +
/// `reserve_ms` + `max_clock_skew_ms`), and calls waiting long enough for a start's lead.
const CUT_OFF_SETTINGS: [&str; 2] = ["snowflake_id.max_lead_ms = 10s", "snowflake_id.max_wait_ms = 10s"];

/// Once the standby has replayed a row, cuts it off for 12 s, longer than its promotion
/// bound, while the primary goes on, then has the primary issue 9 s ahead of its clock, and
/// kills the primary. The ID it issued last.
fn cut_off_while_the_primary_runs_ahead(pair: &mut Pair) -> i64 {
    pair.insert_and_replay();
    pair.cut_off();
    std::thread::sleep(std::time::Duration::from_secs(12));
    issue_ahead_and_kill(&mut pair.primary, "9 s")
}

/// Has `primary` issue an ID of shard 1 into `t`, `ahead` of its clock, then kills it; returns
/// the ID.
fn issue_ahead_and_kill(primary: &mut Cluster, ahead: &str) -> i64 {
    let mut client = primary.connect();
    let advance = format!(
        "SELECT snowflake_advance(1, snowflake_compose(clock_timestamp() + interval '{ahead}', 0, 0))"
    );
    client.batch_execute(&advance).unwrap();
    let highest = value(&mut client, "INSERT INTO t DEFAULT VALUES RETURNING id", &[]);
    drop(client);
    primary.kill_postmaster();
    highest
}

/// The old primary ran with a longer lead than the standby: the floor the standby replayed
/// lies above its own promotion guard. The promotion resumes there and records it before
/// anything is issued, and a clean restart right after the promotion (no signal file, no WAL
/// to replay) resumes above the old primary's IDs. (A restart before the promotion:
/// `standby_restart`.)
#[test]
fn a_promoted_standby_restarted_cleanly_resumes_above_the_floor_it_replayed() {
    // The standby's guard: 20 s + 1 ms + 100 ms ahead of its clock. Its first calls after the
    // restart are refused until the clock is within 20 s of the old primary's last IDs.
    let Pair { mut primary, mut standby } = Pair::builder("floor")
        .settings(&["snowflake_id.max_lead_ms = 30s"])
        .standby_settings(&[
            "snowflake_id.max_lead_ms = 20s",
            "snowflake_id.reserve_ms = 100ms",
            "snowflake_id.max_clock_skew_ms = 0",
        ])
        .start();
    // Two reservation records a moment apart (a standby of 0.6.0, which recorded what it
    // replayed at most once a second, had the first in its file and not the second). After
    // the second the primary's ceiling is far enough ahead that its worker writes no other.
    let mut client = primary.connect();
    client
        .batch_execute(
            "SELECT snowflake_advance(1, snowflake_compose(clock_timestamp() + interval '10 s', 0, 0));
             SELECT snowflake_advance(1, snowflake_compose(clock_timestamp() + interval '25 s', 0, 0));",
        )
        .unwrap();
    let row = client
        .query_one("INSERT INTO t DEFAULT VALUES RETURNING id, pg_current_wal_lsn()::text", &[])
        .unwrap();
    let (highest, lsn): (i64, String) = (row.get(0), row.get(1));
    standby.wait_for_replay(&lsn);
    drop(client);
    primary.stop("fast");

    standby.promote();
    let unix_ms = "SELECT (extract(epoch FROM snowflake_timestamp($1)) * 1000)::bigint";
    let highest_unix_ms: i64 = value(&mut standby.wait_until_accepting(), unix_ms, &[&highest]);
    wait_until("the promoted standby recorded a reservation above the old primary's last ID", || {
        standby.recorded_ceiling_unix_ms() > highest_unix_ms
    });

    standby.stop("fast");
    standby.start_with(&[]);
    let first = first_id_once_issuing(&mut standby.connect());
    assert!(
        first > highest,
        "after a clean restart the promoted standby issued {first}, not above {highest}"
    );
}

/// The promotion guard runs once, when the worker first starts after the promotion; a
/// worker restarted later does not move every shard ahead again. Calls may not wait for the
/// clock at all here (`max_wait_ms = 0`), so a jump ahead would fail them.
#[test]
fn a_promoted_server_whose_worker_is_terminated_twice_fails_no_insert() {
    let pair = Pair::builder("guard-once")
        .setup(&format!("CREATE EXTENSION snowflake_id; {LOAD_TABLE}"))
        .standby_settings(&["snowflake_id.max_wait_ms = 0"])
        .start();
    pair.replay();
    let Pair { primary, standby } = pair;
    drop(primary);
    // The first calls after the promotion are refused until the clock is within max_lead_ms
    // of the guard (less than a second).
    standby.promote();
    let mut client = standby.wait_until_accepting();
    wait_until("the promoted standby issues IDs", || {
        client.execute("INSERT INTO ids SELECT snowflake_nextval(1), 1, 0", &[]).is_ok()
    });

    let writers: Vec<i32> = (1..=8).collect();
    let load = Load::start(&standby, &writers, 1);
    load.wait_for(20_000);
    for _ in 0..2 {
        standby.restart_reservation_worker();
        load.wait_for(load.inserted() + 20_000);
    }
    let errors = load.errors();
    let acknowledged = load.finish();
    assert!(
        errors.is_empty(),
        "INSERTs failed after the worker of a promoted server was restarted: {errors:?}"
    );
    let rows = assert_no_duplicates(&mut client);
    assert_eq!(rows as usize, acknowledged.len() + 1);
    let guards = standby.log().matches("snowflake_id: recovery ended").count();
    assert_eq!(guards, 1, "the promotion guard ran {guards} times");
}
