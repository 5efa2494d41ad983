//! Power loss: a folder on LazyFS, the FUSE file system Jepsen tests databases with, which
//! keeps what is written but not yet fsynced in its own memory and drops it on command, as a
//! machine losing power drops its page cache. `kill -9` alone keeps the page cache: what a
//! process wrote survives it, fsynced or not.
//!
//! Each server of a test gets a mount of its own (a power loss is one machine's): a daemon,
//! its fault FIFO, and the real folder beneath. scripts/lazyfs-install.sh builds LazyFS; the
//! program is `$SNOWFLAKE_LAZYFS`.

use crate::process::{poll_within, print_log_tail, running_as_root, wait_for};
use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// What LazyFS keeps in memory, written data fsynced or not; once it is full, further writes
/// go straight to the disk below (more durable than needed, never less). Its eviction stays
/// off: LazyFS 0.3.0 drops an evicted page without writing it (unfsynced data lost while the
/// server runs, which no power loss does: a server on it read blocks of 0 bytes).
const CACHE_SIZE: &str = "1gb";

/// A mounted LazyFS: unmounted, and its daemon stopped, when dropped.
pub struct LazyFs {
    daemon: Child,
    mount: PathBuf,
    /// The folder of its configuration, FIFOs and log, and the real folder beneath: kept
    /// to mount it again after a power loss it was armed for (`remount`).
    folder: PathBuf,
    below: PathBuf,
    /// Where LazyFS says a clear-cache finished, kept open for reading from the mount on (its
    /// daemon opens it for writing before it reads any command); read without waiting.
    completed: File,
}

/// Whether LazyFS is built (`$SNOWFLAKE_LAZYFS`): scripts/lazyfs-install.sh skips it when its
/// source tarball is absent, and then the tests that need it are skipped or do without.
pub fn available() -> bool {
    std::env::var_os("SNOWFLAKE_LAZYFS").is_some_and(|program| Path::new(&program).is_file())
}

/// The LazyFS program, from `$SNOWFLAKE_LAZYFS` (scripts/lib.sh sets it).
fn program() -> PathBuf {
    let program = std::env::var_os("SNOWFLAKE_LAZYFS").map(PathBuf::from).unwrap_or_default();
    assert!(
        program.is_file(),
        "LazyFS is not built at {program:?} ($SNOWFLAKE_LAZYFS): run scripts/setup.sh, which builds it \
         with scripts/lazyfs-install.sh"
    );
    program
}

/// Whether `mount` is a LazyFS mount now (from /proc/self/mountinfo).
fn mounted(mount: &Path) -> bool {
    let mounts = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let wanted = mount.to_string_lossy();
    mounts.lines().any(|line| {
        let fields: Vec<&str> = line.split(' ').collect();
        fields.get(4) == Some(&wanted.as_ref()) && line.contains(" - fuse.lazyfs ")
    })
}

/// A command run as root: LazyFS must be (here /dev/fuse is root's).
fn as_root(program: impl AsRef<Path>) -> Command {
    if running_as_root() {
        Command::new(program.as_ref())
    } else {
        let mut command = Command::new("sudo");
        command.arg("-n").arg(program.as_ref());
        command
    }
}

impl LazyFs {
    /// Mounts LazyFS at `mount` (an empty folder), over the real folder `below`, with its
    /// configuration and FIFOs in `folder`. Every user may use it (`allow_other`); new files
    /// belong to whoever made them.
    pub fn mount(folder: &Path, below: &Path, mount: &Path) -> LazyFs {
        let (daemon, completed) = LazyFs::spawn(folder, below, mount);
        LazyFs {
            daemon,
            mount: mount.to_path_buf(),
            folder: folder.to_path_buf(),
            below: below.to_path_buf(),
            completed,
        }
    }

    /// Its log, beside its configuration and FIFOs.
    fn log(&self) -> PathBuf {
        self.folder.join("lazyfs.log")
    }

    /// Starts the daemon and waits until it is mounted; returns it and its answer FIFO.
    fn spawn(folder: &Path, below: &Path, mount: &Path) -> (Child, File) {
        let faults = folder.join("lazyfs-faults.fifo");
        let completed = folder.join("lazyfs-completed.fifo");
        let config = folder.join("lazyfs.toml");
        for fifo in [&faults, &completed] {
            let _ = fs::remove_file(fifo);
        }
        fs::write(
            &config,
            format!(
                "[faults]\nfifo_path=\"{}\"\nfifo_path_completed=\"{}\"\n\
                 [cache]\napply_eviction=false\n[cache.simple]\ncustom_size=\"{CACHE_SIZE}\"\nblocks_per_page=1\n\
                 [filesystem]\nlog_all_operations=false\nlogfile=\"\"\n",
                faults.display(),
                completed.display()
            ),
        )
        .unwrap();
        // Appended to: a remount keeps what the daemon before it said.
        let log = OpenOptions::new().create(true).append(true).open(folder.join("lazyfs.log")).unwrap();
        let daemon = as_root(program())
            .arg(mount)
            .arg("--config-path")
            .arg(&config)
            .args(["-o", "allow_other", "-o", "modules=subdir", "-o"])
            .arg(format!("subdir={}", below.display()))
            // In the foreground, and single-threaded: LazyFS 0.3.0 crashed (SIGSEGV) under a
            // base backup when FUSE ran it on many threads; on one it carried a base backup
            // beside 8 pgbench clients.
            .args(["-f", "-s"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start LazyFS");
        // It makes both FIFOs, then opens the second for writing, which waits for a reader;
        // read-write never waits (Linux), and keeps it open for each command's answer.
        wait_for(
            &format!("LazyFS mounted at {mount:?} (see {folder:?}/lazyfs.log)"),
            Duration::from_secs(30),
            || (completed.exists() && mounted(mount)).then_some(()),
        );
        let completed = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&completed)
            .unwrap();
        (daemon, completed)
    }

    /// Arms a power loss at one exact moment: LazyFS kills itself right after the first `op`
    /// (`unlink`, `fsync`, `create`, `write`...) on a path matching `path_regex` (LazyFS
    /// reads it as `.*REGEX.*`), which the operation itself survives and every write not
    /// yet fsynced does not; from then on every call on the mount fails (ENOTCONN), as the
    /// processes of a machine without power do nothing more. `remount` brings it back.
    pub fn lose_power_right_after(&mut self, op: &str, path_regex: &str) {
        self.command(&format!("lazyfs::crash::timing=after::op={op}::from_rgx={path_regex}"));
    }

    /// Waits until an armed power loss happened (the daemon gone), at most `within`.
    pub fn wait_for_power_loss(&mut self, within: Duration) {
        assert!(self.exited_within(within), "the armed power loss did not happen within {within:?}");
    }

    /// Whether the daemon has exited, or does within `within`.
    fn exited_within(&mut self, within: Duration) -> bool {
        poll_within(within, Duration::from_millis(20), || self.daemon.try_wait().ok().flatten()).is_some()
    }

    /// Mounts LazyFS again after a power loss it was armed for, over the same folder: the
    /// disk as the power left it. Call it once no process of the machine runs any more.
    pub fn remount(&mut self) {
        // The dead mount stays until unmounted; lazily, should a killed process still hold it.
        let _ = as_root("fusermount3").arg("-uz").arg(&self.mount).output();
        let (daemon, completed) = LazyFs::spawn(&self.folder, &self.below, &self.mount);
        self.daemon = daemon;
        self.completed = completed;
    }

    /// Writes one command to LazyFS's fault FIFO.
    fn command(&mut self, command: &str) {
        if let Ok(Some(status)) = self.daemon.try_wait() {
            print_log_tail("LazyFS's log", &self.log(), 20);
            panic!("LazyFS at {:?} is gone ({status})", self.mount);
        }
        OpenOptions::new()
            .write(true)
            .open(self.folder.join("lazyfs-faults.fifo"))
            .and_then(|mut fifo| fifo.write_all(format!("{command}\n").as_bytes()))
            .expect("write to LazyFS's fault FIFO");
    }

    /// Drops everything written since its last fsync, in every file of the mount, as a power
    /// loss would; returns once LazyFS says it is done. Call it only when no process of the
    /// machine runs any more (after `kill -9` of them all): a process that went on would see
    /// writes vanish that a later fsync of its own should have made durable, which no power
    /// loss does.
    pub fn lose_unsynced_writes(&mut self) {
        self.command("lazyfs::clear-cache");
        let mut answer = Vec::new();
        wait_for("LazyFS reported the cleared cache", Duration::from_secs(60), || {
            let mut chunk = [0u8; 64];
            match self.completed.read(&mut chunk) {
                Ok(read) => answer.extend_from_slice(&chunk[..read]),
                Err(error) if error.kind() == ErrorKind::WouldBlock => {}
                Err(error) => panic!("read LazyFS's answer: {error}"),
            }
            answer.ends_with(b"\n").then_some(())
        });
        assert_eq!(
            String::from_utf8_lossy(&answer).trim(),
            "finished::clear-cache",
            "unexpected answer from LazyFS"
        );
    }
}

impl Drop for LazyFs {
    fn drop(&mut self) {
        // Gone before its unmount: what it said is lost with its folder, unless shown now.
        if let Ok(Some(status)) = self.daemon.try_wait() {
            eprintln!("LazyFS at {:?} had exited ({status})", self.mount);
            print_log_tail("LazyFS's log", &self.log(), 20);
        }
        // A plain unmount, then a lazy one if something still has a file open.
        let unmounted =
            as_root("fusermount3").arg("-u").arg(&self.mount).output().is_ok_and(|out| out.status.success());
        if !unmounted {
            let _ = as_root("fusermount3").arg("-uz").arg(&self.mount).output();
        }
        if !self.exited_within(Duration::from_secs(10)) {
            let _ = self.daemon.kill();
            let _ = self.daemon.wait();
        }
    }
}
