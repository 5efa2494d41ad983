//! The shard fence (`snowflake_id.shards`): a server issues only the shards its list names.
//! Every generator refuses the others with 55000 and issues nothing; a reload moves the fence;
//! a list the server cannot read stops it at start instead of leaving it unfenced.

use postgres::fallible_iterator::FallibleIterator;
use postgres::types::ToSql;
use postgres::Client;
use snowflake_id_integration::engine::unix_ms;
use snowflake_id_integration::{
    apply_settings, db_error, id_unix_ms, issued, value, wait_until, Cluster, StoppedWorker,
};

/// Sets the fence with ALTER SYSTEM and a reload; returns a session that has it.
fn set_fence(cluster: &Cluster, shards: &str) -> Client {
    let mut client = cluster.connect();
    apply_settings(&mut client, &[("snowflake_id.shards", shards)]);
    client
}

#[test]
fn a_fenced_server_issues_only_its_shards() {
    let cluster = Cluster::builder("fence").settings(&["snowflake_id.shards = '0-5,9'"]).start();
    let mut client = cluster.connect();
    client.batch_execute("CREATE EXTENSION snowflake_id").unwrap();
    let nine: i64 = value(&mut client, "SELECT snowflake_nextval(9)", &[]);
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
        let hint = error.hint().unwrap();
        assert!(hint.starts_with(&format!("Issue shard {shard} on the server that owns it.")), "{hint}");
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
    let next: i64 = value(&mut client, "SELECT snowflake_nextval(9)", &[]);
    assert!(next > nine);

    // Only the server's configuration sets it: a session cannot lift its own fence.
    let error = db_error(&mut client, "SET snowflake_id.shards = ''");
    assert_eq!(error.code().code(), "55P02", "{error:?}");
}

#[test]
fn a_fence_the_server_cannot_read_stops_it_at_start_and_is_refused_at_reload() {
    let mut cluster = Cluster::builder("bad-fence").settings(&["snowflake_id.shards = '0-5,1024'"]).create();
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

/// Times the server log says the reservation worker made `shards` the fence of every call.
fn fence_applied_lines(cluster: &Cluster, shards: &str) -> usize {
    cluster.log().matches(&format!("the shard fence is now snowflake_id.shards = '{shards}'")).count()
}

/// Moves the fence with ALTER SYSTEM and a reload, from a session of its own, and waits until
/// the reservation worker has applied it for every call (its line in the server log); returns
/// the wall clock then, in Unix ms.
fn move_fence(cluster: &Cluster, shards: &str) -> i64 {
    let before = fence_applied_lines(cluster, shards);
    set_fence(cluster, shards);
    wait_until(&format!("the reservation worker applied snowflake_id.shards = '{shards}'"), || {
        fence_applied_lines(cluster, shards) > before
    });
    unix_ms()
}

#[test]
fn a_moved_fence_stops_statements_already_running() {
    // The least lead over the clock a server takes (reserve_ms is at least 100 ms); IDs are
    // asked for far slower than 4,096 per ms anyway, so an ID's time part is the clock's
    // millisecond when it was claimed.
    let cluster = Cluster::builder("fence-running")
        .settings(&[
            "snowflake_id.shards = '7'",
            "snowflake_id.max_lead_ms = 100",
            "snowflake_id.reserve_ms = 100",
        ])
        .setup("CREATE EXTENSION snowflake_id")
        .start();
    let mut client = cluster.connect();
    const IDS: usize = 10_000_000;
    // Ten million IDs each, streamed: the server issues them only as fast as this test reads
    // them, so the statement is still running, waiting for the test, when the fence moves.
    for (setup, generator, per_row) in [
        ("", "snowflake_nextval(7)", 1),
        ("SET snowflake_id.shard = 7", "snowflake_nextval()", 1),
        ("", "snowflake_nextvals(7, 10)", 10),
    ] {
        client.batch_execute(setup).unwrap();
        let query = format!(
            "SELECT {generator} FROM generate_series(1, 10000) a, generate_series(1, {}) b",
            IDS / 10000 / per_row
        );
        let mut rows = client.query_raw(query.as_str(), std::iter::empty::<&dyn ToSql>()).unwrap();
        let mut ids: Vec<i64> = Vec::new();
        while ids.len() < 1000 {
            ids.push(rows.next().unwrap().expect("the statement ended early").get(0));
        }
        let applied_ms = move_fence(&cluster, "8");
        let error = loop {
            match rows.next() {
                Ok(Some(row)) => ids.push(row.get(0)),
                Ok(None) => break None,
                Err(error) => break Some(error),
            }
        };
        drop(rows);

        assert!(ids.windows(2).all(|pair| pair[0] < pair[1]), "{generator}: IDs not increasing");
        let last = *ids.last().unwrap();
        let shard: i32 = value(&mut client, "SELECT snowflake_shard($1)", &[&last]);
        let last_ms = id_unix_ms(&mut client, last);
        assert_eq!(shard, 7, "{generator}");
        // The default layout's time part, counted from its epoch (checked on the last ID).
        let time_ms = |id: i64| (id >> 22) + 1_704_067_200_000;
        assert_eq!(time_ms(last), last_ms);
        let late = ids.iter().filter(|&&id| time_ms(id) > applied_ms).count();
        let Some(error) = error else {
            panic!(
                "{generator}: the statement ran to its end ({} IDs of shard 7) after the fence moved shard 7 \
                 away; {late} of them stamped after the reservation worker applied it",
                ids.len()
            )
        };
        let error = error.as_db_error().unwrap_or_else(|| panic!("{generator}: {error}"));
        assert_eq!(error.code().code(), "55000", "{generator}: {error:?}");
        assert_eq!(error.message(), "shard 7 is not issued by this server", "{generator}");
        assert_eq!(
            error.detail(),
            Some("snowflake_id.shards = '8' names the shards this server may issue. Nothing was issued."),
            "{generator}"
        );
        assert!(ids.len() < IDS, "{generator}");
        assert!(
            last_ms <= applied_ms,
            "{generator}: shard 7 issued an ID stamped {} ms after the fence moved ({late} such IDs)",
            last_ms - applied_ms
        );
        move_fence(&cluster, "7");
    }
}

#[test]
fn a_session_given_a_shard_waits_for_the_worker_to_apply_it() {
    // A reservation far ahead, so that calls need nothing of the worker while it is stopped.
    let cluster = Cluster::builder("fence-worker")
        .settings(&[
            "snowflake_id.shards = '7'",
            "snowflake_id.max_lead_ms = '20s'",
            "snowflake_id.reserve_ms = '20s'",
            "snowflake_id.max_reservation_wait_ms = '1s'",
        ])
        .setup("CREATE EXTENSION snowflake_id; SELECT snowflake_nextval(7)")
        .start();

    // The worker has not applied the reload that gives this server shard 9: a session that has
    // it waits for the worker, at most max_reservation_wait_ms, and is then refused.
    let worker = StoppedWorker::stop(&cluster);
    let mut client = set_fence(&cluster, "7,9");
    let error = db_error(&mut client, "SELECT snowflake_nextval(9)");
    assert_eq!(error.code().code(), "55000", "{error:?}");
    assert_eq!(error.message(), "shard 9 is not issued by this server yet");
    assert!(
        error.detail().unwrap().starts_with(
            "This session has snowflake_id.shards = '7,9', but the reservation worker has not applied it for \
             every call yet: the fence in force was still '7' after "
        ),
        "{error:?}"
    );
    assert_eq!(issued(&mut client, 9), 0, "a refused call issued IDs");
    // The session's own setting still fences off what it no longer names, worker or not.
    let mut client = set_fence(&cluster, "9");
    assert_eq!(db_error(&mut client, "SELECT snowflake_nextval(7)").code().code(), "55000");

    // Given long enough, the call waits until the worker is back and has applied it.
    let mut client = cluster.connect();
    apply_settings(&mut client, &[("snowflake_id.max_reservation_wait_ms", "1min")]);
    let call =
        std::thread::spawn(move || client.query_one("SELECT snowflake_shard(snowflake_nextval(9))", &[]));
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(!call.is_finished(), "the call did not wait for the worker");
    drop(worker);
    let shard: i32 = call.join().unwrap().expect("the call failed").get(0);
    assert_eq!(shard, 9);
    wait_until("the reservation worker logged the fence it applied", || {
        fence_applied_lines(&cluster, "9") > 0
    });
}
