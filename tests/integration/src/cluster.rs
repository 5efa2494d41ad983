//! A throwaway server: `initdb` (or a base backup of another), start, connect, stop, remove;
//! its data directory on the plain disk or on one that can lose power (`Disk`).

use crate::install::{major_of, pg_bin_dir};
use crate::power_loss;
use crate::process::{
    as_server_owner, children_of, create_server_owned_dir, kill_9, pg_ctl, pg_ctl_start, poll_within,
    print_log_tail, run, server_owned_temp_dir, wait_for, wait_until,
};
use crate::queries::value;
use postgres::error::DbError;
use postgres::types::FromSqlOwned;
use postgres::{Client, Config, NoTls};
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The port only names the socket file; nothing listens on TCP.
pub const PORT: u16 = 5432;

/// Runs a statement that must fail in the server, and returns the server's error.
pub fn db_error(client: &mut Client, statement: &str) -> DbError {
    match client.batch_execute(statement) {
        Ok(()) => panic!("no error from {statement}"),
        Err(error) => match error.as_db_error() {
            Some(db) => db.clone(),
            None => panic!("{statement}: {error}"),
        },
    }
}

pub struct Cluster {
    /// The programs of the PostgreSQL major this cluster runs.
    bin: PathBuf,
    root: PathBuf,
    data_dir: PathBuf,
    log_file: PathBuf,
    running: bool,
    /// The LazyFS mount the data directory lies on, with `Disk::PowerLoss`.
    disk: Option<power_loss::LazyFs>,
}

/// Why `Cluster::try_promote` did not end with a primary; each with the server's log.
#[derive(Debug)]
pub enum PromotionFailed {
    /// The server stopped during its promotion.
    Stopped(String),
    /// It was still in recovery after 120 s.
    TimedOut(String),
}

impl Cluster {
    /// A cluster to make: `Cluster::builder(name)`, then what differs from the defaults, then
    /// `create` (stopped) or `start`. The defaults: the PostgreSQL under test, a new
    /// cluster (`initdb`) with the extension preloaded, the plain disk, the real clock.
    pub fn builder(name: &str) -> ClusterBuilder<'_> {
        ClusterBuilder {
            name,
            settings: Vec::new(),
            disk: Disk::Plain,
            bin: None,
            source: Source::Initdb,
            env: Vec::new(),
            setup: None,
        }
    }

    /// An empty folder for a cluster's data, log and socket, owned by the server's owner.
    fn new_folder(name: &str, bin: &Path, disk: Disk) -> Cluster {
        let root = server_owned_temp_dir(name);
        let data_dir = root.join("data");
        let disk = (disk == Disk::PowerLoss).then(|| {
            let below = root.join("data-below");
            create_server_owned_dir(&below);
            create_server_owned_dir(&data_dir);
            // What the mount shows as the data directory: 0700, as PostgreSQL wants it
            // (initdb sets it; pg_basebackup takes the folder as it finds it).
            fs::set_permissions(&below, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
            power_loss::LazyFs::mount(&root, &below, &data_dir)
        });
        Cluster {
            bin: bin.to_path_buf(),
            data_dir,
            log_file: root.join("server.log"),
            root,
            running: false,
            disk,
        }
    }

    /// `--no-sync` for initdb and pg_basebackup, where nothing loses unsynced writes: on a
    /// power-loss disk they sync what they wrote, as they do by default.
    fn no_sync(&self) -> Option<&'static str> {
        self.disk.is_none().then_some("--no-sync")
    }

    /// Writes a file of the data directory, fsynced (file and folder) on a power-loss disk, as
    /// an operator's tools do; `name` is relative to the data directory.
    pub fn write_data_file(&self, name: &str, content: &[u8]) {
        let path = self.data_dir.join(name);
        fs::write(&path, content).unwrap();
        if self.disk.is_some() {
            File::open(&path).and_then(|file| file.sync_all()).unwrap();
            File::open(path.parent().unwrap()).and_then(|folder| folder.sync_all()).unwrap();
        }
    }

    /// A power loss: every process of the server killed with SIGKILL, then every write to its
    /// data directory not yet fsynced lost. Start it again afterwards. Needs `Disk::PowerLoss`.
    pub fn lose_power(&mut self) {
        assert!(self.disk.is_some(), "a power loss needs a cluster on Disk::PowerLoss");
        if self.running {
            self.kill_postmaster();
        }
        self.disk.as_mut().unwrap().lose_unsynced_writes();
    }

    /// Arms a power loss of this server's machine at one exact moment: right after the first
    /// `op` (`unlink`, `fsync`...) on a path of its data directory matching `path_regex`
    /// (`LazyFs::lose_power_right_after`). Returns the postmaster's process id, for
    /// `restore_power`. Needs `Disk::PowerLoss`.
    pub fn lose_power_right_after(&mut self, op: &str, path_regex: &str) -> u32 {
        let postmaster = self.postmaster_pid();
        self.disk
            .as_mut()
            .expect("an armed power loss needs Disk::PowerLoss")
            .lose_power_right_after(op, path_regex);
        postmaster
    }

    /// Once the power loss armed by `lose_power_right_after` happened: every process of the
    /// server that still runs killed, then the disk mounted again as the power left it.
    /// Start the server again afterwards.
    pub fn restore_power(&mut self, postmaster: u32) {
        let disk = self.disk.as_mut().expect("an armed power loss needs Disk::PowerLoss");
        disk.wait_for_power_loss(Duration::from_secs(60));
        kill_server(postmaster);
        self.running = false;
        disk.remount();
    }

    /// Adds settings to postgresql.conf, for the next start or reload (a later line
    /// overrides an earlier one).
    pub fn configure(&self, lines: &[&str]) {
        self.append_settings(lines);
    }

    fn append_settings(&self, lines: impl IntoIterator<Item = impl AsRef<str>>) {
        let mut conf = fs::read_to_string(self.data_dir.join("postgresql.conf")).unwrap();
        for line in lines {
            conf.push_str(line.as_ref());
            conf.push('\n');
        }
        self.write_data_file("postgresql.conf", conf.as_bytes());
    }

    /// A new cluster of the PostgreSQL whose programs are in `bin`, on `disk`, not started.
    /// Clusters of every major are made alike (encoding, locale, no data checksums, which
    /// PostgreSQL 18 turns on by default), so that pg_upgrade can move one to another.
    fn initdb(disk: Disk, bin: &Path, name: &str, settings: &[String]) -> Cluster {
        let cluster = Cluster::new_folder(name, bin, disk);
        let mut initdb = as_server_owner(bin.join("initdb"));
        initdb.args(["-A", "trust", "-U", "postgres", "-E", "UTF8", "--locale=C"]).args(cluster.no_sync());
        if major_of(bin) >= 18 {
            initdb.arg("--no-data-checksums");
        }
        initdb.arg("-D").arg(&cluster.data_dir);
        run(&mut initdb, "initdb");
        let lines = [
            "listen_addresses = ''".to_string(),
            format!("port = {PORT}"),
            format!("unix_socket_directories = '{}'", cluster.root.display()),
            "shared_preload_libraries = 'snowflake_id'".to_string(),
            "max_connections = 60".to_string(),
        ];
        cluster.append_settings(lines.iter().chain(settings));
        cluster
    }

    /// A streaming hot standby made by a base backup of the server whose socket is in
    /// `socket_dir` (which needs `wal_level = replica`, the default), with `settings` added to
    /// the copied configuration; not started.
    fn base_backup(disk: Disk, bin: &Path, socket_dir: &Path, name: &str, settings: &[String]) -> Cluster {
        let standby = Cluster::new_folder(name, bin, disk);
        let mut backup = as_server_owner(bin.join("pg_basebackup"));
        let port = PORT.to_string();
        backup.arg("-h").arg(socket_dir).args(["-p", &port, "-U", "postgres", "-X", "stream", "-R"]);
        // Not the spread checkpoint of the default: minutes on a server under load.
        backup.arg("--checkpoint=fast").args(standby.no_sync()).arg("-D").arg(&standby.data_dir);
        // Tried again (it empties the folder when it fails), as an operator or an HA manager
        // would: the primary's clock stepped a minute ahead ends its WAL sender by
        // wal_sender_timeout mid-copy (the 18 long run, seed 7475, a +92 s step).
        for attempt in 1.. {
            let out = backup.output().unwrap_or_else(|error| panic!("pg_basebackup: {error}"));
            if out.status.success() {
                break;
            }
            assert!(
                attempt < 3,
                "pg_basebackup failed 3 times; the last: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            std::thread::sleep(Duration::from_secs(1));
        }
        // The copied configuration names the primary's socket folder.
        let socket = format!("unix_socket_directories = '{}'", standby.root.display());
        standby.append_settings(std::iter::once(&socket).chain(settings));
        standby
    }

    /// Starts the (stopped) server, with extra environment variables for the postmaster,
    /// such as a fake clock.
    pub fn start_with(&mut self, env: &[(&str, &str)]) {
        if let Err(log) = self.try_start_with(env) {
            panic!("the server did not start\n--- server log ---\n{log}");
        }
    }

    /// Starts the server; on failure, the server log (which says why).
    pub fn try_start_with(&mut self, env: &[(&str, &str)]) -> Result<(), String> {
        assert!(!self.running, "server already running");
        let out = pg_ctl_start(&self.bin, &self.data_dir, &self.log_file, env);
        if !out.status.success() {
            return Err(format!("{}{}", String::from_utf8_lossy(&out.stderr), self.log()));
        }
        self.running = true;
        Ok(())
    }

    /// Stops the server: `fast` or `immediate` (a crash as far as the data is concerned). One
    /// that stopped by itself meanwhile is left as it is (`stopped_by_itself`): the 18 long run
    /// with seed 7181 had a failover stop its standby, which a failing fsync of its replay had
    /// just stopped, and pg_ctl found no server.
    pub fn stop(&mut self, mode: &str) {
        if self.running && !self.stopped_by_itself() {
            run(
                &mut pg_ctl(&self.bin, &self.data_dir, &["-w", "-t", "120", "-m", mode], "stop"),
                "pg_ctl stop",
            );
            self.running = false;
        }
    }

    /// The ceiling of the reservation record in the data directory (`snowflake_id.reservation`),
    /// in Unix ms: the number after `ceiling_unix_ms=`, in a record of any version.
    pub fn recorded_ceiling_unix_ms(&self) -> i64 {
        let record = fs::read_to_string(self.data_dir.join("snowflake_id.reservation"))
            .expect("read the reservation record");
        let digits: String = record
            .trim_start_matches("snowflake_id reservation ceiling_unix_ms=")
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '-')
            .collect();
        digits.parse().unwrap_or_else(|_| panic!("unexpected reservation record {record:?}"))
    }

    /// The postmaster's process id.
    pub fn postmaster_pid(&self) -> u32 {
        self.recorded_postmaster_pid().expect("read postmaster.pid")
    }

    /// The process id in postmaster.pid, if the file is there (a server that stopped cleanly
    /// removed it).
    fn recorded_postmaster_pid(&self) -> Option<u32> {
        let pid_file = fs::read_to_string(self.data_dir.join("postmaster.pid")).ok()?;
        pid_file.lines().next()?.trim().parse().ok()
    }

    /// Whether a server started by this harness has stopped by itself since (PostgreSQL shuts a
    /// standby down when its startup process fails); it counts as stopped from then on.
    pub fn stopped_by_itself(&mut self) -> bool {
        let alive =
            self.recorded_postmaster_pid().is_some_and(|pid| Path::new(&format!("/proc/{pid}")).exists());
        let stopped = self.running && !alive;
        if stopped {
            self.running = false;
        }
        stopped
    }

    /// Kills the postmaster and all its children with SIGKILL at once, as a machine crash
    /// would, and waits until they are gone.
    pub fn kill_postmaster(&mut self) {
        if !self.stopped_by_itself() {
            kill_server(self.postmaster_pid());
            self.running = false;
        }
    }

    /// The process id of the reservation worker, found as an operator would: the
    /// postmaster's child whose process title is "postgres: snowflake_id reservation" (it is
    /// not in pg_stat_activity). `None` while none runs.
    pub fn reservation_worker_pid(&self) -> Option<u32> {
        self.child_titled("snowflake_id reservation")
    }

    /// The process id of a standby's startup process, which replays the WAL ("postgres:
    /// startup recovering ..."). `None` while none runs.
    pub fn startup_process_pid(&self) -> Option<u32> {
        self.child_titled("startup")
    }

    /// The postmaster's child whose process title contains `title`.
    fn child_titled(&self, title: &str) -> Option<u32> {
        children_of(self.postmaster_pid()).into_iter().find(|pid| {
            fs::read_to_string(format!("/proc/{pid}/cmdline")).is_ok_and(|text| text.contains(title))
        })
    }

    /// Terminates the reservation worker (SIGTERM, as pg_terminate_backend would) and waits
    /// until the postmaster has started another; returns its process id.
    pub fn restart_reservation_worker(&self) -> u32 {
        // The postmaster forks the worker once recovery has ended, which may come after the
        // server accepts connections (pg_ctl -w returns then): on a loaded machine, wait for it.
        let within = Duration::from_secs(30);
        let old = wait_for("a reservation worker runs", within, || self.reservation_worker_pid());
        run(Command::new("kill").args(["-TERM", &old.to_string()]), "kill -TERM");
        wait_for("a new reservation worker runs", within, || {
            self.reservation_worker_pid().filter(|&new| new != old)
        })
    }

    /// Asks a standby to promote itself, without waiting for the promotion.
    pub fn request_promotion(&self) {
        run(&mut pg_ctl(&self.bin, &self.data_dir, &["-W"], "promote"), "pg_ctl promote -W");
    }

    /// Promotes a standby and waits until it accepts writes; `Err` at once when the server
    /// stops during the promotion (a failing fsync at the end of recovery PANICs the startup
    /// process, and the server shuts down), where `pg_ctl promote -w` would wait its minute.
    pub fn try_promote(&mut self) -> Result<(), PromotionFailed> {
        self.request_promotion();
        let ended = poll_within(Duration::from_secs(120), Duration::from_millis(100), || {
            if self.stopped_by_itself() {
                return Some(Err(PromotionFailed::Stopped(self.log())));
            }
            (self.try_value("SELECT NOT pg_is_in_recovery()") == Some(true)).then_some(Ok(()))
        });
        ended.unwrap_or_else(|| Err(PromotionFailed::TimedOut(self.log())))
    }

    /// Promotes a standby and waits until it accepts writes.
    pub fn promote(&self) {
        run(&mut pg_ctl(&self.bin, &self.data_dir, &["-w", "-t", "60"], "promote"), "pg_ctl promote");
    }

    /// Waits until this standby has replayed its primary's WAL up to `lsn` (as
    /// `pg_current_wal_lsn()::text` printed it on the primary).
    pub fn wait_for_replay(&self, lsn: &str) {
        assert!(
            self.replayed_within(lsn, Duration::from_secs(60)),
            "timed out waiting until the standby replayed up to {lsn}"
        );
    }

    /// Whether this standby replays its primary's WAL up to `lsn` within `within`: polled,
    /// connecting again while it refuses (it may be restarting), never failing the test.
    pub fn replayed_within(&self, lsn: &str, within: Duration) -> bool {
        let mut client: Option<Client> = None;
        let replayed = poll_within(within, Duration::from_millis(20), || {
            if client.as_ref().is_none_or(Client::is_closed) {
                client = self.config().connect(NoTls).ok();
            }
            let row =
                client.as_mut()?.query_one("SELECT pg_last_wal_replay_lsn() >= $1::text::pg_lsn", &[&lsn]);
            row.ok()?.get::<_, Option<bool>>(0).filter(|&replayed| replayed)
        });
        replayed.is_some()
    }

    /// Waits until the server accepts connections again (after a crash and restart): at most
    /// 60 s, or 5 minutes while it answers that it is starting up or recovering (57P03). Its
    /// recovery can take more than a minute on a loaded machine (75 s for 8 MB of WAL on
    /// LazyFS beside two other fault campaigns on 2 cores); one that never ends still fails.
    pub fn wait_until_accepting(&self) -> Client {
        let started = Instant::now();
        loop {
            let error = match self.config().connect(NoTls) {
                Ok(mut client) => match client.simple_query("SELECT 1") {
                    Ok(_) => return client,
                    Err(error) => error,
                },
                Err(error) => error,
            };
            let recovering = error.code().is_some_and(|code| code.code() == "57P03");
            let limit = Duration::from_secs(if recovering { 300 } else { 60 });
            assert!(started.elapsed() < limit, "the server did not come back: {error}\n{}", self.log());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Kills the backend `pid` of this server with SIGKILL: the postmaster then ends every
    /// other backend, resets shared memory and recovers, as after a crash. Waits until it
    /// has, and returns a connection to the recovered server.
    pub fn kill_backend(&self, pid: u32) -> Client {
        const RESET: &str = "all server processes terminated; reinitializing";
        let resets = self.log().matches(RESET).count();
        let postmaster = self.recorded_postmaster_pid();
        // Only while it is still a child of this server's postmaster: a backend that exited
        // since it was listed may have its process id given to another process already (the
        // 18 long run with seed 3857 killed a process that was no backend of this server, and
        // waited for a reset that never came). Gone before the signal: no reset follows.
        if !postmaster.is_some_and(|postmaster| children_of(postmaster).contains(&pid)) || !kill_9(pid) {
            return self.wait_until_accepting();
        }
        // A postmaster stopped meanwhile (another fault's restart) resets nothing either.
        wait_until(&format!("the server reset after backend {pid} was killed"), || {
            self.log().matches(RESET).count() > resets || self.recorded_postmaster_pid() != postmaster
        });
        self.wait_until_accepting()
    }

    /// The data directory.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The programs of this cluster's PostgreSQL.
    pub fn bin_dir(&self) -> &Path {
        &self.bin
    }

    /// The folder holding the server's socket (for `psql -h`, `pg_dump -h`).
    pub fn socket_dir(&self) -> &Path {
        &self.root
    }

    /// A file in this cluster's folder that the server's owner can read (for libfaketime).
    pub fn scratch_file(&self, name: &str, content: &str) -> PathBuf {
        let path = self.root.join(name);
        fs::write(&path, content).unwrap();
        path
    }

    /// Connection settings for this server's socket.
    pub fn config(&self) -> Config {
        let mut config = Config::new();
        config.host_path(&self.root).port(PORT).user("postgres").dbname("postgres");
        config
    }

    pub fn connect(&self) -> Client {
        self.connect_to("postgres")
    }

    /// A connection to another database of this server.
    pub fn connect_to(&self, dbname: &str) -> Client {
        self.connect_as("postgres", dbname)
    }

    /// A connection to the database `dbname` of this server as `role`.
    pub fn connect_as(&self, role: &str, dbname: &str) -> Client {
        let mut config = self.config();
        config.user(role).dbname(dbname);
        config.connect(NoTls).unwrap_or_else(|e| panic!("connect to {dbname} as {role}: {e}\n{}", self.log()))
    }

    /// The first column of the one row `query` returns on a new connection; `None` when the
    /// server does not answer (down, restarting) or the query fails.
    pub(crate) fn try_value<T: FromSqlOwned>(&self, query: &str) -> Option<T> {
        let mut client = self.config().connect(NoTls).ok()?;
        client.query_one(query, &[]).ok()?.try_get(0).ok()
    }

    /// The server log so far.
    pub fn log(&self) -> String {
        fs::read_to_string(&self.log_file).unwrap_or_default()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            print_log_tail("the server log", &self.log_file, 40);
        }
        if self.running {
            let _ = pg_ctl(&self.bin, &self.data_dir, &["-w", "-m", "immediate"], "stop").output();
        }
        // Unmounted before its folder goes.
        self.disk = None;
        let _ = fs::remove_dir_all(&self.root);
    }
}

/// Kills a postmaster and all its children with SIGKILL at once, and waits until they are
/// gone (those already gone included).
fn kill_server(postmaster: u32) {
    // Listed first: once the postmaster is dead, they are no longer its children.
    let mut pids = children_of(postmaster);
    kill_9(postmaster);
    for &child in &pids {
        // A child may have exited meanwhile (a session that just ended): not an error.
        kill_9(child);
    }
    pids.push(postmaster);
    wait_until("the killed server's processes exited", || {
        pids.iter().all(|pid| !Path::new(&format!("/proc/{pid}")).exists())
    });
}

/// What `Cluster::builder` makes: see there.
#[must_use]
pub struct ClusterBuilder<'a> {
    name: &'a str,
    settings: Vec<String>,
    disk: Disk,
    bin: Option<PathBuf>,
    source: Source<'a>,
    env: Vec<(String, String)>,
    setup: Option<String>,
}

/// Where a new cluster's data comes from.
#[derive(Clone, Copy)]
enum Source<'a> {
    Initdb,
    /// A base backup of a server of this harness (of its major): its standby.
    StandbyOf(&'a Cluster),
    /// The same base backup without its standby.signal: a copy of the data directory that
    /// starts as a primary (the same system identifier and timeline).
    CopyOf(&'a Cluster),
    /// A base backup through the socket in this folder (a kit's server), of the major under
    /// test.
    StandbyThrough(&'a Path),
}

impl<'a> ClusterBuilder<'a> {
    /// postgresql.conf lines (a later line overrides an earlier one).
    pub fn settings(mut self, settings: &[&str]) -> Self {
        self.settings.extend(settings.iter().map(|line| line.to_string()));
        self
    }

    /// Its data directory on `disk`.
    pub fn disk(mut self, disk: Disk) -> Self {
        self.disk = disk;
        self
    }

    /// The PostgreSQL whose programs are in `bin` (another major, for pg_upgrade).
    pub fn bin(mut self, bin: &Path) -> Self {
        self.bin = Some(bin.to_path_buf());
        self
    }

    /// A streaming hot standby of `primary`, by a base backup, its settings added to the
    /// copied configuration.
    pub fn standby_of(mut self, primary: &'a Cluster) -> Self {
        self.source = Source::StandbyOf(primary);
        self
    }

    /// A copy of `primary`'s data directory started beside it as a primary (a VM snapshot, a
    /// restored backup started by mistake): its base backup without standby.signal, so it
    /// keeps the system identifier and the timeline.
    pub fn copy_of(mut self, primary: &'a Cluster) -> Self {
        self.source = Source::CopyOf(primary);
        self
    }

    /// A standby of a server this harness did not start (a kit's), reached through the Unix
    /// socket in `socket_dir` at the harness's port.
    pub fn standby_through(mut self, socket_dir: &'a Path) -> Self {
        self.source = Source::StandbyThrough(socket_dir);
        self
    }

    /// The postmaster's environment at `start` (a faked clock's: `FakeClock::env`).
    pub fn env(mut self, env: Vec<(&str, &str)>) -> Self {
        self.env = env.into_iter().map(|(key, value)| (key.to_string(), value.to_string())).collect();
        self
    }

    /// SQL run once it has started (`CREATE EXTENSION snowflake_id`, a table).
    pub fn setup(mut self, sql: &str) -> Self {
        self.setup = Some(sql.to_string());
        self
    }

    /// Makes it, not started.
    pub fn create(self) -> Cluster {
        let (bin, socket_dir) = match self.source {
            Source::Initdb => {
                let bin = self.bin.unwrap_or_else(|| pg_bin_dir().to_path_buf());
                return Cluster::initdb(self.disk, &bin, self.name, &self.settings);
            }
            Source::StandbyOf(primary) | Source::CopyOf(primary) => {
                (primary.bin.as_path(), primary.root.as_path())
            }
            Source::StandbyThrough(socket_dir) => (pg_bin_dir(), socket_dir),
        };
        let cluster = Cluster::base_backup(self.disk, bin, socket_dir, self.name, &self.settings);
        if let Source::CopyOf(_) = self.source {
            fs::remove_file(cluster.data_dir.join("standby.signal"))
                .expect("the base backup's standby.signal");
        }
        cluster
    }

    /// Makes it and starts it, then runs its setup SQL.
    pub fn start(mut self) -> Cluster {
        let env = std::mem::take(&mut self.env);
        let setup = self.setup.take();
        let mut cluster = self.create();
        cluster
            .start_with(&env.iter().map(|(key, value)| (key.as_str(), value.as_str())).collect::<Vec<_>>());
        if let Some(sql) = setup {
            cluster.connect().batch_execute(&sql).unwrap_or_else(|error| panic!("{sql}: {error}"));
        }
        cluster
    }
}

/// What a cluster's data directory lies on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Disk {
    /// The machine's file system (what `kill -9` leaves is what was written).
    Plain,
    /// A LazyFS mount of its own, which `Cluster::lose_power` can make lose every write not
    /// yet fsynced (its log and socket stay on the plain folder beside it).
    PowerLoss,
}

/// Runs pg_upgrade from `old` (stopped, or running with `--check`) into `new` (stopped), in
/// copy mode, keeping its logs.
pub fn pg_upgrade(old: &Cluster, new: &Cluster, options: &[&str]) {
    let work = new.socket_dir().to_path_buf();
    let mut upgrade = as_server_owner(new.bin_dir().join("pg_upgrade"));
    upgrade
        .current_dir(&work)
        .arg("-b")
        .arg(old.bin_dir())
        .arg("-B")
        .arg(new.bin_dir())
        .arg("-d")
        .arg(old.data_dir())
        .arg("-D")
        .arg(new.data_dir())
        // pg_upgrade runs the new cluster with fsync off and syncs it all at the end, as an
        // operator's run does. `--no-sync` skips that sync only where nothing loses unsynced
        // writes: the 15 long run with seed 3550 skipped it on a power-loss disk and lost the
        // new cluster's checkpoint files to a power loss after its upgrade ("could not read
        // file pg_logical/replorigin_checkpoint: read 0 of 4"). Placed before `-s`, whose
        // value is the argument after it (between them, the socket folder became a stray
        // argument and every pg_upgrade failed).
        .args(new.no_sync())
        .args(["-U", "postgres", "--retain", "-s"])
        .arg(&work)
        .args(options);
    run(&mut upgrade, "pg_upgrade");
}

/// Sets reloadable settings with ALTER SYSTEM and a reload, and waits until this session
/// sees every new value (written as `SHOW` prints it, e.g. "500ms").
pub fn apply_settings(client: &mut Client, settings: &[(&str, &str)]) {
    for (name, value) in settings {
        // One statement each: ALTER SYSTEM refuses to run inside a transaction block.
        client.batch_execute(&format!("ALTER SYSTEM SET {name} = '{value}'")).unwrap();
    }
    client.batch_execute("SELECT pg_reload_conf()").unwrap();
    for (name, wanted) in settings {
        wait_for(&format!("the reload of {name} reached the session"), Duration::from_secs(10), || {
            (value::<String>(client, "SELECT current_setting($1)", &[name]) == *wanted).then_some(())
        });
    }
}

/// Keeps a server's reservation worker stopped (SIGSTOP) while it lives: a worker that has not
/// yet run since a reload, or one of a machine paused, whose backends run on. Lets it go on
/// (SIGCONT) when dropped, also when the test fails.
pub struct StoppedWorker(u32);

impl StoppedWorker {
    pub fn stop(cluster: &Cluster) -> StoppedWorker {
        let pid = cluster.reservation_worker_pid().expect("no reservation worker runs");
        run(Command::new("kill").args(["-STOP", &pid.to_string()]), "kill -STOP");
        StoppedWorker(pid)
    }
}

impl Drop for StoppedWorker {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-CONT", &self.0.to_string()]).output();
    }
}

/// The log of a new server, named after `name`, with `settings` that must refuse to start.
pub fn log_of_refused_start(name: &str, settings: &[&str]) -> String {
    let mut cluster = Cluster::builder(name).settings(settings).create();
    cluster.try_start_with(&[]).expect_err(&format!("the server started with {settings:?}"))
}

/// Asserts that a server's log refuses `setting` (`parameter = value`, as postgresql.conf has it)
/// as PostgreSQL refuses an invalid value, with a hint to correct it.
pub fn assert_setting_refused(log: &str, setting: &str) {
    let (parameter, value) = setting.split_once(" = ").unwrap();
    let value = value.trim_matches('\'');
    let fatal = format!("FATAL:  invalid value for parameter \"{parameter}\": \"{value}\"");
    assert!(log.contains(&fatal), "no line {fatal} in\n{log}");
    assert!(log.contains("HINT:  Correct"), "no hint to correct {parameter} in\n{log}");
}
