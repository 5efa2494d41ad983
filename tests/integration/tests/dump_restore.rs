//! `pg_dump` / `pg_restore` of a database whose tables use `DEFAULT snowflake_nextval(n)`
//! round-trips, and after `snowflake_advance` the restored server issues IDs above the
//! restored ones, even when those were issued ahead of its clock.

use snowflake_id_integration::{pg_bin_dir, run, value, Cluster};
use std::process::Command;

#[test]
fn dump_and_restore_then_generation_continues_above_the_restored_ids() {
    // Both servers accept IDs up to a minute ahead of the clock: the source's last rows are
    // 20 s ahead, as after a shard borrowed ahead or was advanced, and the target must take
    // the advance above them.
    const LEAD: &str = "snowflake_id.max_lead_ms = 1min";
    let source = Cluster::builder("dump-source")
        .settings(&[LEAD])
        .setup(
            "CREATE EXTENSION snowflake_id;
             CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT snowflake_nextval(5), note text);
             CREATE INDEX orders_by_time ON orders (snowflake_timestamp(id));
             INSERT INTO orders (note) SELECT 'order ' || g FROM generate_series(1, 100000) g;
             SELECT snowflake_advance(5, snowflake_compose(clock_timestamp() + interval '20 s', 5, 0));
             INSERT INTO orders (note) SELECT 'ahead ' || g FROM generate_series(1, 1000) g;",
        )
        .start();
    let fingerprint = "SELECT count(*), sum(id)::text, max(id) FROM orders";
    let before = source.connect().query_one(fingerprint, &[]).unwrap();

    let dump = source.socket_dir().join("orders.dump");
    let mut pg_dump = Command::new(pg_bin_dir().join("pg_dump"));
    pg_dump.arg("-h").arg(source.socket_dir()).args(["-U", "postgres", "-Fc", "-f"]);
    run(pg_dump.arg(&dump).arg("postgres"), "pg_dump");

    let target = Cluster::builder("dump-target").settings(&[LEAD]).start();
    let mut pg_restore = Command::new(pg_bin_dir().join("pg_restore"));
    pg_restore.arg("-h").arg(target.socket_dir()).args(["-U", "postgres", "-d", "postgres"]);
    run(pg_restore.arg("--exit-on-error").arg(&dump), "pg_restore");

    let mut restored = target.connect();
    let after = restored.query_one(fingerprint, &[]).unwrap();
    assert_eq!(
        (before.get::<_, i64>(0), before.get::<_, String>(1)),
        (after.get::<_, i64>(0), after.get::<_, String>(1)),
        "the data did not round-trip"
    );
    let default: String = value(
        &mut restored,
        "SELECT pg_get_expr(adbin, adrelid) FROM pg_attrdef WHERE adrelid = 'orders'::regclass",
        &[],
    );
    assert_eq!(default, "snowflake_nextval(5)");

    // The restored IDs lead the target's clock: without the documented step below, its new
    // IDs would start below them.
    let max_restored: i64 = after.get(2);
    let ahead: bool = value(
        &mut restored,
        "SELECT snowflake_timestamp($1) > clock_timestamp() + interval '5 s'",
        &[&max_restored],
    );
    assert!(ahead, "the restored IDs no longer lead the clock: the test proves nothing");
    // The documented step after a restore, then new rows through the column default.
    restored.execute("SELECT snowflake_advance(5, max(id)) FROM orders", &[]).unwrap();
    restored.execute("INSERT INTO orders (note) SELECT 'new' FROM generate_series(1, 1000)", &[]).unwrap();
    let lowest_new: i64 = value(&mut restored, "SELECT min(id) FROM orders WHERE note = 'new'", &[]);
    assert!(lowest_new > max_restored, "new ID {lowest_new} is not above the restored {max_restored}");
}
