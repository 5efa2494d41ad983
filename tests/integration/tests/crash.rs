//! Crashes under load never make a server repeat an ID: `kill -9` of a backend in the middle
//! of generation (PostgreSQL then resets shared memory) and `pg_ctl stop -m immediate`, each
//! followed by more load. After every crash each shard resumes above all its earlier IDs.

use snowflake_id_integration::{
    assert_no_duplicates, assert_rounds_increase, kill_9, value, Cluster, Load, LOAD_TABLE,
};

const ROUNDS: i32 = 6;
const ROWS_PER_ROUND: usize = 25_000;

/// Eight connections share shard 1; eight have a shard each.
fn shards() -> Vec<i32> {
    (0..16).map(|i| if i < 8 { 1 } else { 100 + i }).collect()
}

#[test]
fn kill_9_and_immediate_shutdown_under_load_never_repeat_an_id() {
    // Calls may wait up to 5 s for the clock: each round starts with shard 1 still ahead of
    // the clock from the round before (the borrowed range, plus the reservation's headroom).
    let mut cluster = Cluster::builder("crash")
        .settings(&["restart_after_crash = on", "snowflake_id.max_wait_ms = 5s"])
        .setup(&format!("CREATE EXTENSION snowflake_id; {LOAD_TABLE}"))
        .start();

    let mut acknowledged = Vec::new();
    for round in 0..ROUNDS {
        // First shard 1 borrows about 1.5 s ahead of the clock (a batch of
        // 6 million IDs, of which only the first is fetched), and the next ID, above the
        // batch, is kept. The load and the crash follow quicker than that, so only the
        // recorded reservation keeps the next round above it.
        cluster
            .connect()
            .execute(
                "WITH batch AS (SELECT snowflake_nextvals(1, 6000000) LIMIT 1)
                 INSERT INTO ids SELECT snowflake_nextval(1), 1, $1 FROM batch",
                &[&round],
            )
            .unwrap();
        let load = Load::start(&cluster, &shards(), round);
        load.wait_for(ROWS_PER_ROUND);

        if round % 2 == 0 {
            // One backend dies mid-generation; the postmaster resets every backend and
            // shared memory, and restarts.
            let backends = load.backends();
            kill_9(backends[round as usize % backends.len()]);
        } else {
            cluster.stop("immediate");
            cluster.start_with(&[]);
        }
        acknowledged.extend(load.finish());
        cluster.wait_until_accepting();
    }

    let mut client = cluster.connect();
    let rows = assert_no_duplicates(&mut client);
    assert!(rows >= (ROUNDS as i64) * ROWS_PER_ROUND as i64, "only {rows} rows");
    assert_rounds_increase(&mut client);
    // Every acknowledged commit survived, and decodes to the shard it was issued for. (A plain
    // index makes the lookup fast; it is not unique, so it hides no duplicate.)
    client.batch_execute("CREATE INDEX ON ids (id)").unwrap();
    let (acked_shards, acked_ids): (Vec<i32>, Vec<i64>) = acknowledged.iter().copied().unzip();
    let missing_or_wrong: i64 = value(
        &mut client,
        "SELECT count(*) FROM unnest($1::int[], $2::bigint[]) AS a(shard, id)
         WHERE snowflake_shard(a.id) <> a.shard OR NOT EXISTS (SELECT 1 FROM ids WHERE ids.id = a.id)",
        &[&acked_shards, &acked_ids],
    );
    assert_eq!(missing_or_wrong, 0);
    let crashes = cluster.log().matches("terminating any other active server processes").count();
    assert!(crashes >= (ROUNDS / 2) as usize, "only {crashes} crash restarts in the log");
    println!("crash: {rows} rows over {ROUNDS} rounds with {crashes} backend crashes and {} immediate stops, 0 duplicates", ROUNDS / 2);
}
