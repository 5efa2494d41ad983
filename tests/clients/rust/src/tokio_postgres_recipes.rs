//! tokio-postgres: the recipes of docs/clients/rust.md.

use std::env::var;
use std::time::SystemTime;

use postgres_types::FromSql;
use tokio_postgres::NoTls;

use crate::{customers, increasing, same, Result};

pub async fn run() -> Result<String> {
    let config = format!(
        "host={} port={} user={} dbname={}",
        var("PGHOST")?,
        var("PGPORT")?,
        var("PGUSER")?,
        var("PGDATABASE")?
    );
    let (client, connection) = tokio_postgres::connect(&config, NoTls).await?;
    tokio::spawn(connection);
    let customers = customers();

    // region: schema
    client
        .batch_execute(
            "CREATE TABLE orders (
                 id bigint PRIMARY KEY DEFAULT snowflake_nextval(4),
                 customer text NOT NULL
             )",
        )
        .await?;
    // endregion

    // region: insert
    let id: i64 = client
        .query_one(
            "INSERT INTO orders (customer) VALUES ($1) RETURNING id",
            &[&"ada"],
        )
        .await?
        .get(0);
    // endregion
    let stored: i64 = client
        .query_one("SELECT id FROM orders WHERE customer = 'ada'", &[])
        .await?
        .get(0);
    same(id, stored, "key read back vs stored")?;

    // region: batch
    let ids: Vec<i64> = client
        .query(
            "INSERT INTO orders (customer) SELECT unnest($1::text[]) RETURNING id",
            &[&customers],
        )
        .await?
        .iter()
        .map(|row| row.get(0))
        .collect();
    // endregion
    increasing(
        &ids,
        customers.len(),
        "INSERT ... SELECT unnest($1) RETURNING id",
    )?;
    let stored: Vec<i64> = client
        .query(
            "SELECT id FROM orders WHERE customer <> 'ada' ORDER BY id",
            &[],
        )
        .await?
        .iter()
        .map(|row| row.get(0))
        .collect();
    same(&ids, &stored, "batch keys vs stored")?;

    // region: decode
    let row = client
        .query_one(
            "SELECT (snowflake_decode(id)).* FROM orders WHERE id = $1",
            &[&id],
        )
        .await?;
    let (ts, shard, seq): (SystemTime, i32, i32) =
        (row.get("ts"), row.get("shard"), row.get("seq"));
    // endregion
    let sql = client
        .query_one(
            "SELECT snowflake_timestamp($1), snowflake_shard($1), snowflake_seq($1)",
            &[&id],
        )
        .await?;
    same(
        (ts, shard, seq),
        (sql.get(0), sql.get(1), sql.get(2)),
        "decoded parts",
    )?;
    same(shard, 4, "decoded shard")?;

    // region: decode-typed
    #[derive(Debug, PartialEq, FromSql)]
    #[postgres(name = "snowflake_parts")]
    struct Parts {
        ts: SystemTime,
        shard: i32,
        seq: i32,
    }
    let parts: Parts = client
        .query_one("SELECT snowflake_decode($1)", &[&id])
        .await?
        .get(0);
    // endregion
    same(parts, Parts { ts, shard, seq }, "typed parts vs expanded")?;

    // region: json
    let body = serde_json::json!({ "id": id.to_string(), "customer": "ada" }).to_string();
    // endregion
    let back: serde_json::Value = serde_json::from_str(&body)?;
    same(
        back["id"].as_str(),
        Some(id.to_string().as_str()),
        "ID through JSON as text",
    )?;

    let token: i64 = client
        .query_one(
            "SELECT snowflake_compose(clock_timestamp() + interval '150 ms', 9, 0)",
            &[],
        )
        .await?
        .get(0);
    let seen = Some(token);
    // region: causal
    // seen: the causality token, the largest ID this client was shown (by any server), or
    // None. Observed first, the new key is above it whatever the two servers' clocks say.
    client
        .execute("SELECT snowflake_observe($1)", &[&seen])
        .await?;
    let after: i64 = client
        .query_one(
            "INSERT INTO orders (customer) VALUES ($1) RETURNING id",
            &[&"bob"],
        )
        .await?
        .get(0);
    // endregion
    same(after > token, true, "key above the token")?;
    let none: Option<i64> = client
        .query_one("SELECT snowflake_observe($1)", &[&None::<i64>])
        .await?
        .get(0);
    same(none, None, "a None token observes nothing")?;

    Ok(format!(
        "tokio-postgres 0.7: 1 key and {} batch keys read back as stored, increasing; decoded \
         shard {shard}; snowflake_parts read into a struct; JSON as text; a key written after a \
         token 150 ms ahead is above it",
        ids.len()
    ))
}
