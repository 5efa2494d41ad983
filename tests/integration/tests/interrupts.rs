//! A batch of 100 million IDs stops at once for statement_timeout and pg_cancel_backend: the
//! rows are stored with a look at PostgreSQL's interrupt flag every few thousand. The batch
//! was claimed whole before, so a cancelled call leaves the shard past all of it, as a
//! rolled-back nextval leaves a sequence: nothing half-claimed, nothing issued twice.

use snowflake_id_integration::{db_error, issued, wait_until, Cluster};
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
        .start();
    let mut client = cluster.connect();
    client.batch_execute("CREATE EXTENSION snowflake_id").unwrap();
    wait_until("the reservation is recorded 25 s ahead of the clock", || {
        let now_ms: i64 = client
            .query_one("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::int8", &[])
            .unwrap()
            .get(0);
        cluster.recorded_ceiling_unix_ms() > now_ms + 25_000
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
    let lead_s: f64 = client
        .query_one(
            "SELECT extract(epoch FROM snowflake_timestamp(snowflake_nextval(7)) - clock_timestamp())::float8",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(lead_s > 20.0, "the next ID is only {lead_s} s ahead: the cancelled batch was not claimed whole");

    client.batch_execute("RESET statement_timeout").unwrap();
    let pid: i32 = client.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
    let config = cluster.config();
    let (cancelled_at, error) = std::thread::scope(|scope| {
        let batch = scope.spawn(|| {
            let error = db_error(&mut client, BATCH);
            (Instant::now(), error)
        });
        let mut watcher = config.connect(postgres::NoTls).unwrap();
        // Cancelled once it has been running a moment (the claim is instant; storing is not).
        loop {
            let running: bool = watcher
                .query_one(
                    "SELECT count(*) = 1 FROM pg_stat_activity WHERE pid = $1 AND state = 'active'
                     AND query_start < clock_timestamp() - interval '100 ms'",
                    &[&pid],
                )
                .unwrap()
                .get(0);
            if running {
                break;
            }
            assert!(!batch.is_finished(), "the batch ended before it could be cancelled");
            std::thread::sleep(Duration::from_millis(10));
        }
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
