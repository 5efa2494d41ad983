//! A restart with the wall clock set back (an NTP step or a VM resumed while the server
//! was down, faked with libfaketime) never makes the server repeat an ID: it resumes above
//! its recorded reservation. With the default lead bound it refuses, naming the gap; an
//! operator who accepts IDs ahead of the clock raises the bound and gets IDs above the old ones.

use postgres::Client;
use snowflake_id_integration::{
    apply_settings, assert_no_duplicates, assert_rounds_increase, db_error, Cluster, FakeClock, LOAD_TABLE,
};

fn insert(client: &mut Client, rows: i32, round: i32) {
    for shard in [2, 3] {
        client
            .execute(
                "INSERT INTO ids SELECT snowflake_nextval($1), $1, $3 FROM generate_series(1, $2)",
                &[&shard, &rows, &round],
            )
            .unwrap();
    }
}

#[test]
fn restarts_with_the_clock_set_back_never_repeat_an_id() {
    let mut cluster = Cluster::builder("clock-restart").create();
    let clock = FakeClock::of(&cluster);
    clock.start(&mut cluster);
    let mut client = cluster.connect();
    client.batch_execute(&format!("CREATE EXTENSION snowflake_id; {LOAD_TABLE}")).unwrap();
    insert(&mut client, 25_000, 0);

    // How far back the faked clock read before each restart: the previous round's step.
    let mut was_back = 0;
    for (round, (seconds_back, max_lead)) in [(10, "1min"), (3600, "2h")].into_iter().enumerate() {
        let round = round as i32 + 1;
        drop(client);
        let stopped_at = std::time::Instant::now();
        cluster.stop("fast");
        clock.set(&format!("-{seconds_back}"));
        clock.start(&mut cluster);
        client = cluster.connect();

        // The default bound: refused, nothing issued, the gap in the message. The recorded
        // ceiling is at least the server's clock at the stop (real time less `was_back`; not
        // real time: the previous round's ceiling came from a clock behind, and a slow round
        // left it up to `was_back` short of the stop), and the faked clock now reads real time
        // less `seconds_back`, so the gap is at least their difference less the real time the
        // restart took (on a loaded machine that can exceed the reservation's lead).
        let error = db_error(&mut client, "SELECT snowflake_nextval(2)");
        let restart_ms = stopped_at.elapsed().as_millis() as i64;
        assert_eq!(error.code().code(), "55000");
        let lead_ms: i64 = error.message().split_whitespace().nth(4).unwrap().parse().unwrap();
        assert!(
            lead_ms + restart_ms >= (seconds_back - was_back) * 1000,
            "{} (restart took {restart_ms} ms, the clock was {was_back} s back before it)",
            error.message()
        );
        was_back = seconds_back;

        // Accepting IDs ahead of the clock: generation continues above everything before. The
        // first call waits for the worker to reload too and record a ceiling above the old one
        // (allowed 10 s, for a loaded machine); both go back to the defaults for the next round.
        apply_settings(
            &mut client,
            &[("snowflake_id.max_lead_ms", max_lead), ("snowflake_id.max_wait_ms", "10s")],
        );
        insert(&mut client, 25_000, round);
        apply_settings(
            &mut client,
            &[("snowflake_id.max_lead_ms", "2s"), ("snowflake_id.max_wait_ms", "1s")],
        );
    }
    let rows = assert_no_duplicates(&mut client);
    assert!(rows >= 150_000);
    assert_rounds_increase(&mut client);
    println!("clock restart: {rows} rows across restarts 10 s and 1 h back, 0 duplicates");
}
