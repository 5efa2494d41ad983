//! Crash recovery over many reservation records: the server comes back above every ID it
//! issued, and replay does not fsync per record. The number of records is 1,000 here;
//! `SNOWFLAKE_REPLAY_RECORDS=10000` measures replay at the size docs/performance.md reports
//! (the figure is printed, not asserted).

use snowflake_id_integration::Cluster;

#[test]
fn crash_recovery_over_many_ceiling_records_resumes_above_every_id() {
    let records: i32 =
        std::env::var("SNOWFLAKE_REPLAY_RECORDS").ok().and_then(|n| n.parse().ok()).unwrap_or(1000);
    // Each advance moves shard 1 200 ms further than the last reservation: one record each.
    // No checkpoint comes between them and the crash, so recovery replays them all.
    let mut cluster = Cluster::start(
        "replay",
        &[
            "snowflake_id.max_lead_ms = 24h",
            "snowflake_id.reserve_ms = 100ms",
            "snowflake_id.max_wait_ms = 10s",
            "checkpoint_timeout = 1h",
            "max_wal_size = 10GB",
        ],
    );
    let mut client = cluster.connect();
    client.batch_execute("CREATE EXTENSION snowflake_id; CHECKPOINT").unwrap();
    client
        .query(
            "SELECT snowflake_advance(1, snowflake_compose(clock_timestamp() + make_interval(secs => g * 0.2), 0, 0))
             FROM generate_series(1, $1) g",
            &[&records],
        )
        .unwrap();
    let highest: i64 = client.query_one("SELECT snowflake_nextval(1)", &[]).unwrap().get(0);
    drop(client);
    cluster.kill_postmaster();

    cluster.start_with(&[]);
    let mut client = cluster.wait_until_accepting();
    let next: i64 = client.query_one("SELECT snowflake_nextval(1)", &[]).unwrap().get(0);
    assert!(next > highest, "after crash recovery shard 1 issued {next}, not above {highest}");
    let log = cluster.log();
    let redo =
        log.lines().find(|line| line.contains("redo done at")).unwrap_or_else(|| panic!("no redo in\n{log}"));
    let elapsed = redo.rsplit("elapsed: ").next().unwrap_or("?");
    println!("replay: crash recovery over {records} ceiling records: redo {elapsed}");
}
