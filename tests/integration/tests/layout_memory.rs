//! The layout is remembered: a server that recorded one epoch and split refuses to start with
//! others (set one by one or by a named layout), naming both, until its settings are put back
//! (or its record is deliberately removed). Records written before seq_bits existed are read
//! with the split of their time.

use snowflake_id_integration::{value, Cluster, Pair};

/// Restarts with `setting` added; returns the log of the refused start.
fn refused_restart(cluster: &mut Cluster, setting: &str) -> String {
    cluster.stop("fast");
    cluster.configure(&[setting]);
    let refused = cluster.try_start_with(&[]);
    refused.expect_err(&format!("the server started with {setting} after issuing IDs under another layout"))
}

/// The layout record in the data directory.
fn layout_record(cluster: &Cluster) -> String {
    std::fs::read_to_string(cluster.data_dir().join("snowflake_id.layout")).unwrap()
}

#[test]
fn another_epoch_or_shard_bits_stops_the_server_naming_both_layouts() {
    let mut cluster = Cluster::builder("layout-memory").setup("CREATE EXTENSION snowflake_id").start();
    let last_id: i64 = value(&mut cluster.connect(), "SELECT snowflake_nextval(5)", &[]);
    let record = layout_record(&cluster);
    assert_eq!(record, "snowflake_id layout epoch=2024-01-01T00:00:00.000Z shard_bits=10 seq_bits=12\n");

    // A later epoch: the next IDs would be lower than the last (and would come again).
    let log = refused_restart(&mut cluster, "snowflake_id.epoch = '2024-06-01'");
    assert!(
        log.contains(
            "FATAL:  snowflake_id is configured with another layout than the one this server issued IDs in: \
             configured epoch=2024-06-01T00:00:00.000Z shard_bits=10 seq_bits=12, recorded \
             epoch=2024-01-01T00:00:00.000Z shard_bits=10 seq_bits=12"
        ),
        "{log}"
    );
    assert!(
        log.contains(
            "HINT:  Set snowflake_id.epoch = '2024-01-01T00:00:00.000Z', snowflake_id.shard_bits = 10 and \
             snowflake_id.seq_bits = 12"
        ),
        "{log}"
    );
    assert!(log.contains("remove \"snowflake_id.layout\""), "{log}");

    // Other shard bits with the right epoch: old IDs would decode to other shards.
    let log =
        refused_restart(&mut cluster, "snowflake_id.epoch = '2024-01-01'\nsnowflake_id.shard_bits = 13");
    assert!(
        log.contains("configured epoch=2024-01-01T00:00:00.000Z shard_bits=13 seq_bits=12, recorded"),
        "{log}"
    );

    // Another split by a named layout: Instagram's widths and epoch.
    let log =
        refused_restart(&mut cluster, "snowflake_id.shard_bits = 10\nsnowflake_id.layout = 'instagram'");
    assert!(
        log.contains("configured epoch=2024-01-01T00:00:00.000Z shard_bits=10 seq_bits=10, recorded"),
        "{log}"
    );
    cluster.configure(&["snowflake_id.layout = ''"]);

    // Put back, it starts and goes on above the last ID.
    cluster.configure(&["snowflake_id.shard_bits = 10"]);
    cluster.start_with(&[]);
    let next: i64 = value(&mut cluster.connect(), "SELECT snowflake_nextval(5)", &[]);
    assert!(next > last_id, "{next} is not above {last_id}");

    // The one deliberate way out: the record removed, the new layout is recorded.
    cluster.stop("fast");
    cluster.configure(&["snowflake_id.shard_bits = 13"]);
    std::fs::remove_file(cluster.data_dir().join("snowflake_id.layout")).unwrap();
    cluster.start_with(&[]);
    let shard: i32 = value(&mut cluster.connect(), "SELECT snowflake_shard(snowflake_nextval(5000))", &[]);
    assert_eq!(shard, 5000);
    let record = layout_record(&cluster);
    assert!(record.ends_with("shard_bits=13 seq_bits=12\n"), "{record}");
}

#[test]
fn a_record_of_0_3_0_is_read_with_its_fixed_split() {
    // 0.3.0 recorded no seq_bits: shard and sequence shared 22 bits, so 13 shard bits left 9.
    let mut cluster = Cluster::builder("layout-0-3-0").settings(&["snowflake_id.shard_bits = 13"]).start();
    cluster.stop("fast");
    std::fs::write(
        cluster.data_dir().join("snowflake_id.layout"),
        "snowflake_id layout epoch=2024-01-01T00:00:00.000Z shard_bits=13\n",
    )
    .unwrap();
    let log =
        cluster.try_start_with(&[]).expect_err("the server started with seq_bits = 12 over a record of 9");
    assert!(log.contains("recorded epoch=2024-01-01T00:00:00.000Z shard_bits=13 seq_bits=9"), "{log}");
    assert!(log.contains("snowflake_id.seq_bits = 9"), "{log}");
    cluster.configure(&["snowflake_id.seq_bits = 9"]);
    cluster.start_with(&[]);
    let mut client = cluster.connect();
    client.batch_execute("CREATE EXTENSION snowflake_id").unwrap();
    let row =
        client.query_one("SELECT time_bits, shard_bits, seq_bits FROM snowflake_layout()", &[]).unwrap();
    assert_eq!((row.get::<_, i32>(0), row.get::<_, i32>(1), row.get::<_, i32>(2)), (41, 13, 9));
}

#[test]
fn the_record_survives_a_crash_and_reaches_a_standby_by_base_backup() {
    let mut primary = Cluster::builder("layout-crash").settings(&["snowflake_id.shard_bits = 13"]).start();
    primary.connect().batch_execute("CREATE EXTENSION snowflake_id; SELECT snowflake_nextval(1)").unwrap();
    primary.kill_postmaster();
    primary.start_with(&[]);
    primary.wait_until_accepting();
    let pair = Pair::of(primary, "layout-crash");
    let copied = layout_record(&pair.standby);
    assert!(copied.ends_with("shard_bits=13 seq_bits=12\n"), "{copied}");
    // The standby knows the layout before it ever issues an ID (on promotion).
    assert_eq!(copied, layout_record(&pair.primary));
}
