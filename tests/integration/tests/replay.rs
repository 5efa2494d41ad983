//! Crash recovery over many reservation records: the server comes back above every ID it
//! issued, and replay does not fsync per record. The number of records is 1,000 here;
//! `SNOWFLAKE_REPLAY_RECORDS=10000` measures replay at the size docs/performance.md reports
//! (the figure is printed, not asserted).

use snowflake_id_integration::engine::unix_ms;
use snowflake_id_integration::{id_ahead_ms, id_unix_ms, kill_9, value, Cluster, FsyncFault};
use std::time::Duration;

#[test]
fn crash_recovery_over_many_ceiling_records_resumes_above_every_id() {
    let records: i32 =
        std::env::var("SNOWFLAKE_REPLAY_RECORDS").ok().and_then(|n| n.parse().ok()).unwrap_or(1000);
    // Each advance moves shard 1 200 ms further than the last reservation: one record each.
    // No checkpoint comes between them and the crash, so recovery replays them all.
    let mut cluster = Cluster::builder("replay")
        .settings(&[
            "snowflake_id.max_lead_ms = 24h",
            "snowflake_id.reserve_ms = 100ms",
            "snowflake_id.max_wait_ms = 10s",
            "checkpoint_timeout = 1h",
            "max_wal_size = 10GB",
        ])
        .start();
    let mut client = cluster.connect();
    client.batch_execute("CREATE EXTENSION snowflake_id; CHECKPOINT").unwrap();
    client
        .query(
            "SELECT snowflake_advance(1, snowflake_compose(clock_timestamp() + make_interval(secs => g * 0.2), 0, 0))
             FROM generate_series(1, $1) g",
            &[&records],
        )
        .unwrap();
    let highest: i64 = value(&mut client, "SELECT snowflake_nextval(1)", &[]);
    drop(client);
    cluster.kill_postmaster();

    cluster.start_with(&[]);
    let mut client = cluster.wait_until_accepting();
    let next: i64 = value(&mut client, "SELECT snowflake_nextval(1)", &[]);
    assert!(next > highest, "after crash recovery shard 1 issued {next}, not above {highest}");
    let log = cluster.log();
    let redo =
        log.lines().find(|line| line.contains("redo done at")).unwrap_or_else(|| panic!("no redo in\n{log}"));
    let elapsed = redo.rsplit("elapsed: ").next().unwrap_or("?");
    println!("replay: crash recovery over {records} ceiling records: redo {elapsed}");
}

/// The worker makes each ceiling durable in the file and does not wait for its WAL record's
/// flush, so after a crash the file may be ahead of every record crash recovery finds. The
/// file wins: set here five minutes ahead of the records the server wrote (a lead bound of
/// ten lets it issue there at once), it is where shards resume, however long the restart.
#[test]
fn crash_recovery_never_resumes_below_the_recorded_file() {
    let mut cluster = Cluster::builder("replay-file-ahead")
        .settings(&["snowflake_id.max_lead_ms = '10min'", "snowflake_id.max_wait_ms = 10s"])
        .start();
    let mut client = cluster.connect();
    client.batch_execute("CREATE EXTENSION snowflake_id; CHECKPOINT").unwrap();
    // Some IDs and a second of reservation records after the checkpoint, for redo to replay.
    client.query("SELECT snowflake_nextval(1) FROM generate_series(1, 1000)", &[]).unwrap();
    std::thread::sleep(std::time::Duration::from_secs(1));
    drop(client);
    cluster.kill_postmaster();

    let file_ceiling_ms = unix_ms() + 300_000;
    std::fs::write(
        cluster.data_dir().join("snowflake_id.reservation"),
        format!("snowflake_id reservation ceiling_unix_ms={file_ceiling_ms}\n"),
    )
    .unwrap();
    cluster.start_with(&[]);
    let mut client = cluster.wait_until_accepting();
    let log = cluster.log();
    assert!(log.contains("redo done at"), "no crash recovery replayed records:\n{log}");
    let next: i64 = value(&mut client, "SELECT snowflake_nextval(1)", &[]);
    let next_ms = id_unix_ms(&mut client, next);
    assert!(
        (file_ceiling_ms..file_ceiling_ms + 10_000).contains(&next_ms),
        "after crash recovery shard 1 issued at {next_ms} ms, not at the recorded ceiling {file_ceiling_ms} ms"
    );
}

/// The record carries a CRC-32C, as pg_control does: a damaged record that still parses
/// (one digit of the ceiling flipped) stops the start, naming the file and how to repair it;
/// nothing is issued. A line as 0.4.0 wrote it (no checksum) is read.
#[test]
fn a_damaged_reservation_record_stops_the_start_and_an_old_one_is_read() {
    let mut cluster = Cluster::builder("record-checksum")
        .settings(&["snowflake_id.max_lead_ms = '10min'"])
        .setup("CREATE EXTENSION snowflake_id; SELECT snowflake_nextval(1) FROM generate_series(1, 1000)")
        .start();
    cluster.stop("fast");

    let file = cluster.data_dir().join("snowflake_id.reservation");
    let record = std::fs::read_to_string(&file).unwrap();
    assert!(record.contains(" crc32c="), "no checksum in {record:?}");
    // The ceiling's most significant nonzero digit, lowered by one: still a number, far lower.
    let digits = "snowflake_id reservation ceiling_unix_ms=".len();
    let first = digits + record[digits..].find(|c: char| c != '0').unwrap();
    let lowered = (record.as_bytes()[first] - 1) as char;
    let damaged = format!("{}{lowered}{}", &record[..first], &record[first + 1..]);
    std::fs::write(&file, &damaged).unwrap();
    let log = cluster.try_start_with(&[]).expect_err("the server started with a damaged reservation record");
    assert!(log.contains("could not read the snowflake_id reservation file \"snowflake_id.reservation\": checksum mismatch"), "{log}");
    assert!(log.contains("HINT:  Restore the file from a backup. Or write the line"), "{log}");

    // Repaired as the hint says, in the format of 0.4.0 (zero-padded, no checksum): five
    // minutes ahead, where shards then resume.
    let ceiling_ms = unix_ms() + 300_000;
    std::fs::write(&file, format!("snowflake_id reservation ceiling_unix_ms={ceiling_ms:020}\n")).unwrap();
    cluster.start_with(&[]);
    let mut client = cluster.connect();
    let next: i64 = value(&mut client, "SELECT snowflake_nextval(1)", &[]);
    let next_ms = id_unix_ms(&mut client, next);
    assert!(
        (ceiling_ms..ceiling_ms + 10_000).contains(&next_ms),
        "resumed at {next_ms} ms, not at {ceiling_ms} ms"
    );
}

/// The worker makes a ceiling durable in its record file before it writes the ceiling's WAL
/// record (`resume::RECORDING`, the fix of F15 in docs/reliability.md): while its file write
/// stalls, nothing of the new ceiling is in WAL, so crash recovery resumes at the file, and a
/// clean restart after it issues nothing below a horizon given in between. (With the WAL record
/// first, as before F15's fix, the record replayed above the file is what F9's fix writes to
/// it.) Here the worker's write stalls (strace) as it records past a shard moved 50 s ahead, a
/// commit flushes the WAL written before it, and the worker is killed there: the postmaster's
/// crash restart replays what WAL holds.
#[test]
fn a_crash_inside_the_record_file_write_replays_nothing_of_its_ceiling() {
    let mut cluster = Cluster::builder("replay-stalled-write")
        .settings(&["snowflake_id.max_lead_ms = '1min'", "snowflake_id.reserve_ms = '20s'"])
        .start();
    let mut client = cluster.connect();
    client.batch_execute("CREATE EXTENSION snowflake_id; CHECKPOINT").unwrap();
    client.query_one("SELECT snowflake_nextval(1)", &[]).unwrap();
    let worker = cluster.reservation_worker_pid().expect("the reservation worker runs");
    // A reservation 20 s deep: no renewal of the worker's own comes before the advance's.
    let stall = FsyncFault::slow_writes(worker, Duration::from_secs(120));
    // snowflake_advance waits for the worker to record past the new position: it cannot.
    let mut mover = cluster.connect();
    mover.batch_execute("SET statement_timeout = '3s'").unwrap();
    let advanced = mover.query_one(
        "SELECT snowflake_advance(1, snowflake_compose(clock_timestamp() + interval '50 s', 0, 0))",
        &[],
    );
    assert!(advanced.is_err(), "the advance returned although the worker's file write stalls");
    // A commit flushes the WAL written before it (the ceiling's record with it, were it
    // written before the file).
    client.batch_execute("CREATE TABLE flushed ()").unwrap();
    drop((mover, client));
    // Killed inside its stalled write (which never runs), then released by strace.
    kill_9(worker);
    drop(stall);
    std::thread::sleep(Duration::from_secs(1));
    let mut client = cluster.wait_until_accepting();
    assert!(cluster.log().contains("reinitializing"), "no crash restart after the worker was killed");
    // The reservation before the advance lay some 20 s ahead; the advance's ceiling past 50 s.
    let horizon: i64 = value(&mut client, "SELECT snowflake_horizon()", &[]);
    let ahead_ms = id_ahead_ms(&mut client, horizon);
    assert!(
        ahead_ms < 35_000.0,
        "the horizon after crash recovery is {ahead_ms:.0} ms ahead, past the reservation the file \
         held: the WAL record of the ceiling whose file write stalled was written before it"
    );
    drop(client);
    cluster.stop("fast");
    cluster.start_with(&[]);
    let mut client = cluster.wait_until_accepting();
    let next: i64 = value(&mut client, "SELECT snowflake_nextval(1)", &[]);
    assert!(
        next >= horizon,
        "after a clean restart shard 1 issued {next}, below the horizon {horizon} given before it"
    );
}
