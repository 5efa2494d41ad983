//! A primary and its streaming hot standby: the pair the failover, switchover and standby tests
//! and the campaign start from, and what they do to it (wait for replay, cut the standby off,
//! promote it, again if it stopped during its promotion, watch for a replay that stands still,
//! put a new standby in its place). It says what happened and takes no campaign type: the
//! campaign publishes it (`campaign::system`).

use crate::cluster::{apply_settings, Cluster, Disk, PromotionFailed};
use crate::faults::FakeClock;
use crate::process::wait_for;
use crate::queries::value;
use postgres::Client;
use std::time::{Duration, Instant};

/// The pair's table by default: `t`, whose key is issued on shard 1.
pub const TABLE_T: &str =
    "CREATE EXTENSION snowflake_id; CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake_nextval(1))";

/// A pair of servers of `S`: plain clusters, or the campaign's servers, each on its faked clock
/// (whatever starts them again, `Member`).
pub struct Pair<S = Cluster> {
    pub primary: S,
    pub standby: S,
}

/// A server a pair holds: its cluster, and how it is started again (stopped by a fault).
pub trait Member {
    fn cluster(&self) -> &Cluster;
    fn cluster_mut(&mut self) -> &mut Cluster;
    /// Starts it (stopped) and waits until it accepts connections.
    fn start(&mut self);
}

impl Member for Cluster {
    fn cluster(&self) -> &Cluster {
        self
    }

    fn cluster_mut(&mut self) -> &mut Cluster {
        self
    }

    fn start(&mut self) {
        self.start_with(&[]);
        self.wait_until_accepting();
    }
}

/// How a promotion went that needed more than one request (`Pair::promote_until_promoted`).
pub struct Promoted {
    /// Where the promoted server's WAL switched from the old primary's (an LSN).
    pub switched_at: u64,
    /// For each time it stopped during its promotion (and was started and promoted again), the
    /// PANIC or FATAL line of its log that says why.
    pub stopped: Vec<String>,
}

/// What `Pair::builder` makes: see there.
#[must_use]
pub struct PairBuilder<'a> {
    name: &'a str,
    primary_settings: &'a [&'a str],
    standby_settings: &'a [&'a str],
    setup: &'a str,
    standby_disk: Disk,
}

impl Pair {
    /// `primary`, running, with a standby made of it now by base backup and started (named
    /// `{name}-standby`): for a test that sets its primary up (or crashes it) first.
    pub fn of(primary: Cluster, name: &str) -> Pair {
        Pair::builder(name).start_standby_of(primary)
    }

    /// A pair to start: `Pair::builder(name)`, then what differs from the defaults, then `start`.
    /// The defaults: no settings of their own, the primary with the extension and `TABLE_T`,
    /// the standby on the plain disk. The servers are named `{name}-primary` and
    /// `{name}-standby`.
    pub fn builder(name: &str) -> PairBuilder<'_> {
        PairBuilder {
            name,
            primary_settings: &[],
            standby_settings: &[],
            setup: TABLE_T,
            standby_disk: Disk::Plain,
        }
    }
}

impl<S: Member> Pair<S> {
    /// Waits until the standby has replayed everything the primary has written so far.
    pub fn replay(&self) {
        let lsn: String =
            value(&mut self.primary.cluster().connect(), "SELECT pg_current_wal_lsn()::text", &[]);
        self.standby.cluster().wait_for_replay(&lsn);
    }

    /// Whether the standby replays, within `within`, what its primary has written so far;
    /// false also when the primary does not answer.
    pub fn replays_within(&self, within: Duration) -> bool {
        let position = self.primary.cluster().try_value::<String>("SELECT pg_current_wal_lsn()::text");
        position.is_some_and(|position| self.standby.cluster().replayed_within(&position, within))
    }

    /// Inserts a row into `t` on the primary and waits until the standby has replayed it.
    pub fn insert_and_replay(&self) {
        self.primary.cluster().connect().batch_execute("INSERT INTO t DEFAULT VALUES").unwrap();
        self.replay();
    }

    /// Cuts the standby off from its primary, as a partition would: its WAL receiver stopped
    /// (`primary_conninfo` emptied), the server running.
    pub fn cut_off(&self) {
        apply_settings(&mut self.standby.cluster().wait_until_accepting(), &[("primary_conninfo", "")]);
    }

    /// Promotes the standby and waits until it accepts writes: a client of it.
    pub fn promote(&self) -> Client {
        self.standby.cluster().promote();
        self.standby.cluster().wait_until_accepting()
    }

    /// Starts the standby again if it stopped by itself (a write that failed while it
    /// replayed stops its startup process, and PostgreSQL then shuts it down).
    pub fn start_standby_if_stopped(&mut self) {
        if self.standby.cluster_mut().stopped_by_itself() {
            self.standby.start();
        }
    }

    /// The end of the WAL the standby has received (or replayed, when more), as an LSN.
    pub fn received_lsn(&self) -> u64 {
        let received: String = value(
            &mut self.standby.cluster().wait_until_accepting(),
            "SELECT greatest(coalesce(pg_last_wal_receive_lsn(), '0/0'), coalesce(pg_last_wal_replay_lsn(), '0/0'))::text",
            &[],
        );
        parse_lsn(&received).unwrap_or_else(|| panic!("not an LSN: {received:?}"))
    }

    /// The standby's promotion, as an HA manager does it: a standby that stops during its
    /// promotion is started again and promoted again (a failing fsync of its replay, say,
    /// PANICs the startup process right after the request, and the server shuts down).
    pub fn promote_until_promoted(&mut self) -> Promoted {
        let received = self.received_lsn();
        let mut stopped = Vec::new();
        loop {
            match self.standby.cluster_mut().try_promote() {
                Ok(()) => {
                    let switched_at = switchpoint(&mut self.standby.cluster().wait_until_accepting());
                    return Promoted { switched_at, stopped };
                }
                Err(PromotionFailed::Stopped(log)) => {
                    assert!(stopped.len() < 4, "the standby stopped during each of 5 promotions\n{log}");
                    let why = log
                        .lines()
                        .rev()
                        .find(|line| line.contains("PANIC:") || line.contains("FATAL:"))
                        .unwrap_or("no PANIC or FATAL in its log");
                    stopped.push(why.trim().to_string());
                }
                Err(failed) => panic!("the standby was not promoted: {failed:?}"),
            }
            let signal_left = self.standby.cluster().data_dir().join("standby.signal").exists();
            self.standby.start();
            if !signal_left {
                // Stopped after PostgreSQL removed standby.signal: back as a primary on the old
                // timeline (its promotion guard owed on disk), switched where what it had
                // received ended, as in `promote_losing_power_at_its_end`.
                return Promoted { switched_at: received, stopped };
            }
        }
    }

    /// The standby's promotion, its machine losing power right after PostgreSQL removed
    /// `standby.signal` (LazyFS kills itself at that unlink): before the end-of-recovery
    /// record, before the worker could start. Started again, it runs crash recovery as a
    /// primary on the old timeline, and must still record the promotion guard before it
    /// issues (docs/reliability.md, F4). Returns where its WAL switched from the old primary's:
    /// the end of what it had received (no history file marks it, since the new timeline never
    /// began), read while it is cut off and nothing more can arrive.
    pub fn promote_losing_power_at_its_end(&mut self) -> u64 {
        let received = self.received_lsn();
        let postmaster = self.standby.cluster_mut().lose_power_right_after("unlink", r"standby\.signal");
        self.standby.cluster().request_promotion();
        self.standby.cluster_mut().restore_power(postmaster);
        self.standby.start();
        received
    }

    /// After a promotion: the promoted standby is the primary, the old primary the standby
    /// (to be replaced: `replace_standby`).
    pub fn swap_roles(&mut self) {
        std::mem::swap(&mut self.primary, &mut self.standby);
    }

    /// Puts `new` (a standby of the primary) in the place of the standby, which it returns.
    pub fn replace_standby(&mut self, new: S) -> S {
        std::mem::replace(&mut self.standby, new)
    }
}

/// Watches whether a pair's standby replays: `stuck` says when its replay has stood still for
/// `stuck_for` while its primary wrote past it (a standby that will never move again; an
/// operator then rebuilds it).
pub struct ReplayWatch {
    stuck_for: Duration,
    /// The standby's replay position when last seen to move, and since when.
    seen: Option<(u64, Instant)>,
    /// When it last looked (it connects to both servers).
    checked: Instant,
}

/// A standby's replay that stood still: where it stands, and how far its primary had written.
pub struct StuckReplay {
    pub replayed: u64,
    pub written: u64,
}

impl ReplayWatch {
    pub fn new(stuck_for: Duration) -> ReplayWatch {
        ReplayWatch { stuck_for, seen: None, checked: Instant::now() }
    }

    /// Looks (at most every 10 s): the stuck replay, once it has stood still for `stuck_for`
    /// while the primary wrote past it. A standby down or not answering is not stuck.
    pub fn stuck<S: Member>(&mut self, pair: &Pair<S>) -> Option<StuckReplay> {
        if self.checked.elapsed() < Duration::from_secs(10) {
            return None;
        }
        self.checked = Instant::now();
        let position =
            |cluster: &Cluster, query: &str| parse_lsn(&cluster.try_value::<Option<String>>(query)??);
        let Some(replayed) = position(pair.standby.cluster(), "SELECT pg_last_wal_replay_lsn()::text") else {
            self.seen = None;
            return None;
        };
        let written = position(pair.primary.cluster(), "SELECT pg_current_wal_flush_lsn()::text")?;
        let Some((_, since)) = self.seen.filter(|&(seen, _)| seen == replayed) else {
            self.seen = Some((replayed, Instant::now()));
            return None;
        };
        if written <= replayed || since.elapsed() < self.stuck_for {
            return None;
        }
        self.seen = None;
        Some(StuckReplay { replayed, written })
    }
}

/// A WAL position as PostgreSQL prints it ("16/B374D848"), as a number.
pub fn parse_lsn(text: &str) -> Option<u64> {
    let (high, low) = text.trim().split_once('/')?;
    Some((u64::from_str_radix(high, 16).ok()? << 32) | u64::from_str_radix(low, 16).ok()?)
}

/// Where a just promoted server left its old timeline: the end of the WAL it had, from the
/// newest timeline history file (its last line: parent timeline, switch point, reason).
fn switchpoint(client: &mut Client) -> u64 {
    let history: String = value(
        client,
        "SELECT pg_read_file('pg_wal/' || name) FROM pg_ls_waldir()
         WHERE name LIKE '%.history' ORDER BY name DESC LIMIT 1",
        &[],
    );
    let last = history.lines().rev().find(|line| !line.trim().is_empty()).unwrap_or_default();
    last.split('\t').nth(1).and_then(parse_lsn).unwrap_or_else(|| panic!("no switch point in {history:?}"))
}

impl<'a> PairBuilder<'a> {
    /// The primary's postgresql.conf lines, which its standby copies.
    pub fn settings(mut self, settings: &'a [&'a str]) -> Self {
        self.primary_settings = settings;
        self
    }

    /// Lines added to the standby's copied configuration.
    pub fn standby_settings(mut self, settings: &'a [&'a str]) -> Self {
        self.standby_settings = settings;
        self
    }

    /// SQL run on the primary before the standby is made, instead of `TABLE_T`.
    pub fn setup(mut self, sql: &'a str) -> Self {
        self.setup = sql;
        self
    }

    /// The standby's data directory on `disk`.
    pub fn standby_disk(mut self, disk: Disk) -> Self {
        self.standby_disk = disk;
        self
    }

    /// `primary`, running and set up by the test, with a standby made of it now by base backup
    /// (with `standby_settings` and `standby_disk`) and started. Its own settings and setup are
    /// not used.
    pub fn start_standby_of(self, primary: Cluster) -> Pair {
        let mut standby = self.standby_of(&primary);
        standby.start_with(&[]);
        Pair { primary, standby }
    }

    /// Starts the primary, runs its setup, then makes its standby and starts it.
    pub fn start(self) -> Pair {
        let mut pair = self.create_standby();
        pair.standby.start_with(&[]);
        pair
    }

    /// Starts the primary, runs its setup, and makes its standby, not started (to start it
    /// later, or on a clock of its own).
    pub fn create_standby(self) -> Pair {
        let primary = Cluster::builder(&format!("{}-primary", self.name))
            .settings(self.primary_settings)
            .setup(self.setup)
            .start();
        let standby = self.standby_of(&primary);
        Pair { primary, standby }
    }

    /// Both servers on one faked clock, at the real time until set: the primary's reservation
    /// worker started again once it runs, since the one its postmaster forks first reads the
    /// real clock (clock_glitch.rs).
    pub fn start_on_one_clock(self) -> (Pair, FakeClock) {
        let mut primary =
            Cluster::builder(&format!("{}-primary", self.name)).settings(self.primary_settings).create();
        let clock = FakeClock::of(&primary);
        clock.start(&mut primary);
        primary.restart_reservation_worker();
        primary.connect().batch_execute(self.setup).unwrap();
        let mut standby = self.standby_of(&primary);
        clock.start(&mut standby);
        (Pair { primary, standby }, clock)
    }

    fn standby_of(&self, primary: &Cluster) -> Cluster {
        Cluster::builder(&format!("{}-standby", self.name))
            .standby_of(primary)
            .disk(self.standby_disk)
            .settings(self.standby_settings)
            .create()
    }
}

/// The ID of the first row a server inserts into `t` once it issues again: after a start or a
/// promotion, calls are refused (55000) until the clock is within `max_lead_ms` of where the
/// shards resume.
pub fn first_id_once_issuing(client: &mut Client) -> i64 {
    wait_for("the server issues IDs", Duration::from_secs(60), || {
        client.query_one("INSERT INTO t DEFAULT VALUES RETURNING id", &[]).ok().map(|row| row.get(0))
    })
}

#[cfg(test)]
mod tests {
    use super::parse_lsn;

    #[test]
    fn wal_positions_compare_as_numbers() {
        assert_eq!(parse_lsn("0/16E3FA0"), Some(0x16E3FA0));
        assert_eq!(parse_lsn("16/B374D848\n"), Some((0x16 << 32) | 0xB374D848));
        // Compared as text, "9/0" would come after "10/0".
        assert!(parse_lsn("9/FFFFFFFF").unwrap() < parse_lsn("A/0").unwrap());
        assert_eq!(parse_lsn("16B374D848"), None);
    }
}
