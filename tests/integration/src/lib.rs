//! A throwaway PostgreSQL server for tests: `initdb`, start, connect, stop, remove.
//!
//! The server runs as the unprivileged `postgres` user when the tests run as root (initdb
//! refuses root), listens only on a Unix socket in its own temporary folder, and is stopped
//! and removed when the `Cluster` is dropped, also when a test fails (its log is printed then).

use postgres::error::DbError;
use postgres::{Client, Config, NoTls};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The port only names the socket file; nothing listens on TCP.
const PORT: u16 = 5432;

/// `bin` folder of the PostgreSQL under test: `$PG_CONFIG --bindir`, by default Debian's 15.
pub fn pg_bin_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let pg_config =
            std::env::var("PG_CONFIG").unwrap_or_else(|_| "/usr/lib/postgresql/15/bin/pg_config".into());
        let out = Command::new(&pg_config).arg("--bindir").output().expect("run pg_config");
        assert!(out.status.success(), "{pg_config} --bindir failed");
        PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
    })
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

fn run(command: &mut Command, what: &str) -> Output {
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
    root: PathBuf,
    data_dir: PathBuf,
    log_file: PathBuf,
    running: bool,
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
    fn new_folder(name: &str) -> Cluster {
        let root = std::env::temp_dir().join(format!("snowflake_id-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(&root).unwrap();
        if running_as_root() {
            run(Command::new("chown").arg("postgres:").arg(&root), "chown");
        }
        Cluster { data_dir: root.join("data"), log_file: root.join("server.log"), root, running: false }
    }

    /// Appends lines to postgresql.conf (a later line overrides an earlier one).
    fn append_settings(&self, lines: &[String]) {
        let path = self.data_dir.join("postgresql.conf");
        let mut conf = fs::read_to_string(&path).unwrap();
        for line in lines {
            conf.push_str(line);
            conf.push('\n');
        }
        fs::write(&path, conf).unwrap();
    }

    /// Creates a cluster as `start` does, without starting it.
    pub fn create(name: &str, settings: &[&str]) -> Cluster {
        let cluster = Cluster::new_folder(name);
        let mut initdb = as_server_owner(pg_bin_dir().join("initdb"));
        initdb
            .args(["-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8", "--locale=C", "-D"])
            .arg(&cluster.data_dir);
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
    /// `wal_level = replica`, the default).
    pub fn start_standby_of(primary: &Cluster, name: &str) -> Cluster {
        let mut standby = Cluster::new_folder(name);
        let mut backup = as_server_owner(pg_bin_dir().join("pg_basebackup"));
        backup.arg("-h").arg(&primary.root).args([
            "-p",
            &PORT.to_string(),
            "-U",
            "postgres",
            "-X",
            "stream",
            "-R",
            "--no-sync",
            "-D",
        ]);
        run(backup.arg(&standby.data_dir), "pg_basebackup");
        // The copied configuration names the primary's socket folder.
        standby.append_settings(&[format!("unix_socket_directories = '{}'", standby.root.display())]);
        standby.start_with(&[]);
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
        // Through `env`, so the variables reach the postmaster also across runuser.
        let mut start = as_server_owner("/usr/bin/env");
        start.args(env.iter().map(|(key, value)| format!("{key}={value}")));
        start.arg(pg_bin_dir().join("pg_ctl"));
        start.args(["-w", "-t", "120", "-D"]).arg(&self.data_dir).arg("-l").arg(&self.log_file).arg("start");
        let out = start.output().expect("run pg_ctl start");
        if !out.status.success() {
            return Err(format!("{}{}", String::from_utf8_lossy(&out.stderr), self.log()));
        }
        self.running = true;
        Ok(())
    }

    /// Stops the server: `fast` or `immediate` (a crash as far as the data is concerned).
    pub fn stop(&mut self, mode: &str) {
        if self.running {
            let mut stop = as_server_owner(pg_bin_dir().join("pg_ctl"));
            stop.args(["-w", "-t", "120", "-m", mode, "-D"]).arg(&self.data_dir).arg("stop");
            run(&mut stop, "pg_ctl stop");
            self.running = false;
        }
    }

    /// Connection settings for this server's socket.
    pub fn config(&self) -> Config {
        let mut config = Config::new();
        config.host_path(&self.root).port(PORT).user("postgres").dbname("postgres");
        config
    }

    pub fn connect(&self) -> Client {
        self.config().connect(NoTls).unwrap_or_else(|e| panic!("connect: {e}\n{}", self.log()))
    }

    /// The server log so far.
    pub fn log(&self) -> String {
        fs::read_to_string(&self.log_file).unwrap_or_default()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let log = self.log();
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            eprintln!("--- last lines of the server log ---");
            for line in tail.iter().rev() {
                eprintln!("{line}");
            }
        }
        if self.running {
            let mut stop = as_server_owner(pg_bin_dir().join("pg_ctl"));
            stop.args(["-w", "-m", "immediate", "-D"]).arg(&self.data_dir).arg("stop");
            let _ = stop.output();
        }
        let _ = fs::remove_dir_all(&self.root);
    }
}
