//! The atomics the generator's shared state is made of: std's in every normal build (the
//! extension's fields are plain `std::sync::atomic` words in shared memory), loom's under
//! `cfg(loom)`, where `tests/loom.rs` model-checks the protocol with the same generator code.
//!
//! Loom models `SeqCst` loads, stores and read-modify-writes only as `AcqRel` (its README,
//! "Unsupported features"): weaker than they are, so the handshakes that rely on the single
//! total order of `SeqCst` accesses would be reported broken when they are not. Each is a pair
//! of threads that write one word and then read the other (`lower_ceiling` against `claim` and
//! against `advance`), and the total order makes at least one of them read what the other
//! wrote. Loom does model `fence(SeqCst)`, which makes the same so. So under loom a `SeqCst`
//! access that comes right after another `SeqCst` access of the same thread (no access to
//! these words between) is preceded by a `SeqCst` fence. Weaken either access to `Acquire`
//! or `Relaxed` and the fence goes with it: that is how the models catch a handshake that no
//! longer holds. Two limits remain: loom's fence joins the views of the threads that pass one,
//! more than C11's does, so a model could in principle miss a bug that needs the total order
//! to be weaker than that; and two `SeqCst` accesses with another access between them are
//! still only `AcqRel` to loom (no handshake here has one between).

#[cfg(not(loom))]
pub use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

#[cfg(loom)]
pub use loom::sync::atomic::AtomicUsize;
#[cfg(loom)]
pub use loom_words::AtomicU64;
#[cfg(loom)]
pub use std::sync::atomic::Ordering;

#[cfg(loom)]
mod loom_words {
    use loom::sync::atomic::fence;
    use std::cell::Cell;
    use std::sync::atomic::Ordering::{self, SeqCst};

    loom::thread_local! {
        /// Whether this thread's last access to one of these words was `SeqCst`.
        static AFTER_SEQ_CST: Cell<bool> = Cell::new(false);
    }

    /// Before an access with these orderings (a CAS has two, one of which it will use): the
    /// fence that orders it after this thread's `SeqCst` access just before, if it may be one.
    fn before(orderings: &[Ordering]) {
        if orderings.contains(&SeqCst) && AFTER_SEQ_CST.with(Cell::get) {
            fence(SeqCst);
        }
    }

    /// After an access made with `ordering`.
    fn after(ordering: Ordering) {
        AFTER_SEQ_CST.with(|after| after.set(ordering == SeqCst));
    }

    /// Loom's `AtomicU64`, with a fence between two `SeqCst` accesses of a thread (see above).
    #[derive(Debug, Default)]
    pub struct AtomicU64(loom::sync::atomic::AtomicU64);

    impl AtomicU64 {
        pub fn new(value: u64) -> Self {
            AtomicU64(loom::sync::atomic::AtomicU64::new(value))
        }

        pub fn load(&self, order: Ordering) -> u64 {
            before(&[order]);
            let value = self.0.load(order);
            after(order);
            value
        }

        pub fn store(&self, value: u64, order: Ordering) {
            before(&[order]);
            self.0.store(value, order);
            after(order);
        }

        pub fn fetch_add(&self, value: u64, order: Ordering) -> u64 {
            before(&[order]);
            let previous = self.0.fetch_add(value, order);
            after(order);
            previous
        }

        pub fn fetch_max(&self, value: u64, order: Ordering) -> u64 {
            before(&[order]);
            let previous = self.0.fetch_max(value, order);
            after(order);
            previous
        }

        pub fn fetch_or(&self, value: u64, order: Ordering) -> u64 {
            before(&[order]);
            let previous = self.0.fetch_or(value, order);
            after(order);
            previous
        }

        pub fn fetch_min(&self, value: u64, order: Ordering) -> u64 {
            before(&[order]);
            let previous = self.0.fetch_min(value, order);
            after(order);
            previous
        }

        pub fn compare_exchange(
            &self,
            current: u64,
            new: u64,
            success: Ordering,
            failure: Ordering,
        ) -> Result<u64, u64> {
            before(&[success, failure]);
            let result = self.0.compare_exchange(current, new, success, failure);
            after(if result.is_ok() { success } else { failure });
            result
        }

        pub fn compare_exchange_weak(
            &self,
            current: u64,
            new: u64,
            success: Ordering,
            failure: Ordering,
        ) -> Result<u64, u64> {
            before(&[success, failure]);
            let result = self.0.compare_exchange_weak(current, new, success, failure);
            after(if result.is_ok() { success } else { failure });
            result
        }
    }
}
