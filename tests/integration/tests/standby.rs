//! A hot standby refuses to issue IDs (SQLSTATE 25006) and still decodes them.

use snowflake_id_integration::{db_error, value, Pair};

#[test]
fn a_hot_standby_refuses_to_generate_and_decodes() {
    let setup = "CREATE EXTENSION snowflake_id;
                 CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake_nextval(4));
                 INSERT INTO t SELECT FROM generate_series(1, 10);";
    let pair = Pair::builder("standby").setup(setup).start();
    let mut on_standby = pair.standby.connect();
    assert!(value::<bool>(&mut on_standby, "SELECT pg_is_in_recovery()", &[]));

    on_standby.batch_execute("SET snowflake_id.shard = 4").unwrap();
    for (call, function) in [
        ("SELECT snowflake_nextval(4)", "snowflake_nextval"),
        ("SELECT snowflake_nextval()", "snowflake_nextval"),
        ("SELECT snowflake_nextvals(4, 3)", "snowflake_nextvals"),
        ("SELECT snowflake_advance(4, 1)", "snowflake_advance"),
        ("SELECT snowflake_observe(max(id)) FROM t", "snowflake_observe"),
    ] {
        let db = db_error(&mut on_standby, call);
        assert_eq!(db.code().code(), "25006", "{call}");
        assert_eq!(db.message(), format!("cannot execute {function}() during recovery"));
        assert!(db.hint().unwrap().starts_with("Issue IDs on the primary."));
    }

    // Decoders work on the replicated rows.
    let row = on_standby
        .query_one("SELECT count(*), bool_and(snowflake_shard(id) = 4), count(DISTINCT (snowflake_decode(id)).seq) FROM t", &[])
        .unwrap();
    assert_eq!((row.get::<_, i64>(0), row.get::<_, bool>(1)), (10, true));
}

/// A start in recovery first writes that it owes a promotion guard
/// (`snowflake_id.promotion_pending`, F4 of docs/reliability.md). Where that file cannot be
/// written, the start stops, naming the file, the system's reason and where to look: a
/// recovery that could end without its guard is not begun. Here the write's temporary file is
/// a folder (EISDIR); once it is gone the standby starts and the file is there.
#[test]
fn a_standby_that_cannot_write_its_owed_guard_does_not_start() {
    let Pair { primary: _primary, mut standby } =
        Pair::builder("owed").setup("CREATE EXTENSION snowflake_id").create_standby();
    let blocker = standby.data_dir().join("snowflake_id.promotion_pending.tmp");
    std::fs::create_dir(&blocker).unwrap();
    let refused = standby.try_start_with(&[]);
    let log = refused.expect_err("the standby started without writing that it owes a promotion guard");
    assert!(
        log.contains("could not record that a promotion guard is owed in \"snowflake_id.promotion_pending\" at a start in recovery: Is a directory"),
        "{log}"
    );
    assert!(log.contains("HINT:  The file is in the data directory: check its disk"), "{log}");
    std::fs::remove_dir(&blocker).unwrap();
    standby.start_with(&[]);
    assert!(standby.data_dir().join("snowflake_id.promotion_pending").exists());
    assert!(value::<bool>(&mut standby.connect(), "SELECT pg_is_in_recovery()", &[]));
}
