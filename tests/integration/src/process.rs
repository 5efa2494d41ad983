//! Processes and files as the servers' owner: commands run as `postgres` when the tests run
//! as root, temporary folders it owns, `pg_ctl`, `kill -9` of a server's processes.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub(crate) fn running_as_root() -> bool {
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
    create_server_owned_dir(&root);
    root
}

/// Makes the folder `path` (and its parents), owned by the servers' owner.
pub(crate) fn create_server_owned_dir(path: &Path) {
    fs::create_dir_all(path).unwrap();
    if running_as_root() {
        run(Command::new("chown").arg("postgres:").arg(path), "chown");
    }
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
    run(&mut pg_ctl(bin, data_dir, &["-w", "-t", "120", "-m", "fast"], "stop"), "pg_ctl stop");
}

/// `pg_ctl <options> -D <data_dir> <action>`, as the servers' owner, to run.
pub(crate) fn pg_ctl(bin: &Path, data_dir: &Path, options: &[&str], action: &str) -> Command {
    let mut command = as_server_owner(bin.join("pg_ctl"));
    command.args(options).arg("-D").arg(data_dir).arg(action);
    command
}

/// Stops the server of a kit of deploy/ whose folder is `folder` (its `data` and `server.log`)
/// and starts it again with `env` for its postmaster, such as a fake clock; both must succeed.
pub fn restart_kit_server(folder: &Path, env: &[(&str, &str)]) {
    let (bin, data_dir) = (crate::install::pg_bin_dir(), folder.join("data"));
    pg_ctl_stop(bin, &data_dir);
    let out = pg_ctl_start(bin, &data_dir, &folder.join("server.log"), env);
    assert!(out.status.success(), "{} did not start again: {out:?}", folder.display());
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
pub(crate) fn is_server_process(pid: u32) -> bool {
    fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| {
        let program = cmdline.split(|&byte| byte == 0 || byte == b' ').next().unwrap_or_default();
        program == b"postgres:" || program.ends_with(b"/postgres") || program == b"postgres"
    })
}

/// Prints the last `lines` lines of a server's log file to stderr, under a line naming it
/// (`what`): what a failed test leaves to read.
pub fn print_log_tail(what: &str, log_file: &Path, lines: usize) {
    let log = fs::read_to_string(log_file).unwrap_or_default();
    let all: Vec<&str> = log.lines().collect();
    eprintln!("--- last lines of {what} ---\n{}", all[all.len().saturating_sub(lines)..].join("\n"));
}

/// Polls `done` every 10 ms until it holds; fails the test after 60 s, naming `what`.
pub fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    wait_for(what, Duration::from_secs(60), || done().then_some(()))
}

/// Polls `poll` every 10 ms until it gives a value, and returns it; fails the test after
/// `within`, saying that it timed out waiting until `what`. A wait that wants to say more on
/// failure (the last reading) uses `poll_within` and asserts on its `None`.
pub fn wait_for<T>(what: &str, within: Duration, poll: impl FnMut() -> Option<T>) -> T {
    poll_within(within, Duration::from_millis(10), poll)
        .unwrap_or_else(|| panic!("timed out after {within:?} waiting until {what}"))
}

/// Polls `poll` every `every` until it gives a value, for at most `within`: the value, or
/// `None` if none came in time (without failing the test).
pub fn poll_within<T>(within: Duration, every: Duration, mut poll: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(value) = poll() {
            return Some(value);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(every);
    }
}
