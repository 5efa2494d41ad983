//! A batch of 100 million IDs stops at once for statement_timeout and pg_cancel_backend: the
//! rows are stored with a look at PostgreSQL's interrupt flag every few thousand. The batch
//! was claimed whole before, so a cancelled call leaves the shard past all of it, as a
//! rolled-back nextval leaves a sequence: nothing half-claimed, nothing issued twice.

use snowflake_id_integration::engine::unix_ms;
use snowflake_id_integration::{db_error, issued, next_id_ahead_ms, value, wait_until, Cluster};
use std::time::{Duration, Instant};

const BATCH: &str = "SELECT count(*) FROM snowflake_nextvals(7, 100000000)";
/// Storing 100 million rows takes several seconds here; a cancel honoured at once takes well
/// under a second. The bound is wide for a loaded machine, and far below the uncancelled time.
const PROMPTLY: Duration = Duration::from_secs(2);

#[test]
fn statement_timeout_and_cancel_stop_a_huge_batch_promptly() {
    // 100 million IDs of one shard are 24.4 s of borrowed time at 4,096 per ms. The claim of
    // a batch past the durable reservation first waits for the worker to record a higher
    // ceiling (a WAL flush and an fsync), and that wait honours the statement_timeout too: on
    // a slow disk the 100 ms would end the call before it claimed anything. So the
    // reservation is kept 30 s ahead, and the batch waits for nothing but storing its rows.
    let cluster = Cluster::builder("interrupts")
        .settings(&[
            "snowflake_id.max_lead_ms = 60000",
            "snowflake_id.max_wait_ms = 5000",
            "snowflake_id.reserve_ms = 30000",
        ])
        .setup("CREATE EXTENSION snowflake_id")
        .start();
    let mut client = cluster.connect();
    wait_until("the reservation is recorded 25 s ahead of the clock", || {
        cluster.recorded_ceiling_unix_ms() > unix_ms() + 25_000
    });

    client.batch_execute("SET statement_timeout = '100ms'").unwrap();
    let started = Instant::now();
    let error = db_error(&mut client, BATCH);
    let elapsed = started.elapsed();
    assert_eq!(error.code().code(), "57014", "{error:?}");
    println!("interrupts: statement_timeout = 100ms stopped a 100M batch after {} ms", elapsed.as_millis());
    assert!(elapsed < PROMPTLY, "statement_timeout took {elapsed:?} to stop the batch");
    // Claimed whole, then abandoned: the shard is past every ID of the batch.
    assert_eq!(issued(&mut client, 7), 100_000_000);
    let (lead_ms, _) = next_id_ahead_ms(&mut client, 7);
    assert!(
        lead_ms > 20_000.0,
        "the next ID is only {lead_ms} ms ahead: the cancelled batch was not claimed whole"
    );

    client.batch_execute("RESET statement_timeout").unwrap();
    let pid: i32 = value(&mut client, "SELECT pg_backend_pid()", &[]);
    let (cancelled_at, error) = std::thread::scope(|scope| {
        let batch = scope.spawn(|| {
            let error = db_error(&mut client, BATCH);
            (Instant::now(), error)
        });
        let mut watcher = cluster.connect();
        // Cancelled once it has been running a moment (the claim is instant; storing is not).
        wait_until("the batch has been running 100 ms", || {
            assert!(!batch.is_finished(), "the batch ended before it could be cancelled");
            value(
                &mut watcher,
                "SELECT count(*) = 1 FROM pg_stat_activity WHERE pid = $1 AND state = 'active'
                 AND query_start < clock_timestamp() - interval '100 ms'",
                &[&pid],
            )
        });
        let cancelled_at = Instant::now();
        watcher.query_one("SELECT pg_cancel_backend($1)", &[&pid]).unwrap();
        let (ended_at, error) = batch.join().unwrap();
        (ended_at - cancelled_at, error)
    });
    assert_eq!(error.code().code(), "57014", "{error:?}");
    println!(
        "interrupts: pg_cancel_backend stopped a 100M batch {} ms after the cancel",
        cancelled_at.as_millis()
    );
    assert!(cancelled_at < PROMPTLY, "the cancel took {cancelled_at:?} to stop the batch");
}
