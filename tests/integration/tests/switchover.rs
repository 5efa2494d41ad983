//! A planned switchover resumes where the old primary stopped (`reservation::switchover`): the
//! primary stopped cleanly (`pg_ctl stop -m fast`, as Patroni's switchover does), the standby
//! replays up to its shutdown checkpoint and is promoted, and its first ID is within the
//! reservation's headroom of the clock, above every ID of the old primary; where the promotion
//! guard alone puts it `max_lead_ms + reserve_ms + max_clock_skew_ms` ahead (2.75 s by default).
//! The control: the same after an immediate stop (no shutdown checkpoint) resumes that bound
//! ahead, as before.

use snowflake_id_integration::{
    as_server_owner, id_unix_ms, next_id_ahead_ms, run, value, wait_until, Cluster, Disk, Pair, TABLE_T,
};

/// The primary and its standby, the primary having issued IDs; returns them and the highest ID.
fn pair(name: &str) -> (Cluster, Cluster, i64) {
    let Pair { primary, standby } = Pair::builder(name)
        .setup(&format!("{TABLE_T}; INSERT INTO t SELECT FROM generate_series(1, 10000)"))
        .start();
    let mut client = primary.connect();
    // More IDs, some after the standby runs, and a pause so that the worker renews its ceiling
    // (a record the standby replays) while IDs are issued.
    for _ in 0..5 {
        client.batch_execute("INSERT INTO t SELECT FROM generate_series(1, 2000)").unwrap();
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
    let highest: i64 = value(&mut client, "SELECT max(id) FROM t", &[]);
    (primary, standby, highest)
}

/// The server's clock, in Unix ms.
fn clock_ms(client: &mut postgres::Client) -> i64 {
    value(client, "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::int8", &[])
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

/// The rest of a switchover once the primary has stopped cleanly: the standby replays its
/// shutdown checkpoint (its end is past its start), then is promoted; a client of it.
fn promote_after_clean_stop(primary: &Cluster, standby: &Cluster) -> postgres::Client {
    let checkpoint = latest_checkpoint(primary);
    let mut on_standby = standby.connect();
    wait_until(&format!("the standby replayed the shutdown checkpoint at {checkpoint}"), || {
        value(&mut on_standby, "SELECT pg_last_wal_replay_lsn() > $1::text::pg_lsn", &[&checkpoint])
    });
    drop(on_standby);
    standby.promote();
    standby.wait_until_accepting()
}

#[test]
fn a_planned_switchover_resumes_where_the_old_primary_stopped() {
    let (mut primary, standby, highest) = pair("switchover");
    primary.stop("fast");
    let mut client = promote_after_clean_stop(&primary, &standby);
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
    let past_ms = id_unix_ms(&mut client, first) - before_promotion_ms;
    println!(
        "switchover: after an immediate stop, the first ID is {ahead_ms:.0} ms ahead of the clock, \
         {past_ms} ms past a reading before the promotion"
    );
    assert!(first > highest);
    assert!(past_ms >= 2_740, "the first ID is only {past_ms} ms past the promotion after an unclean stop");
    assert!(!standby.log().contains("recovery ended on the old primary's clean stop"));
}

/// Finding F5 (docs/reliability.md), found by the simulation: the primary records a ceiling far
/// ahead of its clock (a batch borrowing seconds) and hands out IDs under it with no WAL of their
/// own; the power goes before the WAL writer flushes the ceiling's record, so the record file
/// keeps the ceiling and the WAL does not. Restarted, the primary resumes at its file; switched
/// over at once (its clock still below that ceiling, so no renewal has logged a higher one), its
/// shutdown checkpoint must come after a record of that ceiling, or the standby resumes at an
/// older one, below the IDs handed out. The worker logs the ceiling it resumed at when it starts
/// (`resume::RECORDING_AT_START`); without it (the mutation `worker-start-wal-record`) the
/// promoted standby's first ID is below the old primary's batch.
#[test]
fn a_switchover_after_a_power_loss_resumes_above_the_ids_its_file_kept() {
    let settings = [
        // 16 IDs a millisecond, so that a batch of 240,000 runs 15 s ahead of the clock.
        "snowflake_id.shard_bits = 12",
        "snowflake_id.seq_bits = 4",
        "snowflake_id.max_lead_ms = 20s",
        // The WAL writer flushes asynchronous WAL (the worker's records) at most every 10 s.
        "wal_writer_delay = 10s",
    ];
    let primary = Cluster::builder("f5-primary")
        .disk(Disk::PowerLoss)
        .settings(&settings)
        .setup(&format!("{TABLE_T}; INSERT INTO t SELECT FROM generate_series(1, 1000)"))
        .start();
    // Reconnecting at once when its primary comes back (the default waits 5 s).
    let Pair { mut primary, standby } = Pair::builder("f5")
        .standby_settings(&["wal_retrieve_retry_interval = 100ms"])
        .start_standby_of(primary);
    let mut client = primary.connect();
    let flushed_lsn = |client: &mut postgres::Client| -> String {
        value(client, "SELECT pg_current_wal_flush_lsn()::text", &[])
    };
    // A commit flushes the WAL; the batch, with no WAL of its own, makes the worker record a
    // ceiling about 15.5 s ahead, whose record stays unflushed until the WAL writer's next round.
    // Taken again until no flush came between the commit and the check (10 s rounds: seldom).
    let mut batch_max = None;
    for _ in 0..5 {
        client.batch_execute("INSERT INTO t SELECT FROM generate_series(1, 100)").unwrap();
        let committed = flushed_lsn(&mut client);
        let max: i64 = value(&mut client, "SELECT max(id) FROM snowflake_nextvals(1, 240000) AS id", &[]);
        if flushed_lsn(&mut client) == committed {
            batch_max = Some(max);
            break;
        }
    }
    let batch_max = batch_max.expect("the WAL writer flushed between every commit and its check");
    standby.wait_for_replay(&flushed_lsn(&mut client));
    drop(client);
    primary.lose_power();
    primary.start_with(&[]);
    let ceiling_at_restart = primary.recorded_ceiling_unix_ms();
    // Its worker started (an HA manager switches over from a running primary; F5's remaining
    // window is a stop before the worker's start). Nothing is issued on it: a call would make
    // the worker record a higher ceiling, in WAL, which is what the test must do without.
    wait_until("the restarted primary's reservation worker started", || {
        primary.log().matches("snowflake_id reservation worker started").count() >= 2
    });
    // And its standby streaming again, as a switchover waits for.
    let mut client = primary.connect();
    wait_until("the standby streams from the restarted primary", || {
        value(&mut client, "SELECT count(*) = 1 FROM pg_stat_replication WHERE state = 'streaming'", &[])
    });
    drop(client);
    // The switchover, at once: a clean stop, the standby catches up, then its promotion.
    primary.stop("fast");
    // The test's premise: no renewal between the restart and the stop (the batch lies 15 s
    // ahead; a restart, the standby's reconnection and a stop take a few seconds), so no
    // record of a higher ceiling.
    assert_eq!(
        primary.recorded_ceiling_unix_ms(),
        ceiling_at_restart,
        "the worker renewed before the switchover: the clock reached the batch's ceiling"
    );
    let mut client = promote_after_clean_stop(&primary, &standby);
    let (_, first) = next_id_ahead_ms(&mut client, 1);
    assert!(
        first > batch_max,
        "the promoted standby's first ID {first} is not above the old primary's batch {batch_max}: it resumed at a \
         ceiling older than the one the old primary's file kept"
    );
    assert!(standby.log().contains("recovery ended on the old primary's clean stop"), "not a clean stop");
}
