//! The kits of deploy/ (`fleet.sh`, `mesh.sh`, `patroni.sh`) run for real, in a folder of
//! their own.

use crate::process::{print_log_tail, server_owned_temp_dir};
use std::fs::{self};
use std::path::{Path, PathBuf};
use std::process::Command;

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
