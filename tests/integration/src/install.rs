//! Which PostgreSQL the tests run: its programs and folders, from `$PG_CONFIG`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// `pg_config` of the PostgreSQL under test: `$PG_CONFIG`, by default Debian's 15.
pub(crate) fn pg_config() -> PathBuf {
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

pub(crate) fn pg_config_dir(pg_config: &Path, flag: &str) -> PathBuf {
    let out = Command::new(pg_config).arg(flag).output().expect("run pg_config");
    assert!(out.status.success(), "{} {flag} failed", pg_config.display());
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// The major version of the PostgreSQL whose programs are in `bin` (e.g. 15, 18).
pub fn major_of(bin: &Path) -> u32 {
    let out = Command::new(bin.join("postgres")).arg("--version").output().expect("run postgres --version");
    let text = String::from_utf8_lossy(&out.stdout);
    // "postgres (PostgreSQL) 18.6", "postgres (PostgreSQL) 19rc1 (Debian 19~rc1-1)": the
    // digits that start the word after "(PostgreSQL)".
    let version =
        text.split("(PostgreSQL)").nth(1).and_then(|rest| rest.split_whitespace().next()).unwrap_or_default();
    let major: String = version.chars().take_while(char::is_ascii_digit).collect();
    major.parse().unwrap_or_else(|_| panic!("no version in {text:?}"))
}
