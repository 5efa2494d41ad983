//! The workload engine every real-server test with an application's writers and readers
//! drives: the fault campaign, the horizon's readers under a crash, the active-active mesh.
//! A test brings its own kinds of operation (what a transaction does) and where each goes;
//! the engine runs them the same way everywhere:
//!
//! - `history`: what one operation was given, sorted by what a client can know of its end
//!   (committed, aborted, maybe, bare), and how a failed statement is recorded;
//! - `writer`: a writer's loop: draw a kind, route it, (re)connect, run it, record it;
//! - `reader`: a reader paging a table with the documented loop (`snowflake_horizon()`, then
//!   the rows below it), or naively, as the control;
//! - here: `Route`, and the helpers every part of it uses (`Pick`, the seeded choices;
//!   `connection_lost`, a failed statement told from a lost server).
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

/// A small deterministic generator for the random choices of a workload (no dependency for
/// it): xorshift, seeded so that each seed gives its own sequence.
pub struct Pick(u64);

impl Pick {
    /// A generator of its own for each `seed` (a writer's number, say).
    pub fn new(seed: u64) -> Pick {
        Pick(0x9E37_79B9_7F4A_7C15 ^ (seed + 1).wrapping_mul(0x2545_F491_4F6C_DD1D))
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }

    /// True `percent` times in 100.
    pub fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
}

/// Whether a connection is gone (the server crashed, restarted, or is still starting), as
/// opposed to a statement the server refused: a client that reconnects may go on.
pub fn connection_lost(error: &postgres::Error) -> bool {
    // 57P01 admin_shutdown, 57P02 crash_shutdown, 57P03 cannot_connect_now.
    let server_went_away =
        error.code().is_some_and(|code| ["57P01", "57P02", "57P03"].contains(&code.code()));
    let io = std::error::Error::source(error).is_some_and(|source| source.is::<std::io::Error>());
    server_went_away || error.is_closed() || io
}
