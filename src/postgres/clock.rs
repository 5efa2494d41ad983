//! The wall clock, as the generator reads it inside a backend: the core's clock read, plus
//! sleeps that PostgreSQL can interrupt.

pub use snowflake_core::clock::wall_clock_unix_ms;
use snowflake_core::generator::{Clock, ShardSlot};
use std::sync::atomic::{AtomicI64, Ordering::Relaxed};

/// The real clock, for one call. Sleeps in 1 ms steps and checks for interrupts between
/// them, so a waiting call still honours `statement_timeout`, cancel requests and shutdown.
/// It also notices when the clock reads earlier than this backend's previous reading.
#[derive(Default)]
pub struct WallClock {
    stepped_back: bool,
}

/// This backend's latest clock reading. A backend reads the clock in sequence, so a smaller
/// reading is a real step back of the clock, not a race with another backend. A plain
/// process-wide static (a backend is one process, one thread): a `thread_local!` would cost a
/// `__tls_get_addr` call per read in a shared library.
static LATEST_READING: AtomicI64 = AtomicI64::new(i64::MIN);

impl WallClock {
    /// Counts, in the statistics of the shard the call claimed from, a reading of this call
    /// that went back in time (`snowflake_stats().clock_regressions`).
    #[inline]
    pub fn count_step_back(&self, slot: &ShardSlot) {
        if self.stepped_back {
            slot.clock_regressions.fetch_add(1, Relaxed);
        }
    }
}

impl Clock for WallClock {
    #[inline]
    fn now_unix_ms(&mut self) -> i64 {
        let now = wall_clock_unix_ms();
        // Load and store, not a locked swap: no other thread writes it.
        let previous = LATEST_READING.load(Relaxed);
        LATEST_READING.store(now, Relaxed);
        self.stepped_back |= now < previous;
        now
    }

    fn sleep_ms(&mut self, ms: u64) {
        for _ in 0..ms {
            pgrx::check_for_interrupts!();
            // SAFETY: a plain sleep, interruptible by signals.
            unsafe { pgrx::pg_sys::pg_usleep(1000) };
        }
        pgrx::check_for_interrupts!();
    }
}

/// The wall clock for a call that never sleeps: the fast path, which claims with
/// `max_wait_ms = 0` and leaves any waiting to the guarded path.
pub struct NoWaitClock(pub WallClock);

impl Clock for NoWaitClock {
    #[inline(always)]
    fn now_unix_ms(&mut self) -> i64 {
        self.0.now_unix_ms()
    }
    fn sleep_ms(&mut self, _ms: u64) {
        unreachable!("a claim with max_wait_ms = 0 never sleeps")
    }
}
