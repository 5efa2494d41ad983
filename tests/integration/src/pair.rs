//! A primary and its streaming hot standby: the pair the failover, switchover and standby tests
//! start from, and what they do to it (wait for replay, cut the standby off, promote it).

use crate::cluster::{apply_settings, Cluster, Disk};
use crate::faults::FakeClock;
use crate::process::wait_until;
use postgres::Client;

/// The pair's table by default: `t`, whose key is issued on shard 1.
pub const TABLE_T: &str =
    "CREATE EXTENSION snowflake_id; CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake_nextval(1))";

pub struct Pair {
    pub primary: Cluster,
    pub standby: Cluster,
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

    /// Waits until the standby has replayed everything the primary has written so far.
    pub fn replay(&self) {
        let lsn: String =
            self.primary.connect().query_one("SELECT pg_current_wal_lsn()::text", &[]).unwrap().get(0);
        self.standby.wait_for_replay(&lsn);
    }

    /// Inserts a row into `t` on the primary and waits until the standby has replayed it.
    pub fn insert_and_replay(&self) {
        self.primary.connect().batch_execute("INSERT INTO t DEFAULT VALUES").unwrap();
        self.replay();
    }

    /// Cuts the standby off from its primary, as a partition would: its WAL receiver stopped
    /// (`primary_conninfo` emptied), the server running.
    pub fn cut_off(&self) {
        apply_settings(&mut self.standby.connect(), &[("primary_conninfo", "")]);
    }

    /// Promotes the standby and waits until it accepts writes: a client of it.
    pub fn promote(&self) -> Client {
        self.standby.promote();
        self.standby.wait_until_accepting()
    }
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
    let mut first = None;
    wait_until("the server issues IDs", || {
        first = client.query_one("INSERT INTO t DEFAULT VALUES RETURNING id", &[]).ok().map(|row| row.get(0));
        first.is_some()
    });
    first.unwrap()
}
