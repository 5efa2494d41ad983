//! The generator core alone, outside PostgreSQL: nanoseconds per ID of `generator::claim`
//! against the cost of the one clock read it cannot avoid. Plain `Instant` loops, median of
//! several runs; printed as `name<TAB>ns_per_op` lines for `scripts/bench.sh`.
//!
//!   cargo bench -p snowflake_core --bench generator      (SNOWFLAKE_BENCH_OPS=10000 for a quick check)

use snowflake_core::clock::wall_clock_unix_ms;
use snowflake_core::generator::{self, Clock, ClockPolicy, NoKeeper, Reservation, ShardSlot};
use snowflake_core::horizon::{Holder, Pending, PendingSlot};
use snowflake_core::layout::{Layout, DEFAULT_EPOCH_UNIX_MS};
use snowflake_core::sync::AtomicU64;
use std::hint::black_box;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

/// The real clock, read as the extension reads it; sleeping is never needed here (the
/// reservation is wide open and the lead bound generous).
struct SystemClock;

impl Clock for SystemClock {
    #[inline]
    fn now_unix_ms(&mut self) -> i64 {
        wall_clock_unix_ms()
    }
    fn sleep_ms(&mut self, ms: u64) {
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
}

const RUNS: usize = 7;

/// Operations per run: `SNOWFLAKE_BENCH_OPS`, by default 20 million.
fn ops_per_run() -> u64 {
    std::env::var("SNOWFLAKE_BENCH_OPS").ok().and_then(|ops| ops.parse().ok()).unwrap_or(20_000_000)
}

/// Median nanoseconds per operation over `RUNS` runs.
fn median_ns_per_op(mut run: impl FnMut(u64)) -> f64 {
    let ops = ops_per_run();
    let mut samples: Vec<f64> = (0..RUNS)
        .map(|_| {
            let start = Instant::now();
            run(ops);
            start.elapsed().as_nanos() as f64 / ops as f64
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    samples[RUNS / 2]
}

fn main() {
    let layout = Layout::new(DEFAULT_EPOCH_UNIX_MS, 10, 12);
    // A lead bound wide enough that 20 M IDs of one shard never wait: this measures the
    // instructions of a claim, not the 4,096-per-ms rate cap of a shard.
    let policy = ClockPolicy { max_lead_ms: 3_600_000, max_wait_ms: 1000, max_reservation_wait_ms: 3000 };
    let reservation = Reservation::default();
    reservation.ceiling.store(layout.max_time_part(), Relaxed);

    let clock_read = median_ns_per_op(|ops| {
        for _ in 0..ops {
            black_box(wall_clock_unix_ms());
        }
    });
    // One call of the extension's fast path: one ID, never waiting, with a backend's slot.
    let claim_one_id = |shard: &ShardSlot, pending: Pending| {
        let claim = generator::claim(
            shard,
            &reservation,
            pending,
            1,
            &layout,
            policy,
            &mut SystemClock,
            &mut NoKeeper,
        );
        black_box(claim.expect("claim refused"));
    };
    let claim_one = median_ns_per_op(|ops| {
        let (shard, backend) = (ShardSlot::default(), Backend::default());
        let holder = backend.holder();
        for _ in 0..ops {
            claim_one_id(&shard, holder.pending(0));
        }
    });
    let claim_two_threads = median_ns_per_op(|ops| {
        // Two threads on one shard: the cost per ID when every CAS can meet a rival.
        let shard = ShardSlot::default();
        std::thread::scope(|scope| {
            for _ in 0..2 {
                scope.spawn(|| {
                    // Each thread a backend of its own.
                    let backend = Backend::default();
                    let holder = backend.holder();
                    for _ in 0..ops / 2 {
                        claim_one_id(&shard, holder.pending(0));
                    }
                });
            }
        });
    });
    println!("clock_read\t{clock_read:.2}");
    println!("claim_one_thread\t{claim_one:.2}");
    println!("claim_two_threads_one_shard\t{claim_two_threads:.2}");
}

/// A backend's slot with one bit word.
#[derive(Default)]
struct Backend {
    slot: PendingSlot,
    bits: [AtomicU64; 1],
}

impl Backend {
    /// Its holder, for claims of shard 0.
    fn holder(&self) -> Holder<'_> {
        Holder::new(&self.slot, &self.bits)
    }
}
