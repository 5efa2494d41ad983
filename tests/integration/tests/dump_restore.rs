//! `pg_dump` / `pg_restore` of a database whose tables use `DEFAULT snowflake_nextval(n)`
//! round-trips, and after `snowflake_advance` the restored server issues IDs above the
//! restored ones, even when those were issued ahead of its clock.

use snowflake_id_integration::{pg_bin_dir, Cluster};
use std::process::Command;

#[test]
fn dump_and_restore_then_generation_continues_above_the_restored_ids() {
    let source = Cluster::start("dump-source", &[]);
    let mut client = source.connect();
    client
        .batch_execute(
            "CREATE EXTENSION snowflake_id;
             CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT snowflake_nextval(5), note text);
             CREATE INDEX orders_by_time ON orders (snowflake_timestamp(id));
             INSERT INTO orders (note) SELECT 'order ' || g FROM generate_series(1, 100000) g;
             -- IDs issued about 1.5 s ahead of the clock, as a busy shard would.
             INSERT INTO orders (id, note) SELECT id, 'borrowed' FROM snowflake_nextvals(5, 6000000) id LIMIT 1000;",
        )
        .unwrap();
    let fingerprint = "SELECT count(*), sum(id)::text, max(id) FROM orders";
    let before = client.query_one(fingerprint, &[]).unwrap();

    let dump = source.socket_dir().join("orders.dump");
    let out = Command::new(pg_bin_dir().join("pg_dump"))
        .arg("-h")
        .arg(source.socket_dir())
        .args(["-U", "postgres", "-Fc", "-f"])
        .arg(&dump)
        .arg("postgres")
        .output()
        .unwrap();
    assert!(out.status.success(), "pg_dump: {}", String::from_utf8_lossy(&out.stderr));

    let target = Cluster::start("dump-target", &[]);
    let out = Command::new(pg_bin_dir().join("pg_restore"))
        .arg("-h")
        .arg(target.socket_dir())
        .args(["-U", "postgres", "-d", "postgres", "--exit-on-error"])
        .arg(&dump)
        .output()
        .unwrap();
    assert!(out.status.success(), "pg_restore: {}", String::from_utf8_lossy(&out.stderr));

    let mut restored = target.connect();
    let after = restored.query_one(fingerprint, &[]).unwrap();
    assert_eq!(
        (before.get::<_, i64>(0), before.get::<_, String>(1)),
        (after.get::<_, i64>(0), after.get::<_, String>(1)),
        "the data did not round-trip"
    );
    let default: String = restored
        .query_one(
            "SELECT pg_get_expr(adbin, adrelid) FROM pg_attrdef WHERE adrelid = 'orders'::regclass",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(default, "snowflake_nextval(5)");

    // The documented step after a restore, then new rows through the column default.
    let max_restored: i64 = after.get(2);
    restored.execute("SELECT snowflake_advance(5, max(id)) FROM orders", &[]).unwrap();
    restored.execute("INSERT INTO orders (note) SELECT 'new' FROM generate_series(1, 1000)", &[]).unwrap();
    let lowest_new: i64 =
        restored.query_one("SELECT min(id) FROM orders WHERE note = 'new'", &[]).unwrap().get(0);
    assert!(lowest_new > max_restored, "new ID {lowest_new} is not above the restored {max_restored}");
}
