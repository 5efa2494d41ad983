//! Adopting the ID scheme a database already has, as docs/adopting.md does it: a table whose
//! key DEFAULT is an Instagram-style or a Mastodon-style PL/pgSQL generator, on a server
//! started with the matching layout, is switched to `snowflake_nextval` in one transaction
//! while connections insert through the DEFAULT. No insert fails, no acknowledged row is
//! missing, every new key sorts after every old one, and the extension decodes the old keys
//! to exactly what the PL/pgSQL formula put into them. The SQL run is the page's own: the
//! files under sql/adopt/, which the page must show word for word.

use snowflake_id_integration::{count, value, wait_until, Cluster, Write, Writers};

const PAGE: &str = include_str!("../../../docs/adopting.md");

/// The secret of the Mastodon-style generator, which the test restates to recompute its tail.
const MASTODON_SECRET: &str = "b3c1d9e07a5f4a28";

/// Columns and a BEFORE INSERT trigger that record, for every row, the key DEFAULT in force
/// (`made_by`: the writer holds the table's lock from before its key was made until the
/// trigger, so the DEFAULT cannot change in between) and when the statement started and the
/// row reached the trigger (the key was made between the two). `{table}` is the table,
/// `{parts}` the PL/pgSQL that records what the old generator put into the key.
const RECORDER: &str = "
ALTER TABLE {table} ADD COLUMN made_by text, ADD COLUMN statement_at timestamptz,
    ADD COLUMN row_at timestamptz, ADD COLUMN old_ms bigint, ADD COLUMN old_seq bigint;
CREATE FUNCTION record_parts() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.made_by := (SELECT pg_get_expr(d.adbin, d.adrelid) FROM pg_attrdef d
                    JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
                    WHERE d.adrelid = TG_RELID AND a.attname = 'id');
    NEW.statement_at := statement_timestamp();
    NEW.row_at := clock_timestamp();
    {parts}
    RETURN NEW;
END
$$;
CREATE TRIGGER record_parts BEFORE INSERT ON {table} FOR EACH ROW EXECUTE FUNCTION record_parts();
";

/// What the writers run: ten rows through the key's DEFAULT, one transaction.
const WRITES: usize = 10;

/// A scheme to adopt; `conf`, `generator`, `switch` and `check` are the page's files.
struct Scheme {
    name: &'static str,
    conf: &'static str,
    generator: &'static str,
    switch: &'static str,
    check: &'static str,
    table: &'static str,
    /// The shard the key is switched to.
    shard: i32,
    /// `snowflake_layout()` under `conf`: time_bits, shard_bits, seq_bits, epoch (UTC).
    layout: (i32, i32, i32, &'static str),
    /// The DEFAULT of the old generator, as pg_get_expr shows it.
    old_default: &'static str,
    /// PL/pgSQL of the trigger, for rows made by the old generator: sets `NEW.old_seq` (the
    /// sequence value the formula put in) and, where the formula's time is known exactly,
    /// `NEW.old_ms` (the Unix milliseconds it put in).
    parts: String,
    /// Old rows (`made_by = old_default`) whose key is not what the formula makes of the
    /// recorded parts, or does not decode to them under the server's layout: must be none.
    old_mismatches: &'static str,
    /// Rows whose foreign decoding (under a named layout) does not agree with the server's
    /// reading as expected: must be none.
    foreign_mismatches: &'static str,
}

fn instagram() -> Scheme {
    Scheme {
        name: "adopt-instagram",
        conf: include_str!("../sql/adopt/instagram.conf"),
        generator: include_str!("../sql/adopt/instagram-generator.sql"),
        switch: include_str!("../sql/adopt/instagram-switch.sql"),
        check: include_str!("../sql/adopt/instagram-check.sql"),
        table: "insta5.photos",
        shard: 5,
        layout: (40, 13, 10, "2019-01-01 00:00:00+00"),
        old_default: "insta5.next_id()",
        // Rows are made and inserted one at a time, so currval is the value nextval returned
        // for this row's key. Its millisecond came from clock_timestamp() inside the function:
        // not recorded, but bounded by statement_at and row_at.
        parts: "IF NEW.made_by = 'insta5.next_id()' THEN
                    NEW.old_seq := currval('insta5.table_id_seq') % 1024;
                END IF;"
            .into(),
        old_mismatches: "SELECT count(*) FROM insta5.photos
             WHERE made_by = 'insta5.next_id()' AND NOT (
                 -- The formula: (ms - epoch) << 23 | shard << 10 | nextval % 1024, its time part
                 -- being the only unrecorded input,
                 id = (((id >> 23) << 23) | (5 << 10) | old_seq)
                 -- read back as the shard, the sequence and the millisecond it holds,
                 AND snowflake_shard(id) = 5 AND snowflake_seq(id) = old_seq
                 AND snowflake_timestamp(id) = to_timestamp(((id >> 23) + 1546300800000) / 1000.0)
                 -- which was the clock's when the row was made.
                 AND snowflake_timestamp(id) BETWEEN date_trunc('milliseconds', statement_at) AND row_at)",
        // The same split under Instagram's own epoch: every time 7 years 4 months earlier.
        foreign_mismatches: "SELECT count(*) FROM insta5.photos
             WHERE extract(epoch FROM snowflake_timestamp(id)) - extract(epoch FROM snowflake_timestamp(id, 'instagram'))
                       <> (1546300800000 - 1314220021721) / 1000.0
                OR snowflake_shard(id, 'instagram') <> snowflake_shard(id)
                OR snowflake_seq(id, 'instagram') <> snowflake_seq(id)",
    }
}

fn mastodon() -> Scheme {
    Scheme {
        name: "adopt-mastodon",
        conf: include_str!("../sql/adopt/mastodon.conf"),
        generator: include_str!("../sql/adopt/mastodon-generator.sql"),
        switch: include_str!("../sql/adopt/mastodon-switch.sql"),
        check: include_str!("../sql/adopt/mastodon-check.sql"),
        table: "statuses",
        shard: 0,
        layout: (47, 0, 16, "1970-01-01 00:00:00+00"),
        old_default: "timestamp_id('statuses'::text)",
        // The function's inputs restated: the transaction's millisecond (now(), rounded) and
        // the tail from the hashed base plus this row's nextval.
        parts: format!(
            "IF NEW.made_by = 'timestamp_id(''statuses''::text)' THEN
                 NEW.old_ms := (date_part('epoch', now()) * 1000)::bigint;
                 NEW.old_seq := (('x' || substr(md5('statuses' || '{MASTODON_SECRET}' || (NEW.old_ms << 16)::text), 1, 4))::bit(16)::bigint
                                 + currval('statuses_id_seq')) & 65535;
             END IF;"
        ),
        old_mismatches: "SELECT count(*) FROM statuses
             WHERE made_by = 'timestamp_id(''statuses''::text)' AND NOT (
                 id = (old_ms << 16) | old_seq
                 AND snowflake_timestamp(id) = to_timestamp(old_ms / 1000.0)
                 AND snowflake_shard(id) = 0 AND snowflake_seq(id) = old_seq)",
        // The server's layout is Mastodon's: the named layout reads every ID alike.
        foreign_mismatches: "SELECT count(*) FROM statuses
             WHERE snowflake_decode(id, 'mastodon') IS DISTINCT FROM snowflake_decode(id)",
    }
}

/// postgresql.conf lines of a configuration file of the page.
fn settings(conf: &str) -> Vec<&str> {
    conf.lines().map(str::trim).filter(|line| !line.is_empty() && !line.starts_with('#')).collect()
}

/// The statements of a SQL file of the page, each with the comment lines before it.
fn statements(sql: &str) -> Vec<String> {
    let mut statements = Vec::new();
    let mut current = String::new();
    for line in sql.lines() {
        current.push_str(line);
        current.push('\n');
        if line.trim_end().ends_with(';') && !line.trim_start().starts_with("--") {
            statements.push(std::mem::take(&mut current));
        }
    }
    assert!(current.trim().is_empty(), "text after the last statement: {current}");
    statements
}

#[test]
fn the_page_shows_the_sql_the_tests_run() {
    for scheme in [instagram(), mastodon()] {
        for (tag, text) in [
            ("conf", scheme.conf),
            ("plpgsql", scheme.generator),
            ("plpgsql", scheme.switch),
            ("plpgsql", scheme.check),
        ] {
            let block = format!("```{tag}\n{text}```\n");
            assert!(PAGE.contains(&block), "docs/adopting.md does not show, as a block of its own:\n{block}");
        }
    }
    assert!(mastodon().generator.contains(MASTODON_SECRET));
}

#[test]
fn an_instagram_style_generator_switches_under_writers() {
    adopt(instagram());
}

#[test]
fn a_mastodon_style_generator_switches_under_writers() {
    adopt(mastodon());
}

fn adopt(scheme: Scheme) {
    let table = scheme.table;
    let cluster = Cluster::builder(scheme.name).settings(&settings(scheme.conf)).start();
    let mut client = cluster.connect();
    client.batch_execute("CREATE EXTENSION snowflake_id; SET TimeZone = 'UTC'").unwrap();
    let row = client
        .query_one("SELECT time_bits, shard_bits, seq_bits, epoch::text FROM snowflake_layout()", &[])
        .unwrap();
    let layout = (row.get(0), row.get(1), row.get(2), row.get::<_, &str>(3));
    assert_eq!(layout, scheme.layout, "the server's layout");

    // The database as it is before: the generator, its table, rows made by it.
    client.batch_execute(scheme.generator).unwrap();
    client.batch_execute(&RECORDER.replace("{table}", table).replace("{parts}", &scheme.parts)).unwrap();
    let insert = format!("INSERT INTO {table} SELECT FROM generate_series(1, {WRITES}) RETURNING id");
    for _ in 0..50 {
        client.query(&insert, &[]).unwrap();
    }
    let before = 50 * WRITES;

    // Writers: each its own connection and prepared INSERT, as an application's pool has.
    let writers = Writers::start(&cluster, (0..4).map(|_| Write::prepared(&insert)).collect());
    // A writer that failed stops; the waits end then too, and the failure is reported below.
    let failed = || !writers.errors().is_empty();
    wait_until("the writers are running", || writers.rows() >= 2000 || failed());

    // The switch, statement by statement as the page gives it. COMMIT waits until a writer
    // is queued behind the table's lock, so that writers provably write across the switch.
    let mut switcher = cluster.connect();
    let mut observer = cluster.connect();
    let waiting =
        format!("SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = '{table}'::regclass");
    let switch = statements(scheme.switch);
    assert_eq!(switch.concat(), scheme.switch);
    assert_eq!(switch.last().map(|commit| commit.trim()), Some("COMMIT;"));
    for statement in &switch {
        if statement.trim() == "COMMIT;" {
            wait_until("a writer waits for the switch", || count(&mut observer, &waiting) >= 1 || failed());
        }
        switcher.batch_execute(statement).unwrap_or_else(|error| panic!("{statement}: {error:?}"));
    }
    let at_commit = writers.rows();
    wait_until("the writers continue", || writers.rows() >= at_commit + 2000 || failed());
    let (keys, errors) = writers.finish();
    let acknowledged: Vec<i64> = keys.concat();
    assert_eq!(errors, Vec::<String>::new(), "writes failed");

    // Every acknowledged row is there, once.
    let row = client.query_one(&format!("SELECT count(*), count(DISTINCT id) FROM {table}"), &[]).unwrap();
    let (rows, distinct): (i64, i64) = (row.get(0), row.get(1));
    assert_eq!(rows, distinct, "duplicate keys");
    assert_eq!(rows as usize, before + acknowledged.len(), "rows against acknowledged inserts");
    let found: i64 =
        value(&mut client, &format!("SELECT count(*) FROM {table} WHERE id = ANY($1)"), &[&acknowledged]);
    assert_eq!(found as usize, acknowledged.len(), "acknowledged keys missing");

    // Each key was made by the old DEFAULT or by the new one, and the new ones, all of the
    // shard switched to, sort after all the old ones.
    let new_default = format!("snowflake_nextval({})", scheme.shard);
    let row = client
        .query_one(
            &format!(
                "SELECT count(*) FILTER (WHERE made_by = $1), count(*) FILTER (WHERE made_by = $2),
                        max(id) FILTER (WHERE made_by = $1), min(id) FILTER (WHERE made_by = $2),
                        count(*) FILTER (WHERE made_by = $2 AND snowflake_shard(id) <> $3)
                 FROM {table}"
            ),
            &[&scheme.old_default, &new_default, &scheme.shard],
        )
        .unwrap();
    let (old, new): (i64, i64) = (row.get(0), row.get(1));
    assert_eq!(old + new, rows, "keys made by neither DEFAULT");
    assert!(old as usize > before && new > 0, "keys made before ({old}) and after ({new}) the switch");
    let (last_old, first_new): (i64, i64) = (row.get(2), row.get(3));
    assert!(first_new > last_old, "a new key {first_new} does not sort after the old key {last_old}");
    assert_eq!(row.get::<_, i64>(4), 0, "new keys of another shard than {}", scheme.shard);
    // New keys are made at the clock's millisecond, or at most max_lead_ms (2 s) ahead of it.
    let off_clock = count(
        &mut client,
        &format!(
            "SELECT count(*) FROM {table} WHERE made_by = '{new_default}' AND snowflake_timestamp(id)
                 NOT BETWEEN date_trunc('milliseconds', statement_at) AND row_at + interval '2 s'"
        ),
    );
    assert_eq!(off_clock, 0, "new keys off the clock");

    // Old keys decode to what the formula put into them, under the server's layout.
    assert_eq!(count(&mut client, scheme.old_mismatches), 0, "old keys that decode to other parts");
    // The page's check.
    let row = client.query_one(scheme.check, &[]).unwrap();
    let check: (i64, i64, i64, i64) = (row.get(0), row.get(1), row.get(2), row.get(3));
    assert_eq!(check, (rows, 0, 0, 0), "the page's check: ids, other_shard, other_time, other_seq");
    // Decoders with a layout name agree with the server's layout as they should.
    assert_eq!(count(&mut client, scheme.foreign_mismatches), 0, "foreign decoding");
    println!("{}: {old} keys made before the switch, {new} after", scheme.name);
}
