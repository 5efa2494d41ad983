//! A throwaway PostgreSQL server for tests: `initdb`, start, connect, stop, remove.
//!
//! The server runs as the unprivileged `postgres` user when the tests run as root (initdb
//! refuses root), listens only on a Unix socket in its own temporary folder, and is stopped
//! and removed when the `Cluster` is dropped, also when a test fails (its log is printed then).

use postgres::error::DbError;
use postgres::types::ToSql;
use postgres::{Client, Config, NoTls};
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

pub mod campaign;
pub mod power_loss;

/// The port only names the socket file; nothing listens on TCP.
pub const PORT: u16 = 5432;

/// `pg_config` of the PostgreSQL under test: `$PG_CONFIG`, by default Debian's 15.
fn pg_config() -> PathBuf {
    std::env::var_os("PG_CONFIG").map_or_else(|| "/usr/lib/postgresql/15/bin/pg_config".into(), PathBuf::from)
}

/// `bin` folder of the PostgreSQL under test: `$PG_CONFIG --bindir`.
pub fn pg_bin_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| bin_dir_of(&pg_config()))
}

/// The folder of the PostgreSQL under test that `pg_config` prints for `flag`
/// (`--pkglibdir`, `--sharedir`...).
pub fn pg_dir(flag: &str) -> PathBuf {
    pg_config_dir(&pg_config(), flag)
}

/// The `bin` folder of the PostgreSQL that `pg_config` describes.
pub fn bin_dir_of(pg_config: &Path) -> PathBuf {
    pg_config_dir(pg_config, "--bindir")
}

fn pg_config_dir(pg_config: &Path, flag: &str) -> PathBuf {
    let out = Command::new(pg_config).arg(flag).output().expect("run pg_config");
    assert!(out.status.success(), "{} {flag} failed", pg_config.display());
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// The major version of the PostgreSQL whose programs are in `bin` (e.g. 15, 18).
pub fn major_of(bin: &Path) -> u32 {
    let out = Command::new(bin.join("postgres")).arg("--version").output().expect("run postgres --version");
    let text = String::from_utf8_lossy(&out.stdout);
    // "postgres (PostgreSQL) 18.6"
    let version = text.split_whitespace().last().unwrap_or_default();
    version
        .split('.')
        .next()
        .and_then(|major| major.parse().ok())
        .unwrap_or_else(|| panic!("no version in {text:?}"))
}

fn running_as_root() -> bool {
    static ROOT: OnceLock<bool> = OnceLock::new();
    *ROOT.get_or_init(|| {
        let out = Command::new("id").arg("-u").output().expect("run id -u");
        String::from_utf8_lossy(&out.stdout).trim() == "0"
    })
}

/// A command run as the server's owner: `postgres` when we are root, else ourselves.
pub fn as_server_owner(program: impl AsRef<Path>) -> Command {
    if running_as_root() {
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(program.as_ref());
        command
    } else {
        Command::new(program.as_ref())
    }
}

/// A new empty temporary folder named after `name` and this test process, owned by the
/// servers' owner (for data directories and sockets). The caller removes it.
pub fn server_owned_temp_dir(name: &str) -> PathBuf {
    // Tests of one file run in threads of one process: each call a folder of its own.
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let root = std::env::temp_dir().join(format!("snowflake_id-{name}-{}-{call}", std::process::id()));
    let _ = fs::remove_dir_all(&root);
    fs::create_dir_all(&root).unwrap();
    if running_as_root() {
        run(Command::new("chown").arg("postgres:").arg(&root), "chown");
    }
    root
}

pub fn run(command: &mut Command, what: &str) -> Output {
    let out = command.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

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

/// What a cluster's data directory lies on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Disk {
    /// The machine's file system (what `kill -9` leaves is what was written).
    Plain,
    /// A LazyFS mount of its own, which `Cluster::lose_power` can make lose every write not
    /// yet fsynced (its log and socket stay on the plain folder beside it).
    PowerLoss,
}

impl Cluster {
    /// Creates and starts a cluster with the extension preloaded, plus `settings`
    /// (postgresql.conf lines; a later line overrides an earlier one).
    pub fn start(name: &str, settings: &[&str]) -> Cluster {
        let mut cluster = Cluster::create(name, settings);
        cluster.start_with(&[]);
        cluster
    }

    /// An empty folder for a cluster's data, log and socket, owned by the server's owner.
    fn new_folder(name: &str, bin: &Path, disk: Disk) -> Cluster {
        let root = server_owned_temp_dir(name);
        let data_dir = root.join("data");
        let disk = (disk == Disk::PowerLoss).then(|| {
            let below = root.join("data-below");
            for folder in [&below, &data_dir] {
                fs::create_dir(folder).unwrap();
                if running_as_root() {
                    run(Command::new("chown").arg("postgres:").arg(folder), "chown");
                }
            }
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
    fn no_sync(&self) -> &'static [&'static str] {
        if self.disk.is_some() {
            &[]
        } else {
            &["--no-sync"]
        }
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

    /// Appends lines to postgresql.conf (a later line overrides an earlier one).
    fn append_settings(&self, lines: &[String]) {
        let mut conf = fs::read_to_string(self.data_dir.join("postgresql.conf")).unwrap();
        for line in lines {
            conf.push_str(line);
            conf.push('\n');
        }
        self.write_data_file("postgresql.conf", conf.as_bytes());
    }

    /// Adds settings to postgresql.conf, for the next start or reload (a later line
    /// overrides an earlier one).
    pub fn configure(&self, lines: &[&str]) {
        self.append_settings(&lines.iter().map(|line| line.to_string()).collect::<Vec<_>>());
    }

    /// Creates a cluster as `start` does, without starting it.
    pub fn create(name: &str, settings: &[&str]) -> Cluster {
        Cluster::create_with(pg_bin_dir(), name, settings)
    }

    /// Creates a cluster of the PostgreSQL whose programs are in `bin`, without starting it.
    /// Clusters of every major are made alike (encoding, locale, no data checksums, which
    /// PostgreSQL 18 turns on by default), so that pg_upgrade can move one to another.
    pub fn create_with(bin: &Path, name: &str, settings: &[&str]) -> Cluster {
        Cluster::create_on(Disk::Plain, bin, name, settings)
    }

    /// `create_with`, the data directory on `disk`.
    pub fn create_on(disk: Disk, bin: &Path, name: &str, settings: &[&str]) -> Cluster {
        let cluster = Cluster::new_folder(name, bin, disk);
        let mut initdb = as_server_owner(bin.join("initdb"));
        initdb.args(["-A", "trust", "-U", "postgres", "-E", "UTF8", "--locale=C"]).args(cluster.no_sync());
        if major_of(bin) >= 18 {
            initdb.arg("--no-data-checksums");
        }
        initdb.arg("-D").arg(&cluster.data_dir);
        run(&mut initdb, "initdb");
        let mut lines = vec![
            "listen_addresses = ''".to_string(),
            format!("port = {PORT}"),
            format!("unix_socket_directories = '{}'", cluster.root.display()),
            "shared_preload_libraries = 'snowflake_id'".to_string(),
            "max_connections = 60".to_string(),
        ];
        lines.extend(settings.iter().map(|line| line.to_string()));
        cluster.append_settings(&lines);
        cluster
    }

    /// Creates and starts a streaming hot standby of `primary` (which needs
    /// `wal_level = replica`, the default), with `settings` added to the copied configuration.
    pub fn start_standby_of(primary: &Cluster, name: &str, settings: &[&str]) -> Cluster {
        let mut standby = Cluster::create_standby_of(primary, name, settings);
        standby.start_with(&[]);
        standby
    }

    /// Creates a streaming hot standby of `primary` as `start_standby_of` does, without
    /// starting it (to start it on a faked clock, say).
    pub fn create_standby_of(primary: &Cluster, name: &str, settings: &[&str]) -> Cluster {
        Cluster::create_standby_through(&primary.bin, &primary.root, name, settings, Disk::Plain)
    }

    /// `create_standby_of`, the standby's data directory on `disk`.
    pub fn create_standby_on(disk: Disk, primary: &Cluster, name: &str, settings: &[&str]) -> Cluster {
        Cluster::create_standby_through(&primary.bin, &primary.root, name, settings, disk)
    }

    /// The same for a primary this harness did not start (a kit's server), reached through
    /// the Unix socket in `socket_dir` at the harness's port, on the PostgreSQL under test.
    pub fn create_standby_of_socket(socket_dir: &Path, name: &str, settings: &[&str]) -> Cluster {
        Cluster::create_standby_through(pg_bin_dir(), socket_dir, name, settings, Disk::Plain)
    }

    fn create_standby_through(
        bin: &Path,
        socket_dir: &Path,
        name: &str,
        settings: &[&str],
        disk: Disk,
    ) -> Cluster {
        let standby = Cluster::new_folder(name, bin, disk);
        let mut backup = as_server_owner(bin.join("pg_basebackup"));
        backup.arg("-h").arg(socket_dir).args([
            "-p",
            &PORT.to_string(),
            "-U",
            "postgres",
            "-X",
            "stream",
            "-R",
            // Not the spread checkpoint of the default: minutes on a server under load.
            "--checkpoint=fast",
        ]);
        backup.args(standby.no_sync()).arg("-D");
        run(backup.arg(&standby.data_dir), "pg_basebackup");
        // The copied configuration names the primary's socket folder.
        let mut lines = vec![format!("unix_socket_directories = '{}'", standby.root.display())];
        lines.extend(settings.iter().map(|line| line.to_string()));
        standby.append_settings(&lines);
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

    /// Stops the server: `fast` or `immediate` (a crash as far as the data is concerned).
    pub fn stop(&mut self, mode: &str) {
        if self.running {
            let mut stop = as_server_owner(self.bin.join("pg_ctl"));
            stop.args(["-w", "-t", "120", "-m", mode, "-D"]).arg(&self.data_dir).arg("stop");
            run(&mut stop, "pg_ctl stop");
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
        let pid_file = fs::read_to_string(self.data_dir.join("postmaster.pid")).expect("read postmaster.pid");
        pid_file.lines().next().unwrap().trim().parse().unwrap()
    }

    /// Kills the postmaster and all its children with SIGKILL at once, as a machine crash
    /// would, and waits until they are gone.
    pub fn kill_postmaster(&mut self) {
        let postmaster = self.postmaster_pid();
        // Listed first: once the postmaster is dead, they are no longer its children.
        let mut pids = children_of(postmaster);
        kill_9(postmaster);
        for &child in &pids {
            // A child may have exited meanwhile (a session that just ended): not an error.
            kill_9(child);
        }
        pids.push(postmaster);
        self.running = false;
        let deadline = Instant::now() + Duration::from_secs(60);
        while pids.iter().any(|pid| Path::new(&format!("/proc/{pid}")).exists()) {
            assert!(Instant::now() < deadline, "killed server processes did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The process id of the reservation worker, found as an operator would: the
    /// postmaster's child whose process title is "postgres: snowflake_id reservation" (it is
    /// not in pg_stat_activity). `None` while none runs.
    pub fn reservation_worker_pid(&self) -> Option<u32> {
        children_of(self.postmaster_pid()).into_iter().find(|pid| {
            fs::read_to_string(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|title| title.contains("snowflake_id reservation"))
        })
    }

    /// Terminates the reservation worker (SIGTERM, as pg_terminate_backend would) and waits
    /// until the postmaster has started another; returns its process id.
    pub fn restart_reservation_worker(&self) -> u32 {
        let old = self.reservation_worker_pid().expect("no reservation worker runs");
        run(Command::new("kill").args(["-TERM", &old.to_string()]), "kill -TERM");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match self.reservation_worker_pid() {
                Some(new) if new != old => return new,
                _ => assert!(Instant::now() < deadline, "no new reservation worker within 30 s"),
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Promotes a standby and waits until it accepts writes.
    pub fn promote(&self) {
        let mut promote = as_server_owner(self.bin.join("pg_ctl"));
        promote.args(["-w", "-t", "60", "-D"]).arg(&self.data_dir).arg("promote");
        run(&mut promote, "pg_ctl promote");
    }

    /// Waits until this standby has replayed its primary's WAL up to `lsn` (as
    /// `pg_current_wal_lsn()::text` printed it on the primary).
    pub fn wait_for_replay(&self, lsn: &str) {
        let mut client = self.connect();
        wait_until(&format!("the standby replayed up to {lsn}"), || {
            client.query_one("SELECT pg_last_wal_replay_lsn() >= $1::text::pg_lsn", &[&lsn]).unwrap().get(0)
        });
    }

    /// Waits until the server accepts connections again (after a crash and restart).
    pub fn wait_until_accepting(&self) -> Client {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let error = match self.config().connect(NoTls) {
                Ok(mut client) => match client.simple_query("SELECT 1") {
                    Ok(_) => return client,
                    Err(error) => error,
                },
                Err(error) => error,
            };
            assert!(Instant::now() < deadline, "the server did not come back: {error}\n{}", self.log());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Kills the backend `pid` of this server with SIGKILL: the postmaster then ends every
    /// other backend, resets shared memory and recovers, as after a crash. Waits until it
    /// has, and returns a connection to the recovered server.
    pub fn kill_backend(&self, pid: u32) -> Client {
        const RESET: &str = "all server processes terminated; reinitializing";
        let resets = self.log().matches(RESET).count();
        if !kill_9(pid) {
            // Gone before the signal (it exited on its own): no reset follows.
            return self.wait_until_accepting();
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.log().matches(RESET).count() == resets {
            assert!(Instant::now() < deadline, "no reset of the server within 60 s of killing backend {pid}");
            std::thread::sleep(Duration::from_millis(20));
        }
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
        let mut config = self.config();
        config.dbname(dbname);
        config.connect(NoTls).unwrap_or_else(|e| panic!("connect to {dbname}: {e}\n{}", self.log()))
    }

    /// The server log so far.
    pub fn log(&self) -> String {
        fs::read_to_string(&self.log_file).unwrap_or_default()
    }
}

/// The processes whose parent is `pid` (from /proc).
pub fn children_of(pid: u32) -> Vec<u32> {
    let Ok(entries) = fs::read_dir("/proc") else { return vec![] };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|child| {
            // The parent pid is the second field after the parenthesised command name.
            let stat = fs::read_to_string(format!("/proc/{child}/stat")).unwrap_or_default();
            let after_name = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or("");
            after_name.split_whitespace().nth(1).and_then(|ppid| ppid.parse::<u32>().ok()) == Some(pid)
        })
        .collect()
}

/// `pg_ctl start` of the (stopped) server in `data_dir`, logging to `log_file`, with extra
/// environment variables for the postmaster, such as a fake clock: a cluster of these tests,
/// or a server of a kit of deploy/.
pub fn pg_ctl_start(bin: &Path, data_dir: &Path, log_file: &Path, env: &[(&str, &str)]) -> Output {
    // Through `env`, so the variables reach the postmaster also across runuser.
    let mut start = as_server_owner("/usr/bin/env");
    start.args(env.iter().map(|(key, value)| format!("{key}={value}")));
    start.arg(bin.join("pg_ctl"));
    start.args(["-w", "-t", "120", "-D"]).arg(data_dir).arg("-l").arg(log_file).arg("start");
    start.output().expect("run pg_ctl start")
}

/// `pg_ctl stop -m fast` of the server in `data_dir` (a server of a kit of deploy/), which must
/// succeed.
pub fn pg_ctl_stop(bin: &Path, data_dir: &Path) {
    let mut stop = as_server_owner(bin.join("pg_ctl"));
    stop.args(["-w", "-t", "120", "-m", "fast", "-D"]).arg(data_dir).arg("stop");
    run(&mut stop, "pg_ctl stop");
}

/// Sends SIGKILL to a process of a server these tests started. Only to a PostgreSQL process:
/// process ids wrap around (at 32,768 on some machines), so an id read a moment ago (from a
/// postmaster.pid left by a server that has died, say) may name someone else's process by now,
/// which must not be killed. Returns whether the signal was sent: false when the process had
/// gone already (a backend whose client disconnected meanwhile, say), so that a caller waiting
/// for the server's reset after the kill knows that none will come.
pub fn kill_9(pid: u32) -> bool {
    is_server_process(pid)
        && Command::new("kill")
            .args(["-9", &pid.to_string()])
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
}

/// Whether `pid` is a PostgreSQL server process (a postmaster, whose command line names the
/// `postgres` program, or one of its children, whose process title starts with `postgres:`).
fn is_server_process(pid: u32) -> bool {
    fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| {
        let program = cmdline.split(|&byte| byte == 0 || byte == b' ').next().unwrap_or_default();
        program == b"postgres:" || program.ends_with(b"/postgres") || program == b"postgres"
    })
}

/// Environment that makes a postmaster (and its children) read the wall clock through
/// libfaketime, offset by the seconds written in `offset_file` (e.g. "-10", "+0"). The
/// offset can be changed while the server runs: the file is read at every clock reading
/// (libfaketime's cache would delay a change by an amount that depends on the faked time
/// itself). Monotonic clocks stay real, so PostgreSQL's own timeouts are unaffected.
fn faketime_env(offset_file: &Path) -> Vec<(&'static str, String)> {
    vec![
        ("LD_PRELOAD", "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1".into()),
        ("FAKETIME_TIMESTAMP_FILE", offset_file.display().to_string()),
        ("FAKETIME_NO_CACHE", "1".into()),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1".into()),
    ]
}

/// A server's wall clock faked through libfaketime (see `faketime_env`): the real time offset
/// by what `set` last wrote, which takes effect at once, also while the server runs.
pub struct FakeClock {
    offset_file: PathBuf,
    env: Vec<(&'static str, String)>,
}

impl FakeClock {
    /// A clock for `cluster`, at the real time ("+0") until set; its file is in the cluster's
    /// folder.
    pub fn of(cluster: &Cluster) -> FakeClock {
        FakeClock::in_folder(cluster.socket_dir())
    }

    /// A clock whose file is in `folder`, which the server's owner can read (a kit server's
    /// folder, say), at the real time ("+0") until set.
    pub fn in_folder(folder: &Path) -> FakeClock {
        let offset_file = folder.join("faketime");
        fs::write(&offset_file, "+0\n").unwrap();
        let env = faketime_env(&offset_file);
        FakeClock { offset_file, env }
    }

    /// The environment that puts a postmaster on this clock (for `pg_ctl_start`).
    pub fn env(&self) -> Vec<(&str, &str)> {
        self.env.iter().map(|(key, value)| (*key, value.as_str())).collect()
    }

    /// Starts the (stopped) server on this clock.
    pub fn start(&self, cluster: &mut Cluster) {
        if let Err(log) = self.try_start(cluster) {
            panic!("the server did not start\n--- server log ---\n{log}");
        }
    }

    /// Starts the (stopped) server on this clock; on failure, the server log.
    pub fn try_start(&self, cluster: &mut Cluster) -> Result<(), String> {
        cluster.try_start_with(&self.env())
    }

    /// The file libfaketime reads the offset from (written by `set`).
    pub fn offset_file(&self) -> &Path {
        &self.offset_file
    }

    /// Sets the offset from the real time, in seconds as libfaketime reads it: "-10", "+0".
    pub fn set(&self, offset: &str) {
        fs::write(&self.offset_file, format!("{offset}\n")).unwrap();
    }
}

/// A fault injected into every fsync and fdatasync of a process (and its threads) with
/// strace, until dropped.
pub struct FsyncFault(std::process::Child);

impl FsyncFault {
    /// Delays every fsync of `pid` by `delay`.
    pub fn slow(pid: u32, delay: Duration) -> FsyncFault {
        FsyncFault::inject(pid, &format!("delay_enter={}", delay.as_micros()))
    }

    /// Makes every fsync of `pid` fail with EIO, as a failing disk does.
    pub fn failing(pid: u32) -> FsyncFault {
        FsyncFault::inject(pid, "error=EIO")
    }

    fn inject(pid: u32, how: &str) -> FsyncFault {
        let child = Command::new("strace")
            .args(["-qq", "-f", "-p", &pid.to_string(), "-o", "/dev/null", "-e"])
            .arg(format!("inject=fsync,fdatasync:{how}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("run strace");
        // strace attaches within a moment; give it one.
        std::thread::sleep(Duration::from_millis(300));
        FsyncFault(child)
    }
}

impl Drop for FsyncFault {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            print_log_tail("the server log", &self.log_file, 40);
        }
        if self.running {
            let mut stop = as_server_owner(self.bin.join("pg_ctl"));
            stop.args(["-w", "-m", "immediate", "-D"]).arg(&self.data_dir).arg("stop");
            let _ = stop.output();
        }
        // Unmounted before its folder goes.
        self.disk = None;
        let _ = fs::remove_dir_all(&self.root);
    }
}

/// Prints the last `lines` lines of a server's log file to stderr, under a line naming it
/// (`what`): what a failed test leaves to read.
pub fn print_log_tail(what: &str, log_file: &Path, lines: usize) {
    let log = fs::read_to_string(log_file).unwrap_or_default();
    let tail: Vec<&str> = log.lines().rev().take(lines).collect();
    eprintln!("--- last lines of {what} ---");
    for line in tail.iter().rev() {
        eprintln!("{line}");
    }
}

/// A kit of deploy/ (`fleet.sh`, `mesh.sh`) run for real, in a temporary folder of its own
/// that the script is given as `SNOWFLAKE_<NAME>_DIR`, each server in a subfolder with its
/// `server.log`. `<name>.sh down` stops it and the folder is removed when it is dropped, also
/// when the test fails (the last lines of every server's log are printed then).
pub struct Kit {
    name: &'static str,
    dir: PathBuf,
    env: Vec<(String, std::ffi::OsString)>,
}

impl Kit {
    /// Runs `deploy/<name>.sh up <servers>`, with `env` for this and every later call.
    pub fn up(name: &'static str, servers: usize, env: &[(&str, &str)]) -> Kit {
        let dir = server_owned_temp_dir(name);
        let mut all = vec![(format!("SNOWFLAKE_{}_DIR", name.to_uppercase()), dir.clone().into_os_string())];
        all.extend(env.iter().map(|(key, value)| (key.to_string(), value.into())));
        let kit = Kit { name, dir, env: all };
        kit.run(&["up", &servers.to_string()]);
        kit
    }

    /// The kit's folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `deploy/<name>.sh args`, to run.
    pub fn command(&self, args: &[&str]) -> Command {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../../deploy/{}.sh", self.name));
        let mut command = Command::new(script);
        command.args(args).envs(self.env.iter().map(|(key, value)| (key, value)));
        command
    }

    /// Runs `deploy/<name>.sh args`, which must succeed; returns what it printed.
    pub fn run(&self, args: &[&str]) -> String {
        let name = self.name;
        let out = self.command(args).output().unwrap_or_else(|e| panic!("run deploy/{name}.sh: {e}"));
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{name}.sh {args:?} failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    }
}

impl Drop for Kit {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let mut servers: Vec<PathBuf> = fs::read_dir(&self.dir)
                .into_iter()
                .flatten()
                .flatten()
                .map(|entry| entry.path())
                .filter(|path| path.join("server.log").is_file())
                .collect();
            servers.sort();
            for server in servers {
                let name = server.file_name().unwrap_or_default().to_string_lossy().into_owned();
                print_log_tail(&format!("the log of {name}"), &server.join("server.log"), 15);
            }
        }
        let _ = self.command(&["down"]).output();
        let _ = fs::remove_dir_all(&self.dir);
    }
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
        .args(["-U", "postgres", "--retain", "--no-sync", "-s"])
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
    let deadline = Instant::now() + Duration::from_secs(10);
    for (name, value) in settings {
        while client.query_one("SELECT current_setting($1)", &[name]).unwrap().get::<_, String>(0) != *value {
            assert!(Instant::now() < deadline, "the reload of {name} did not reach the session");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Rows inserted by a `Load`: one table, no unique index, so that a duplicate ID would show.
pub const LOAD_TABLE: &str = "CREATE TABLE ids (id bigint NOT NULL, shard int NOT NULL, round int NOT NULL)";

/// What one of `Writers` runs over and over: a statement returning the keys it wrote (a
/// `bigint` in its first column), with its parameters.
pub struct Write {
    sql: String,
    params: Vec<i32>,
    prepared: bool,
}

impl Write {
    /// Sent as text at every run.
    pub fn text(sql: &str, params: &[i32]) -> Write {
        Write { sql: sql.to_string(), params: params.to_vec(), prepared: false }
    }

    /// Prepared once by its connection and run as that prepared statement, as an
    /// application's connection pool does (PostgreSQL plans it again when a table it uses
    /// changes).
    pub fn prepared(sql: &str) -> Write {
        Write { sql: sql.to_string(), params: Vec::new(), prepared: true }
    }
}

/// Connections writing at once, each with a connection of its own, until told to stop or
/// until its first error (a crash cutting it off, a refusal), which is recorded.
pub struct Writers {
    stop: Arc<AtomicBool>,
    rows: Arc<AtomicUsize>,
    backends: Arc<Mutex<Vec<u32>>>,
    errors: Arc<Mutex<Vec<String>>>,
    workers: Vec<std::thread::JoinHandle<Vec<i64>>>,
}

impl Writers {
    /// Starts one connection per entry of `writes`, each running its write over and over.
    pub fn start(cluster: &Cluster, writes: Vec<Write>) -> Writers {
        let stop = Arc::new(AtomicBool::new(false));
        let rows = Arc::new(AtomicUsize::new(0));
        let backends = Arc::new(Mutex::new(Vec::new()));
        let errors = Arc::new(Mutex::new(Vec::new()));
        let workers = writes
            .into_iter()
            .map(|write| {
                let (stop, rows, backends) = (stop.clone(), rows.clone(), backends.clone());
                let errors = errors.clone();
                let config = cluster.config();
                std::thread::spawn(move || {
                    let mut keys = Vec::new();
                    let fail = |error: String| errors.lock().unwrap().push(error);
                    let mut client = match config.connect(NoTls) {
                        Ok(client) => client,
                        Err(error) => {
                            fail(error.to_string());
                            return keys;
                        }
                    };
                    if let Ok(row) = client.query_one("SELECT pg_backend_pid()", &[]) {
                        backends.lock().unwrap().push(row.get::<_, i32>(0) as u32);
                    }
                    let params: Vec<&(dyn ToSql + Sync)> =
                        write.params.iter().map(|param| param as &(dyn ToSql + Sync)).collect();
                    let prepared = match write.prepared.then(|| client.prepare(&write.sql)) {
                        None => None,
                        Some(Ok(statement)) => Some(statement),
                        Some(Err(error)) => {
                            fail(format!("{error:?}"));
                            return keys;
                        }
                    };
                    while !stop.load(Ordering::Relaxed) {
                        let result = match &prepared {
                            Some(statement) => client.query(statement, &params),
                            None => client.query(write.sql.as_str(), &params),
                        };
                        match result {
                            Ok(written) => {
                                keys.extend(written.iter().map(|row| row.get::<_, i64>(0)));
                                rows.fetch_add(written.len(), Ordering::Relaxed);
                            }
                            Err(error) => {
                                // The server went away (or refused): this connection is done.
                                fail(format!("{error:?}"));
                                break;
                            }
                        }
                    }
                    keys
                })
            })
            .collect();
        Writers { stop, rows, backends, errors, workers }
    }

    /// Rows acknowledged so far.
    pub fn rows(&self) -> usize {
        self.rows.load(Ordering::Relaxed)
    }

    /// Waits until at least `rows` were acknowledged (at most a minute).
    pub fn wait_for(&self, rows: usize) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.rows() < rows {
            let errors = self.errors();
            assert!(
                Instant::now() < deadline,
                "the load reached only {} rows; errors: {errors:?}",
                self.rows()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The errors the connections stopped at so far (each stops at its first).
    pub fn errors(&self) -> Vec<String> {
        self.errors.lock().unwrap().clone()
    }

    /// Process ids of the writers' backends.
    pub fn backends(&self) -> Vec<u32> {
        self.backends.lock().unwrap().clone()
    }

    /// Stops (or collects, after a crash) the connections; returns each one's keys, in the
    /// order of `writes` and each in the order they were returned, and every error.
    pub fn finish(self) -> (Vec<Vec<i64>>, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        let keys = self.workers.into_iter().map(|worker| worker.join().unwrap()).collect();
        let errors = self.errors.lock().unwrap().clone();
        (keys, errors)
    }
}

/// Connections inserting IDs concurrently until told to stop or cut off by a crash.
pub struct Load {
    writers: Writers,
    shards: Vec<i32>,
}

impl Load {
    /// Starts one connection per entry of `shards`, each inserting batches of rows with
    /// `snowflake_nextval(its shard)` tagged with `round`, one transaction per batch.
    pub fn start(cluster: &Cluster, shards: &[i32], round: i32) -> Load {
        let insert = "INSERT INTO ids (id, shard, round) \
                      SELECT snowflake_nextval($1), $1, $2 FROM generate_series(1, 250) RETURNING id";
        let writes = shards.iter().map(|&shard| Write::text(insert, &[shard, round])).collect();
        Load { writers: Writers::start(cluster, writes), shards: shards.to_vec() }
    }

    /// Rows acknowledged so far.
    pub fn inserted(&self) -> usize {
        self.writers.rows()
    }

    /// Waits until at least `rows` were acknowledged (at most a minute).
    pub fn wait_for(&self, rows: usize) {
        self.writers.wait_for(rows)
    }

    /// The errors the connections stopped at so far (each stops at its first).
    pub fn errors(&self) -> Vec<String> {
        self.writers.errors()
    }

    /// Process ids of the load's backends.
    pub fn backends(&self) -> Vec<u32> {
        self.writers.backends()
    }

    /// Stops (or collects, after a crash) the connections; returns every acknowledged
    /// `(shard, id)`.
    pub fn finish(self) -> Vec<(i32, i64)> {
        let (keys, _) = self.writers.finish();
        self.shards
            .into_iter()
            .zip(keys)
            .flat_map(|(shard, ids)| ids.into_iter().map(move |id| (shard, id)))
            .collect()
    }
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

/// Polls `done` every 10 ms until it holds; fails the test after 60 s, naming `what`.
pub fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Issues one ID of `shard` and says how far ahead of the server's clock its time part lies,
/// in ms, with the ID: where a shard resumes after a promotion or a change of settings.
pub fn next_id_ahead_ms(client: &mut Client, shard: i32) -> (f64, i64) {
    let row = client
        .query_one(
            "SELECT id, extract(epoch FROM snowflake_timestamp(id) - clock_timestamp())::float8 * 1000
             FROM (SELECT snowflake_nextval($1) AS id) AS issued",
            &[&shard],
        )
        .unwrap();
    (row.get(1), row.get(0))
}

/// The one `bigint` a query returns, such as a `count(*)`.
pub fn count(client: &mut Client, query: &str) -> i64 {
    client.query_one(query, &[]).unwrap().get(0)
}

/// IDs issued for `shard` since the server started, from snowflake_stats() (0 when none).
pub fn issued(client: &mut Client, shard: i32) -> i64 {
    client
        .query_opt("SELECT issued FROM snowflake_stats() WHERE shard = $1", &[&shard])
        .unwrap()
        .map_or(0, |row| row.get(0))
}

/// Asserts that the `ids` table holds no ID twice; returns its row count.
pub fn assert_no_duplicates(client: &mut Client) -> i64 {
    let row = client.query_one("SELECT count(*), count(DISTINCT id) FROM ids", &[]).unwrap();
    let (rows, distinct): (i64, i64) = (row.get(0), row.get(1));
    assert_eq!(rows, distinct, "{} duplicate IDs", rows - distinct);
    rows
}

/// Asserts that every ID of a round is above every ID of the same shard from an earlier
/// round (rounds are separated by crashes or restarts).
pub fn assert_rounds_increase(client: &mut Client) {
    let violations: i64 = client
        .query_one(
            "WITH r AS (SELECT shard, round, min(id) AS lo, max(id) AS hi FROM ids GROUP BY shard, round)
             SELECT count(*) FROM r later JOIN r earlier
               ON later.shard = earlier.shard AND earlier.round < later.round AND earlier.hi >= later.lo",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(violations, 0, "a shard issued IDs after a restart that are not above earlier ones");
}

/// What a stand-in HA manager answers (`HaStandIn`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// 200, as Patroni's `GET /primary` on the leader.
    Leader,
    /// 503, as on a replica.
    Replica,
    /// Nothing: each connection closed unanswered, as when the manager is dead.
    Gone,
}

/// A stand-in for an HA manager's REST API: an HTTP server on a loopback port answering every
/// request as told (`Answer`), for the lease (`snowflake_id.lease_url`). Stopped when dropped.
pub struct HaStandIn {
    port: u16,
    answer: Arc<Mutex<Answer>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl HaStandIn {
    pub fn start() -> HaStandIn {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let answer = Arc::new(Mutex::new(Answer::Leader));
        let stop = Arc::new(AtomicBool::new(false));
        let (answer_of_thread, stop_of_thread) = (answer.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            use std::io::{Read, Write};
            while !stop_of_thread.load(Ordering::SeqCst) {
                let Ok((mut stream, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                };
                let response = match *answer_of_thread.lock().unwrap() {
                    Answer::Leader => "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
                    Answer::Replica => "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n",
                    Answer::Gone => continue, // dropped: the connection closes unanswered
                };
                stream.set_nonblocking(false).unwrap();
                stream.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
                let mut request = [0u8; 512];
                let _ = stream.read(&mut request);
                let _ = stream.write_all(response.as_bytes());
            }
        });
        HaStandIn { port, answer, stop, thread: Some(thread) }
    }

    pub fn answer(&self, answer: Answer) {
        *self.answer.lock().unwrap() = answer;
    }

    /// The postgresql.conf line that points a server's lease at this stand-in.
    pub fn lease_url_setting(&self) -> String {
        format!("snowflake_id.lease_url = 'http://127.0.0.1:{}/primary'", self.port)
    }
}

impl Drop for HaStandIn {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
