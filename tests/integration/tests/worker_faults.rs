//! Faults of the reservation worker under load: terminated (twice), and its fsync slowed by
//! strace fault injection. Calls go on under the current reservation while the worker is
//! away; with the default settings, fsyncs of 2 s slow calls down and fail none; a worker that
//! cannot record in time (fsyncs of 5 s) makes calls fail with 55000 and a hint, never hang; a
//! worker whose fsync fails lets no call past the ceiling it last recorded.

use snowflake_id_integration::{assert_no_duplicates, wait_until, Cluster, FsyncFault, Load, LOAD_TABLE};
use std::time::{Duration, Instant};

const WRITERS: [i32; 8] = [1, 2, 3, 4, 5, 6, 7, 8];

/// A server of its own with the load table, and eight writers, one shard each, that have
/// inserted `rows` rows.
fn loaded(name: &str, rows: usize) -> (Cluster, Load) {
    let cluster =
        Cluster::builder(name).setup(&format!("CREATE EXTENSION snowflake_id; {LOAD_TABLE}")).start();
    let load = Load::start(&cluster, &WRITERS, 0);
    load.wait_for(rows);
    (cluster, load)
}

#[test]
fn terminating_the_worker_twice_under_eight_writers_fails_no_insert() {
    let (cluster, load) = loaded("worker-terminated", 20_000);
    let first = cluster.reservation_worker_pid().unwrap();
    let second = cluster.restart_reservation_worker();
    load.wait_for(load.inserted() + 20_000);
    let third = cluster.restart_reservation_worker();
    load.wait_for(load.inserted() + 20_000);
    assert!(first != second && second != third);
    let errors = load.errors();
    let acknowledged = load.finish();
    assert!(errors.is_empty(), "INSERTs failed while the worker was restarted: {errors:?}");
    let rows = assert_no_duplicates(&mut cluster.connect());
    assert_eq!(rows as usize, acknowledged.len());
    println!("worker faults: terminated twice under 8 writers: {rows} rows, 0 failed, 0 duplicates");
}

#[test]
fn a_worker_whose_fsync_takes_2_s_slows_eight_writers_and_fails_no_insert() {
    let (cluster, load) = loaded("worker-fsync-2s", 10_000);
    let before = load.inserted();
    let slow = FsyncFault::slow(cluster.reservation_worker_pid().unwrap(), Duration::from_secs(2));
    // Long enough for several slow recordings, the first (sized for a fast disk) included.
    std::thread::sleep(Duration::from_secs(15));
    let during = load.inserted() - before;
    drop(slow);
    load.wait_for(load.inserted() + 10_000);
    let errors = load.errors();
    let acknowledged = load.finish();
    assert!(errors.is_empty(), "INSERTs failed while fsync took 2 s: {errors:?}");
    assert!(during > 0, "no INSERT went through in 15 s of slow fsyncs");
    let mut client = cluster.connect();
    let rows = assert_no_duplicates(&mut client);
    assert_eq!(rows as usize, acknowledged.len());
    let row =
        client.query_one("SELECT sum(waits)::int8, sum(wait_ms)::int8 FROM snowflake_stats()", &[]).unwrap();
    let (waits, wait_ms): (i64, i64) = (row.get(0), row.get(1));
    println!(
        "worker faults: fsync delayed 2 s for 15 s under 8 writers: {during} rows inserted meanwhile, 0 failed; \
         {waits} calls waited {wait_ms} ms in all; {rows} rows, 0 duplicates"
    );
}

#[test]
fn a_worker_whose_fsync_takes_5_s_makes_calls_fail_with_a_hint_not_hang() {
    let (cluster, load) = loaded("worker-slow-fsync", 10_000);
    let slow = FsyncFault::slow(cluster.reservation_worker_pid().unwrap(), Duration::from_secs(5));
    // Every writer meets the end of the reservation within a few seconds and stops at its
    // first error; none may hang.
    let (waited, errors) = every_writer_refused(load, "writers hang");
    drop(slow);
    for error in &errors {
        assert!(error.contains("has used up the durable reservation of IDs"), "{error}");
        assert!(error.contains("Check the server log for the snowflake_id reservation worker"), "{error}");
    }
    println!(
        "worker faults: fsync delayed 5 s: all 8 writers failed with 55000 within {} ms",
        waited.as_millis()
    );
    // Once the disk is fast again, IDs are issued again (the worker may first finish the
    // fsyncs it was delayed in).
    issues_again_without_a_repeat(&cluster);
}

/// A ceiling is published only once its record file is durable (`resume::RECORDING`: the file,
/// then shared memory). While every fsync of the worker fails, nothing new is durable, so the
/// writers reach the last recorded ceiling and are refused there (55000), and once fsync works
/// again they go on without a repeated ID. Published first, the ceiling would move on with each
/// failed recording: the writers would never stop, past anything a restart resumes above.
#[test]
fn a_worker_whose_fsync_fails_lets_no_call_past_its_recorded_ceiling() {
    let (cluster, load) = loaded("worker-fsync-fails", 10_000);
    let failing = FsyncFault::failing(cluster.reservation_worker_pid().unwrap());
    let (stopped_after, _) = every_writer_refused(
        load,
        "writers still issue 60 s after every fsync of the worker began to fail: a ceiling was \
         published that no record file holds",
    );
    drop(failing);
    let rows = issues_again_without_a_repeat(&cluster);
    println!(
        "worker faults: fsync failing: all 8 writers refused with 55000 within {} ms; {rows} rows, 0 duplicates",
        stopped_after.as_millis()
    );
}

/// Waits (up to 60 s, else fails with `stuck`) until every writer of `load` stopped at its
/// first error, each a 55000; how long that took, and the errors.
fn every_writer_refused(load: Load, stuck: &str) -> (Duration, Vec<String>) {
    let started = Instant::now();
    while load.errors().len() < WRITERS.len() {
        assert!(started.elapsed() < Duration::from_secs(60), "{stuck}: {:?}", load.errors());
        std::thread::sleep(Duration::from_millis(50));
    }
    let waited = started.elapsed();
    let errors = load.errors();
    load.finish();
    for error in &errors {
        assert!(error.contains("E55000"), "{error}");
    }
    (waited, errors)
}

/// Once the worker records again, IDs are issued again (within 60 s: it may first finish the
/// fsyncs it was held in) and no row repeats an ID; the number of rows.
fn issues_again_without_a_repeat(cluster: &Cluster) -> i64 {
    let mut client = cluster.connect();
    wait_until("an ID is issued after the worker's disk worked again", || {
        client.query_one("SELECT snowflake_nextval(1)", &[]).is_ok()
    });
    assert_no_duplicates(&mut client)
}
