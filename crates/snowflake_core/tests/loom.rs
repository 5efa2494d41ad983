//! Model checks of the generator's protocol (`src/generator.rs`) with loom: every interleaving
//! of a few threads, and every value a load may return under the C11 memory model as loom
//! models it (a Relaxed or Acquire load may read a store that is not the latest one).
//!
//! Each model runs the generator's own code (its atomics are loom's under `cfg(loom)`, see
//! `src/sync.rs`) with a fake clock per thread and a layout without sequence bits, where a
//! counter is its time part and the time parts are small numbers. The worker's durable record
//! is a value the worker thread keeps and hands back at the end: it records a ceiling before
//! publishing it (a raise), or after publishing it (a lowering, from when the record holds).
//! After every thread has finished, each model checks what a crash at that moment would rely on:
//! * no two claims returned the same ID;
//! * every ID issued lies at or above the floor in force (a promotion's: nothing below it may
//!   be issued once the ceiling above it is seen);
//! * every ID issued lies below the ceiling recorded last, the one a restart would resume at;
//!   a model whose worker lowers the ceiling ends with that lowering, or with its restoring;
//! * an advance (`snowflake_advance`) reported covered lies below that ceiling too, and so does
//!   the floor an observation (`snowflake_observe`) reported covered raised; a claim that
//!   starts after the observation issues above the observed ID.
//!
//! Run in a target directory of its own (`CARGO_TARGET_DIR`), so that the normal build is not
//! rebuilt; with at most 3 preemptions per execution it takes under a minute on two cores:
//!
//!   RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 cargo test -p snowflake_core --release --test loom

#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use snowflake_core::generator::{self, Claim, Clock, ClockPolicy, NoKeeper, Reservation, ShardSlot};
use snowflake_core::horizon::{self, Holder, PendingSlot, PendingSlots};
use snowflake_core::layout::Layout;
use snowflake_core::sync::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;

/// Epoch 0 and no sequence bits: a counter is its time part, one ID per millisecond.
const LAYOUT: Layout = Layout::new(0, 16, 0);
/// Calls never wait for the clock, and for the worker at most once (1 ms on their clock, then
/// they look again), which keeps the models small.
const POLICY: ClockPolicy = ClockPolicy { max_lead_ms: 10, max_wait_ms: 0, max_reservation_wait_ms: 1 };
/// The worker's `snowflake_id.reserve_ms`.
const RESERVE_MS: u64 = 5;

/// A clock that reads `now` (Unix ms, so time parts too) until slept on.
struct FakeClock(i64);

impl Clock for FakeClock {
    fn now_unix_ms(&mut self) -> i64 {
        self.0
    }
    fn sleep_ms(&mut self, ms: u64) {
        self.0 += ms as i64;
    }
}

/// One server's shared memory: three shards, the reservation, and the pending slots of two
/// backends with one bit word each (`claim`'s calls on shard 0 are backend 0's, those on shard
/// 1 backend 1's, each with a holder of its own; `claim_with` is given the holder).
struct Server {
    shards: [ShardSlot; SHARDS],
    reservation: Reservation,
    pending: [PendingSlot; 2],
    bits: [AtomicU64; 2],
}

const SHARDS: usize = 3;

impl Server {
    /// A server whose reservation is `floor..ceiling`, with nothing issued yet.
    fn new(floor: u64, ceiling: u64) -> Arc<Server> {
        let server = Server {
            shards: Default::default(),
            reservation: Reservation::default(),
            pending: Default::default(),
            bits: Default::default(),
        };
        server.reservation.floor.store(floor, Relaxed);
        server.reservation.ceiling.store(ceiling, Relaxed);
        Arc::new(server)
    }

    /// One call of `count` IDs on `shard` with the clock at `now`: the run it was given, if any.
    fn claim(&self, shard: usize, now: u64, count: u64) -> Option<(usize, Claim)> {
        self.claim_with(&self.holder(shard), shard, now, count)
    }

    /// A holder of backend `backend`'s slot: a process of its own (the backend, or one of its
    /// parallel workers), in the thread that makes its calls.
    fn holder(&self, backend: usize) -> Holder<'_> {
        self.slots().holder(backend).unwrap()
    }

    /// A call of `holder`'s process.
    fn claim_with(&self, holder: &Holder, shard: usize, now: u64, count: u64) -> Option<(usize, Claim)> {
        let mut clock = FakeClock(now as i64);
        let claimed = generator::claim(
            &self.shards[shard],
            &self.reservation,
            holder.pending(shard as u32),
            count,
            &LAYOUT,
            POLICY,
            &mut clock,
            &mut NoKeeper,
        );
        claimed.ok().map(|claim| (shard, claim))
    }

    fn slots(&self) -> PendingSlots<'_> {
        PendingSlots::new(&self.pending, &self.bits, SHARDS as u32)
    }

    /// The horizon of `shard` (`None`: of every shard) with the clock at `now`.
    fn horizon(&self, now: u64, shard: Option<u32>) -> u64 {
        horizon::compute(now, &self.reservation, &self.slots(), shard).of_shard
    }

    /// The end of backend `backend`'s transaction, in its thread.
    fn end(&self, backend: usize, holder: &Holder) {
        self.slots().release(backend);
        holder.forget();
    }

    /// The worker's renewal (`renew` in the extension) with its clock at `now`: records the
    /// ceiling `next_ceiling` asks for, then publishes it. Returns the ceiling recorded.
    fn renew(&self, now: u64) -> Option<u64> {
        let ceiling =
            generator::next_ceiling(now, &self.reservation, &LAYOUT, RESERVE_MS, POLICY.max_lead_ms, 0)?;
        self.reservation.publish_ceiling(ceiling);
        Some(ceiling)
    }
}

/// A call's thread: the runs of IDs it was given.
type Call = Box<dyn FnOnce(&Server) -> Vec<(usize, Claim)> + Send>;

/// Runs `calls` in threads of their own beside the worker's `worker` (on the model's thread),
/// and returns what the worker returned and every run of IDs issued.
fn run<W>(server: &Arc<Server>, worker: W, calls: Vec<Call>) -> (Option<u64>, Vec<(usize, Claim)>)
where
    W: FnOnce(&Server) -> Option<u64>,
{
    let threads: Vec<_> = calls
        .into_iter()
        .map(|call| {
            let server = server.clone();
            thread::spawn(move || call(&server))
        })
        .collect();
    let recorded = worker(server);
    let issued = threads.into_iter().flat_map(|thread| thread.join().unwrap()).collect();
    (recorded, issued)
}

/// A reader's thread (taking horizons) beside the model's.
fn reader<T: Send + 'static>(
    server: &Arc<Server>,
    read: impl FnOnce(&Server) -> T + Send + 'static,
) -> thread::JoinHandle<T> {
    let server = server.clone();
    thread::spawn(move || read(&server))
}

/// No two runs share an ID, none lies below `floor`, and every one lies below `ceiling`.
fn check(issued: &[(usize, Claim)], floor: u64, ceiling: u64) {
    for (i, (shard, claim)) in issued.iter().enumerate() {
        let (first, last) = (LAYOUT.counter_time_part(claim.first), LAYOUT.counter_time_part(claim.last));
        assert!(first >= floor, "shard {shard} issued time part {first}, below the floor {floor} in force");
        assert!(
            last < ceiling,
            "shard {shard} issued time part {last}, at or above the recorded ceiling {ceiling}"
        );
        for (other_shard, other) in &issued[i + 1..] {
            let apart = other.last < claim.first || claim.last < other.first;
            assert!(shard != other_shard || apart, "shard {shard} issued {claim:?} and {other:?}");
        }
    }
}

/// Two calls on one shard, each needing the millisecond the ceiling stops at, race the worker
/// raising it (`next_ceiling`, recorded, then `publish_ceiling`).
#[test]
fn claims_racing_a_ceiling_raise() {
    loom::model(|| {
        let server = Server::new(0, 100);
        let (recorded, issued) = run(
            &server,
            |server| server.renew(99),
            vec![
                Box::new(|server| server.claim(0, 98, 3).into_iter().collect()),
                Box::new(|server| server.claim(0, 99, 2).into_iter().collect()),
            ],
        );
        let recorded = recorded.expect("the ceiling is within half the headroom of the clock");
        check(&issued, 0, recorded);
    });
}

/// The clock jumped ahead to 150 and came back to 100 (the worker's reading); the ceiling left
/// at 200 is lowered to 105. A call that read the jumped clock claims at 150 on one shard, one
/// just above the lower ceiling on the other: either the worker sees their counters and keeps
/// the ceiling, or the calls see the lower ceiling and drop what they claimed.
#[test]
fn claims_racing_a_lowering() {
    loom::model(|| {
        let server = Server::new(0, 200);
        let (lowered, issued) = run(
            &server,
            |server| {
                let shards = &server.shards;
                generator::lower_ceiling(
                    100,
                    &server.reservation,
                    shards,
                    &LAYOUT,
                    RESERVE_MS,
                    POLICY.max_lead_ms,
                )
            },
            vec![
                Box::new(|server| server.claim(0, 150, 1).into_iter().collect()),
                Box::new(|server| server.claim(1, 106, 1).into_iter().collect()),
            ],
        );
        if let Some(lowered) = lowered {
            assert_eq!(lowered, 105);
        }
        check(&issued, 0, lowered.unwrap_or(200));
    });
}

/// A standby promoted: floor and ceiling stood at the replayed 50; the worker records the
/// promotion guard 100 and resumes there (`resume_at`), then raises the ceiling above it. Calls
/// whose clock reads 98 and 99 must never issue below 100, whichever ceiling they see.
#[test]
fn claims_racing_a_promotion() {
    loom::model(|| {
        let server = Server::new(50, 50);
        let (recorded, issued) = run(
            &server,
            |server| {
                server.reservation.resume_at(100);
                server.renew(99)
            },
            vec![
                Box::new(|server| server.claim(0, 98, 1).into_iter().collect()),
                Box::new(|server| server.claim(1, 99, 1).into_iter().collect()),
            ],
        );
        let recorded = recorded.expect("the clock is within half the headroom of the guard");
        check(&issued, 100, recorded);
    });
}

/// A standby promoted after its old primary's clean stop: the replay left floor and ceiling at
/// 110 (the last ceiling 104, raised to the bound for WAL that might not have arrived), recorded;
/// the worker brings the floor down to where the old primary stopped (`resume_after_clean_stop`,
/// 104: every old ID lies below it) while calls whose clocks read 100 and 103 claim. Whichever
/// floor they see, nothing is issued below 104 or at or above the recorded 110.
#[test]
fn claims_racing_a_clean_switchover() {
    loom::model(|| {
        let server = Server::new(110, 110);
        server.reservation.publish_ceiling(110);
        let (_, issued) = run(
            &server,
            |server| {
                server.reservation.resume_after_clean_stop(104);
                None
            },
            vec![
                Box::new(|server| server.claim(0, 100, 1).into_iter().collect()),
                Box::new(|server| server.claim(1, 103, 2).into_iter().collect()),
            ],
        );
        check(&issued, 104, 110);
    });
}

/// `snowflake_advance` moves shard 0 (last issued at 90) to start at 108, with the ceiling at
/// 200, while the worker lowers the ceiling to 105 (the clock jumped ahead and came back) and a
/// call claims on the same shard. An advance reported as covered must stay covered: a restart
/// at the ceiling recorded last resumes at or above 108.
#[test]
fn advance_racing_a_lowering() {
    loom::model(|| {
        let server = Server::new(0, 200);
        server.shards[0].last_issued.store(LAYOUT.counter_at(90), Relaxed);
        let first_allowed = LAYOUT.counter_at(108);
        let advancer = {
            let server = server.clone();
            thread::spawn(move || {
                // As the extension's `snowflake_advance` does, once the worker has passed it.
                let time_part = generator::check_advance(first_allowed, &LAYOUT, POLICY, 100).unwrap();
                let reservation = &server.reservation;
                reservation.ask_for(time_part, &mut NoKeeper, 0);
                reservation.ceiling.load(Relaxed) > time_part
                    && generator::advance(&server.shards[0], reservation, first_allowed, &LAYOUT)
            })
        };
        let claimer = {
            let server = server.clone();
            thread::spawn(move || server.claim(0, 100, 1).into_iter().collect::<Vec<_>>())
        };
        let shards = &server.shards;
        let lowered = generator::lower_ceiling(
            100,
            &server.reservation,
            shards,
            &LAYOUT,
            RESERVE_MS,
            POLICY.max_lead_ms,
        );
        let covered = advancer.join().unwrap();
        let issued = claimer.join().unwrap();
        let recorded = lowered.unwrap_or(200);
        assert!(
            !covered || LAYOUT.counter_at(recorded) >= first_allowed,
            "the advance to {first_allowed} was reported covered, but the ceiling recorded last is {recorded}: \
             a restart would resume below it"
        );
        check(&issued, 0, recorded);
    });
}

/// `snowflake_observe` raises the floor of every shard to 108 (an ID of time part 107 seen
/// from another server), with the ceiling at 200, while the worker lowers the ceiling to 105
/// (the clock jumped ahead and came back) and a call claims on shard 0. An observation
/// reported as covered must stay covered: a restart at the ceiling recorded last resumes at or
/// above 108. And a claim that starts after the observation returned, on any shard, issues
/// above 107.
#[test]
fn an_observation_racing_a_lowering() {
    loom::model(|| {
        let server = Server::new(0, 200);
        server.shards[0].last_issued.store(LAYOUT.counter_at(90), Relaxed);
        let observer = {
            let server = server.clone();
            thread::spawn(move || {
                // As the extension's `snowflake_observe` does, once the worker has passed it.
                let floor = generator::check_observe(107, &LAYOUT, POLICY, 100).unwrap();
                let reservation = &server.reservation;
                reservation.ask_for(floor, &mut NoKeeper, 0);
                let covered =
                    reservation.ceiling.load(Relaxed) > floor && generator::observe(reservation, floor);
                // The same backend's next call, on another shard.
                (covered, server.claim(1, 100, 1))
            })
        };
        let claimer = {
            let server = server.clone();
            thread::spawn(move || server.claim(0, 100, 1).into_iter().collect::<Vec<_>>())
        };
        let lowered = generator::lower_ceiling(
            100,
            &server.reservation,
            &server.shards,
            &LAYOUT,
            RESERVE_MS,
            POLICY.max_lead_ms,
        );
        let (covered, after) = observer.join().unwrap();
        let issued = claimer.join().unwrap();
        let recorded = lowered.unwrap_or(200);
        assert!(
            !covered || recorded >= 108,
            "the observation was reported covered, but the ceiling recorded last is {recorded}: a restart \
             would resume below the floor it raised"
        );
        // (Not covered, the extension waits for the worker and observes again before it returns.)
        if let (true, Some((_, claim))) = (covered, after) {
            assert!(LAYOUT.counter_time_part(claim.first) > 107, "{claim:?} issued after the observation");
        }
        check(&issued, 0, recorded);
    });
}

/// A hot standby replays the ceilings its primary records (`Reservation::replay`: floor and
/// ceiling to the same value), 100 and then 104, over the 50 replayed before. It has no
/// reservation of its own: calls on it, with the clock at 98 and 99, must issue nothing.
/// Raises only: a replayed lower ceiling (after the primary's `lower_ceiling`) moves the floor
/// down too, and a call that reads the ceiling before it and the floor after it issues below
/// the old ceiling; replaying 80 after 100 here fails. That case is still open.
#[test]
fn claims_on_a_standby_racing_replayed_raises() {
    loom::model(|| {
        let server = Server::new(50, 50);
        let (_, issued) = run(
            &server,
            |server| {
                server.reservation.replay(100);
                server.reservation.replay(104);
                None
            },
            vec![
                Box::new(|server| server.claim(0, 98, 1).into_iter().collect()),
                Box::new(|server| server.claim(1, 99, 1).into_iter().collect()),
            ],
        );
        assert!(issued.is_empty(), "a standby issued {issued:?}");
    });
}

/// Two threads claim on one shard, twice each, one with a clock that steps back: no ID twice,
/// and each thread's IDs increase.
#[test]
fn two_claims_on_one_shard() {
    fn twice(
        server: &Server,
        (now, count): (u64, u64),
        (then, count_then): (u64, u64),
    ) -> Vec<(usize, Claim)> {
        let issued: Vec<_> =
            [server.claim(0, now, count), server.claim(0, then, count_then)].into_iter().flatten().collect();
        assert!(issued.len() < 2 || issued[0].1.last < issued[1].1.first, "not increasing: {issued:?}");
        issued
    }
    loom::model(|| {
        let server = Server::new(0, 1000);
        let (_, issued) = run(
            &server,
            |_| None,
            vec![
                Box::new(|server| twice(server, (100, 1), (100, 2))),
                Box::new(|server| twice(server, (101, 2), (99, 1))),
            ],
        );
        check(&issued, 0, 1000);
    });
}

/// A reader takes the horizon with its clock at 100 while two backends claim with clocks that
/// read 98 and 97, backend 0 twice (the second claim finds its slot already set and stores
/// nothing). Neither transaction ends: none of their IDs may lie below the horizon, which
/// either saw their slots or raised the floor before their claims looked at it.
#[test]
fn a_claim_racing_a_horizon_is_covered() {
    loom::model(|| {
        let server = Server::new(0, 1000);
        let reader = reader(&server, |server| server.horizon(100, None));
        let (_, issued) = run(
            &server,
            |_| None,
            vec![
                Box::new(|server| {
                    let holder = server.holder(0);
                    [server.claim_with(&holder, 0, 98, 1), server.claim_with(&holder, 0, 99, 1)]
                        .into_iter()
                        .flatten()
                        .collect()
                }),
                Box::new(|server| server.claim(1, 97, 1).into_iter().collect()),
            ],
        );
        let horizon = reader.join().unwrap();
        for (shard, claim) in &issued {
            let time_part = LAYOUT.counter_time_part(claim.first);
            assert!(
                time_part >= horizon,
                "backend {shard} issued time part {time_part} in an open transaction, below the horizon {horizon}"
            );
        }
        check(&issued, 0, 1000);
    });
}

/// Backend 0 claims, its transaction ends (`release`), and it claims again with its clock
/// stepped back, while a reader takes the horizon: the second transaction's ID may not lie
/// below it.
#[test]
fn a_transaction_after_a_release_is_covered_again() {
    loom::model(|| {
        let server = Server::new(0, 1000);
        let reader = reader(&server, |server| server.horizon(100, None));
        let claimer = {
            let server = server.clone();
            thread::spawn(move || {
                let holder = server.holder(0);
                server.claim_with(&holder, 0, 99, 1);
                server.end(0, &holder);
                server.claim_with(&holder, 0, 90, 1)
            })
        };
        let horizon = reader.join().unwrap();
        if let Some((_, claim)) = claimer.join().unwrap() {
            let time_part = LAYOUT.counter_time_part(claim.first);
            assert!(
                time_part >= horizon,
                "issued time part {time_part} in an open transaction, below {horizon}"
            );
        }
    });
}

/// Asserts that every ID of `issued` lies at or above the horizon of its shard, `of_shard`.
fn check_covered(issued: &[(usize, Claim)], of_shard: impl Fn(usize) -> u64) {
    for (shard, claim) in issued {
        let (time_part, horizon) = (LAYOUT.counter_time_part(claim.first), of_shard(*shard));
        assert!(
            time_part >= horizon,
            "shard {shard} issued time part {time_part} in an open transaction, below its horizon {horizon}"
        );
    }
}

/// Backend 0 claims shard 0 with its clock at 98 while a reader takes the horizon of shard 1
/// and then of shard 0 with its clock at 100: shard 1's is never held by backend 0's
/// transaction (it is the clock's, 100; held, it would be 98), and shard 0's is never above
/// the ID. The same with the horizon of shard 0 first.
#[test]
fn a_claim_holds_only_the_horizon_of_its_shard() {
    for other_first in [true, false] {
        loom::model(move || {
            let server = Server::new(0, 1000);
            let reader = reader(&server, move |server| {
                if other_first {
                    (server.horizon(100, Some(1)), server.horizon(100, Some(0)))
                } else {
                    let of_0 = server.horizon(100, Some(0));
                    (server.horizon(100, Some(1)), of_0)
                }
            });
            let (_, issued) =
                run(&server, |_| None, vec![Box::new(|server| server.claim(0, 98, 1).into_iter().collect())]);
            let (of_1, of_0) = reader.join().unwrap();
            assert_eq!(of_1, 100, "shard 1's horizon was held by a transaction of shard 0");
            check_covered(&issued, |_| of_0);
        });
    }
}

/// Backend 0 and its parallel worker (a thread of its own, sharing its slot) claim shards 0
/// and 2 at once, backend 0 twice (the second time it marks shard 2 too, the worker's shard,
/// after its own): the mark goes from no shard to one shard to several, by whichever comes
/// first. A reader takes the horizons of shards 1, 2 and 0: shard 1's is never held, and no ID
/// lies below its shard's horizon.
#[test]
fn a_transaction_of_several_shards_holds_each_and_no_other() {
    loom::model(|| {
        let server = Server::new(0, 1000);
        let reader = reader(&server, |server| {
            let of_1 = server.horizon(100, Some(1));
            let of_2 = server.horizon(100, Some(2));
            (of_1, of_2, server.horizon(100, Some(0)))
        });
        let (_, issued) = run(
            &server,
            |_| None,
            vec![
                Box::new(|server| {
                    let holder = server.holder(0);
                    [server.claim_with(&holder, 0, 98, 1), server.claim_with(&holder, 2, 99, 1)]
                        .into_iter()
                        .flatten()
                        .collect()
                }),
                Box::new(|server| server.claim_with(&server.holder(0), 2, 97, 1).into_iter().collect()),
            ],
        );
        let (of_1, of_2, of_0) = reader.join().unwrap();
        assert_eq!(of_1, 100, "shard 1's horizon was held by a transaction of shards 0 and 2");
        check_covered(&issued, |shard| if shard == 0 { of_0 } else { of_2 });
        check(&issued, 0, 1000);
    });
}
