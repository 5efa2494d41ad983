//! The clock policy on a real server: its limits are reloadable, a call that would run past
//! the lead bound waits for the clock when allowed to, and fails cleanly when not.

use postgres::Client;
use snowflake_id_integration::{apply_settings, db_error, value, Cluster};

/// Advances shard 2 to 450 ms ahead of the clock (within a 500 ms bound); returns that ID.
fn advance_ahead(client: &mut Client) -> i64 {
    let advance =
        "SELECT snowflake_advance(2, snowflake_compose(clock_timestamp() + interval '450 ms', 2, 0))";
    value(client, advance, &[])
}

/// 400 ms worth of IDs (4,096 per ms): from 450 ms ahead, this needs about 850 ms of lead,
/// less the time between the advance's clock reading and the batch's. It stays past the
/// 500 ms bound unless that time exceeds 350 ms (the advance waits for the reservation to be
/// recorded, a WAL flush and two fsyncs, so a loaded machine can take tens of milliseconds).
const BATCH_IDS: i64 = 1_638_400;
const BATCH: &str = "SELECT count(*), min(id), max(id), \
     extract(epoch FROM snowflake_timestamp(max(id)) - clock_timestamp())::float8 * 1000 \
     FROM snowflake_nextvals(2, 1638400) id";

#[test]
fn past_the_lead_bound_a_call_fails_or_waits_as_configured() {
    let cluster = Cluster::builder("clock-policy").setup("CREATE EXTENSION snowflake_id").start();
    let mut client = cluster.connect();

    // No waiting allowed: refused at once, nothing issued.
    apply_settings(&mut client, &[("snowflake_id.max_lead_ms", "500ms"), ("snowflake_id.max_wait_ms", "0")]);
    let ahead = advance_ahead(&mut client);
    let db = db_error(&mut client, BATCH);
    assert_eq!(db.code().code(), "55000");
    assert!(
        db.message().starts_with("shard 2 would run ")
            && db.message().ends_with(" ms ahead of the wall clock"),
        "{}",
        db.message()
    );
    let detail = db.detail().unwrap();
    assert!(detail.starts_with("Its next ID would carry "), "{detail}");
    assert!(
        detail.contains(
            "snowflake_id.max_lead_ms = 500 and snowflake_id.max_wait_ms = 0 allow 500 ms at most."
        ),
        "{detail}"
    );
    let next: i64 = value(&mut client, "SELECT snowflake_nextval(2)", &[]);
    let seq: i32 = value(&mut client, "SELECT snowflake_seq($1)", &[&next]);
    assert!(next > ahead);
    assert!(seq <= 1, "the refused batch consumed IDs (next seq {seq})");

    // Waiting allowed: the same call sleeps until the clock is close enough, then succeeds.
    apply_settings(&mut client, &[("snowflake_id.max_wait_ms", "1s")]);
    let ahead = advance_ahead(&mut client);
    let row = client.query_one(BATCH, &[]).unwrap();
    assert_eq!(row.get::<_, i64>(0), BATCH_IDS);
    assert!(row.get::<_, i64>(1) > ahead);
    let lead_ms: f64 = row.get(3);
    assert!(lead_ms <= 500.0, "the batch ended {lead_ms} ms ahead of the clock");
}
