//! The shard fence (`snowflake_id.shards`): a server issues only the shards its list names.
//! Every generator refuses the others with 55000 and issues nothing; a reload moves the fence;
//! a list the server cannot read stops it at start instead of leaving it unfenced.

use postgres::Client;
use snowflake_id_integration::{apply_settings, db_error, issued, Cluster};

/// Sets the fence with ALTER SYSTEM and a reload; returns a session that has it.
fn set_fence(cluster: &Cluster, shards: &str) -> Client {
    let mut client = cluster.connect();
    apply_settings(&mut client, &[("snowflake_id.shards", shards)]);
    client
}

#[test]
fn a_fenced_server_issues_only_its_shards() {
    let cluster = Cluster::start("fence", &["snowflake_id.shards = '0-5,9'"]);
    let mut client = cluster.connect();
    client.batch_execute("CREATE EXTENSION snowflake_id").unwrap();
    let nine: i64 = client.query_one("SELECT snowflake_nextval(9)", &[]).unwrap().get(0);
    client.query("SELECT snowflake_nextvals(3, 10)", &[]).unwrap();

    for call in [
        "SELECT snowflake_nextval(7)",
        "SELECT snowflake_nextvals(7, 10)",
        "SELECT snowflake_advance(7, 1)",
        "SET snowflake_id.shard = 7; SELECT snowflake_nextval()",
        "CREATE TEMP TABLE t (id bigint DEFAULT snowflake_nextval(6)); INSERT INTO t DEFAULT VALUES",
    ] {
        let error = db_error(&mut client, call);
        assert_eq!(error.code().code(), "55000", "{call}: {error:?}");
        let shard = if call.contains("(6)") { 6 } else { 7 };
        assert_eq!(error.message(), format!("shard {shard} is not issued by this server"), "{call}");
        assert_eq!(
            error.detail(),
            Some("snowflake_id.shards = '0-5,9' names the shards this server may issue. Nothing was issued.")
        );
        assert!(error
            .hint()
            .unwrap()
            .starts_with(&format!("Issue shard {shard} on the server that owns it.")));
    }
    assert_eq!(issued(&mut client, 7), 0, "a refused call issued IDs");
    assert_eq!(issued(&mut client, 6), 0, "a refused call issued IDs");

    // A reload moves the fence: shard 7 is issued here now, above nothing, and 9 is fenced.
    let mut client = set_fence(&cluster, "7");
    client.query_one("SELECT snowflake_nextval(7)", &[]).unwrap();
    assert_eq!(db_error(&mut client, "SELECT snowflake_nextval(9)").code().code(), "55000");
    // 'none' fences every shard; '' lifts the fence.
    let mut client = set_fence(&cluster, "none");
    assert_eq!(db_error(&mut client, "SELECT snowflake_nextval(7)").code().code(), "55000");
    let mut client = set_fence(&cluster, "");
    let next: i64 = client.query_one("SELECT snowflake_nextval(9)", &[]).unwrap().get(0);
    assert!(next > nine);

    // Only the server's configuration sets it: a session cannot lift its own fence.
    let error = db_error(&mut client, "SET snowflake_id.shards = ''");
    assert_eq!(error.code().code(), "55P02", "{error:?}");
}

#[test]
fn a_fence_the_server_cannot_read_stops_it_at_start_and_is_refused_at_reload() {
    let mut cluster = Cluster::create("bad-fence", &["snowflake_id.shards = '0-5,1024'"]);
    let log = cluster.try_start_with(&[]).expect_err("the server started with a fence outside the layout");
    assert!(
        log.contains("FATAL:  invalid value for parameter \"snowflake_id.shards\": \"0-5,1024\""),
        "{log}"
    );
    assert!(log.contains("Shard 1024 is outside the layout, whose shards are 0 to 1023."), "{log}");

    cluster.configure(&["snowflake_id.shards = '2'"]);
    cluster.start_with(&[]);
    let mut client = cluster.connect();
    client.batch_execute("CREATE EXTENSION snowflake_id").unwrap();
    // A bad value at reload leaves the fence as it was (PostgreSQL logs why).
    client.batch_execute("ALTER SYSTEM SET snowflake_id.shards = '2'").unwrap();
    let error = db_error(&mut client, "ALTER SYSTEM SET snowflake_id.shards = '3-1'");
    assert_eq!(error.code().code(), "22023", "{error:?}");
    assert_eq!(error.detail(), Some("The range \"3-1\" runs backwards."));
    assert_eq!(db_error(&mut client, "SELECT snowflake_nextval(3)").code().code(), "55000");
    client.query_one("SELECT snowflake_nextval(2)", &[]).unwrap();
}
