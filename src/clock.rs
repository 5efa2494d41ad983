//! The wall clock, as the generator reads it inside a backend.

use crate::generator::{Clock, Reservation};
use std::time::{SystemTime, UNIX_EPOCH};

/// Wall-clock Unix milliseconds. `SystemTime::now` is `clock_gettime(CLOCK_REALTIME)`,
/// served by the vDSO on Linux: no system call. A clock before 1970 reads as negative.
#[inline]
pub fn wall_clock_unix_ms() -> i64 {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(since) => since.as_millis() as i64,
        Err(before) => -(before.duration().as_millis() as i64),
    }
}

/// The real clock, for one call. Sleeps in 1 ms steps and checks for interrupts between
/// them, so a waiting call still honours `statement_timeout`, cancel requests and shutdown.
/// It also notices when the clock reads earlier than this backend's previous reading.
#[derive(Default)]
pub struct WallClock {
    stepped_back: bool,
}

thread_local! {
    /// This backend's latest clock reading. A backend reads the clock in sequence, so a
    /// smaller reading is a real step back of the clock, not a race with another backend.
    static LATEST_READING: std::cell::Cell<i64> = const { std::cell::Cell::new(i64::MIN) };
}

impl WallClock {
    /// Whether a reading of this call went back in time.
    pub fn stepped_back(&self) -> bool {
        self.stepped_back
    }
}

impl Clock for WallClock {
    #[inline]
    fn now_unix_ms(&mut self) -> i64 {
        let now = wall_clock_unix_ms();
        let previous = LATEST_READING.replace(now);
        self.stepped_back |= now < previous;
        now
    }

    fn wake_worker(&mut self, reservation: &Reservation) {
        crate::reservation::wake_worker(reservation);
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
