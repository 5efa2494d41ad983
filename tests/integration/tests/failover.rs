//! A streaming standby promoted after its primary is killed resumes above everything the old
//! primary committed, even IDs it issued ahead of the clock: the reservation travels in WAL.

use snowflake_id_integration::{apply_settings, assert_no_duplicates, Cluster, Load, LOAD_TABLE};

#[test]
fn a_promoted_standby_resumes_above_the_killed_primary() {
    // IDs may lead the clock by 10 s here, so that shard 1 can borrow further ahead than a
    // promotion takes (below). Calls may wait 10 s for the reservation: the promoted
    // standby's first ones wait for its worker's first record, behind the promotion's
    // checkpoint on a loaded machine.
    let mut primary = Cluster::start(
        "failover-primary",
        &["snowflake_id.max_lead_ms = 10s", "snowflake_id.max_wait_ms = 10s"],
    );
    let mut setup = primary.connect();
    setup.batch_execute(&format!("CREATE EXTENSION snowflake_id; {LOAD_TABLE}")).unwrap();
    // Once promoted, the standby must not wait for a standby of its own.
    let standby =
        Cluster::start_standby_of(&primary, "failover-standby", &["synchronous_standby_names = ''"]);
    // Synchronous replication (remote_apply): every commit acknowledged to a client is on the
    // standby, so "above every acknowledged ID" is a check that can be made exactly.
    apply_settings(&mut setup, &[("synchronous_standby_names", "*"), ("synchronous_commit", "remote_apply")]);
    drop(setup);

    let shards: Vec<i32> = (0..12).map(|i| if i < 6 { 1 } else { 200 + i }).collect();
    let load = Load::start(&primary, &shards, 0);
    load.wait_for(100_000);
    // Shard 1 borrows about 5 s ahead of the clock and commits the ID above the batch:
    // promotion takes less than that, so only the replayed reservation keeps shard 1 above it.
    primary
        .connect()
        .execute(
            "WITH batch AS (SELECT snowflake_nextvals(1, 20000000) LIMIT 1)
             INSERT INTO ids SELECT snowflake_nextval(1), 1, 0 FROM batch",
            &[],
        )
        .unwrap();
    primary.kill_postmaster();
    let mut acknowledged = load.finish();
    standby.promote();

    let mut client = standby.wait_until_accepting();
    let top_borrowed: i64 = client.query_one("SELECT max(id) FROM ids WHERE shard = 1", &[]).unwrap().get(0);
    acknowledged.push((1, top_borrowed));
    let mut distinct_shards: Vec<i32> = shards.clone();
    distinct_shards.dedup();
    for &shard in &distinct_shards {
        client
            .execute(
                "INSERT INTO ids SELECT snowflake_nextval($1), $1, 1 FROM generate_series(1, 2000)",
                &[&shard],
            )
            .unwrap();
        let first_new: i64 = client
            .query_one("SELECT min(id) FROM ids WHERE shard = $1 AND round = 1", &[&shard])
            .unwrap()
            .get(0);
        let highest_old = acknowledged.iter().filter(|(s, _)| *s == shard).map(|(_, id)| *id).max().unwrap();
        assert!(
            first_new > highest_old,
            "shard {shard}: new ID {first_new} is not above the old primary's {highest_old}"
        );
    }
    let rows = assert_no_duplicates(&mut client);
    assert!(rows as usize >= acknowledged.len(), "acknowledged commits are missing on the promoted standby");
    println!("failover: {rows} rows, {} acknowledged by the killed primary, all below the promoted standby's new IDs, 0 duplicates", acknowledged.len());
}
