//! A writer: one thread, one connection at a time, running the test's kinds of operation
//! until the test says stop, and recording each in the history. Where the server goes away
//! it reconnects (and records the op cut off as `lost`); where no server takes writes it waits.

use super::{Op, Pick, Route, Transaction};
use postgres::{Client, NoTls};
use std::thread::sleep;
use std::time::{Duration, Instant};

/// What a test's writers do: its kinds of operation and where each goes. A writer owns one
/// (moved into its thread); state it keeps between ops lives in cells inside it.
pub trait Workload {
    /// What an op does, drawn before it runs (recorded with it).
    type Kind: Clone;
    /// What the writer holds from routing an op until it is recorded (the campaign: the
    /// shard's freeze, which a move takes exclusively).
    type Hold<'a>
    where
        Self: 'a;

    /// Whether to go on: checked before every op.
    fn writing(&self) -> bool;

    /// When the history's milliseconds count from.
    fn origin(&self) -> Instant;

    /// The next op's kind.
    fn kind(&self, pick: &mut Pick) -> Self::Kind;

    /// Where the op goes, and the shard it is routed by; `None` while nowhere takes it (the
    /// writer waits 100 ms and draws again).
    fn route(&self, kind: &Self::Kind, tag: i64) -> Option<(Route, i32, Self::Hold<'_>)>;

    /// Runs the op on `client`: every ID a statement returns goes to `transaction` at once
    /// (and bare ones to `op.bare`), so that a failure at the next statement is recorded right.
    fn run(
        &self,
        client: &mut Client,
        pick: &mut Pick,
        op: &mut Op<Self::Kind>,
        transaction: &mut Transaction,
    ) -> Result<(), postgres::Error>;

    /// The SQLSTATE that, failing a sent commit, means another connection ended the
    /// transaction (see `Op::record`).
    fn finished_elsewhere(&self) -> Option<&'static str> {
        None
    }

    /// Called with each new connection before its first op (to note its backend, say).
    fn connected(&self, _client: &mut Client) {}

    /// Called with each op once recorded, with its connection if still usable (to read the
    /// WAL position after a commit, count progress, hand a prepared transaction on).
    fn recorded(&self, _op: &mut Op<Self::Kind>, _client: Option<&mut Client>) {}
}

/// One writer of a workload: its number, its seeded choices, its connection, its history.
pub struct Writer<W: Workload> {
    workload: W,
    number: usize,
    pick: Pick,
    connection: Option<(String, Client)>,
    next_tag: i64,
    ops: Vec<Op<W::Kind>>,
}

impl<W: Workload> Writer<W> {
    /// Writer `number` (tags from `number` × 10^9), drawing with `pick`.
    pub fn new(workload: W, number: usize, pick: Pick) -> Writer<W> {
        let next_tag = number as i64 * 1_000_000_000;
        Writer { workload, number, pick, connection: None, next_tag, ops: Vec::new() }
    }

    /// Runs ops until the workload says stop; returns the history, in order.
    pub fn run(mut self) -> Vec<Op<W::Kind>> {
        while self.workload.writing() {
            self.step();
        }
        self.ops
    }

    /// One op: draw, route, (re)connect, run, record.
    fn step(&mut self) {
        let workload = &self.workload;
        let kind = workload.kind(&mut self.pick);
        let Some((route, shard, hold)) = workload.route(&kind, self.next_tag) else {
            sleep(Duration::from_millis(100));
            return;
        };
        if self.connection.as_ref().is_none_or(|(server, _)| *server != route.server) {
            self.connection = match route.config.connect(NoTls) {
                Ok(mut client) => {
                    workload.connected(&mut client);
                    Some((route.server.clone(), client))
                }
                Err(_) => {
                    // Down, starting, or promoted but not yet accepting: the test sees the gap
                    // in the history.
                    drop(hold);
                    sleep(Duration::from_millis(100));
                    return;
                }
            };
        }
        let tag = self.next_tag;
        self.next_tag += 1;
        let since = |at: Instant| at.saturating_duration_since(workload.origin()).as_millis() as u64;
        let mut op = Op {
            writer: self.number,
            tag,
            shard,
            kind,
            server: route.server,
            epoch: route.epoch,
            start_ms: since(Instant::now()),
            end_ms: 0,
            end_unix_ms: 0,
            committed: Vec::new(),
            aborted: Vec::new(),
            maybe: Vec::new(),
            maybe_unseen: false,
            bare: Vec::new(),
            commit_lsn: None,
            error: None,
            message: None,
        };
        let mut transaction = Transaction::default();
        let (_, client) = self.connection.as_mut().unwrap();
        let result = workload.run(client, &mut self.pick, &mut op, &mut transaction);
        op.end_ms = since(Instant::now());
        op.end_unix_ms = super::unix_ms();
        let unusable = op.record(result, transaction, client, workload.finished_elsewhere());
        if unusable {
            self.connection = None;
        }
        workload.recorded(&mut op, self.connection.as_mut().map(|(_, client)| client));
        let failed = !op.succeeded();
        self.ops.push(op);
        drop(hold);
        if failed {
            sleep(Duration::from_millis(50));
        }
    }
}
