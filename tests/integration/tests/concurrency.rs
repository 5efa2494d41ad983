//! Many connections at once on one real server: no duplicates, right shards, per-connection
//! order. The figures (time, IDs per second) are printed for the notes, never asserted.

use snowflake_id_integration::{assert_unique_and_increasing, id_ahead_ms, Cluster};
use std::time::Instant;

const CONNECTIONS: usize = 16;
const IDS_PER_CONNECTION: usize = 62_500; // 16 x 62,500 = 1,000,000
const IDS_PER_QUERY: usize = 2_500;

/// Half the connections share shard 1; the others each have a shard of their own.
fn shard_of_connection(connection: usize) -> i32 {
    if connection < CONNECTIONS / 2 {
        1
    } else {
        100 + connection as i32
    }
}

#[test]
fn sixteen_connections_one_million_ids_no_duplicates() {
    let cluster = Cluster::builder("concurrency").settings(&["synchronous_commit = off"]).start();
    cluster.connect().batch_execute("CREATE EXTENSION snowflake_id").unwrap();

    let started = Instant::now();
    let per_connection: Vec<Vec<(i64, i32)>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..CONNECTIONS)
            .map(|connection| {
                let cluster = &cluster;
                scope.spawn(move || {
                    let mut client = cluster.connect();
                    let shard = shard_of_connection(connection);
                    // Alternate single calls and batches: both must interleave safely.
                    let single = client
                        .prepare(
                            "SELECT id, snowflake_shard(id) FROM \
                             (SELECT snowflake_nextval($1) AS id FROM generate_series(1, $2::int)) ids",
                        )
                        .unwrap();
                    let batch = client
                        .prepare("SELECT id, snowflake_shard(id) FROM snowflake_nextvals($1, $2::int) AS id")
                        .unwrap();
                    let mut ids = Vec::with_capacity(IDS_PER_CONNECTION);
                    for query in 0..IDS_PER_CONNECTION / IDS_PER_QUERY {
                        let statement = if query % 2 == 0 { &single } else { &batch };
                        let rows = client.query(statement, &[&shard, &(IDS_PER_QUERY as i32)]).unwrap();
                        ids.extend(rows.iter().map(|row| (row.get::<_, i64>(0), row.get::<_, i32>(1))));
                    }
                    ids
                })
            })
            .collect();
        workers.into_iter().map(|worker| worker.join().unwrap()).collect()
    });
    let elapsed = started.elapsed();

    for (connection, ids) in per_connection.iter().enumerate() {
        assert_eq!(ids.len(), IDS_PER_CONNECTION);
        let shard = shard_of_connection(connection);
        assert!(
            ids.iter().all(|&(_, decoded)| decoded == shard),
            "connection {connection}: an ID decodes to another shard"
        );
        assert!(ids.iter().all(|&(id, _)| id > 0));
    }
    let streams: Vec<Vec<i64>> =
        per_connection.iter().map(|ids| ids.iter().map(|&(id, _)| id).collect()).collect();
    let issued = assert_unique_and_increasing(&streams);
    assert_eq!(issued, 1_000_000);

    // The newest ID's time is the server's clock, not far in the future.
    let newest = streams.iter().flatten().copied().max().unwrap();
    let lead_ms = id_ahead_ms(&mut cluster.connect(), newest);
    assert!(lead_ms < 2000.0, "the newest ID is {lead_ms} ms ahead of the clock");

    println!(
        "concurrency: {issued} IDs from {CONNECTIONS} connections in {:.2} s ({:.0} IDs/s), 0 duplicates",
        elapsed.as_secs_f64(),
        issued as f64 / elapsed.as_secs_f64()
    );
}
