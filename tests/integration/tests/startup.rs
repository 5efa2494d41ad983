//! What a server does with the extension's settings at start: refuses to start with a bad
//! layout, saying why in its log; without preloading, every function refuses, naming the fix.

use snowflake_id_integration::{assert_setting_refused, db_error, log_of_refused_start, value, Cluster};

/// Starts a server that must refuse to start; returns its log, checked for the fatal line.
fn refused_start(name: &str, setting: &str) -> String {
    let log = log_of_refused_start(name, &[setting]);
    assert_setting_refused(&log, setting);
    log
}

#[test]
fn a_malformed_epoch_stops_the_server_with_a_clear_line() {
    let log = refused_start("bad-epoch", "snowflake_id.epoch = '2024-02-30'");
    assert!(log.contains("DETAIL:  2024-02-30 is not a date in the calendar"), "{log}");
    assert!(log.contains("HINT:  Set snowflake_id.epoch to a past UTC timestamp"), "{log}");
}

#[test]
fn an_epoch_in_the_future_stops_the_server() {
    let log = refused_start("future-epoch", "snowflake_id.epoch = '2999-01-01'");
    assert!(log.contains("The epoch 2999-01-01T00:00:00.000Z is in the future."), "{log}");
}

#[test]
fn an_epoch_in_another_time_zone_stops_the_server() {
    let log = refused_start("offset-epoch", "snowflake_id.epoch = '2024-01-01 00:00:00+02'");
    assert!(log.contains("time zone offset \"+02\" is not UTC"), "{log}");
}

#[test]
fn shard_bits_outside_the_range_stop_the_server() {
    let log = refused_start("bad-bits", "snowflake_id.shard_bits = 17");
    assert!(
        log.contains("17 is outside the valid range for parameter \"snowflake_id.shard_bits\" (0 .. 16)"),
        "{log}"
    );
    refused_start("garbage-bits", "snowflake_id.shard_bits = ten");
}

#[test]
fn a_default_shard_outside_the_layout_stops_the_server() {
    let log = refused_start("bad-shard", "snowflake_id.shard = 1024");
    assert!(log.contains("DETAIL:  snowflake_id.shard_bits = 10 allows shards 0 to 1023."), "{log}");
}

#[test]
fn a_misspelt_setting_is_reported_in_the_log() {
    let cluster = Cluster::builder("typo").settings(&["snowflake_id.shardbits = 13"]).start();
    let log = cluster.log();
    assert!(
        log.contains(
            "WARNING:  invalid configuration parameter name \"snowflake_id.shardbits\", removing it"
        ),
        "{log}"
    );
}

#[test]
fn without_preloading_every_function_refuses_naming_the_fix() {
    let cluster = Cluster::builder("not-preloaded").settings(&["shared_preload_libraries = ''"]).start();
    let mut client = cluster.connect();
    client.batch_execute("CREATE EXTENSION snowflake_id; SET snowflake_id.shard = 1").unwrap();
    for call in [
        "SELECT snowflake_nextval(1)",
        "SELECT snowflake_nextval()",
        "SELECT snowflake_nextvals(1, 5)",
        "SELECT snowflake_advance(1, 1)",
        "SELECT snowflake_decode(1)",
        "SELECT snowflake_compose(now(), 3, 1)",
        "SELECT snowflake_min_id(now())",
        "SELECT * FROM snowflake_layout()",
    ] {
        let db = db_error(&mut client, call);
        assert_eq!(db.code().code(), "55000", "{call}");
        assert_eq!(db.message(), "snowflake_id must be loaded via shared_preload_libraries");
        assert!(db.hint().unwrap().contains("Add snowflake_id to shared_preload_libraries"));
    }
}

#[test]
fn the_instagram_layout_with_its_own_epoch() {
    // The named layout gives the split; the epoch set explicitly wins over Instagram's own.
    let cluster = Cluster::builder("instagram")
        .settings(&["snowflake_id.layout = 'instagram'", "snowflake_id.epoch = '2019-01-01'"])
        .start();
    let mut client = cluster.connect();
    client.batch_execute("CREATE EXTENSION snowflake_id; SET TimeZone = 'UTC'").unwrap();
    let row = client
        .query_one(
            "SELECT time_bits, shard_bits, seq_bits, max_shard, ids_per_ms, epoch::text, \
             current_setting('snowflake_id.shard_bits') FROM snowflake_layout()",
            &[],
        )
        .unwrap();
    assert_eq!((0..5).map(|column| row.get::<_, i32>(column)).collect::<Vec<_>>(), [40, 13, 10, 8191, 1024]);
    assert_eq!(row.get::<_, String>(5), "2019-01-01 00:00:00+00");
    assert_eq!(row.get::<_, String>(6), "13", "SHOW gives the width the layout set");
    // Instagram's formula: ((ms - epoch) << 23) | (shard << 10) | seq.
    let row = client
        .query_one(
            "SELECT snowflake_shard(id), snowflake_seq(id), abs(extract(epoch FROM snowflake_timestamp(id) - now())) < 5, \
             (id >> 23) = (extract(epoch FROM snowflake_timestamp(id)) * 1000)::int8 - 1546300800000, \
             (id >> 10) & 8191 FROM snowflake_nextval(8191) id",
            &[],
        )
        .unwrap();
    let (shard, seq, near_now): (i32, i32, bool) = (row.get(0), row.get(1), row.get(2));
    let (time_part_is_ms_since_epoch, shard_part): (bool, i64) = (row.get(3), row.get(4));
    assert_eq!((shard, seq, near_now, time_part_is_ms_since_epoch, shard_part), (8191, 0, true, true, 8191));
    assert_eq!(db_error(&mut client, "SELECT snowflake_nextval(8192)").code().code(), "22023");
}

#[test]
fn the_mastodon_layout_issues_unix_milliseconds_shifted_by_16() {
    let cluster = Cluster::builder("mastodon").settings(&["snowflake_id.layout = 'mastodon'"]).start();
    let mut client = cluster.connect();
    client.batch_execute("CREATE EXTENSION snowflake_id").unwrap();
    let row = client
        .query_one(
            "SELECT abs((id >> 16) - (extract(epoch FROM clock_timestamp()) * 1000)::int8) < 5000, \
             (SELECT (time_bits, shard_bits, seq_bits)::text FROM snowflake_layout()) FROM snowflake_nextval(0) id",
            &[],
        )
        .unwrap();
    assert_eq!((row.get::<_, bool>(0), row.get::<_, String>(1)), (true, "(47,0,16)".to_string()));
}

#[test]
fn a_split_without_8_years_of_time_or_an_unknown_layout_stops_the_server() {
    let log =
        log_of_refused_start("split-short", &["snowflake_id.shard_bits = 16", "snowflake_id.seq_bits = 12"]);
    assert!(
        log.contains(
            "FATAL:  snowflake_id.shard_bits = 16 and snowflake_id.seq_bits = 12 leave 35 bits of time, less than 8 \
             years of IDs"
        ),
        "{log}"
    );
    assert!(log.contains("so that together they are at most 25"), "{log}");
    let log =
        log_of_refused_start("split-long", &["snowflake_id.shard_bits = 0", "snowflake_id.seq_bits = 8"]);
    assert!(log.contains("leave 55 bits of time, more than the 47"), "{log}");
    let log = refused_start("layout-unknown", "snowflake_id.layout = 'instagramm'");
    assert!(log.contains("\"instagramm\" is not a named layout"), "{log}");
    assert!(log.contains("twitter, discord, instagram, mastodon"), "{log}");
}

#[test]
fn integer_settings_in_hex_or_octal_are_read_as_postgres_reads_them() {
    // PostgreSQL reads 0xC as 12 and 012 as octal 10; the server starts with those values.
    let cluster = Cluster::builder("hex-octal")
        .settings(&["snowflake_id.shard_bits = 0xC", "snowflake_id.shard = 012"])
        .setup("CREATE EXTENSION snowflake_id")
        .start();
    let mut client = cluster.connect();
    let shard_bits: i32 = value(&mut client, "SELECT shard_bits FROM snowflake_layout()", &[]);
    let shard: i32 = value(&mut client, "SELECT snowflake_shard(snowflake_nextval())", &[]);
    assert_eq!((shard_bits, shard), (12, 10));
}

/// A reservation kept further ahead than calls may lead the clock and wait for it would make
/// every restart refuse calls until the clock caught up: refused at start, and at a reload.
#[test]
fn a_reservation_longer_than_the_lead_bound_and_the_wait_is_refused() {
    let log = log_of_refused_start(
        "reserve-over-lead",
        &[
            "snowflake_id.max_lead_ms = 300",
            "snowflake_id.max_wait_ms = 100",
            "snowflake_id.reserve_ms = 500",
        ],
    );
    assert!(
        log.contains(
            "FATAL:  snowflake_id.reserve_ms (500 ms) is larger than snowflake_id.max_lead_ms + \
             snowflake_id.max_wait_ms (300 + 100 ms)"
        ),
        "{log}"
    );
    assert!(
        log.contains(
            "HINT:  Keep snowflake_id.reserve_ms at most snowflake_id.max_lead_ms + snowflake_id.max_wait_ms"
        ),
        "{log}"
    );

    // Never leading the clock is fine, with the default wait.
    Cluster::builder("lead-zero").settings(&["snowflake_id.max_lead_ms = 0"]).start();

    let cluster =
        Cluster::builder("reserve-over-lead-reload").settings(&["snowflake_id.reserve_ms = 2500"]).start();
    let mut client = cluster.connect();
    for statement in [
        "ALTER SYSTEM SET snowflake_id.reserve_ms = '4s'",
        "ALTER SYSTEM SET snowflake_id.max_lead_ms = 1000",
        "ALTER SYSTEM SET snowflake_id.max_wait_ms = 0",
    ] {
        let error = db_error(&mut client, statement);
        assert_eq!(error.code().code(), "22023", "{statement}: {error:?}");
        assert!(
            error
                .detail()
                .unwrap()
                .contains("is larger than snowflake_id.max_lead_ms + snowflake_id.max_wait_ms"),
            "{error:?}"
        );
    }
    // Within the bound, all three.
    for statement in [
        "ALTER SYSTEM SET snowflake_id.reserve_ms = '3s'",
        "ALTER SYSTEM SET snowflake_id.max_lead_ms = '3s'",
        "ALTER SYSTEM SET snowflake_id.max_wait_ms = 500",
    ] {
        client.batch_execute(statement).unwrap();
    }
}
