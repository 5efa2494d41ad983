//! The Rust recipes of docs/clients/rust.md (tokio-postgres, sqlx), run against a server with the
//! extension: `snowflake_id_clients tokio-postgres|sqlx|tokio-postgres-js53` (the last on a server
//! in the js53 layout), connecting as PGHOST, PGPORT, PGUSER
//! and PGDATABASE say (tests/clients/run.sh sets them). Fails (exit 1) on the first claim that
//! does not hold; prints one line of what it checked.

use std::error::Error;

mod js53_recipes;
mod sqlx_recipes;
mod tokio_postgres_recipes;

type Result<T> = std::result::Result<T, Box<dyn Error>>;

/// Distinct, increasing keys, `n` of them.
fn increasing(ids: &[i64], n: usize, what: &str) -> Result<()> {
    if ids.len() != n {
        return Err(format!("{what}: {} keys, want {n}", ids.len()).into());
    }
    if let Some(pair) = ids.windows(2).find(|pair| pair[0] >= pair[1]) {
        return Err(format!("{what}: keys not increasing: {} then {}", pair[0], pair[1]).into());
    }
    Ok(())
}

/// Fails with `what` unless `got == want`.
fn same<T: PartialEq + std::fmt::Debug>(got: T, want: T, what: &str) -> Result<()> {
    if got == want {
        Ok(())
    } else {
        Err(format!("{what}: got {got:?}, want {want:?}").into())
    }
}

fn customers() -> Vec<String> {
    (0..1000).map(|i| format!("customer {i}")).collect()
}

fn main() {
    let which = std::env::args().nth(1).unwrap_or_default();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let result = runtime.block_on(async {
        match which.as_str() {
            "tokio-postgres" => tokio_postgres_recipes::run().await,
            "sqlx" => sqlx_recipes::run().await,
            "tokio-postgres-js53" => js53_recipes::run().await,
            _ => Err("usage: snowflake_id_clients tokio-postgres|sqlx|tokio-postgres-js53".into()),
        }
    });
    match result {
        Ok(line) => println!("{line}"),
        Err(err) => {
            eprintln!("{which}: FAILED: {err}");
            std::process::exit(1);
        }
    }
}
