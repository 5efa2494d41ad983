//! Faults a test injects into a running server: its clock (libfaketime) and its fsyncs
//! (strace).

use crate::cluster::Cluster;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Environment that makes a postmaster (and its children) read the wall clock through
/// libfaketime, offset by the seconds written in `offset_file` (e.g. "-10", "+0"). The
/// offset can be changed while the server runs: the file is read at every clock reading
/// (libfaketime's cache would delay a change by an amount that depends on the faked time
/// itself). Monotonic clocks stay real, so PostgreSQL's own timeouts are unaffected.
pub(crate) fn faketime_env(offset_file: &Path) -> Vec<(&'static str, String)> {
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
        write_offset_file(&offset_file, "+0");
        let env = faketime_env(&offset_file);
        FakeClock { offset_file, env }
    }

    /// The environment that puts a postmaster on this clock (for `pg_ctl_start`).
    pub fn env(&self) -> Vec<(&str, &str)> {
        self.env.iter().map(|(key, value)| (*key, value.as_str())).collect()
    }

    /// Starts the (stopped) server on this clock.
    pub fn start(&self, cluster: &mut Cluster) {
        cluster.start_with(&self.env());
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
        write_offset_file(&self.offset_file, offset);
    }
}

/// Writes a clock's offset file whole: a new file renamed over the old one. libfaketime reads
/// the file at every clock call (no cache), so a file rewritten in place could be read empty
/// or half-written, a clock jump of its own.
pub fn write_offset_file(path: &Path, offset: &str) {
    let new = path.with_extension("new");
    fs::write(&new, format!("{offset}\n")).unwrap();
    fs::rename(&new, path).unwrap();
}

/// A fault injected into every fsync and fdatasync of a process (and its threads) with
/// strace, until dropped; or into its writes at an offset (`slow_writes`).
pub struct FsyncFault(std::process::Child);

const FSYNCS: &str = "fsync,fdatasync";

impl FsyncFault {
    /// Delays every fsync of `pid` by `delay`.
    pub fn slow(pid: u32, delay: Duration) -> FsyncFault {
        FsyncFault::inject(pid, FSYNCS, &format!("delay_enter={}", delay.as_micros()))
    }

    /// Makes every fsync of `pid` fail with EIO, as a failing disk does.
    pub fn failing(pid: u32) -> FsyncFault {
        FsyncFault::inject(pid, FSYNCS, "error=EIO")
    }

    /// Delays every `pwrite` of `pid` by `delay`: the reservation worker's in-place write of its
    /// record file, after the record's WAL entry.
    pub fn slow_writes(pid: u32, delay: Duration) -> FsyncFault {
        FsyncFault::inject(pid, "pwrite64", &format!("delay_enter={}", delay.as_micros()))
    }

    fn inject(pid: u32, syscalls: &str, how: &str) -> FsyncFault {
        let child = Command::new("strace")
            .args(["-qq", "-f", "-p", &pid.to_string(), "-o", "/dev/null", "-e"])
            .arg(format!("inject={syscalls}:{how}"))
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
