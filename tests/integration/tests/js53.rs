//! The `js53` layout: IDs of 53 bits (41 of milliseconds, 6 of shard, 6 of sequence), every one
//! at or below 2^53 - 1, a number JavaScript and JSON parsers that read doubles hold exactly.
//! Its settings, its record, its limits (the 64 IDs a millisecond of one shard, shard 64, the end
//! of its time) and the functions that read or take IDs under it.

use snowflake_id_integration::{
    column, count, db_error, log_of_refused_start, value, Cluster, JS53_LAYOUT, MAX_SAFE_INTEGER,
};
use std::collections::HashSet;

fn js53_server(name: &str, settings: &[&str]) -> Cluster {
    Cluster::builder(name)
        .settings(&[JS53_LAYOUT])
        .settings(settings)
        .setup("CREATE EXTENSION snowflake_id")
        .start()
}

#[test]
fn js53_issues_ids_a_double_holds_and_records_its_width() {
    let cluster = js53_server("js53", &[]);
    let mut client = cluster.connect();
    client.batch_execute("SET TimeZone = 'UTC'").unwrap();
    let row = client
        .query_one(
            "SELECT time_bits, shard_bits, seq_bits, max_shard, ids_per_ms, epoch::text, runs_out::text, \
             current_setting('snowflake_id.id_bits') FROM snowflake_layout()",
            &[],
        )
        .unwrap();
    let widths: (i32, i32, i32, i32, i32) = (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4));
    assert_eq!(widths, (41, 6, 6, 63, 64));
    assert_eq!(row.get::<_, String>(5), "2024-01-01 00:00:00+00");
    assert_eq!(row.get::<_, String>(6), "2093-09-06 15:47:35.552+00", "41 bits of ms after 2024");
    assert_eq!(row.get::<_, String>(7), "53", "SHOW gives the width the layout set");
    let record = std::fs::read_to_string(cluster.data_dir().join("snowflake_id.layout")).unwrap();
    assert_eq!(
        record,
        "snowflake_id layout epoch=2024-01-01T00:00:00.000Z shard_bits=6 seq_bits=6 id_bits=53\n"
    );

    // Every shard, batches and single calls: at or below 2^53 - 1, exact as doubles, distinct,
    // increasing per shard, decoding to their shard.
    let mut seen = HashSet::new();
    for shard in [0, 1, 31, 63] {
        let mut ids: Vec<i64> = column(&mut client, "SELECT snowflake_nextvals($1, 5000)", &[&shard]);
        ids.extend((0..50).map(|_| value::<i64>(&mut client, "SELECT snowflake_nextval($1)", &[&shard])));
        assert!(ids.windows(2).all(|pair| pair[0] < pair[1]), "shard {shard}: not increasing");
        for &id in &ids {
            assert!((0..=MAX_SAFE_INTEGER).contains(&id), "{id} is above 2^53 - 1");
            assert_eq!(id as f64 as i64, id, "{id} does not survive a double");
            assert!(seen.insert(id), "{id} issued twice");
        }
        assert_eq!(value::<i32>(&mut client, "SELECT snowflake_shard($1)", &[&ids[0]]), shard);
    }

    // The JSON form gives the ID as a number, which a double-reading parser keeps exactly.
    let row = client
        .query_one(
            "SELECT id, snowflake_json(id)::text, jsonb_typeof(snowflake_json(id)->'id'), \
             (snowflake_json(id)->'id')::float8::int8, (snowflake_json(id)->>'shard')::int \
             FROM snowflake_nextval(9) id",
            &[],
        )
        .unwrap();
    let (id, json): (i64, String) = (row.get(0), row.get(1));
    assert_eq!(row.get::<_, String>(2), "number", "{json}");
    assert_eq!(row.get::<_, i64>(3), id, "{json}: not the ID once read as a double");
    assert_eq!(row.get::<_, i32>(4), 9, "{json}");
    assert!(json.starts_with(&format!("{{\"id\": {id}, ")), "{json}");

    // Composing and the bounds of a millisecond stay in the layout, up to its last ID.
    let row = client
        .query_one(
            "SELECT snowflake_compose(snowflake_timestamp($1), 63, 63), snowflake_min_id(snowflake_timestamp($1)), \
             snowflake_max_id(snowflake_timestamp($1)), snowflake_max_id((SELECT runs_out FROM snowflake_layout()) - \
             interval '1 millisecond'), snowflake_horizon()",
            &[&id],
        )
        .unwrap();
    let (composed, min_id, max_id, last, horizon): (i64, i64, i64, i64, i64) =
        (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4));
    assert!(min_id <= id && id <= max_id && max_id == composed, "{min_id} {id} {max_id} {composed}");
    assert_eq!(last, MAX_SAFE_INTEGER, "the last millisecond's largest ID");
    // The horizon is an ID of the layout too, near the clock (below IDs still in doubt).
    assert!(horizon > 0 && horizon <= MAX_SAFE_INTEGER, "horizon {horizon}");
    let horizon_age_ms: i64 = value(
        &mut client,
        "SELECT (extract(epoch FROM clock_timestamp() - snowflake_timestamp($1)) * 1000)::int8",
        &[&horizon],
    );
    assert!(horizon_age_ms.abs() < 60_000, "horizon {horizon} is {horizon_age_ms} ms from the clock");

    // Decoded under its name on any server, the same parts.
    let row = client
        .query_one(
            "SELECT snowflake_shard($1, 'js53'), snowflake_seq($1, 'js53'), snowflake_shard($1), snowflake_seq($1)",
            &[&id],
        )
        .unwrap();
    let (named, own): ((i32, i32), (i32, i32)) = ((row.get(0), row.get(1)), (row.get(2), row.get(3)));
    assert_eq!(named, own);

    // An ID wider than the layout (a 63-bit one) is refused, not decoded past the layout's end,
    // and so is a shard above its 6 bits; nothing is issued by the refusals.
    let wide = MAX_SAFE_INTEGER + 1;
    for statement in [
        format!("SELECT snowflake_timestamp({wide})"),
        format!("SELECT snowflake_json({wide})"),
        format!("SELECT snowflake_advance(3, {wide})"),
        format!("SELECT snowflake_observe({wide})"),
    ] {
        let error = db_error(&mut client, &statement);
        assert_eq!(error.code().code(), "22023", "{statement}: {error:?}");
        assert!(error.message().contains("is not a snowflake ID of this layout"), "{statement}: {error:?}");
        assert!(
            error
                .detail()
                .is_some_and(|detail| detail.contains("53 bits: they are at most 9007199254740991")),
            "{statement}: {error:?}"
        );
    }
    let error = db_error(&mut client, "SELECT snowflake_nextval(64)");
    assert_eq!(error.code().code(), "22023");
    assert!(error.detail().is_some_and(|detail| detail.contains("allows shards 0 to 63")), "{error:?}");

    // Advancing to an ID of the layout and observing one work as on any layout.
    let ahead: i64 =
        value(&mut client, "SELECT snowflake_compose(clock_timestamp() + interval '500 ms', 12, 5)", &[]);
    client.query_one("SELECT snowflake_advance(3, $1)", &[&ahead]).unwrap();
    let next: i64 = value(&mut client, "SELECT snowflake_nextval(3)", &[]);
    assert!(next > ahead && next <= MAX_SAFE_INTEGER, "{next} after advancing to {ahead}");
    client.query_one("SELECT snowflake_observe($1)", &[&(ahead + 64)]).unwrap();
    let after: i64 = value(&mut client, "SELECT snowflake_nextval(4)", &[]);
    assert!(after > ahead + 64, "{after} after observing {}", ahead + 64);
}

#[test]
fn a_shard_asked_for_more_than_64_ids_a_millisecond_borrows_then_refuses_never_repeats() {
    // 64 IDs a millisecond: one call may take 64 for each millisecond of the lead bound (2 s)
    // and the current one, 128,064; a second such batch at once would lead the clock by 4 s,
    // and with no wait allowed it is refused whole (55000).
    let cluster = js53_server("js53-rate", &["snowflake_id.max_wait_ms = 0"]);
    let mut client = cluster.connect();
    let ids: Vec<i64> = column(&mut client, "SELECT snowflake_nextvals(7, 128000)", &[]);
    assert_eq!(ids.len(), 128_000);
    assert!(ids.windows(2).all(|pair| pair[0] < pair[1]), "not increasing");
    let last = *ids.last().unwrap();
    assert!(last <= MAX_SAFE_INTEGER);
    let lead_ms: i64 = value(
        &mut client,
        "SELECT (extract(epoch FROM snowflake_timestamp($1) - clock_timestamp()) * 1000)::int8",
        &[&last],
    );
    assert!(lead_ms <= 2000, "the batch's last ID leads the clock by {lead_ms} ms, past the bound");

    let error = db_error(&mut client, "SELECT count(*) FROM snowflake_nextvals(7, 200000)");
    assert_eq!(error.code().code(), "22023", "{error:?}");
    assert!(
        error.detail().is_some_and(|detail| detail.contains("at most 128064 IDs: 64 per millisecond")),
        "{error:?}"
    );
    // Two full batches in one statement, milliseconds apart: the second is refused.
    let error = db_error(
        &mut client,
        "SELECT count(*) FROM snowflake_nextvals(8, 128000) UNION ALL SELECT count(*) FROM snowflake_nextvals(8, 128000)",
    );
    assert_eq!(error.code().code(), "55000", "{error:?}");
    // After the refusals each shard goes on above everything it gave out.
    let next: i64 = value(&mut client, "SELECT snowflake_nextval(7)", &[]);
    assert!(next > last, "{next} is not above {last}");
}

#[test]
fn a_server_recorded_in_js53_refuses_another_width_and_js53_past_its_end_refuses_to_start() {
    let mut cluster = js53_server("js53-memory", &[]);
    cluster.connect().query_one("SELECT snowflake_nextval(1)", &[]).unwrap();
    cluster.stop("fast");
    // The layout line dropped from the configuration: the default 63-bit layout is refused,
    // naming both (old IDs would decode to other times and shards).
    cluster.configure(&["snowflake_id.layout = ''"]);
    let log = cluster.try_start_with(&[]).expect_err("the server started in 63 bits after issuing IDs in 53");
    assert!(
        log.contains(
            "configured epoch=2024-01-01T00:00:00.000Z shard_bits=10 seq_bits=12, recorded \
             epoch=2024-01-01T00:00:00.000Z shard_bits=6 seq_bits=6 id_bits=53"
        ),
        "{log}"
    );
    assert!(
        log.contains(
            "HINT:  Set snowflake_id.epoch = '2024-01-01T00:00:00.000Z', snowflake_id.shard_bits = 6, \
             snowflake_id.seq_bits = 6 and snowflake_id.id_bits = 53 in postgresql.conf again \
             (snowflake_id.layout sets all four)"
        ),
        "{log}"
    );
    // 6 + 6 bits in 63 would leave 51 bits of time: refused before the record is read.
    cluster.configure(&[JS53_LAYOUT, "snowflake_id.id_bits = 63"]);
    let log = cluster.try_start_with(&[]).expect_err("the server started with 51 bits of time");
    assert!(log.contains("leave of snowflake_id.id_bits = 63: here 51"), "{log}");
    // Put back, it starts.
    cluster.configure(&["snowflake_id.id_bits = 53"]);
    cluster.start_with(&[]);
    cluster.connect().query_one("SELECT snowflake_nextval(1)", &[]).unwrap();

    // 41 bits of milliseconds after 1950 ended in 2019.
    let log = log_of_refused_start("js53-old-epoch", &[JS53_LAYOUT, "snowflake_id.epoch = '1950-01-01'"]);
    assert!(log.contains("and 41 bits of time ran out on 2019-09-07"), "{log}");

    // A split that leaves less than 8 years of time in 53 bits is refused with the widths.
    let log = log_of_refused_start("js53-short", &["snowflake_id.id_bits = 53"]);
    assert!(log.contains("leave 31 bits of time, less than 8 years of IDs"), "{log}");
    assert!(log.contains("leave of snowflake_id.id_bits = 53: here 31"), "{log}");
    assert!(log.contains("so that together they are at most 15"), "{log}");
}

/// The column checks judge a column by the layout's width: under js53 a `double precision`
/// key holds every ID (its 53-bit significand), and numeric or character varying need the 16
/// digits of 2^53 - 1; `real` and 15 digits still cannot hold them. The default layout's
/// refusal of the same double column is in tests/pg_regress/sql/narrow_columns.sql.
#[test]
fn js53_columns_of_double_precision_and_16_digits_hold_its_ids() {
    let cluster = js53_server("js53-columns", &[]);
    let mut client = cluster.connect();
    client
        .batch_execute(
            "CREATE TABLE doubles (id double precision PRIMARY KEY DEFAULT snowflake_nextval(1));
             CREATE TABLE digits (id numeric(16, 0) PRIMARY KEY DEFAULT snowflake_nextval(2),
                                  label varchar(16) DEFAULT snowflake_nextval(2)::text);
             CREATE TABLE double_refs (parent double precision REFERENCES doubles);
             CREATE TABLE real_refs (parent real REFERENCES doubles);
             INSERT INTO doubles SELECT FROM generate_series(1, 2000);
             INSERT INTO digits SELECT FROM generate_series(1, 2000);",
        )
        .unwrap();
    // Every ID kept exactly by the double: distinct, decoding to its shard, equal to its
    // integer read back.
    let row = client
        .query_one(
            "SELECT count(DISTINCT id), count(*) FILTER (WHERE snowflake_shard(id::bigint) = 1),
                    count(*) FILTER (WHERE id::bigint::float8 = id AND id <= 9007199254740991)
             FROM doubles",
            &[],
        )
        .unwrap();
    assert_eq!((row.get::<_, i64>(0), row.get::<_, i64>(1), row.get::<_, i64>(2)), (2000, 2000, 2000));

    // Only the real reference is too narrow.
    let findings: Vec<String> = column(
        &mut client,
        "SELECT tbl::text || '.' || col || ': ' || type || ': ' || finding FROM snowflake_check_columns()",
        &[],
    );
    assert_eq!(findings, ["real_refs.parent: real: reference too narrow"]);

    // Narrower than the layout's IDs: refused in the statement, the width named.
    for (column, type_name) in
        [("real", "real"), ("numeric(15, 0)", "numeric(15,0)"), ("varchar(15)", "character varying(15)")]
    {
        let error =
            db_error(&mut client, &format!("CREATE TABLE narrow (id {column} DEFAULT snowflake_nextval(3))"));
        assert_eq!(error.code().code(), "42804", "{column}");
        assert_eq!(
            error.detail(),
            Some(
                format!(
                    "Its default calls snowflake_nextval(), whose IDs are 53-bit; {type_name} cannot hold \
                     them, and the first INSERT would fail."
                )
                .as_str()
            ),
            "{column}"
        );
    }
}

/// The shard fence reads shards against the layout's 64: a fence of the top shards issues them
/// and refuses the rest; shard 64 in a fence is outside the layout, refused as a setting.
#[test]
fn js53_fences_name_shards_0_to_63() {
    let cluster = js53_server("js53-fence", &["snowflake_id.shards = '60-63'"]);
    let mut client = cluster.connect();
    let id: i64 = value(&mut client, "SELECT snowflake_nextval(63)", &[]);
    assert!(id <= MAX_SAFE_INTEGER, "{id} is above 2^53 - 1");
    assert_eq!(db_error(&mut client, "SELECT snowflake_nextval(1)").code().code(), "55000");
    let error = db_error(&mut client, "ALTER SYSTEM SET snowflake_id.shards = '60-64'");
    assert_eq!(error.code().code(), "22023", "{error:?}");
    assert_eq!(error.detail(), Some("Shard 64 is outside the layout, whose shards are 0 to 63."));
}

/// Adopting existing keys: a bigserial key converted under js53 goes on above its old keys, in
/// 53 bits; a table whose keys are above 2^53 - 1 (a 63-bit generator's) cannot be adopted
/// into js53, and the conversion says so, changing nothing.
#[test]
fn js53_adopts_keys_below_its_width_and_refuses_keys_above() {
    let cluster = js53_server("js53-adopt", &[]);
    let mut client = cluster.connect();
    client
        .batch_execute(
            "CREATE TABLE small (id bigserial PRIMARY KEY, note text);
             INSERT INTO small (note) SELECT 'old' FROM generate_series(1, 1000);
             SELECT snowflake_convert_column('small', 'id', 3);
             INSERT INTO small (note) SELECT 'new' FROM generate_series(1, 1000);",
        )
        .unwrap();
    let row = client
        .query_one(
            "SELECT min(id) FILTER (WHERE note = 'new') > max(id) FILTER (WHERE note = 'old'),
                    max(id) <= 9007199254740991,
                    count(*) FILTER (WHERE note = 'new' AND snowflake_shard(id) = 3)
             FROM small",
            &[],
        )
        .unwrap();
    assert_eq!((row.get::<_, bool>(0), row.get::<_, bool>(1), row.get::<_, i64>(2)), (true, true, 1000));

    client
        .batch_execute(
            "CREATE TABLE wide (id bigint PRIMARY KEY);
             INSERT INTO wide VALUES (1), (9007199254740992);",
        )
        .unwrap();
    let error = db_error(&mut client, "SELECT snowflake_convert_column('wide', 'id', 4)");
    assert_eq!(error.code().code(), "55000", "{error:?}");
    assert_eq!(
        error.message(),
        "existing values of column \"id\" of relation public.wide are too large to convert"
    );
    assert!(error.detail().unwrap_or_default().starts_with("The largest is 9007199254740992,"), "{error:?}");
    let defaults = count(&mut client, "SELECT count(*) FROM pg_attrdef WHERE adrelid = 'wide'::regclass");
    assert_eq!(defaults, 0, "the conversion left a default");
}
