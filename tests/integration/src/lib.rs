//! The integration tests' library: real PostgreSQL servers started by the tests, driven from
//! outside over Unix sockets, and what the tests do to them. One room per job:
//!
//! - `install`: which PostgreSQL runs (`$PG_CONFIG`);
//! - `process`: commands and folders as the servers' owner, `pg_ctl`, `kill -9`;
//! - `cluster`: a throwaway server (`Cluster`), started, stopped and removed, its log printed
//!   when a test fails; its data directory on a disk that can lose power (`power_loss`);
//! - `pair`: a primary and its streaming standby (`Pair`), replayed, cut off, promoted (again
//!   when it stopped during it), its standby replaced; the tests' pairs and the campaign's;
//! - `faults`: a faked clock (libfaketime) and slow or failing fsyncs (strace);
//! - `workload`: writers loading a server;
//! - `engine`: the workload engine of the tests that play an application (writers running
//!   its kinds of operation, their history, readers paging below the horizon, the seeded
//!   choices of a workload);
//! - `queries`: what tests ask a server and assert about what it holds;
//! - `ha`: a stand-in HA manager for the lease; `registry`: an etcd for the shard registry;
//!   `kit`: the kits of deploy/ run for real;
//! - `campaign`: the fault campaign (docs/reliability.md).
//!
//! The servers run as the unprivileged `postgres` user when the tests run as root (initdb
//! refuses root) and listen only on Unix sockets in their own temporary folders.

pub mod campaign;
mod cluster;
pub mod engine;
mod faults;
mod ha;
mod install;
mod kit;
mod pair;
pub mod power_loss;
mod process;
mod queries;
mod registry;
mod workload;

pub use cluster::*;
pub use engine::{connection_lost, Pick};
pub use faults::*;
pub use ha::*;
pub use install::*;
pub use kit::*;
pub use pair::*;
pub use process::*;
pub use queries::*;
pub use registry::*;
pub use workload::*;

/// The setting of the 53-bit layout (docs/js53.md), which several tests start servers with.
pub const JS53_LAYOUT: &str = "snowflake_id.layout = 'js53'";
/// The largest ID of the 53-bit layout: JavaScript's `Number.MAX_SAFE_INTEGER`, 2^53 - 1.
pub const MAX_SAFE_INTEGER: i64 = (1 << 53) - 1;
