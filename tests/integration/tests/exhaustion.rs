//! Sequence exhaustion: a backend taking IDs from one shard faster than 4,096 per ms runs
//! ahead of the clock ("borrows" milliseconds) but never past the lead bound, alone and with
//! other backends on the same shard. Every ID is checked against the clock read as it was issued.

use postgres::Client;
use snowflake_id_integration::engine::unix_ms;
use snowflake_id_integration::{assert_unique_and_increasing, db_error, issued, value, Cluster};

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

#[test]
fn one_shard_drained_as_fast_as_possible_stays_within_the_lead_bound() {
    let cluster = Cluster::builder("exhaustion").setup("CREATE EXTENSION snowflake_id").start();
    let mut client = cluster.connect();

    // Alone: a million single calls, then a million in one batch.
    let mut streams = vec![take(&mut client, SINGLE_CALLS), take(&mut client, BATCHES)];

    // Together: the fast backend with three others on the same shard.
    let cluster = &cluster;
    streams.extend(std::thread::scope(|scope| {
        let workers: Vec<_> = [SINGLE_CALLS, BATCHES, BATCHES, SINGLE_CALLS]
            .into_iter()
            .map(|query| scope.spawn(move || take(&mut cluster.connect(), query)))
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect::<Vec<_>>()
    }));
    // No ID repeats, within a run or between them.
    let total = assert_unique_and_increasing(&streams);

    let stats = "SELECT issued, lead_ms, waits FROM snowflake_stats() WHERE shard = 9";
    let row = client.query_one(stats, &[]).unwrap();
    let (issued, lead_ms, waits): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
    assert_eq!(issued as usize, total);
    assert!(lead_ms <= 2000);
    let bad_shard: i64 = value(
        &mut client,
        "SELECT count(*) FROM unnest($1::bigint[]) id WHERE snowflake_shard(id) <> 9",
        &[&streams.concat()],
    );
    assert_eq!(bad_shard, 0);
    println!("exhaustion: {total} IDs from shard 9 (alone, then 4 backends at once), 0 duplicates, lead within 2000 ms, {waits} waits");
}

/// The end of the 41-bit range: an epoch 2^41 ms minus a minute ago leaves a minute of IDs.
/// A batch that would pass the last millisecond is refused with 2200H, as a sequence at its
/// MAXVALUE is, and nothing is issued.
#[test]
fn passing_the_last_millisecond_raises_2200h() {
    let epoch_ms = unix_ms() - (1_i64 << 41) + 60_000;
    // Before 1970: whole seconds (rounded down) from `date`, milliseconds appended.
    let (seconds, millis) = (epoch_ms.div_euclid(1000), epoch_ms.rem_euclid(1000));
    let date = std::process::Command::new("date")
        .args(["-u", "-d", &format!("@{seconds}"), "+%Y-%m-%dT%H:%M:%S"])
        .output()
        .unwrap();
    let epoch = format!("{}.{millis:03}Z", String::from_utf8(date.stdout).unwrap().trim());
    let cluster = Cluster::builder("exhausted")
        .settings(&[&format!("snowflake_id.epoch = '{}'", epoch.trim()), "snowflake_id.max_lead_ms = 24h"])
        .setup("CREATE EXTENSION snowflake_id; SELECT snowflake_nextval(1)")
        .start();
    let mut client = cluster.connect();
    // 2 minutes of IDs at 4,096 per ms: past the end.
    let error = db_error(&mut client, "SELECT count(*) FROM snowflake_nextvals(1, 491520000)");
    assert_eq!(error.code().code(), "2200H", "{error:?}");
    assert_eq!(error.message(), "snowflake IDs have run out");
    assert_eq!(issued(&mut client, 1), 1, "the refused batch issued IDs");
}
