//! The workload engine every real-server test with an application's writers and readers
//! drives: the fault campaign, the horizon's readers under a crash, the active-active mesh.
//! A test brings its own kinds of operation (what a transaction does) and where each goes;
//! the engine runs them the same way everywhere:
//!
//! - `history`: what one operation was given, sorted by what a client can know of its end
//!   (committed, aborted, maybe, bare), and how a failed statement is recorded;
//! - `writer`: a writer's loop: draw a kind, route it, (re)connect, run it, record it;
//! - `reader`: a reader paging a table with the documented loop (`snowflake_horizon()`, then
//!   the rows below it), or naively, as the control.
//!
//! Judging the history is the test's: the campaign's checker, or a test's own assertions.

mod history;
mod reader;
mod writer;

pub use history::*;
pub use reader::*;
pub use writer::*;

use postgres::Config;
use std::time::{SystemTime, UNIX_EPOCH};

/// Where an operation or a poll goes: a server by a name of the test's choosing (the history
/// records it; a writer reconnects when it changes) and how to connect to it, as whom.
#[derive(Clone)]
pub struct Route {
    pub server: String,
    pub config: Config,
    /// Failovers (or restarts) of the server's group before this op, as the test counts them.
    pub epoch: u32,
}

impl Route {
    /// A server that never fails over (or whose test does not count it): epoch 0 throughout.
    pub fn to(server: &str, config: Config) -> Route {
        Route { server: server.into(), config, epoch: 0 }
    }
}

/// The real time now, in Unix ms.
pub fn unix_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}
