//! tokio-postgres on a server in the js53 layout: the recipe of docs/clients/rust.md ("With the
//! js53 layout"), IDs as plain JSON numbers, kept exactly also when read as `f64`.

use std::env::var;

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
    let id_bits: String = client.query_one("SHOW snowflake_id.id_bits", &[]).await?.get(0);
    same(id_bits.as_str(), "53", "the server's snowflake_id.id_bits")?;
    client
        .batch_execute(
            "CREATE TABLE orders (
                 id bigint PRIMARY KEY DEFAULT snowflake_nextval(4),
                 customer text NOT NULL
             )",
        )
        .await?;

    // region: js53
    // Where snowflake_id.layout = 'js53' every ID is at most 2^53 - 1: a plain JSON number,
    // which JavaScript and every reader taking numbers as f64 keep exactly.
    let id: i64 = client
        .query_one("INSERT INTO orders (customer) VALUES ($1) RETURNING id", &[&"ada"])
        .await?
        .get(0);
    let body = serde_json::json!({ "id": id, "customer": "ada" }).to_string();
    // endregion
    let text: String = client.query_one("SELECT id::text FROM orders WHERE id = $1", &[&id]).await?.get(0);
    same(body.clone(), format!(r#"{{"customer":"ada","id":{text}}}"#), "the body")?;
    let read: serde_json::Value = serde_json::from_str(&body)?;
    same(read["id"].as_f64().map(|double| double as i64), Some(id), "the body's ID read as f64")?;
    let server_json: String = client.query_one("SELECT snowflake_json($1)::text", &[&id]).await?.get(0);
    let parts: serde_json::Value = serde_json::from_str(&server_json)?;
    same(parts["id"].as_f64().map(|double| double as i64), Some(id), "snowflake_json's ID read as f64")?;

    let customers = customers();
    let ids: Vec<i64> = client
        .query("INSERT INTO orders (customer) SELECT unnest($1::text[]) RETURNING id", &[&customers])
        .await?
        .iter()
        .map(|row| row.get(0))
        .collect();
    increasing(&ids, customers.len(), "INSERT ... SELECT unnest($1) RETURNING id")?;
    let stored: Vec<String> = client
        .query("SELECT id::text FROM orders WHERE customer <> 'ada' ORDER BY id", &[])
        .await?
        .iter()
        .map(|row| row.get(0))
        .collect();
    let doubles: Vec<f64> = serde_json::from_str(&serde_json::to_string(&ids)?)?;
    let through_doubles: Vec<String> = doubles.iter().map(|double| (*double as i64).to_string()).collect();
    same(through_doubles, stored, "batch keys through JSON read as f64 vs stored")?;
    Ok(format!(
        "tokio-postgres on js53: 1 key and {} batch keys as JSON numbers, every digit the stored one read back as \
         f64; snowflake_json read alike",
        ids.len()
    ))
}
