//! The shard registry (`snowflake_id.registry_url`, docs/registry.md) with a real etcd started
//! by each test: a server issues a shard only while it holds the shard's claim there, so two
//! servers configured with one shard, or a data directory copied and started beside its
//! original, never issue the same shard at once, and a server that takes a shard resumes above
//! every ID its last holder gave, whatever its clock says.

use postgres::Client;
use snowflake_id_integration::{db_error, Cluster, FakeClock, Registry};
use std::collections::HashSet;
use std::time::{Duration, Instant};

/// The claim's lease: the shortest the setting allows, so that a dead holder's shard frees
/// itself within seconds.
const TTL_MS: u64 = 2_000;

fn registry_settings(registry: &Registry, shards: &str) -> Vec<String> {
    vec![
        format!("snowflake_id.registry_url = '{}'", registry.url()),
        format!("snowflake_id.registry_ttl_ms = {TTL_MS}"),
        format!("snowflake_id.shards = '{shards}'"),
    ]
}

fn server(name: &str, registry: &Registry, shards: &str) -> Cluster {
    let settings = registry_settings(registry, shards);
    let settings: Vec<&str> = settings.iter().map(String::as_str).collect();
    Cluster::builder(name).settings(&settings).setup("CREATE EXTENSION snowflake_id").start()
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
    let rows = client.query("SELECT snowflake_nextvals($1, $2)", &[&shard, &count]).unwrap();
    rows.iter().map(|row| row.get(0)).collect()
}

fn system_identifier(client: &mut Client) -> String {
    let row = client.query_one("SELECT system_identifier::text FROM pg_control_system()", &[]).unwrap();
    row.get(0)
}

#[test]
fn a_second_server_configured_with_a_shard_is_refused_it_and_issues_its_others() {
    let registry = Registry::start("two-servers");
    let first = server("registry-first", &registry, "1,2");
    let mut on_first = first.connect();
    let mut given = vec![first_id_within(&mut on_first, 2, Duration::from_secs(30))];
    given.extend(ids(&mut on_first, 2, 1000));
    first_id_within(&mut on_first, 1, Duration::from_secs(30));

    let mut second = server("registry-second", &registry, "2,3");
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
    let issued_on_second: i64 = on_second
        .query_one("SELECT coalesce(sum(issued), 0)::bigint FROM snowflake_stats() WHERE shard = 2", &[])
        .unwrap()
        .get(0);
    assert_eq!(issued_on_second, 0, "a refused call issued IDs");
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
    let original = server("registry-original", &registry, "4");
    let mut on_original = original.connect();
    let mut given: Vec<i64> = vec![first_id_within(&mut on_original, 4, Duration::from_secs(30))];

    // A copy of the data directory (same system identifier, same timeline), started beside it
    // as a primary, its clock 30 s behind the original's.
    let mut copy = Cluster::builder("registry-copy").standby_of(&original).create();
    std::fs::remove_file(copy.data_dir().join("standby.signal")).unwrap();
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
