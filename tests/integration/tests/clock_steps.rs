//! The wall clock stepping back while the server runs (faked with libfaketime, changed while
//! loaders issue IDs): a small step (1 s) is absorbed by running ahead, a medium one (4 s) by waiting,
//! a large one refused at once with SQLSTATE 55000. Never a duplicate, and every connection's
//! IDs keep increasing through all of it.

use postgres::NoTls;
use snowflake_id_integration::{Cluster, FakeClock};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Each loader: `(ids in issue order, SQLSTATE and message of every refused call)`.
type LoaderResult = (Vec<i64>, Vec<(String, String)>);

#[test]
fn clock_steps_back_while_running() {
    // Up to 5 s of waiting, so that the medium step (4 s back, 2 s past the lead bound)
    // is waited out rather than refused.
    let mut cluster = Cluster::create("clock-steps", &["snowflake_id.max_wait_ms = 5s"]);
    let clock = FakeClock::of(&cluster);
    clock.start(&mut cluster);
    cluster.connect().batch_execute("CREATE EXTENSION snowflake_id").unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let refused = Arc::new(AtomicUsize::new(0));
    let loaders: Vec<std::thread::JoinHandle<LoaderResult>> = (0..4)
        .map(|_| {
            let (stop, refused, config) = (stop.clone(), refused.clone(), cluster.config());
            std::thread::spawn(move || {
                let mut client = config.connect(NoTls).unwrap();
                let (mut ids, mut refusals) = (Vec::new(), Vec::new());
                while !stop.load(Ordering::Relaxed) {
                    match client.query("SELECT snowflake_nextval(1) FROM generate_series(1, 200)", &[]) {
                        Ok(rows) => ids.extend(rows.iter().map(|row| row.get::<_, i64>(0))),
                        Err(error) => {
                            let db = error.as_db_error().expect("a server error");
                            refusals.push((db.code().code().to_string(), db.message().to_string()));
                            refused.fetch_add(1, Ordering::Relaxed);
                            std::thread::sleep(Duration::from_millis(50));
                        }
                    }
                }
                (ids, refusals)
            })
        })
        .collect();

    // Offsets from the real time; each step back starts from the real time ("+0"), so its
    // size is the whole offset. The large step is held until a call has met it (at most 30 s):
    // on a loaded machine the loaders may still be finishing the medium step's waits.
    let steps = [("-1", 2.0), ("+0", 1.5), ("-4", 5.0), ("+0", 1.5), ("-3600", 2.0), ("+0", 2.0)];
    for (step, seconds) in steps {
        clock.set(step);
        std::thread::sleep(Duration::from_secs_f64(seconds));
        let held_since = std::time::Instant::now();
        while step == "-3600" && refused.load(Ordering::Relaxed) == 0 && held_since.elapsed().as_secs() < 30 {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    stop.store(true, Ordering::Relaxed);
    let results: Vec<LoaderResult> = loaders.into_iter().map(|l| l.join().unwrap()).collect();

    let mut all = Vec::new();
    let mut refusals = Vec::new();
    for (ids, refused) in results {
        if let Some(w) = ids.windows(2).find(|w| w[0] >= w[1]) {
            panic!("a connection's IDs went back: {} then {}", w[0], w[1]);
        }
        all.extend(ids);
        refusals.extend(refused);
    }
    let issued = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), issued, "duplicate IDs");
    assert!(issued >= 10_000, "only {issued} IDs");

    // The large step was refused, and only as the clock policy says.
    assert!(!refusals.is_empty(), "the 1 h step back was not refused");
    for (code, message) in &refusals {
        assert_eq!(code, "55000", "{message}");
        assert!(
            message.starts_with("shard 1 would run ") && message.ends_with(" ms ahead of the wall clock"),
            "{message}"
        );
    }
    // The server saw the steps, waited for the medium one, and stayed within the lead bound.
    let row = cluster
        .connect()
        .query_one(
            "SELECT clock_regressions, waits, wait_ms, lead_ms FROM snowflake_stats() WHERE shard = 1",
            &[],
        )
        .unwrap();
    let (regressions, waits, wait_ms, lead_ms): (i64, i64, i64, i64) =
        (row.get(0), row.get(1), row.get(2), row.get(3));
    assert!(regressions >= 3, "{regressions} clock regressions counted");
    assert!(waits >= 1 && wait_ms >= 1000, "{waits} waits, {wait_ms} ms, {regressions} regressions");
    assert!(lead_ms <= 2000, "lead {lead_ms} ms");
    println!(
        "clock steps: {issued} IDs from 4 connections through steps of 1 s, 4 s and 1 h back; \
         {} refusals (55000), {waits} waits ({wait_ms} ms), {regressions} regressions seen, 0 duplicates",
        refusals.len()
    );
}
