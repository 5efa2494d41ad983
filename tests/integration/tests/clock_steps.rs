//! The wall clock stepping back while the server runs (faked with libfaketime, changed while
//! loaders issue IDs): a small step (1 s) is absorbed by running ahead, a medium one (4 s) by waiting,
//! a large one refused at once with SQLSTATE 55000. Never a duplicate, and every connection's
//! IDs keep increasing through all of it.

use postgres::Client;
use snowflake_id_integration::engine::{Op, Route, Transaction, Workload, Writer};
use snowflake_id_integration::{assert_unique_and_increasing, Cluster, FakeClock, Pick};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A loader, run by the workload engine: 200 bare IDs of shard 1 per call, on one connection,
/// until told to stop; a refused call is recorded (its SQLSTATE and message) and the next
/// follows 50 ms later.
struct Loading {
    stop: Arc<AtomicBool>,
    refused: Arc<AtomicUsize>,
    config: postgres::Config,
    started: Instant,
}

impl Workload for Loading {
    type Kind = ();
    type Hold<'a> = ();

    fn writing(&self) -> bool {
        !self.stop.load(Ordering::Relaxed)
    }

    fn origin(&self) -> Instant {
        self.started
    }

    fn kind(&self, _pick: &mut Pick) {}

    fn route(&self, _kind: &(), _tag: i64) -> Option<(Route, i32, ())> {
        Some((Route::to("server", self.config.clone()), 1, ()))
    }

    fn run(
        &self,
        client: &mut Client,
        _: &mut Pick,
        op: &mut Op<()>,
        _: &mut Transaction,
    ) -> Result<(), postgres::Error> {
        let rows = client.query("SELECT snowflake_nextval(1) FROM generate_series(1, 200)", &[])?;
        op.bare = rows.iter().map(|row| row.get(0)).collect();
        Ok(())
    }

    fn recorded(&self, op: &mut Op<()>, _client: Option<&mut Client>) {
        if !op.succeeded() {
            self.refused.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[test]
fn clock_steps_back_while_running() {
    // Up to 5 s of waiting, so that the medium step (4 s back, 2 s past the lead bound)
    // is waited out rather than refused.
    let mut cluster = Cluster::builder("clock-steps").settings(&["snowflake_id.max_wait_ms = 5s"]).create();
    let clock = FakeClock::of(&cluster);
    clock.start(&mut cluster);
    cluster.connect().batch_execute("CREATE EXTENSION snowflake_id").unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let refused = Arc::new(AtomicUsize::new(0));
    let loaders: Vec<_> = (0..4)
        .map(|number| {
            let loading = Loading {
                stop: stop.clone(),
                refused: refused.clone(),
                config: cluster.config(),
                started: Instant::now(),
            };
            std::thread::spawn(move || Writer::new(loading, number, Pick::new(number as u64)).run())
        })
        .collect();

    // Offsets from the real time; each step back starts from the real time ("+0"), so its
    // size is the whole offset. The large step is held until a call has met it (at most 30 s):
    // on a loaded machine the loaders may still be finishing the medium step's waits.
    let steps = [("-1", 2.0), ("+0", 1.5), ("-4", 5.0), ("+0", 1.5), ("-3600", 2.0), ("+0", 2.0)];
    for (step, seconds) in steps {
        clock.set(step);
        std::thread::sleep(Duration::from_secs_f64(seconds));
        let held_since = Instant::now();
        while step == "-3600" && refused.load(Ordering::Relaxed) == 0 && held_since.elapsed().as_secs() < 30 {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    stop.store(true, Ordering::Relaxed);
    let histories: Vec<Vec<Op<()>>> = loaders.into_iter().map(|loader| loader.join().unwrap()).collect();

    let streams: Vec<Vec<i64>> =
        histories.iter().map(|history| history.iter().flat_map(|op| op.bare.clone()).collect()).collect();
    let issued = assert_unique_and_increasing(&streams);
    assert!(issued >= 10_000, "only {issued} IDs");

    // The large step was refused, and only as the clock policy says.
    let refusals: Vec<&Op<()>> = histories.iter().flatten().filter(|op| !op.succeeded()).collect();
    assert!(!refusals.is_empty(), "the 1 h step back was not refused");
    for op in &refusals {
        let message = op.message.clone().unwrap_or_default();
        assert_eq!(op.error.as_deref(), Some("55000"), "{message}");
        assert!(
            message.starts_with("shard 1 would run ") && message.ends_with(" ms ahead of the wall clock"),
            "{message}"
        );
    }
    // The server saw the steps, waited for the medium one, and stayed within the lead bound.
    let stats = "SELECT clock_regressions, waits, wait_ms, lead_ms FROM snowflake_stats() WHERE shard = 1";
    let row = cluster.connect().query_one(stats, &[]).unwrap();
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
