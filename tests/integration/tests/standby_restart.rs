//! A standby that restarts before it is promoted still resumes above every ID the old primary
//! issued, when only the reservation it replayed from the primary's WAL says how far that is:
//! the old primary ran with a longer lead than the standby's promotion guard covers, or its
//! clock ran ahead while it issued and was set back before it stopped. Each test makes the
//! standby's last replayed ceiling the one that matters, moves the standby's redo point past
//! its record (a checkpoint on both servers), restarts the standby (cleanly, or by a backend
//! killed with SIGKILL, after which the postmaster re-creates shared memory and recovers),
//! stops the old primary and promotes the standby.

use snowflake_id_integration::engine::unix_ms;
use snowflake_id_integration::{
    apply_settings, column, first_id_once_issuing, value, wait_until, Cluster, FakeClock, Pair, TABLE_T,
};

/// How a test restarts the standby before the promotion.
enum Restart {
    /// `pg_ctl stop -m fast`, then a start.
    Clean,
    /// A backend killed with SIGKILL: the postmaster ends every process, re-creates shared
    /// memory and runs recovery again from the last restartpoint.
    BackendKilled,
}

/// The primary runs with a lead bound of 20 s, set after the standby was made, the standby
/// with the default 2 s: the standby's promotion guard covers 2.75 s ahead of its clock, the
/// old primary's last IDs lie 15 s ahead.
fn primary_with_a_longer_lead_than_the_standby(name: &str, restart: Restart) {
    let pair = Pair::builder(name).start();
    // On the primary only: ALTER SYSTEM writes postgresql.auto.conf, which is not replicated.
    apply_settings(&mut pair.primary.connect(), &[("snowflake_id.max_lead_ms", "20s")]);
    let highest = issue_ahead(&pair, "15 s");
    promote_after_restart(pair, restart, highest);
}

#[test]
fn a_standby_restarted_before_promotion_resumes_above_a_primary_with_a_longer_lead() {
    primary_with_a_longer_lead_than_the_standby("restart-lead", Restart::Clean);
}

#[test]
fn a_standby_crash_restarted_before_promotion_resumes_above_a_primary_with_a_longer_lead() {
    primary_with_a_longer_lead_than_the_standby("crash-lead", Restart::BackendKilled);
}

/// Both servers have the same settings, but the primary's clock ran 10 s fast while it issued
/// IDs (libfaketime), and was set right before it stopped: the clocks agree at the failover,
/// and the IDs lie 11.5 s ahead of the standby's clock, past its guard.
#[test]
fn a_standby_restarted_before_promotion_resumes_above_a_primary_whose_clock_was_set_back() {
    let mut primary = Cluster::builder("stepped-back-primary").create();
    let clock = FakeClock::of(&primary);
    clock.set("+10");
    clock.start(&mut primary);
    // The worker the postmaster forks as it starts does not read the faked clock (see
    // clock_glitch.rs); one started later does.
    primary.restart_reservation_worker();
    primary.connect().batch_execute(TABLE_T).unwrap();
    let pair = Pair::of(primary, "stepped-back");
    // Within the primary's lead bound of 2 s (its clock_timestamp() is the fast one).
    let highest = issue_ahead(&pair, "1.5 s");
    clock.set("+0");
    promote_after_restart(pair, Restart::Clean, highest);
}

/// Finding F1 of the fault campaign (docs/reliability.md). The pair runs on one clock
/// (libfaketime), 15 s fast: the primary issues there, the standby replays there. The standby
/// stops; the primary goes on issuing, under ceilings whose records the standby never gets.
/// Then the clock is set right, the primary dies, and the standby starts and is promoted: the
/// guard on its clock now lies 15 s short of the old primary's last IDs, and the last ceiling
/// it replayed lies below them too (they came 1.5 s later). It must resume above them by the
/// highest clock reading it took while it replayed. A skew of 3 s gives the stop of the
/// standby time on a loaded machine; without the readings the guard would still fall 9.5 s
/// short.
#[test]
fn a_standby_promoted_after_the_clock_ran_fast_and_was_set_back_resumes_above_what_it_never_received() {
    let (Pair { mut primary, mut standby }, clock) =
        Pair::builder("fast-clock").settings(&["snowflake_id.max_clock_skew_ms = '3s'"]).start_on_one_clock();

    clock.set("+15");
    wait_until("the standby replayed a ceiling of the fast clock", || {
        standby.recorded_ceiling_unix_ms() > unix_ms() + 14_000
    });
    standby.stop("fast");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let highest: i64 = value(
        &mut primary.connect(),
        "WITH new AS (INSERT INTO t SELECT FROM generate_series(1, 1000) RETURNING id) SELECT max(id) FROM new",
        &[],
    );
    clock.set("+0");
    primary.stop("immediate");
    clock.start(&mut standby);
    standby.promote();
    let mut client = standby.wait_until_accepting();
    let first = first_id_once_issuing(&mut client);
    assert!(
        first > highest,
        "the promoted standby issued {first}, {} ms below the old primary's {highest}",
        (highest - first) >> 22
    );
}

/// The other side of the readings: the pair's clock jumps 2 minutes ahead while nothing is
/// issued and comes back; the primary lowers its ceiling (clock_glitch.rs), which says that
/// nothing was issued up there, and the standby drops its reading of the jump with it: a
/// promotion then issues at once, not 2 minutes later.
///
/// Only readings taken more than `max_clock_skew_ms` before the primary wrote the lowering go
/// (F7: one taken later may be of a second jump the primary issued under): the standby's last
/// reading of the jump comes moments before the set-back. The two servers read one clock
/// here, so the skew is 0; with the default 250 ms the reading stays, and a promotion waits
/// for the clock to pass the jump.
#[test]
fn a_standby_drops_its_reading_of_a_clock_jump_when_the_primary_lowers_its_ceiling() {
    // Replication's own timeouts read the wall clock: a jump longer than them ends the
    // standby's connection, and its reconnection then waits for the clock to come back past
    // the jump. Off here, so that the standby stays connected through the jump.
    let (Pair { mut primary, standby }, clock) = Pair::builder("jump")
        .settings(&[
            "wal_receiver_timeout = 0",
            "wal_sender_timeout = 0",
            "snowflake_id.max_clock_skew_ms = 0",
        ])
        .start_on_one_clock();

    clock.set("+120");
    // The primary reserves up there first, then the standby replays that: its own reading of
    // the jump alone (taken as it replays an older record) would pass the second wait too.
    wait_until("the primary reserved at the jump", || {
        primary.recorded_ceiling_unix_ms() > unix_ms() + 100_000
    });
    let lsn: String = value(&mut primary.connect(), "SELECT pg_current_wal_insert_lsn()::text", &[]);
    primary.connect().batch_execute("CREATE TABLE writes (at timestamptz)").unwrap();
    standby.wait_for_replay(&lsn);
    clock.set("+0");
    // A commit that wrote WAL flushes the primary's WAL, ceilings included: its WAL writer,
    // which would flush them otherwise, waits until its clock has passed its last flush again.
    let mut client = primary.connect();
    wait_until("the standby followed the primary's lowered ceiling", || {
        client.batch_execute("INSERT INTO writes VALUES (clock_timestamp())").unwrap();
        standby.recorded_ceiling_unix_ms() < unix_ms() + 10_000
    });
    drop(client);
    primary.stop("fast");
    standby.promote();
    let mut client = standby.wait_until_accepting();
    let issued = client.query_one("INSERT INTO t DEFAULT VALUES RETURNING id", &[]);
    assert!(issued.is_ok(), "the promoted standby refused to issue: {issued:?}");
}

/// Moves shard 1 of `primary` `ahead` of its clock (`snowflake_advance`) and issues an ID
/// there, which it returns, once `standby` has replayed it all.
///
/// Right after the standby has rewritten its record file: a standby that records what it
/// replays only from time to time (once a second, in 0.6.0) then has the ceiling in memory
/// and not in the file, which is what the restart below must not lose.
fn issue_ahead(Pair { primary, standby }: &Pair, ahead: &str) -> i64 {
    let before = standby.recorded_ceiling_unix_ms();
    wait_until("the standby rewrote its reservation record", || standby.recorded_ceiling_unix_ms() != before);
    let issue = format!(
        "WITH advanced AS (SELECT snowflake_advance(1, snowflake_compose(clock_timestamp() + interval '{ahead}', 0, 0)))
         INSERT INTO t SELECT snowflake_nextval(1) FROM advanced RETURNING id, pg_current_wal_lsn()::text"
    );
    let row = primary.connect().query_one(&issue, &[]).unwrap();
    standby.wait_for_replay(row.get(1));
    row.get(0)
}

/// Checkpoints both servers (the standby's restartpoint moves its redo point past the
/// reservation record), restarts the standby as told, stops the old primary, promotes the
/// standby, and checks that its new IDs of shard 1 are all above `highest`. Calls are refused
/// (55000) until the clock is within the standby's lead bound of where the shards resume.
fn promote_after_restart(Pair { mut primary, mut standby }: Pair, restart: Restart, highest: i64) {
    let mut client = primary.connect();
    client.batch_execute("CHECKPOINT").unwrap();
    let lsn: String = value(&mut client, "SELECT pg_current_wal_lsn()::text", &[]);
    drop(client);
    standby.wait_for_replay(&lsn);
    standby.connect().batch_execute("CHECKPOINT").unwrap();
    match restart {
        Restart::Clean => {
            standby.stop("fast");
            standby.start_with(&[]);
        }
        Restart::BackendKilled => {
            // Connected while it is killed: a backend that has exited cleanly resets nothing.
            let mut victim = standby.connect();
            let pid: i32 = value(&mut victim, "SELECT pg_backend_pid()", &[]);
            standby.kill_backend(pid as u32);
            drop(victim);
        }
    }
    standby.wait_for_replay(&lsn);
    primary.stop("fast");
    standby.promote();

    let mut client = standby.wait_until_accepting();
    let first = first_id_once_issuing(&mut client);
    let insert = "INSERT INTO t SELECT snowflake_nextval(1) FROM generate_series(1, 1000) RETURNING id";
    let lowest = column(&mut client, insert, &[]).into_iter().chain([first]).min().unwrap();
    // The time part starts at bit 22 of the default layout.
    assert!(
        lowest > highest,
        "the promoted standby issued {lowest}, {} ms below the old primary's {highest}",
        (highest - lowest) >> 22
    );
}
