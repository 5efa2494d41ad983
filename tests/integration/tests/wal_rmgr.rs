//! The WAL resource manager ids. Records are written under `snowflake_id.wal_rmgr_id`
//! (default 213, not PostgreSQL's experimental 128). A fresh cluster registers nothing under
//! 128; records that versions up to 0.2.0 wrote under 128 still replay after the update
//! (`snowflake_id.legacy_wal_rmgr_id`, by default 128 only while such records may remain).
//! Ids PostgreSQL keeps for itself are refused at start.

use snowflake_id_integration::{log_of_refused_start, value, wait_until, Cluster};

/// Moves shard 1 a second ahead `records` times (a reservation record each), then crashes
/// the server (kill -9); returns the highest ID shard 1 issued before the crash.
fn write_records_then_crash(cluster: &mut Cluster, records: usize) -> i64 {
    let mut client = cluster.connect();
    let advance = "SELECT snowflake_advance(1, snowflake_compose(clock_timestamp() + interval '1 s', 0, 0))";
    for _ in 0..records {
        client.query_one(advance, &[]).unwrap();
    }
    let highest: i64 = value(&mut client, "SELECT snowflake_nextval(1)", &[]);
    drop(client);
    cluster.kill_postmaster();
    highest
}

#[test]
fn wal_written_under_128_replays_after_the_update_to_the_new_id() {
    // As 0.2.0 ran: records under 128, nothing registered besides.
    let mut cluster = Cluster::builder("wal-rmgr")
        .settings(&[
            "snowflake_id.wal_rmgr_id = 128",
            "snowflake_id.legacy_wal_rmgr_id = 0",
            "checkpoint_timeout = 1h",
        ])
        .setup("CREATE EXTENSION snowflake_id; CHECKPOINT")
        .start();
    // Records after the checkpoint: crash recovery must replay them.
    let highest = write_records_then_crash(&mut cluster, 5);

    // The update: the new defaults (written here as lines, later lines win).
    cluster.configure(&["snowflake_id.wal_rmgr_id = 213", "snowflake_id.legacy_wal_rmgr_id = -1"]);
    cluster.start_with(&[]);
    let mut client = cluster.wait_until_accepting();
    let log = cluster.log();
    assert!(log.contains("registered custom resource manager \"snowflake_id\" with ID 213"), "{log}");
    assert!(log.contains("registered custom resource manager \"snowflake_id_0.2\" with ID 128"), "{log}");
    assert!(log.contains("redo done at"), "crash recovery replayed nothing:\n{log}");
    let next: i64 = value(&mut client, "SELECT snowflake_nextval(1)", &[]);
    assert!(next > highest, "after recovery shard 1 issued {next}, not above {highest}");
    // New records go under 213 and replay as well.
    client.batch_execute("CHECKPOINT").unwrap();
    drop(client);
    let highest = write_records_then_crash(&mut cluster, 1);
    cluster.start_with(&[]);
    let mut client = cluster.wait_until_accepting();
    let next: i64 = value(&mut client, "SELECT snowflake_nextval(1)", &[]);
    assert!(next > highest);

    // Once a checkpoint has completed since the update, no record under 128 is left to
    // replay: the next start leaves 128 to others.
    for _ in 0..3 {
        client.batch_execute("CHECKPOINT").unwrap();
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
    wait_until("the worker saw a checkpoint after the update", || {
        cluster.log().contains("no WAL record of versions up to 0.2.0 is left to replay")
    });
    // The next record written says so (the worker renews the reservation a few times a second).
    let file = cluster.data_dir().join("snowflake_id.reservation");
    wait_until("the record says no WAL under 128 is left", || {
        std::fs::read_to_string(&file).unwrap().contains(" wal128=0 ")
    });
    drop(client);
    cluster.stop("fast");
    let registered_before = cluster.log().matches("with ID 128").count();
    cluster.start_with(&[]);
    cluster.connect().query_one("SELECT snowflake_nextval(1)", &[]).unwrap();
    assert_eq!(cluster.log().matches("with ID 128").count(), registered_before, "128 registered again");
}

#[test]
fn a_fresh_cluster_registers_nothing_under_the_experimental_id() {
    let mut cluster = Cluster::builder("wal-rmgr-fresh").start();
    cluster.connect().batch_execute("CREATE EXTENSION snowflake_id; SELECT snowflake_nextval(1)").unwrap();
    cluster.stop("fast");
    cluster.start_with(&[]);
    let log = cluster.log();
    assert!(log.contains("registered custom resource manager \"snowflake_id\" with ID 213"), "{log}");
    assert!(!log.contains("with ID 128"), "{log}");
    let record = std::fs::read_to_string(cluster.data_dir().join("snowflake_id.reservation")).unwrap();
    assert!(record.contains(" wal128=0 "), "{record:?}");
}

#[test]
fn an_id_postgresql_keeps_for_itself_stops_the_server() {
    let log = log_of_refused_start("wal-rmgr-bad", &["snowflake_id.wal_rmgr_id = 100"]);
    assert!(
        log.contains("FATAL:  invalid value for parameter \"snowflake_id.wal_rmgr_id\": \"100\""),
        "{log}"
    );
    assert!(log.contains("100 is not a custom WAL resource manager id"), "{log}");
}
