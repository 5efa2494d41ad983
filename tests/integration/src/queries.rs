//! What tests ask a server and assert about what it holds.

use postgres::types::{FromSqlOwned, ToSql};
use postgres::Client;

/// The first column of the one row a query returns; fails the test, naming the query, when
/// it fails or returns no row or several.
pub fn value<T: FromSqlOwned>(client: &mut Client, query: &str, params: &[&(dyn ToSql + Sync)]) -> T {
    client.query_one(query, params).unwrap_or_else(|error| panic!("{query}: {error}")).get(0)
}

/// The first column of every row a query returns, in order; fails the test, naming the query,
/// when it fails.
pub fn column<T: FromSqlOwned>(client: &mut Client, query: &str, params: &[&(dyn ToSql + Sync)]) -> Vec<T> {
    let rows = client.query(query, params).unwrap_or_else(|error| panic!("{query}: {error}"));
    rows.iter().map(|row| row.get(0)).collect()
}

/// The one `bigint` a query returns, such as a `count(*)`.
pub fn count(client: &mut Client, query: &str) -> i64 {
    value(client, query, &[])
}

/// IDs issued for `shard` since the server started, from snowflake_stats() (0 when none).
pub fn issued(client: &mut Client, shard: i32) -> i64 {
    client
        .query_opt("SELECT issued FROM snowflake_stats() WHERE shard = $1", &[&shard])
        .unwrap()
        .map_or(0, |row| row.get(0))
}

/// Issues one ID of `shard` and says how far ahead of the server's clock its time part lies,
/// in ms, with the ID: where a shard resumes after a promotion or a change of settings.
pub fn next_id_ahead_ms(client: &mut Client, shard: i32) -> (f64, i64) {
    let row = client
        .query_one(
            "SELECT id, extract(epoch FROM snowflake_timestamp(id) - clock_timestamp())::float8 * 1000
             FROM (SELECT snowflake_nextval($1) AS id) AS issued",
            &[&shard],
        )
        .unwrap();
    (row.get(1), row.get(0))
}

/// How far the time part of `id` lies ahead of the server's clock, in ms (negative: behind).
pub fn id_ahead_ms(client: &mut Client, id: i64) -> f64 {
    value(
        client,
        "SELECT extract(epoch FROM snowflake_timestamp($1) - clock_timestamp())::float8 * 1000",
        &[&id],
    )
}

/// The time part of `id` as the server decodes it, in Unix ms.
pub fn id_unix_ms(client: &mut Client, id: i64) -> i64 {
    value(client, "SELECT (extract(epoch FROM snowflake_timestamp($1)) * 1000)::int8", &[&id])
}

/// Asserts that the `ids` table holds no ID twice; returns its row count.
pub fn assert_no_duplicates(client: &mut Client) -> i64 {
    let row = client.query_one("SELECT count(*), count(DISTINCT id) FROM ids", &[]).unwrap();
    let (rows, distinct): (i64, i64) = (row.get(0), row.get(1));
    assert_eq!(rows, distinct, "{} duplicate IDs", rows - distinct);
    rows
}

/// Asserts that the IDs each connection received (one list each) increase, and that no ID came
/// twice among all of them; returns how many there are.
pub fn assert_unique_and_increasing(streams: &[Vec<i64>]) -> usize {
    let mut all = Vec::new();
    for (connection, ids) in streams.iter().enumerate() {
        if let Some(w) = ids.windows(2).find(|w| w[0] >= w[1]) {
            panic!("connection {connection}'s IDs went back: {} then {}", w[0], w[1]);
        }
        all.extend_from_slice(ids);
    }
    let issued = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), issued, "{} duplicate IDs", issued - all.len());
    issued
}

/// Asserts that every ID of a round is above every ID of the same shard from an earlier
/// round (rounds are separated by crashes or restarts).
pub fn assert_rounds_increase(client: &mut Client) {
    let violations = count(
        client,
        "WITH r AS (SELECT shard, round, min(id) AS lo, max(id) AS hi FROM ids GROUP BY shard, round)
         SELECT count(*) FROM r later JOIN r earlier
           ON later.shard = earlier.shard AND earlier.round < later.round AND earlier.hi >= later.lo",
    );
    assert_eq!(violations, 0, "a shard issued IDs after a restart that are not above earlier ones");
}
