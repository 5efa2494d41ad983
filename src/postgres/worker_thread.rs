//! The reservation worker's own threads (the lease's asking thread, the registry's): each
//! asks a network peer, so that the worker's loop, which renews the reservation and moves the
//! fence, never waits on one.
//!
//! Every signal is blocked in them: PostgreSQL's handlers (SIGHUP, SIGTERM, the latch's SIGURG
//! or SIGUSR1) must run in the worker's own thread. And they call nothing of PostgreSQL (no
//! palloc, no elog), only the socket API, the clock and shared memory's atomics.

/// Starts `run` on a thread named `name`, with every signal blocked in it.
pub fn spawn(name: &str, run: impl FnOnce() + Send + 'static) -> std::io::Result<()> {
    // SAFETY: sigset and pthread_sigmask on this thread's own mask, restored right after the
    // spawn; the new thread inherits the blocked mask.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut before: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut before);
        let spawned = std::thread::Builder::new().name(name.into()).spawn(run);
        libc::pthread_sigmask(libc::SIG_SETMASK, &before, std::ptr::null_mut());
        spawned.map(|_| ())
    }
}
