//! Sequence exhaustion: a backend taking IDs from one shard faster than 4,096 per ms runs
//! ahead of the clock ("borrows" milliseconds) but never past the lead bound, alone and with
//! other backends on the same shard. Every ID is checked against the clock read as it was issued.

use postgres::{Client, NoTls};
use snowflake_id_integration::Cluster;

const MAX_LEAD_MS: f64 = 2000.0;

/// Runs `query` (rows of `(id, lead_ms)`: the ID's time minus the clock right after it was
/// issued) and checks the lead of each; returns the IDs in the order they came.
fn take(client: &mut Client, query: &str) -> Vec<i64> {
    let rows = client.query(query, &[]).unwrap();
    rows.iter()
        .map(|row| {
            let (id, lead_ms): (i64, f64) = (row.get(0), row.get(1));
            assert!(lead_ms <= MAX_LEAD_MS + 1.0, "ID {id} led the clock by {lead_ms} ms");
            id
        })
        .collect()
}

const SINGLE_CALLS: &str =
    "SELECT id, extract(epoch FROM snowflake_timestamp(id) - clock_timestamp())::float8 * 1000
     FROM (SELECT snowflake_nextval(9) AS id, g FROM generate_series(1, 1000000) g) ids";
const BATCHES: &str =
    "SELECT id, extract(epoch FROM snowflake_timestamp(id) - clock_timestamp())::float8 * 1000
     FROM snowflake_nextvals(9, 1000000) AS id";

fn assert_unique_and_increasing(streams: &[Vec<i64>]) -> usize {
    let mut all = Vec::new();
    for ids in streams {
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "a connection's IDs did not increase");
        all.extend_from_slice(ids);
    }
    let issued = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), issued, "duplicate IDs");
    issued
}

#[test]
fn one_shard_drained_as_fast_as_possible_stays_within_the_lead_bound() {
    let cluster = Cluster::builder("exhaustion").start();
    let mut client = cluster.connect();
    client.batch_execute("CREATE EXTENSION snowflake_id").unwrap();

    // Alone: a million single calls, then a million in one batch.
    let alone = vec![take(&mut client, SINGLE_CALLS), take(&mut client, BATCHES)];
    let issued_alone = assert_unique_and_increasing(&alone);

    // Together: the fast backend with three others on the same shard.
    let together: Vec<Vec<i64>> = std::thread::scope(|scope| {
        let workers: Vec<_> = [SINGLE_CALLS, BATCHES, BATCHES, SINGLE_CALLS]
            .into_iter()
            .map(|query| {
                let config = cluster.config();
                scope.spawn(move || take(&mut config.connect(NoTls).unwrap(), query))
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    let issued_together = assert_unique_and_increasing(&together);
    // No ID of the second run repeats one of the first.
    let everything: Vec<i64> = alone.iter().chain(together.iter()).flatten().copied().collect();
    let mut distinct = everything.clone();
    distinct.sort_unstable();
    distinct.dedup();
    let total = distinct.len();
    assert_eq!(total, issued_alone + issued_together, "IDs repeated between the runs");

    let row = client
        .query_one("SELECT issued, lead_ms, waits FROM snowflake_stats() WHERE shard = 9", &[])
        .unwrap();
    let (issued, lead_ms, waits): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
    assert_eq!(issued as usize, total);
    assert!(lead_ms <= 2000);
    let bad_shard: i64 = client
        .query_one(
            "SELECT count(*) FROM unnest($1::bigint[]) id WHERE snowflake_shard(id) <> 9",
            &[&everything],
        )
        .unwrap()
        .get(0);
    assert_eq!(bad_shard, 0);
    println!("exhaustion: {total} IDs from shard 9 (alone, then 4 backends at once), 0 duplicates, lead within 2000 ms, {waits} waits");
}

/// The end of the 41-bit range: an epoch 2^41 ms minus a minute ago leaves a minute of IDs.
/// A batch that would pass the last millisecond is refused with 2200H, as a sequence at its
/// MAXVALUE is, and nothing is issued.
#[test]
fn passing_the_last_millisecond_raises_2200h() {
    let now_ms =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let epoch_ms = now_ms - (1_i64 << 41) + 60_000;
    // Before 1970: whole seconds (rounded down) from `date`, milliseconds appended.
    let (seconds, millis) = (epoch_ms.div_euclid(1000), epoch_ms.rem_euclid(1000));
    let date = std::process::Command::new("date")
        .args(["-u", "-d", &format!("@{seconds}"), "+%Y-%m-%dT%H:%M:%S"])
        .output()
        .unwrap();
    let epoch = format!("{}.{millis:03}Z", String::from_utf8(date.stdout).unwrap().trim());
    let cluster = Cluster::builder("exhausted")
        .settings(&[&format!("snowflake_id.epoch = '{}'", epoch.trim()), "snowflake_id.max_lead_ms = 24h"])
        .start();
    let mut client = cluster.connect();
    client.batch_execute("CREATE EXTENSION snowflake_id").unwrap();
    client.query_one("SELECT snowflake_nextval(1)", &[]).unwrap();
    // 2 minutes of IDs at 4,096 per ms: past the end.
    let error = snowflake_id_integration::db_error(
        &mut client,
        "SELECT count(*) FROM snowflake_nextvals(1, 491520000)",
    );
    assert_eq!(error.code().code(), "2200H", "{error:?}");
    assert_eq!(error.message(), "snowflake IDs have run out");
    assert_eq!(snowflake_id_integration::issued(&mut client, 1), 1, "the refused batch issued IDs");
}
