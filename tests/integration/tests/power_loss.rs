//! A power loss never makes a server repeat an ID, even when the machine comes back with its
//! clock behind (a clock that lost its time with the power, before NTP corrects it). The data
//! directory lies on LazyFS (src/power_loss.rs): every process of the server is killed with
//! SIGKILL, then every write not yet fsynced is lost, as a machine losing power loses its page
//! cache. `kill -9` alone (tests/crash.rs) keeps them all.
//!
//! Two servers: with the reservation's WAL records (the default: crash recovery replays them
//! too) and without (`snowflake_id.wal_rmgr_id = 0`, for a server without standbys), where the
//! reservation file alone must hold, so its fsync is what this test guards.

use snowflake_id_integration::{next_id_ahead_ms, value, Cluster, Disk, FakeClock, Load, LOAD_TABLE};
use std::collections::BTreeMap;
use std::time::Duration;

/// How far behind the real time the clock comes back: more than a restart takes, so that a
/// server resuming from a lost reservation would reach the milliseconds it issued before.
const CLOCK_BEHIND: &str = "-15";

/// Four connections share shard 1; four have a shard each.
const SHARDS: [i32; 8] = [1, 1, 1, 1, 2, 3, 4, 5];

fn ids_survive_power_loss_with_the_clock_behind(name: &str, settings: &[&str]) {
    // The reservation lies a few seconds ahead of the clock that comes back: calls may issue
    // that far ahead rather than wait (max_lead_ms).
    let mut cluster = Cluster::builder(name)
        .disk(Disk::PowerLoss)
        .settings(&["restart_after_crash = on", "snowflake_id.max_lead_ms = 20s"])
        .settings(settings)
        .create();
    let clock = FakeClock::of(&cluster);
    clock.start(&mut cluster);
    cluster
        .wait_until_accepting()
        .batch_execute(&format!("CREATE EXTENSION snowflake_id; {LOAD_TABLE}"))
        .unwrap();

    // Writers commit rows (each commit is fsynced: it must survive), for long enough that the
    // reservation was renewed many times since the server started.
    let load = Load::start(&cluster, &SHARDS, 0);
    std::thread::sleep(Duration::from_secs(3));
    load.wait_for(20_000);
    // IDs taken without a commit, as an application takes them for use elsewhere: seen, so
    // never to be issued again, though nothing of them is in the WAL.
    let mut client = cluster.connect();
    let take = "SELECT max(id) FROM snowflake_nextvals($1, 1000) AS id";
    let mut seen: BTreeMap<i32, i64> =
        SHARDS[3..].iter().map(|&shard| (shard, value(&mut client, take, &[&shard]))).collect();
    // A control: a file written and never fsynced, which the power loss must take.
    cluster.write_data_file("unsynced-control", b"");
    std::fs::write(cluster.data_dir().join("unsynced-control"), b"written, not fsynced").unwrap();

    drop(client);
    cluster.lose_power();
    let acknowledged = load.finish();
    let control = std::fs::read(cluster.data_dir().join("unsynced-control")).unwrap();
    assert!(control.is_empty(), "the power loss kept a write that was never fsynced: {control:?}");

    clock.set(CLOCK_BEHIND);
    clock.start(&mut cluster);
    let mut client = cluster.wait_until_accepting();
    for &(shard, id) in &acknowledged {
        seen.entry(shard).and_modify(|before| *before = (*before).max(id)).or_insert(id);
    }
    // First, before the clock catches up: each shard resumes above every ID it had given
    // out, committed or only seen.
    for (&shard, &before) in &seen {
        let (ahead_ms, next) = next_id_ahead_ms(&mut client, shard);
        assert!(
            next > before,
            "shard {shard} repeated itself after the power loss: next ID {next} is not above {before}, given out before"
        );
        println!("{name}: shard {shard} resumed {ahead_ms:.0} ms ahead of its clock, above {before}");
        // The test's premise: the clock came back behind what was issued (else a lost
        // reservation would go unseen, the clock alone keeping the IDs apart).
        assert!(ahead_ms > 0.0, "the restart took longer than the clock was set back: set it back further");
    }
    // Every acknowledged commit survived.
    client.batch_execute("CREATE INDEX ON ids (id)").unwrap();
    let ids: Vec<i64> = acknowledged.iter().map(|&(_, id)| id).collect();
    let missing: i64 = value(
        &mut client,
        "SELECT count(*) FROM unnest($1::bigint[]) AS a(id) WHERE NOT EXISTS (SELECT 1 FROM ids WHERE ids.id = a.id)",
        &[&ids],
    );
    assert_eq!(missing, 0, "acknowledged commits lost in the power loss");
    println!(
        "{name}: {} acknowledged rows, all kept; the clock came back {CLOCK_BEHIND} s",
        acknowledged.len()
    );
}

#[test]
fn with_wal_records_no_id_repeats_after_a_power_loss() {
    ids_survive_power_loss_with_the_clock_behind("power-loss-wal", &[]);
}

#[test]
fn by_the_reservation_file_alone_no_id_repeats_after_a_power_loss() {
    ids_survive_power_loss_with_the_clock_behind("power-loss-file", &["snowflake_id.wal_rmgr_id = 0"]);
}
