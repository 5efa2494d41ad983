//! The shard registry (`snowflake_id.registry_url`, docs/registry.md) with a real etcd started
//! by each test: a server issues a shard only while it holds the shard's claim there, so two
//! servers configured with one shard, or a data directory copied and started beside its
//! original, never issue the same shard at once, and a server that takes a shard resumes above
//! every ID its last holder gave, whatever its clock says.

use postgres::Client;
use snowflake_id_integration::{
    assert_setting_refused, column, db_error, issued, log_of_refused_start, value, wait_for, Cluster, Disk,
    FakeClock, Pair, Registry, Write, Writers,
};
use std::collections::HashSet;
use std::time::{Duration, Instant};

/// The claim's lease: the shortest the setting allows, so that a dead holder's shard frees
/// itself within seconds.
const TTL_MS: u64 = 2_000;

/// The settings of a server of `shards` with `registry`, then `extra` (which win).
fn registry_settings(registry: &Registry, shards: &str, extra: &[&str]) -> Vec<String> {
    let mut settings = vec![
        format!("snowflake_id.registry_url = '{}'", registry.url()),
        format!("snowflake_id.registry_ttl_ms = {TTL_MS}"),
        format!("snowflake_id.shards = '{shards}'"),
    ];
    settings.extend(extra.iter().map(|setting| setting.to_string()));
    settings
}

fn server(name: &str, registry: &Registry, shards: &str, extra: &[&str]) -> Cluster {
    let settings = registry_settings(registry, shards, extra);
    let settings: Vec<&str> = settings.iter().map(String::as_str).collect();
    Cluster::builder(name).settings(&settings).setup("CREATE EXTENSION snowflake_id").start()
}

/// Writers on `cluster`, each asking for 10 IDs of `shard` at a time until its first error.
fn writers(cluster: &Cluster, shard: i32, count: usize) -> Writers {
    let write = || Write::text("SELECT snowflake_nextvals($1, 10)", &[shard]);
    Writers::start(cluster, (0..count).map(|_| write()).collect())
}

/// The Unix millisecond of an ID of the default layout.
fn unix_ms(client: &mut Client, id: i64) -> i64 {
    value(client, "SELECT (extract(epoch FROM (snowflake_decode($1)).ts) * 1000)::bigint", &[&id])
}

/// The first ID of `shard` the server issues, once it holds the shard's claim: asked again
/// while it is refused, for at most `within`.
fn first_id_within(client: &mut Client, shard: i32, within: Duration) -> i64 {
    let started = Instant::now();
    loop {
        match client.query_one("SELECT snowflake_nextval($1)", &[&shard]) {
            Ok(row) => return row.get(0),
            Err(error) => {
                let code = error.as_db_error().map(|db| db.code().code().to_owned());
                assert_eq!(code.as_deref(), Some("55000"), "shard {shard}: {error}");
                assert!(
                    started.elapsed() < within,
                    "shard {shard} was not issued within {within:?}: {error}"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

fn ids(client: &mut Client, shard: i32, count: i32) -> Vec<i64> {
    column(client, "SELECT snowflake_nextvals($1, $2)", &[&shard, &count])
}

fn system_identifier(client: &mut Client) -> String {
    value(client, "SELECT system_identifier::text FROM pg_control_system()", &[])
}

#[test]
fn a_second_server_configured_with_a_shard_is_refused_it_and_issues_its_others() {
    let registry = Registry::start("two-servers");
    let first = server("registry-first", &registry, "1,2", &[]);
    let mut on_first = first.connect();
    let mut given = vec![first_id_within(&mut on_first, 2, Duration::from_secs(30))];
    given.extend(ids(&mut on_first, 2, 1000));
    first_id_within(&mut on_first, 1, Duration::from_secs(30));

    let mut second = server("registry-second", &registry, "2,3", &[]);
    let mut on_second = second.connect();
    first_id_within(&mut on_second, 3, Duration::from_secs(30));
    // Shard 2 is the first server's: refused, with who holds it, for as long as it renews.
    let first_system = system_identifier(&mut on_first);
    for _ in 0..3 {
        let error = db_error(&mut on_second, "SELECT snowflake_nextval(2)");
        assert_eq!(error.code().code(), "55000", "{error:?}");
        assert_eq!(
            error.message(),
            "shard 2 is not issued by this server: the registry does not give it to this server"
        );
        let detail = error.detail().unwrap();
        assert!(detail.contains(&format!("system identifier {first_system}")), "{detail}");
        assert!(detail.contains("two servers are configured with this shard"), "{detail}");
        assert!(error.hint().unwrap().contains("another shard"), "{error:?}");
        std::thread::sleep(Duration::from_millis(TTL_MS));
    }
    assert_eq!(issued(&mut on_second, 2), 0, "a refused call issued IDs");
    // What monitoring reads: shard 2 held by the first server, shard 3 by this one, with a
    // mark ahead of the clock; the registry answering.
    let claims: Vec<(i32, String, Option<String>, bool)> = on_second
        .query(
            "SELECT shard, state, holder_system_identifier::text, mark > clock_timestamp() \
             FROM snowflake_registry_claims() ORDER BY shard",
            &[],
        )
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1), row.get(2), row.get::<_, Option<bool>>(3) == Some(true)))
        .collect();
    let second_system = system_identifier(&mut on_second);
    assert_eq!(
        claims,
        vec![
            (2, "held_elsewhere".to_owned(), Some(first_system.clone()), false),
            (3, "held".to_owned(), Some(second_system), true),
        ]
    );
    let (url, answered_lately): (Option<String>, Option<bool>) = on_second
        .query_one(
            "SELECT registry_url, registry_last_answer > clock_timestamp() - interval '5 s' FROM snowflake_status()",
            &[],
        )
        .map(|row| (row.get(0), row.get(1)))
        .unwrap();
    assert_eq!((url, answered_lately), (Some(registry.url()), Some(true)));
    given.extend(ids(&mut on_first, 2, 1000));

    // The first stops cleanly and releases its claims: the second takes shard 2 at once,
    // above every ID the first gave.
    drop(on_first);
    drop(first);
    let taken = first_id_within(&mut on_second, 2, Duration::from_secs(10));
    let highest = *given.iter().max().unwrap();
    assert!(taken > highest, "the second resumed shard 2 at {taken}, not above the first's {highest}");
    second.stop("fast");
}

#[test]
fn a_copied_data_directory_never_issues_a_shard_its_original_holds() {
    let registry = Registry::start("copy");
    let original = server("registry-original", &registry, "4", &[]);
    let mut on_original = original.connect();
    let mut given: Vec<i64> = vec![first_id_within(&mut on_original, 4, Duration::from_secs(30))];

    // A copy of the data directory (same system identifier, same timeline), started beside it
    // as a primary, its clock 30 s behind the original's.
    let mut copy = Cluster::builder("registry-copy").copy_of(&original).create();
    let clock = FakeClock::of(&copy);
    clock.set("-30s");
    clock.start(&mut copy);
    let mut on_copy = copy.connect();
    assert_eq!(system_identifier(&mut on_copy), system_identifier(&mut on_original));

    // Both write for three leases: the original issues, the copy is refused every time.
    let until = Instant::now() + Duration::from_millis(3 * TTL_MS);
    let mut refusals = 0;
    while Instant::now() < until {
        given.extend(ids(&mut on_original, 4, 100));
        let error = db_error(&mut on_copy, "SELECT snowflake_nextval(4)");
        assert_eq!(error.code().code(), "55000", "{error:?}");
        assert!(error.detail().unwrap().contains("another postmaster of this data directory"), "{error:?}");
        refusals += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(refusals > 10, "the copy was asked {refusals} times");

    // The original killed (kill -9): its claim runs out, the copy takes the shard, and its
    // first ID lies above every ID the original gave, 30 s behind as its clock is.
    drop(on_original);
    let mut original = original;
    original.kill_postmaster();
    let taken = first_id_within(&mut on_copy, 4, Duration::from_millis(10 * TTL_MS));
    let highest = *given.iter().max().unwrap();
    assert!(taken > highest, "the copy resumed shard 4 at {taken}, not above the original's {highest}");
    let mut all: HashSet<i64> = given.into_iter().collect();
    let count = all.len();
    all.extend(ids(&mut on_copy, 4, 1000));
    assert_eq!(all.len(), count + 1000, "an ID was issued twice");
    copy.stop("fast");
}

#[test]
fn a_promoted_standby_takes_its_primarys_shard_at_once_and_the_old_primary_fences() {
    let registry = Registry::start("failover");
    // A lease long enough that a promoted server that waited for it would be seen waiting.
    let settings = registry_settings(&registry, "5", &["snowflake_id.registry_ttl_ms = 20000"]);
    let settings: Vec<&str> = settings.iter().map(String::as_str).collect();
    let pair =
        Pair::builder("registry-failover").settings(&settings).setup("CREATE EXTENSION snowflake_id").start();
    first_id_within(&mut pair.primary.connect(), 5, Duration::from_secs(30));
    let load = writers(&pair.primary, 5, 2);
    load.wait_for(2_000);

    // The standby is promoted while its old primary runs on (its HA manager dead): the
    // promoted server issues the shard without waiting out the old primary's lease.
    let mut promoted = pair.promote();
    let promoted_at = Instant::now();
    let first = first_id_within(&mut promoted, 5, Duration::from_secs(10));
    assert!(promoted_at.elapsed() < Duration::from_secs(10), "the promoted server waited for the lease");

    // The old primary loses the claim at its next renewal (a third of the lease): its writers
    // stop at the fence, and every ID they were given lies below the promoted server's first.
    let deadline = Instant::now() + Duration::from_secs(30);
    while load.errors().len() < 2 {
        assert!(Instant::now() < deadline, "the old primary still issues shard 5: {:?}", load.errors());
        std::thread::sleep(Duration::from_millis(50));
    }
    let (keys, errors) = load.finish();
    assert!(
        errors.iter().all(|error| error.contains("55000") || error.contains("not issued by this server")),
        "{errors:?}"
    );
    let highest = keys.iter().flatten().max().copied().unwrap();
    assert!(first > highest, "the promoted server resumed at {first}, not above its old primary's {highest}");
    // Lost at the renewal, then, at its next read, refused for good: a later timeline holds it.
    let mut on_old = pair.primary.connect();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let error = db_error(&mut on_old, "SELECT snowflake_nextval(5)");
        assert_eq!(error.code().code(), "55000", "{error:?}");
        if error.detail().unwrap().contains("A promoted standby of this server") {
            break;
        }
        assert!(Instant::now() < deadline, "the old primary does not say it was replaced: {error:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn the_registry_down_issues_up_to_the_mark_and_nothing_past_it() {
    let mut registry = Registry::start("down");
    // The mark 2 s ahead: an outage of 10 s outlasts it.
    let server = server("registry-down", &registry, "6", &["snowflake_id.registry_reserve_ms = 2000"]);
    let mut client = server.connect();
    first_id_within(&mut client, 6, Duration::from_secs(30));
    let load = writers(&server, 6, 2);
    load.wait_for(1_000);

    // etcd killed under the writers: they go on up to the mark recorded, then are refused.
    let killed_at_unix_ms =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    registry.kill();
    wait_for("the writers stop with the registry down", Duration::from_secs(10), || {
        (load.errors().len() >= 2).then_some(())
    });
    let (keys, _) = load.finish();
    let highest = keys.iter().flatten().max().copied().unwrap();
    // The mark lay at most registry_reserve_ms ahead of the ceiling wanted at its last renewal
    // (itself at most max_lead_ms + reserve_ms ahead of the clock), with a second for the
    // renewal's own time.
    let bound = killed_at_unix_ms + 2_000 + 2_000 + 500 + 1_000;
    let highest_ms = unix_ms(&mut client, highest);
    assert!(highest_ms <= bound, "an ID of {highest_ms} was issued past the mark (at most {bound})");
    // snowflake_status() shows the registry silent since the kill (what the alert reads), and the
    // claim its mark, which no ID passed.
    let silent_since_kill =
        "SELECT registry_last_answer <= to_timestamp($1::float8 / 1000) FROM snowflake_status()";
    assert!(
        value::<bool>(&mut client, silent_since_kill, &[&(killed_at_unix_ms as f64)]),
        "snowflake_status() says the registry answered after it was killed"
    );
    let mark_ms: f64 = value(
        &mut client,
        "SELECT extract(epoch FROM mark)::float8 * 1000 FROM snowflake_registry_claims()",
        &[],
    );
    assert!(highest_ms as f64 <= mark_ms, "an ID of {highest_ms} lies past the claim's mark {mark_ms}");

    // etcd started again on its data: the claim is renewed, the writers go on, nothing repeats.
    registry.run();
    let mut all: HashSet<i64> = keys.into_iter().flatten().collect();
    let count = all.len();
    let again = first_id_within(&mut client, 6, Duration::from_secs(30));
    assert!(again > highest);
    all.extend(ids(&mut client, 6, 1000));
    all.insert(again);
    assert_eq!(all.len(), count + 1001, "an ID was issued twice");
}

#[test]
fn a_holder_that_lost_power_is_followed_above_every_id_it_gave() {
    let registry = Registry::start("power-loss");
    let settings = registry_settings(&registry, "7", &[]);
    let settings: Vec<&str> = settings.iter().map(String::as_str).collect();
    let mut holder = Cluster::builder("registry-holder")
        .settings(&settings)
        .disk(Disk::PowerLoss)
        .setup("CREATE EXTENSION snowflake_id")
        .start();
    let mut on_holder = holder.connect();
    let mut given = vec![first_id_within(&mut on_holder, 7, Duration::from_secs(30))];

    // Another server configured with the same shard, its clock 30 s behind: refused while the
    // holder renews.
    let mut other = Cluster::builder("registry-other").settings(&settings).create();
    let clock = FakeClock::of(&other);
    clock.set("-30s");
    clock.start(&mut other);
    let mut on_other = other.connect();
    on_other.batch_execute("CREATE EXTENSION snowflake_id").unwrap();
    given.extend(ids(&mut on_holder, 7, 2000));
    let error = db_error(&mut on_other, "SELECT snowflake_nextval(7)");
    assert!(error.detail().unwrap().contains("two servers are configured with this shard"), "{error:?}");

    // The holder's machine loses power: what it did not fsync is gone, its claim runs out, and
    // the other takes the shard above every ID the holder gave.
    given.extend(ids(&mut on_holder, 7, 2000));
    drop(on_holder);
    holder.lose_power();
    let taken = first_id_within(&mut on_other, 7, Duration::from_millis(10 * TTL_MS));
    let highest = *given.iter().max().unwrap();
    assert!(taken > highest, "the other server resumed shard 7 at {taken}, not above the holder's {highest}");

    // Started again, the old holder finds the shard held by the other, and issues none of it.
    holder.start_with(&[]);
    let mut on_holder = holder.connect();
    std::thread::sleep(Duration::from_millis(2 * TTL_MS));
    let error = db_error(&mut on_holder, "SELECT snowflake_nextval(7)");
    assert!(error.detail().unwrap().contains("two servers are configured with this shard"), "{error:?}");
    other.stop("fast");
    holder.stop("fast");
}

/// A registry setting PostgreSQL refuses stops the start, saying why: a registry that fell back
/// to off (or to another keyspace) would let two servers issue one shard.
#[test]
fn a_registry_setting_that_cannot_be_used_stops_the_start() {
    let url = "snowflake_id.registry_url = 'http://127.0.0.1:2379'";
    for (name, setting, reason) in [
        ("registry-https", "snowflake_id.registry_url = 'https://127.0.0.1:2379'", "without TLS"),
        ("registry-prefix", "snowflake_id.registry_prefix = 'snowflake_id'", "starts and ends with '/'"),
        ("registry-down", "snowflake_id.registry_down = 'maybe'", "neither keep_to_mark nor stop"),
        ("registry-ttl", "snowflake_id.registry_ttl_ms = 500", "outside the valid range"),
    ] {
        let log = log_of_refused_start(name, &[url, setting]);
        assert_setting_refused(&log, setting);
        assert!(log.contains(reason), "the refusal does not say why ({reason}):\n{log}");
        assert!(log.contains("two servers could issue the same shard"), "{log}");
        assert!(log.contains(&format!("HINT:  Correct {}", setting.split_once(" = ").unwrap().0)), "{log}");
    }
}
