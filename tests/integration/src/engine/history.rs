//! The history: one `Op` per operation a writer ran, with every ID it was given sorted by what
//! the client can know of its transaction's end. A lost connection leaves a COMMIT in doubt;
//! a refused statement rolls its transaction back; an autocommit INSERT cut off may have
//! stored rows whose IDs never came back.

use super::connection_lost;
use postgres::Client;

/// One statement or transaction of a writer, as the client saw it.
#[derive(Clone, Debug)]
pub struct Op<K> {
    pub writer: usize,
    /// Unique over the run (the writer's number times 10^9, plus its count of ops): tests
    /// store it beside the rows, so that a row read names the op that wrote it.
    pub tag: i64,
    /// The shard the test routed it by (the mesh: its node's shard).
    pub shard: i32,
    pub kind: K,
    pub server: String,
    pub epoch: u32,
    /// When it started and ended, in ms since the test's origin.
    pub start_ms: u64,
    pub end_ms: u64,
    /// The real time when it ended, in Unix ms (the campaign's lead check adds a faked clock's
    /// offset to it).
    pub end_unix_ms: i64,
    /// IDs of acknowledged commits.
    pub committed: Vec<i64>,
    /// IDs returned in a transaction that then rolled back (or failed before its COMMIT).
    pub aborted: Vec<i64>,
    /// IDs returned in a transaction whose end this client did not see: a COMMIT sent but not
    /// acknowledged, or a transaction prepared and left for another connection to resolve.
    pub maybe: Vec<i64>,
    /// Rows of this tag may be stored with IDs the client never saw (an autocommit INSERT
    /// whose answer was lost).
    pub maybe_unseen: bool,
    /// IDs returned by a bare SELECT: issued, never stored.
    pub bare: Vec<i64>,
    /// Of an acknowledged commit on a primary with a standby: the primary's WAL position read
    /// right after it, at or past the end of its commit record (the campaign records it; a
    /// failover whose promoted standby had the WAL up to here cannot have lost it).
    pub commit_lsn: Option<u64>,
    /// The SQLSTATE, or `lost` for a lost connection; `None` when it succeeded.
    pub error: Option<String>,
    pub message: Option<String>,
}

impl<K> Op<K> {
    /// Every ID the client was given.
    pub fn ids(&self) -> impl Iterator<Item = i64> + '_ {
        self.committed.iter().chain(&self.aborted).chain(&self.maybe).chain(&self.bare).copied()
    }

    /// It ended without an error.
    pub fn succeeded(&self) -> bool {
        self.error.is_none()
    }

    /// It ended with its connection lost (the server went away): its end may be unknown.
    pub fn lost(&self) -> bool {
        self.error.as_deref() == Some("lost")
    }
}

/// The state of one op's transaction while it runs, which the op's code keeps up to date so
/// that a failure at any statement is recorded right.
#[derive(Default)]
pub struct Transaction {
    /// IDs that commit with it.
    pending: Vec<i64>,
    /// IDs rolled back (to a savepoint, or with the whole transaction).
    rolled_back: Vec<i64>,
    /// IDs of a transaction prepared, whose end is another connection's.
    prepared: Vec<i64>,
    /// The COMMIT (or the autocommit statement, PREPARE TRANSACTION, COMMIT PREPARED) was sent.
    commit_sent: bool,
    /// The statement sent was an autocommit INSERT: rows may exist whose IDs never came back.
    autocommit_insert: bool,
}

impl Transaction {
    /// IDs a statement of the transaction returned: they commit with it.
    pub fn returned(&mut self, ids: impl IntoIterator<Item = i64>) {
        self.pending.extend(ids);
    }

    /// IDs returned and then undone by `ROLLBACK TO SAVEPOINT`.
    pub fn rolled_back_to_savepoint(&mut self, ids: Vec<i64>) {
        self.rolled_back.extend(ids);
    }

    /// The transaction was rolled back: every ID it returned is aborted.
    pub fn rolled_back(&mut self) {
        self.rolled_back.append(&mut self.pending);
    }

    /// The transaction was prepared (`PREPARE TRANSACTION` acknowledged) and another connection
    /// ends it: its IDs are in doubt for this op.
    pub fn prepared(&mut self) {
        self.prepared.append(&mut self.pending);
    }

    /// About to send what ends the transaction: a failure from here on leaves it in doubt
    /// when the connection is lost.
    pub fn sending_commit(&mut self) {
        self.commit_sent = true;
    }

    /// About to send an autocommit INSERT: it commits as it returns, and a lost answer may
    /// leave rows stored whose IDs the client never saw.
    pub fn sending_autocommit_insert(&mut self) {
        self.commit_sent = true;
        self.autocommit_insert = true;
    }
}

/// How a failed statement is recorded: its SQLSTATE, or `lost`; and its message.
pub fn classify(error: &postgres::Error) -> (String, String) {
    let code = match error.code() {
        Some(code) if !connection_lost(error) => code.code(),
        _ => "lost",
    };
    let message = error.as_db_error().map_or_else(|| error.to_string(), |db| db.message().to_string());
    (code.to_string(), message)
}

impl<K> Op<K> {
    /// Records how the op ended from its result and its transaction's state; after a refused
    /// statement, ends whatever transaction it left open. Returns whether the connection is
    /// unusable now (lost, or closed by the server).
    ///
    /// `finished_elsewhere` names the SQLSTATE of a failure that means "another connection
    /// ended it" (the campaign: 42704 at COMMIT PREPARED when a move or failover resolved the
    /// prepared transaction first): with the commit sent, its IDs are in doubt, not aborted.
    pub fn record(
        &mut self,
        result: Result<(), postgres::Error>,
        mut transaction: Transaction,
        client: &mut Client,
        finished_elsewhere: Option<&str>,
    ) -> bool {
        let mut unusable = false;
        match result {
            Ok(()) => self.committed.append(&mut transaction.pending),
            Err(error) => {
                let (code, message) = classify(&error);
                let lost = code == "lost";
                let elsewhere = finished_elsewhere == Some(code.as_str());
                if (lost || elsewhere) && transaction.commit_sent {
                    self.maybe.append(&mut transaction.pending);
                    self.maybe_unseen = transaction.autocommit_insert;
                } else {
                    self.aborted.append(&mut transaction.pending);
                }
                if lost || client.is_closed() {
                    unusable = true;
                } else {
                    // End whatever transaction the failed statement left open.
                    let _ = client.batch_execute("ROLLBACK");
                }
                self.error = Some(code);
                self.message = Some(message);
            }
        }
        self.maybe.append(&mut transaction.prepared);
        self.aborted.append(&mut transaction.rolled_back);
        unusable
    }
}
