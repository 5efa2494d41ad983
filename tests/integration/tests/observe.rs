//! `snowflake_observe` across a crash: an ID observed ahead of the clock, further ahead than
//! the reservation runs by itself (`reserve_ms`), then `kill -9` of the postmaster right after
//! the call returned. After the restart, the next ID of every shard is still above it: the
//! call waited until the durable reservation had passed it. The ID lies far enough ahead (8 s,
//! with a lead bound of 10 s) that the clock has not reached it when the server is back, so
//! only the reservation can keep the IDs above it.

use snowflake_id_integration::Cluster;

#[test]
fn an_observation_survives_a_kill_9_right_after_it() {
    let mut cluster = Cluster::start("observe-crash", &["snowflake_id.max_lead_ms = 10s"]);
    let mut client = cluster.connect();
    client.batch_execute("CREATE EXTENSION snowflake_id").unwrap();
    // 8 s ahead: within the lead bound, beyond what the reservation covers without being asked
    // (reserve_ms, 500 ms).
    let observed: i64 = client
        .query_one(
            "SELECT snowflake_observe(snowflake_compose(clock_timestamp() + interval '8 s', 9, 4095))",
            &[],
        )
        .unwrap()
        .get(0);
    let observed_unix_ms: i64 = client
        .query_one("SELECT (extract(epoch FROM snowflake_timestamp($1)) * 1000)::bigint", &[&observed])
        .unwrap()
        .get(0);
    let recorded = cluster.recorded_ceiling_unix_ms();
    cluster.kill_postmaster();

    cluster.start_with(&[]);
    let mut client = cluster.wait_until_accepting();
    for shard in [1, 9, 700] {
        let next: i64 = client.query_one("SELECT snowflake_nextval($1)", &[&shard]).unwrap().get(0);
        assert!(
            next > observed,
            "after the crash shard {shard} issued {next}, not above the observed {observed}"
        );
    }
    assert!(
        recorded > observed_unix_ms,
        "the record ({recorded}) is not past the observed ID's ms ({observed_unix_ms})"
    );
    let lead_ms: f64 = client
        .query_one(
            "SELECT extract(epoch FROM snowflake_timestamp($1) - clock_timestamp())::float8 * 1000",
            &[&observed],
        )
        .unwrap()
        .get(0);
    assert!(lead_ms > 0.0, "the clock passed the observed ID during the restart: the test shows nothing");
    println!("observed an ID 8 s ahead, kill -9, restarted: the next IDs are above it ({lead_ms:.0} ms ahead of the clock at the restart)");
}
