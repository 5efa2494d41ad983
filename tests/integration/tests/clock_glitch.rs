//! A clock that jumps an hour ahead for a few seconds and comes back (faked with libfaketime).
//! While it reads ahead, the worker reserves an hour ahead. With no ID issued meanwhile, the
//! worker moves the reservation back once the clock is back, so a restart issues at once.
//! With IDs issued at the jump, the reservation stays, and the refusal says why.

use postgres::Client;
use snowflake_id_integration::engine::unix_ms;
use snowflake_id_integration::{apply_settings, db_error, next_id_ahead_ms, value, Cluster, FakeClock};
use std::time::Duration;

/// The ceiling recorded in the reservation file, in ms ahead of the real clock.
fn recorded_lead_ms(cluster: &Cluster) -> i64 {
    cluster.recorded_ceiling_unix_ms() - unix_ms()
}

/// Waits (up to 30 s) until the recorded ceiling's lead satisfies `done`.
fn wait_for_record(cluster: &Cluster, what: &str, done: impl Fn(i64) -> bool) {
    for _ in 0..600 {
        if done(recorded_lead_ms(cluster)) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{what}: the recorded ceiling leads the clock by {} ms", recorded_lead_ms(cluster));
}

/// Starts the (stopped) server on `clock`; a client of it. libfaketime does not fake the clock
/// of the worker the postmaster forks as it starts (its log lines, and the ceilings it records,
/// follow the real clock); one started later reads the faked clock as backends do.
fn start(cluster: &mut Cluster, clock: &FakeClock) -> Client {
    clock.start(cluster);
    cluster.restart_reservation_worker();
    cluster.connect()
}

#[test]
fn a_clock_jump_ahead_while_idle_does_not_block_issue_after_a_restart() {
    let mut cluster = Cluster::builder("clock-glitch").create();
    let clock = FakeClock::of(&cluster);
    let mut client = start(&mut cluster, &clock);
    client.batch_execute("CREATE EXTENSION snowflake_id").unwrap();
    let before: i64 = value(&mut client, "SELECT snowflake_nextval(2)", &[]);

    // An hour ahead, idle: the worker reserves there. Back: it moves the reservation back.
    clock.set("+3600");
    wait_for_record(&cluster, "the jump", |lead| lead > 3_000_000);
    clock.set("+0");
    wait_for_record(&cluster, "back from the jump", |lead| lead < 10_000);
    drop(client);
    cluster.stop("fast");
    let mut client = start(&mut cluster, &clock);
    let (lead_ms, after) = next_id_ahead_ms(&mut client, 2);
    assert!(after > before);
    assert!(lead_ms < 10_000.0, "after the restart the first ID leads the clock by {lead_ms} ms");

    // Now IDs are issued at the jump: the reservation stays an hour ahead, and the refusals
    // after the clock came back say IDs were issued up there.
    clock.set("+3600");
    wait_for_record(&cluster, "the second jump", |lead| lead > 3_000_000);
    let at_the_jump: i64 = value(&mut client, "SELECT snowflake_nextval(3)", &[]);
    clock.set("+0");
    std::thread::sleep(Duration::from_secs(2));
    assert!(recorded_lead_ms(&cluster) > 3_000_000, "the reservation was moved back below an issued ID");
    let error = db_error(&mut client, "SELECT snowflake_nextval(3)");
    assert_eq!(error.code().code(), "55000");
    let detail = error.detail().unwrap();
    assert!(detail.starts_with("Its next ID would carry "), "{detail}");
    assert!(detail.contains("IDs of this shard were issued up to there"), "{detail}");
    // Another shard is refused after a restart alike: the server resumes above the ID at the jump.
    drop(client);
    cluster.stop("fast");
    let mut client = start(&mut cluster, &clock);
    let error = db_error(&mut client, "SELECT snowflake_nextval(2)");
    assert_eq!(error.code().code(), "55000", "{error:?}");
    assert!(error.detail().unwrap().contains("resumed there after a restart"));
    // An operator who accepts IDs an hour ahead gets them above the one issued at the jump.
    // The moment after the reload is for the worker's reload too.
    apply_settings(&mut client, &[("snowflake_id.max_lead_ms", "2h")]);
    std::thread::sleep(Duration::from_millis(500));
    let next: i64 = value(&mut client, "SELECT snowflake_nextval(3)", &[]);
    assert!(next > at_the_jump);
}
