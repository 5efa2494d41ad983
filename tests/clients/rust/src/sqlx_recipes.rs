//! sqlx: the recipes of docs/clients/rust.md.

use chrono::{DateTime, Utc};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::{customers, increasing, same, Result};

pub async fn run() -> Result<String> {
    // PGHOST, PGPORT, PGUSER, PGDATABASE from the environment
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect_with(PgConnectOptions::new())
        .await?;
    let customers = customers();

    // region: schema
    sqlx::query(
        "CREATE TABLE orders (
             id bigint PRIMARY KEY DEFAULT snowflake_nextval(4),
             customer text NOT NULL
         )",
    )
    .execute(&pool)
    .await?;
    // endregion

    // region: insert
    let id: i64 = sqlx::query_scalar("INSERT INTO orders (customer) VALUES ($1) RETURNING id")
        .bind("ada")
        .fetch_one(&pool)
        .await?;
    // endregion
    let stored: i64 = sqlx::query_scalar("SELECT id FROM orders WHERE customer = 'ada'")
        .fetch_one(&pool)
        .await?;
    same(id, stored, "key read back vs stored")?;

    // region: batch
    let ids: Vec<i64> =
        sqlx::query_scalar("INSERT INTO orders (customer) SELECT unnest($1::text[]) RETURNING id")
            .bind(&customers)
            .fetch_all(&pool)
            .await?;
    // endregion
    increasing(
        &ids,
        customers.len(),
        "INSERT ... SELECT unnest($1) RETURNING id",
    )?;
    let stored: Vec<i64> =
        sqlx::query_scalar("SELECT id FROM orders WHERE customer <> 'ada' ORDER BY id")
            .fetch_all(&pool)
            .await?;
    same(&ids, &stored, "batch keys vs stored")?;

    // region: decode
    let (ts, shard, seq): (DateTime<Utc>, i32, i32) =
        sqlx::query_as("SELECT (snowflake_decode(id)).* FROM orders WHERE id = $1")
            .bind(id)
            .fetch_one(&pool)
            .await?;
    // endregion
    let sql: (DateTime<Utc>, i32, i32) =
        sqlx::query_as("SELECT snowflake_timestamp($1), snowflake_shard($1), snowflake_seq($1)")
            .bind(id)
            .fetch_one(&pool)
            .await?;
    same((ts, shard, seq), sql, "decoded parts")?;
    same(shard, 4, "decoded shard")?;

    // region: json
    let body = serde_json::json!({ "id": id.to_string(), "customer": "ada" }).to_string();
    // endregion
    let back: serde_json::Value = serde_json::from_str(&body)?;
    same(
        back["id"].as_str(),
        Some(id.to_string().as_str()),
        "ID through JSON as text",
    )?;
    pool.close().await;

    Ok(format!(
        "sqlx 0.9: 1 key and {} batch keys read back as stored, increasing; decoded shard \
         {shard}; JSON as text",
        ids.len()
    ))
}
