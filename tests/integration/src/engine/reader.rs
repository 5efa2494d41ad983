//! A reader: pages a table's rows `(id, tag)` with a cursor kept across reconnections and
//! servers, until the test names the end and the cursor reaches it. Below the horizon it is
//! the documented loop (README, "Reading new rows"): `snowflake_horizon()` in one statement,
//! the rows above the cursor and below it in the next. Naive, it reads every row above the
//! cursor: the control, which misses rows committed after it read past their IDs.

use super::{connection_lost, Route};
use postgres::types::ToSql;
use postgres::{Client, NoTls};
use std::thread::sleep;
use std::time::Duration;

/// How a reader pages.
#[derive(Clone, Copy, Debug)]
pub enum Paging {
    /// Below `snowflake_horizon(shard)`, or `snowflake_horizon()` with no shard.
    BelowHorizon { shard: Option<i32> },
    /// Every row above the cursor.
    Naive,
}

/// What a reader read, in order, and how its polls went.
#[derive(Default)]
pub struct Reads {
    pub ids: Vec<i64>,
    /// The tag of each row read, beside `ids`: the op that wrote it.
    pub tags: Vec<i64>,
    /// The cursor: the largest ID read.
    pub cursor: i64,
    /// The last horizon given, and how far each trailed the server's clock, in ms.
    pub last_horizon: i64,
    pub lags_ms: Vec<i64>,
    pub polls: usize,
    /// Polls cut off by a lost connection.
    pub lost: usize,
    /// Polls refused (not a lost connection).
    pub errors: Vec<String>,
    /// The reader stopped before reaching the end: told to give up.
    pub gave_up: bool,
}

/// What the test tells its readers.
pub trait Source {
    /// What the reader holds during a poll (the campaign: the shard's freeze).
    type Hold<'a>
    where
        Self: 'a;

    /// Where the rows are read now; `None` while nowhere (the reader waits and asks again).
    fn route(&self) -> Option<(Route, Self::Hold<'_>)>;

    /// The largest ID to read, once known: the reader stops when its cursor reaches it.
    fn end(&self) -> Option<i64>;

    /// Stop at once (the test ran out of time, or failed).
    fn give_up(&self) -> bool;

    /// Called after each poll that succeeded.
    fn polled(&self, _reads: &Reads) {}
}

/// Reads `table` with `paging` until `source` says the end is reached, pausing `pause` between
/// polls; returns what it read.
pub fn read(source: &impl Source, table: &str, paging: Paging, pause: Duration) -> Reads {
    let mut reads = Reads::default();
    let mut connection: Option<(String, Client)> = None;
    loop {
        if source.give_up() {
            reads.gave_up = true;
            return reads;
        }
        if source.end().is_some_and(|end| reads.cursor >= end) {
            return reads;
        }
        if let Some((route, _hold)) = source.route() {
            if connection.as_ref().is_none_or(|(server, _)| *server != route.server) {
                connection = route.config.connect(NoTls).ok().map(|client| (route.server, client));
            }
            if let Some((_, client)) = connection.as_mut() {
                match poll(client, table, paging, &mut reads) {
                    Ok(()) => {
                        reads.polls += 1;
                        source.polled(&reads);
                    }
                    Err(error) => {
                        if connection_lost(&error) {
                            reads.lost += 1;
                        } else {
                            reads.errors.push(error.to_string());
                        }
                        connection = None;
                    }
                }
            }
        }
        sleep(pause);
    }
}

/// One poll: the rows after the cursor (below the horizon, in a statement after the one that
/// read it), appended to `reads`, and the cursor moved to the last of them (the documented
/// rule). `read` polls until its end; a test that interleaves its own steps polls itself.
/// `table` is anything with an `id` and a `tag` column: a table, or a subquery with an alias.
pub fn poll(
    client: &mut Client,
    table: &str,
    paging: Paging,
    reads: &mut Reads,
) -> Result<(), postgres::Error> {
    let rows = match paging {
        Paging::BelowHorizon { shard } => {
            let (horizon, params): (_, &[&(dyn ToSql + Sync)]) = match &shard {
                Some(shard) => ("snowflake_horizon($1)", &[shard]),
                None => ("snowflake_horizon()", &[]),
            };
            let sql = format!(
                "SELECT h, (extract(epoch FROM clock_timestamp() - snowflake_timestamp(h)) * 1000)::bigint \
                 FROM {horizon} AS h"
            );
            let row = client.query_one(&sql, params)?;
            let (horizon, lag_ms): (i64, i64) = (row.get(0), row.get(1));
            let rows = client.query(
                &format!("SELECT id, tag FROM {table} WHERE id > $1 AND id < $2 ORDER BY id"),
                &[&reads.cursor, &horizon],
            )?;
            reads.last_horizon = horizon;
            reads.lags_ms.push(lag_ms);
            rows
        }
        Paging::Naive => client
            .query(&format!("SELECT id, tag FROM {table} WHERE id > $1 ORDER BY id"), &[&reads.cursor])?,
    };
    reads.ids.extend(rows.iter().map(|row| row.get::<_, i64>(0)));
    reads.tags.extend(rows.iter().map(|row| row.get::<_, i64>(1)));
    reads.cursor = reads.ids.last().copied().unwrap_or(reads.cursor);
    Ok(())
}
