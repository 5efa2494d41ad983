//! `snowflake_convert_column` on a table that is being written to: connections keep inserting
//! into the converted table and into a table whose foreign key points at it, before, during
//! and after the conversion. They wait on its lock (checked in `pg_locks`), then continue
//! with the new default; no insert fails, no row is lost, and every new key sorts after every
//! old one, in each connection's own order too.

use snowflake_id_integration::{count, value, wait_until, Cluster, Write, Writers};

/// What the writers insert: a customer (the converted key), or an order of the newest customer
/// (a row checked against the key through the foreign key). Both return the customer key;
/// `::bigint` keeps the statement's result type unchanged when the column is widened.
const WRITES: [&str; 2] = [
    "INSERT INTO customers (name) VALUES ('during') RETURNING id::bigint",
    "INSERT INTO orders (customer) SELECT max(id) FROM customers RETURNING customer::bigint",
];

const SHARD: i32 = 5;

#[test]
fn conversion_under_concurrent_inserts_keeps_rows_keys_and_order() {
    let cluster = Cluster::builder("convert")
        .setup(
            "CREATE EXTENSION snowflake_id;
             CREATE TABLE customers (id serial PRIMARY KEY, name text);
             CREATE TABLE orders (id serial PRIMARY KEY, customer integer NOT NULL REFERENCES customers);
             INSERT INTO customers (name) SELECT 'before' FROM generate_series(1, 1000);
             INSERT INTO orders (customer) SELECT 1 + g % 1000 FROM generate_series(1, 5000) g;",
        )
        .start();
    let mut client = cluster.connect();

    let writers = Writers::start(&cluster, (0..4).map(|i| Write::text(WRITES[i % 2], &[])).collect());
    wait_until("the writers are running", || writers.rows() >= 400);
    let mut converter = cluster.connect();
    converter.batch_execute("BEGIN").unwrap();
    converter.execute("SELECT snowflake_convert_column('customers', 'id', $1)", &[&SHARD]).unwrap();
    // Holding the conversion open until writers queue behind its locks proves that they wrote
    // during it, not only before and after.
    let mut observer = cluster.connect();
    wait_until("a writer waits for the conversion", || {
        count(
            &mut observer,
            "SELECT count(*) FROM pg_locks
             WHERE NOT granted AND relation IN ('customers'::regclass, 'orders'::regclass)",
        ) >= 1
    });
    converter.batch_execute("COMMIT").unwrap();
    let at_commit = writers.rows();
    wait_until("the writers continue", || writers.rows() >= at_commit + 400);
    let (keys, errors) = writers.finish();
    assert_eq!(errors, Vec::<String>::new(), "writes failed");
    // Each writer's statement with the keys it returned, in order (one per statement).
    let results: Vec<(&str, Vec<i64>)> =
        keys.into_iter().enumerate().map(|(i, keys)| (WRITES[i % 2], keys)).collect();

    // Every acknowledged customer is there; old keys are the sequence's, new ones shard 5's.
    let acknowledged = |statement: &str| -> usize {
        results.iter().filter(|(write, _)| *write == statement).map(|(_, keys)| keys.len()).sum()
    };
    let row = client
        .query_one(
            "SELECT count(*), count(*) FILTER (WHERE id < 2147483648),
                    count(*) FILTER (WHERE snowflake_shard(id) = $1 AND id >= snowflake_min_id(now() - interval '1 hour'))
             FROM customers",
            &[&SHARD],
        )
        .unwrap();
    let (total, old, new): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
    assert_eq!(total as usize, 1000 + acknowledged(WRITES[0]));
    assert_eq!(old + new, total, "keys that are neither sequence values nor shard {SHARD}'s IDs");
    assert!(old > 1000 && new > 0, "inserts before ({old} keys) and after ({new}) the conversion");
    let new_after_old = count(
        &mut client,
        "SELECT count(*) FROM customers WHERE id > 2147483647 AND id <= (SELECT max(id) FROM customers WHERE id < 2147483648)",
    );
    assert_eq!(new_after_old, 0);
    // Each writer saw keys only increase: sequence values, then snowflake IDs.
    for (write, keys) in &results {
        assert!(keys.windows(2).all(|pair| pair[0] <= pair[1]), "{write}: keys went back");
    }

    // Orders still reference existing customers, through a widened column, and the old
    // sequence is gone.
    let orders = count(&mut client, "SELECT count(*) FROM orders");
    let joined = count(&mut client, "SELECT count(*) FROM orders o JOIN customers c ON c.id = o.customer");
    assert_eq!(orders, joined);
    assert_eq!(orders as usize, 5000 + acknowledged(WRITES[1]));
    let types: String = value(
        &mut client,
        "SELECT string_agg(format_type(atttypid, NULL), ',' ORDER BY attrelid::regclass::text)
         FROM pg_attribute WHERE (attrelid, attname) IN (('customers'::regclass, 'id'), ('orders'::regclass, 'customer'))",
        &[],
    );
    assert_eq!(types, "bigint,bigint");
    assert_eq!(count(&mut client, "SELECT count(*) FROM pg_class WHERE relname = 'customers_id_seq'"), 0);
}
