//! The wall clock, as the generator reads it inside a backend.

use crate::generator::{Clock, Reservation};
use std::sync::atomic::{AtomicI64, Ordering::Relaxed};

/// Wall-clock Unix milliseconds: `clock_gettime(CLOCK_REALTIME)`, served by the vDSO on
/// Linux, with no system call. Called directly rather than through `SystemTime`, whose
/// `Duration` arithmetic costs as much again as the read. The fine clock, not
/// `CLOCK_REALTIME_COARSE` (a fifth of the cost, but 4 ms steps on common kernels): an ID's
/// time must never be earlier than the clock when it was issued, which `id >=
/// snowflake_min_id(<a time read before>)` and partition bounds rely on. A clock before 1970
/// reads as negative.
#[inline]
pub fn wall_clock_unix_ms() -> i64 {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: writes the current time into `now`; CLOCK_REALTIME always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut now) };
    // Floors also before 1970, where `tv_sec` is negative and `tv_nsec` still positive.
    now.tv_sec * 1000 + now.tv_nsec / 1_000_000
}

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
    /// Whether a reading of this call went back in time.
    pub fn stepped_back(&self) -> bool {
        self.stepped_back
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
