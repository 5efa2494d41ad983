//! A hot standby refuses to issue IDs (SQLSTATE 25006) and still decodes them.

use snowflake_id_integration::{db_error, Cluster};

#[test]
fn a_hot_standby_refuses_to_generate_and_decodes() {
    let primary = Cluster::start("standby-primary", &[]);
    let mut on_primary = primary.connect();
    on_primary
        .batch_execute(
            "CREATE EXTENSION snowflake_id;
             CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake_nextval(4));
             INSERT INTO t SELECT FROM generate_series(1, 10);",
        )
        .unwrap();
    let standby = Cluster::start_standby_of(&primary, "standby-replica", &[]);
    let mut on_standby = standby.connect();
    let in_recovery: bool = on_standby.query_one("SELECT pg_is_in_recovery()", &[]).unwrap().get(0);
    assert!(in_recovery);

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
