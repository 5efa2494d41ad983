//! `snowflake_observe` and `snowflake_advance` across a crash: an ID observed (or a shard
//! advanced past one) ahead of the clock, further ahead than the reservation runs by itself
//! (`reserve_ms`), then `kill -9` of the postmaster right after the call returned. After the
//! restart, the next ID is still above it: the call waited until the durable reservation had
//! passed it (`generator::observe_step`, `advance_step`). The ID lies far enough ahead (8 s,
//! with a lead bound of 10 s) that the clock has not reached it when the server is back, so
//! only the reservation can keep the IDs above it.

use snowflake_id_integration::{id_ahead_ms, id_unix_ms, value, Cluster};

/// Runs `call` (returning the ID it moved past), kills the postmaster at once, restarts, and
/// checks that the next ID of each of `shards` is above that ID.
fn survives_a_kill_9_right_after(name: &str, call: &str, shards: &[i32]) {
    let mut cluster = Cluster::builder(name).settings(&["snowflake_id.max_lead_ms = 10s"]).start();
    let mut client = cluster.connect();
    client.batch_execute("CREATE EXTENSION snowflake_id").unwrap();
    let moved_past: i64 = value(&mut client, call, &[]);
    let moved_past_unix_ms = id_unix_ms(&mut client, moved_past);
    let recorded = cluster.recorded_ceiling_unix_ms();
    cluster.kill_postmaster();

    cluster.start_with(&[]);
    let mut client = cluster.wait_until_accepting();
    for shard in shards {
        let next: i64 = value(&mut client, "SELECT snowflake_nextval($1)", &[shard]);
        assert!(
            next > moved_past,
            "{name}: after the crash shard {shard} issued {next}, not above {moved_past}"
        );
    }
    assert!(
        recorded > moved_past_unix_ms,
        "{name}: the record ({recorded}) is not past the ID's ms ({moved_past_unix_ms})"
    );
    let lead_ms = id_ahead_ms(&mut client, moved_past);
    assert!(lead_ms > 0.0, "{name}: the clock passed the ID during the restart: the test shows nothing");
    println!("{name}: an ID 8 s ahead, kill -9, restarted: the next IDs are above it ({lead_ms:.0} ms ahead of the clock at the restart)");
}

#[test]
fn an_observation_survives_a_kill_9_right_after_it() {
    // 8 s ahead: within the lead bound, beyond what the reservation covers without being asked
    // (reserve_ms, 500 ms). Every shard is held above it.
    survives_a_kill_9_right_after(
        "observe-crash",
        "SELECT snowflake_observe(snowflake_compose(clock_timestamp() + interval '8 s', 9, 4095))",
        &[1, 9, 700],
    );
}

#[test]
fn an_advance_survives_a_kill_9_right_after_it() {
    survives_a_kill_9_right_after(
        "advance-crash",
        "SELECT snowflake_advance(3, snowflake_compose(clock_timestamp() + interval '8 s', 3, 4095))",
        &[3],
    );
}
