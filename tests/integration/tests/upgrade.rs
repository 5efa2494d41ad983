//! `ALTER EXTENSION snowflake_id UPDATE` on a database created with 0.1.0 (from the install
//! script kept in `sql/`): tables, data, column defaults, expression indexes and views keep
//! working, the new function is there, and the upgraded extension equals a fresh install of
//! the current version object by object, definitions and privileges included. 0.6.0 changes
//! what `snowflake_decode` returns (a named type): views over it are carried over, the same
//! views with their privileges; anything else over it stops the update, named. A function the
//! update creates, made first in the extension's schema by that schema's owner, stops the
//! update with 42723 until a superuser drops it; an extension in a schema of its own cannot be
//! squatted so.

use postgres::Client;
use snowflake_id_integration::{column, db_error, value, Cluster};

/// Every object of the extension with its definition, privileges and comment, sorted.
fn extension_objects(client: &mut Client) -> Vec<String> {
    column(
        client,
        "SELECT concat_ws(' | ', pg_describe_object(d.classid, d.objid, d.objsubid),
                              CASE WHEN d.classid = 'pg_proc'::regclass THEN pg_get_functiondef(d.objid) END,
                              CASE WHEN d.classid = 'pg_proc'::regclass
                                   THEN (SELECT proacl::text FROM pg_proc WHERE oid = d.objid) END,
                              obj_description(d.objid, d.classid::regclass::name))
             FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid
             WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e' AND e.extname = 'snowflake_id'
             ORDER BY 1",
        &[],
    )
}

fn version(client: &mut Client) -> String {
    value(client, "SELECT extversion FROM pg_extension WHERE extname = 'snowflake_id'", &[])
}

/// The default version: what `ALTER EXTENSION snowflake_id UPDATE` updates to.
fn default_version(client: &mut Client) -> String {
    value(client, "SELECT default_version FROM pg_available_extensions WHERE name = 'snowflake_id'", &[])
}

/// The default of the column of `table` that has one.
fn default_of(client: &mut Client, table: &str) -> String {
    value(
        client,
        "SELECT pg_get_expr(adbin, adrelid) FROM pg_attrdef WHERE adrelid = $1::text::regclass",
        &[&table],
    )
}

/// A new database `fresh` of `cluster` where `create` installs the extension afresh: what an
/// updated one must equal.
fn fresh_install(cluster: &Cluster, create: &str) -> Client {
    // One statement each: CREATE DATABASE refuses to run in a transaction block.
    cluster.connect().batch_execute("CREATE DATABASE fresh").unwrap();
    let mut fresh = cluster.connect_to("fresh");
    fresh.batch_execute(create).unwrap();
    fresh
}

/// A database `name` owned by mallory (LOGIN only), who therefore owns its `public` schema
/// (PostgreSQL 15+: `pg_database_owner`); returns a superuser's connection to it.
fn database_of_mallory(cluster: &Cluster, name: &str) -> Client {
    let mut admin = cluster.connect();
    admin.batch_execute("CREATE ROLE mallory LOGIN").unwrap();
    admin.batch_execute(&format!("CREATE DATABASE {name} OWNER mallory")).unwrap();
    cluster.connect_to(name)
}

#[test]
fn update_from_0_1_0_keeps_data_and_defaults_and_equals_a_fresh_install() {
    let cluster = Cluster::builder("upgrade").start();
    cluster.connect().batch_execute("CREATE DATABASE upgraded").unwrap();
    let mut old = cluster.connect_to("upgraded");
    old.batch_execute(
        "CREATE EXTENSION snowflake_id VERSION '0.1.0';
         CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT snowflake_nextval(3), note text);
         CREATE INDEX orders_by_time ON orders (snowflake_timestamp(id));
         CREATE VIEW order_parts AS SELECT o.id, d.* FROM orders o, snowflake_decode(o.id) d;
         CREATE VIEW order_shards WITH (security_barrier) AS SELECT (snowflake_decode(id)).shard FROM orders;
         CREATE VIEW order_parts_3 AS SELECT * FROM order_parts WHERE shard = 3 WITH CHECK OPTION;
         CREATE ROLE parts_reader;
         GRANT SELECT ON order_parts TO parts_reader;
         COMMENT ON VIEW order_parts IS 'the parts of each order';
         CREATE TABLE legacy (id serial PRIMARY KEY);
         INSERT INTO orders (note) SELECT 'old' FROM generate_series(1, 1000);
         INSERT INTO legacy SELECT FROM generate_series(1, 10);",
    )
    .unwrap();
    assert_eq!(version(&mut old), "0.1.0");
    let before = old.query_one("SELECT count(*), sum(id)::text, max(id) FROM orders", &[]).unwrap();
    let old_objects = extension_objects(&mut old);
    let views_before = views(&mut old);
    assert_eq!(views_before.len(), 3, "{views_before:?}");
    assert!(!old_objects.iter().any(|object| object.contains("snowflake_convert_column")));

    old.batch_execute("ALTER EXTENSION snowflake_id UPDATE").unwrap();
    let default_version = default_version(&mut old);
    assert_eq!(version(&mut old), default_version);
    assert_ne!(default_version, "0.1.0");

    // The data and the objects built on the extension's functions are as they were.
    let after = old.query_one("SELECT count(*), sum(id)::text, max(id) FROM orders", &[]).unwrap();
    assert_eq!(
        (before.get::<_, i64>(0), before.get::<_, String>(1)),
        (after.get::<_, i64>(0), after.get::<_, String>(1))
    );
    // The DEFAULT still issues IDs of shard 3, above the old ones.
    old.batch_execute("INSERT INTO orders (note) SELECT 'new' FROM generate_series(1, 1000)").unwrap();
    let max_old: i64 = before.get(2);
    let row = old
        .query_one(
            "SELECT count(*), min(id), bool_and(snowflake_shard(id) = 3) FROM orders WHERE note = 'new'",
            &[],
        )
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), 1000);
    assert!(row.get::<_, i64>(1) > max_old);
    assert!(row.get::<_, bool>(2));
    // The expression index is used and finds every row; the view decodes.
    old.batch_execute("SET enable_seqscan = off; SET enable_bitmapscan = off").unwrap();
    let in_index = "SELECT count(*) FROM orders WHERE snowflake_timestamp(id) > now() - interval '1 day'";
    let plan = column::<String>(&mut old, &format!("EXPLAIN (COSTS OFF) {in_index}"), &[]).join("\n");
    assert!(plan.contains("orders_by_time"), "{plan}");
    assert_eq!(value::<i64>(&mut old, in_index, &[]), 2000);
    assert_eq!(value::<i64>(&mut old, "SELECT count(*) FROM order_parts WHERE shard = 3", &[]), 2000);
    // The views over snowflake_decode are the same objects (their oids, owner, privileges,
    // options, comments and the view over them kept), now over the new function.
    assert_eq!(views(&mut old), views_before);
    let row = old
        .query_one(
            "SELECT (SELECT count(*) FROM order_shards WHERE shard = 3), (SELECT count(*) FROM order_parts_3),
                    pg_get_viewdef('order_parts') LIKE '%snowflake_decode(o.id)%'",
            &[],
        )
        .unwrap();
    assert_eq!((row.get::<_, i64>(0), row.get::<_, i64>(1), row.get::<_, bool>(2)), (2000, 2000, true));
    let decode_type: String = value(
        &mut old,
        "SELECT DISTINCT p.prorettype::regtype::text FROM pg_depend d JOIN pg_rewrite r ON r.oid = d.objid
         JOIN pg_proc p ON p.oid = d.refobjid
         WHERE r.ev_class = 'order_parts'::regclass AND p.proname = 'snowflake_decode'",
        &[],
    );
    assert_eq!(decode_type, "snowflake_parts");
    assert!(
        !views(&mut old).iter().any(|view| view.contains("snowflake_id")),
        "a view left in the extension"
    );

    // What 0.2.0 adds works on the upgraded database.
    old.batch_execute(
        "SELECT snowflake_convert_column('legacy', 'id', 4); INSERT INTO legacy DEFAULT VALUES;",
    )
    .unwrap();
    assert_eq!(value::<i32>(&mut old, "SELECT snowflake_shard(max(id)) FROM legacy", &[]), 4);

    // Upgraded and freshly created extensions are the same, object by object.
    let mut fresh = fresh_install(&cluster, "CREATE EXTENSION snowflake_id");
    assert_eq!(version(&mut fresh), default_version);
    let upgraded_objects = extension_objects(&mut old);
    assert_eq!(upgraded_objects, extension_objects(&mut fresh));
    // 0.2.0 added snowflake_convert_column; 0.4.0 the four decoders of a named layout; 0.6.0
    // the two forms of snowflake_horizon, snowflake_status and snowflake_fence_allows, the type
    // snowflake_parts, and the event trigger of snowflake_id.auto_keys with its function;
    // 0.6.1 snowflake_horizon_holders; 0.7.0 snowflake_observe, snowflake_check_columns and
    // the event trigger snowflake_check_defaults with its function; 0.7.1
    // snowflake_auto_keys_schemas; 0.9.0 snowflake_registry_claims. PostgreSQL 18 records the
    // type's array type as a member too: not counted.
    let array_types =
        upgraded_objects.iter().filter(|object| object.starts_with("type snowflake_parts[]")).count();
    assert_eq!(upgraded_objects.len() - array_types, old_objects.len() + 19);
    old.batch_execute("SET TimeZone = 'UTC'").unwrap();
    let twitter: String = value(
        &mut old,
        "SELECT (snowflake_decode((1 << 22) + (3 << 12) + 5, 'twitter'))::text
         || ' ' || pg_typeof(snowflake_decode((1 << 22) + (3 << 12) + 5, 'twitter'))",
        &[],
    );
    assert_eq!(twitter, "(\"2010-11-04 01:42:54.658+00\",3,5) snowflake_parts");
    // The event trigger works on the upgraded database.
    old.batch_execute(
        "SET snowflake_id.auto_keys = public; SET snowflake_id.shard = 5;
         CREATE TABLE made_after (id bigserial PRIMARY KEY);",
    )
    .unwrap();
    assert_eq!(default_of(&mut old, "made_after"), "snowflake_nextval()");
}

/// Each view of the database: its oid, owner, privileges, options, comment and extension, as text.
fn views(client: &mut Client) -> Vec<String> {
    column(
        client,
        "SELECT concat_ws(' | ', c.relname, c.oid, c.relowner::regrole, c.relacl, c.reloptions,
                              obj_description(c.oid, 'pg_class'),
                              (SELECT e.extname FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid
                               WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype = 'e'))
             FROM pg_class c WHERE c.relkind = 'v' AND c.relnamespace = 'public'::regnamespace ORDER BY c.relname",
        &[],
    )
}

/// A materialized view and an index over `snowflake_decode` cannot be carried over: the update
/// from 0.5.0 stops before changing anything, naming them, and goes through once they are gone.
#[test]
fn update_to_0_6_0_stops_on_objects_over_snowflake_decode_other_than_views() {
    let cluster = Cluster::builder("upgrade_blocked").start();
    let mut client = cluster.connect();
    client
        .batch_execute(
            "CREATE EXTENSION snowflake_id VERSION '0.5.0';
             CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT snowflake_nextval(3));
             INSERT INTO orders SELECT FROM generate_series(1, 10);
             CREATE MATERIALIZED VIEW shards AS SELECT (snowflake_decode(id)).shard FROM orders;
             CREATE INDEX orders_by_seq ON orders (((snowflake_decode(id)).seq));",
        )
        .unwrap();
    let db = db_error(&mut client, "ALTER EXTENSION snowflake_id UPDATE TO '0.6.0'");
    assert_eq!(db.code().code(), "2BP01", "{db:?}");
    let detail = db.detail().unwrap_or_default();
    assert!(
        detail.contains("index orders_by_seq") && detail.contains("materialized view shards"),
        "{detail}"
    );
    assert!(db.hint().unwrap_or_default().contains("ALTER EXTENSION snowflake_id UPDATE"), "{db:?}");
    assert_eq!(version(&mut client), "0.5.0");
    assert_eq!(
        value::<String>(&mut client, "SELECT pg_typeof(snowflake_decode(1 << 22))::text", &[]),
        "record"
    );

    client
        .batch_execute(
            "DROP MATERIALIZED VIEW shards; DROP INDEX orders_by_seq;
             ALTER EXTENSION snowflake_id UPDATE TO '0.6.0';
             CREATE MATERIALIZED VIEW shards AS SELECT (snowflake_decode(id)).shard FROM orders;",
        )
        .unwrap();
    assert_eq!(version(&mut client), "0.6.0");
    assert_eq!(value::<i64>(&mut client, "SELECT count(*) FROM shards WHERE shard = 3", &[]), 10);
}

/// The functions named `snowflake_auto_keys_schemas`: schema, owner, and the extension they
/// belong to (empty for none), sorted.
fn auto_keys_schemas_functions(client: &mut Client) -> Vec<String> {
    column(
        client,
        "SELECT concat_ws(' | ', p.pronamespace::regnamespace::text, p.proowner::regrole::text,
                              coalesce((SELECT e.extname FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid
                                        WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'), ''))
             FROM pg_proc p WHERE p.proname = 'snowflake_auto_keys_schemas' ORDER BY 1",
        &[],
    )
}

/// (Issue 52, finding 9.) The owner of the extension's schema can block an update by creating,
/// before it, a function the update script creates: in a database at 0.7.0 whose owner, mallory
/// (LOGIN only), therefore owns `public` (PostgreSQL 15+: `pg_database_owner`), she creates
/// `public.snowflake_auto_keys_schemas()`, which the script to 0.7.1 creates. `ALTER EXTENSION
/// snowflake_id UPDATE` fails with 42723 naming it, and changes nothing: the version, the
/// extension's objects and her function are as they were. The remedy the upgrade notes give
/// (docs/operations.md), her function dropped by a superuser in the update's transaction,
/// updates it to the default version, equal to a fresh install.
#[test]
fn a_function_squatted_in_public_stops_the_update_until_a_superuser_drops_it() {
    let cluster = Cluster::builder("upgrade_squatted").start();
    let mut superuser = database_of_mallory(&cluster, "squatted");
    superuser
        .batch_execute(
            "CREATE EXTENSION snowflake_id VERSION '0.7.0';
             CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT snowflake_nextval(3));
             INSERT INTO orders SELECT FROM generate_series(1, 10);",
        )
        .unwrap();
    let owner: String = value(
        &mut superuser,
        "SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = 'public'",
        &[],
    );
    assert_eq!(owner, "pg_database_owner");

    let mut mallory = cluster.connect_as("mallory", "squatted");
    mallory
        .batch_execute(
            "CREATE FUNCTION public.snowflake_auto_keys_schemas() RETURNS text[]
             LANGUAGE sql AS $$ SELECT ARRAY['public'] $$",
        )
        .unwrap();
    let objects_before = extension_objects(&mut superuser);
    let squatted = vec!["public | mallory | ".to_string()];
    assert_eq!(auto_keys_schemas_functions(&mut superuser), squatted);

    let db = db_error(&mut superuser, "ALTER EXTENSION snowflake_id UPDATE");
    assert_eq!(db.code().code(), "42723", "{db:?}");
    assert!(db.message().contains("snowflake_auto_keys_schemas"), "{db:?}");
    eprintln!("the update refused: {}: {}", db.code().code(), db.message());
    assert_eq!(version(&mut superuser), "0.7.0");
    assert_eq!(extension_objects(&mut superuser), objects_before);
    assert_eq!(auto_keys_schemas_functions(&mut superuser), squatted);
    let shard: i32 =
        value(&mut superuser, "INSERT INTO orders DEFAULT VALUES RETURNING snowflake_shard(id)", &[]);
    assert_eq!(shard, 3);

    // The remedy: a superuser drops the squatted function in the update's transaction (so that
    // it cannot be created again in between) and updates.
    superuser
        .batch_execute(
            "BEGIN;
             DROP FUNCTION public.snowflake_auto_keys_schemas();
             ALTER EXTENSION snowflake_id UPDATE;
             COMMIT;",
        )
        .unwrap();
    let default_version = default_version(&mut superuser);
    assert_eq!(version(&mut superuser), default_version);
    assert_eq!(
        auto_keys_schemas_functions(&mut superuser),
        vec!["public | postgres | snowflake_id".to_string()]
    );
    let mut fresh = fresh_install(&cluster, "CREATE EXTENSION snowflake_id");
    assert_eq!(extension_objects(&mut superuser), extension_objects(&mut fresh));
    assert_eq!(value::<i64>(&mut superuser, "SELECT count(*) FROM orders", &[]), 11);
}

/// (Issue 52, finding 9.) The extension created in a schema of its own, where no untrusted role
/// has CREATE (`CREATE SCHEMA snowflake; CREATE EXTENSION snowflake_id SCHEMA snowflake`), as
/// docs/security.md recommends, cannot be squatted that way: mallory, who owns the database and
/// so `public`, may create `public.snowflake_auto_keys_schemas()`, which the update does not
/// look at, and may not create it in `snowflake` (42501). The update from 0.7.0 goes through,
/// the extension then equals a fresh install in a schema of its own, and its defaults, event
/// triggers and horizon work with every function qualified.
#[test]
fn an_extension_in_a_schema_of_its_own_cannot_be_squatted() {
    let cluster = Cluster::builder("upgrade_own_schema").start();
    let mut superuser = database_of_mallory(&cluster, "own_schema");
    superuser
        .batch_execute(
            "CREATE SCHEMA snowflake;
             CREATE EXTENSION snowflake_id SCHEMA snowflake VERSION '0.7.0';
             CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT snowflake.snowflake_nextval(3));
             INSERT INTO orders SELECT FROM generate_series(1, 10);",
        )
        .unwrap();
    let mut mallory = cluster.connect_as("mallory", "own_schema");
    mallory
        .batch_execute(
            "CREATE FUNCTION public.snowflake_auto_keys_schemas() RETURNS text[]
             LANGUAGE sql AS $$ SELECT ARRAY['public'] $$",
        )
        .unwrap();
    let db = db_error(
        &mut mallory,
        "CREATE FUNCTION snowflake.snowflake_auto_keys_schemas() RETURNS text[] LANGUAGE sql AS $$ SELECT ARRAY['public'] $$",
    );
    assert_eq!(db.code().code(), "42501", "{db:?}");

    superuser.batch_execute("ALTER EXTENSION snowflake_id UPDATE").unwrap();
    let default_version = default_version(&mut superuser);
    assert_eq!(version(&mut superuser), default_version);
    assert_eq!(
        auto_keys_schemas_functions(&mut superuser),
        vec!["public | mallory | ".to_string(), "snowflake | postgres | snowflake_id".to_string()]
    );
    let mut fresh =
        fresh_install(&cluster, "CREATE SCHEMA snowflake; CREATE EXTENSION snowflake_id SCHEMA snowflake");
    assert_eq!(extension_objects(&mut superuser), extension_objects(&mut fresh));

    // It works from its own schema: the default issues shard 3; the narrow-default check
    // refuses an integer column; auto_keys gives a bigserial the qualified default; the
    // horizon passes the IDs committed.
    superuser.batch_execute("INSERT INTO orders DEFAULT VALUES; SELECT pg_sleep(0.01)").unwrap();
    let row = superuser
        .query_one(
            "SELECT count(*), bool_and(snowflake.snowflake_shard(id) = 3),
                    max(id) < snowflake.snowflake_horizon(3) FROM orders",
            &[],
        )
        .unwrap();
    assert_eq!((row.get::<_, i64>(0), row.get::<_, bool>(1), row.get::<_, bool>(2)), (11, true, true));
    let narrow =
        db_error(&mut superuser, "CREATE TABLE narrow (id integer DEFAULT snowflake.snowflake_nextval(3))");
    assert_eq!(narrow.code().code(), "42804", "{narrow:?}");
    superuser
        .batch_execute(
            "SET snowflake_id.auto_keys = public; SET snowflake_id.shard = 5;
             CREATE TABLE made_after (id bigserial PRIMARY KEY);",
        )
        .unwrap();
    assert_eq!(default_of(&mut superuser, "made_after"), "snowflake.snowflake_nextval()");
}
