//! The registry's protocol against a real etcd (Debian's `etcd-server`, as the Patroni kit uses
//! it), started by each test on loopback ports of its own, in a folder of its own, and stopped
//! (by its pid) when the test ends, also on failure. The rules decide as the worker will:
//! `snowflake_core::registry::verdict` on what a read found, then a take or a renewal whose
//! compare makes the claim one holder's.

use snowflake_core::registry::{verdict, Claim, Holder, Verdict};
use snowflake_registry::test_member::EtcdMember;
use snowflake_registry::{Current, Error, Etcd, HeldClaim, Outcome};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

const PREFIX: &str = "/snowflake_id/test/";
const SHARD: u32 = 3;
/// A read that found the shard free and never marked.
const FREE: Current = Current { claim: None, mark: None };

fn holder(system_identifier: u64, timeline: u32, incarnation: u64) -> Claim {
    Claim { holder: Holder { system_identifier, timeline, incarnation }, since_unix_ms: 1_700_000_000_000 }
}

/// Reads the shard and decides as the worker will.
fn ask(etcd: &Etcd, me: &Claim) -> (Current, Verdict) {
    let current = etcd.read(SHARD).expect("a read");
    let marked_by = current.mark.map(|mark| mark.by);
    let decided = verdict(me.holder, current.claim.as_ref().map(|held| held.claim), marked_by);
    (current, decided)
}

/// Reads the shard until its claim has run out (its holder renews no more), as `me` decides on it.
fn read_once_run_out(etcd: &Etcd, me: &Claim) -> (Current, Verdict) {
    let started = Instant::now();
    loop {
        let (current, decided) = ask(etcd, me);
        if current.claim.is_none() {
            return (current, decided);
        }
        assert!(started.elapsed() < Duration::from_secs(10), "the claim did not run out within 10 s");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Takes the claim as the verdict allows: a free one (expected absent), or one to take over
/// (expected its revision).
fn take(etcd: &Etcd, me: &Claim, node: &str, ttl_ms: u64) -> Outcome {
    let (current, decided) = ask(etcd, me);
    assert!(
        matches!(decided, Verdict::Take | Verdict::TakeOver | Verdict::Renew),
        "{node} may not take shard {SHARD}: {decided:?}"
    );
    let lease = etcd.grant(ttl_ms).expect("a lease");
    etcd.take(SHARD, &current, me, node, lease).expect("a take")
}

/// The claim's new revision, and the mark's milliseconds as they stand after the write.
fn written(outcome: Outcome) -> (i64, Option<u64>) {
    match outcome {
        Outcome::Written { revision, mark } => (revision, mark.map(|mark| mark.unix_ms)),
        Outcome::Lost { now } => panic!("expected the write to go through; the claim is {now:?}"),
    }
}

fn renew(etcd: &Etcd, me: &Claim, node: &str, revision: i64, ttl_ms: u64, mark: u64) -> Outcome {
    let lease = etcd.grant(ttl_ms).expect("a lease");
    etcd.renew(SHARD, revision, me, node, lease, mark).expect("a renewal")
}

#[test]
fn a_second_server_configured_with_the_shard_is_refused_it() {
    let server = EtcdMember::start("two-servers");
    let etcd = server.client(PREFIX);
    let (first, second) = (holder(7301, 1, 11), holder(9999, 1, 22));
    let (revision, mark) = written(take(&etcd, &first, "node1", 10_000));
    assert_eq!(mark, None, "a shard never held has no mark");
    let (current, decided) = ask(&etcd, &second);
    assert_eq!(decided, Verdict::HeldElsewhere { held: first });
    assert_eq!(current.claim.map(|held| (held.node, held.revision)), Some(("node1".into(), revision)));
    // Even a take that skips the rules (expecting the shard free) does not go through.
    let lease = etcd.grant(10_000).expect("a lease");
    match etcd.take(SHARD, &FREE, &second, "node2", lease).expect("a take") {
        Outcome::Lost { now: Some(HeldClaim { claim, .. }) } => assert_eq!(claim, first),
        other => panic!("the second server's take went through: {other:?}"),
    }
}

#[test]
fn a_copy_of_the_data_directory_waits_until_its_original_stops_renewing() {
    let server = EtcdMember::start("clone");
    let etcd = server.client(PREFIX);
    let (original, copy) = (holder(7301, 1, 11), holder(7301, 1, 12));
    let ttl_ms = 2_000;
    let (mut revision, _) = written(take(&etcd, &original, "node1", ttl_ms));
    // Three leases' worth of renewals: the copy never gets the claim meanwhile.
    let mut mark = 1_700_000_030_000;
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(3 * ttl_ms) {
        (revision, _) = written(renew(&etcd, &original, "node1", revision, ttl_ms, mark));
        assert_eq!(ask(&etcd, &copy).1, Verdict::WaitForExpiry { held: original });
        mark += 500;
        std::thread::sleep(Duration::from_millis(ttl_ms / 4));
    }
    let last_mark = mark - 500;
    // The original stops (killed: it renews no more). Its claim runs out; its mark stays.
    read_once_run_out(&etcd, &copy);
    let (_, mark_seen) = written(take(&etcd, &copy, "node1-copy", ttl_ms));
    assert_eq!(mark_seen, Some(last_mark), "the copy resumes above the original's last mark");
}

#[test]
fn a_promoted_standby_takes_over_at_once_and_its_old_primary_loses_the_next_renewal() {
    let server = EtcdMember::start("promotion");
    let etcd = server.client(PREFIX);
    let (old_primary, promoted) = (holder(7301, 1, 11), holder(7301, 2, 33));
    let (revision, _) = written(take(&etcd, &old_primary, "node1", 10_000));
    let (revision, _) = written(renew(&etcd, &old_primary, "node1", revision, 10_000, 1_700_000_040_000));
    // The standby, promoted: its old primary's claim is live (10 s lease), and it takes it now.
    assert_eq!(ask(&etcd, &promoted).1, Verdict::TakeOver);
    let (_, mark) = written(take(&etcd, &promoted, "node2", 10_000));
    assert_eq!(mark, Some(1_700_000_040_000));
    // The old primary, left running: its next renewal finds the claim gone to a later timeline.
    match renew(&etcd, &old_primary, "node1", revision, 10_000, 1_700_000_050_000) {
        Outcome::Lost { now: Some(held) } => {
            assert_eq!(
                verdict(old_primary.holder, Some(held.claim), None),
                Verdict::Replaced { by: promoted.holder }
            )
        }
        other => panic!("the old primary's renewal went through after the promotion: {other:?}"),
    }
    let mark = etcd.read(SHARD).expect("a read").mark;
    let mark = mark.map(|mark| (mark.unix_ms, mark.by));
    assert_eq!(mark, Some((1_700_000_040_000, old_primary.holder)), "its mark was not raised");
    // The promoted server renews (the mark now its own), then stops cleanly: the old primary,
    // still running, finds the shard free and the mark its successor's, and does not take it.
    let (revision, _) = written(take(&etcd, &promoted, "node2", 10_000));
    let (revision, _) = written(renew(&etcd, &promoted, "node2", revision, 10_000, 1_700_000_060_000));
    written(etcd.release(SHARD, revision).expect("a release"));
    assert_eq!(ask(&etcd, &old_primary).1, Verdict::Replaced { by: promoted.holder });
}

#[test]
fn a_clean_stop_frees_the_claim_at_once_and_the_mark_stays() {
    let server = EtcdMember::start("release");
    let etcd = server.client(PREFIX);
    let (first, next) = (holder(7301, 1, 11), holder(9999, 1, 22));
    let (revision, _) = written(take(&etcd, &first, "node1", 60_000));
    let (revision, _) = written(renew(&etcd, &first, "node1", revision, 60_000, 1_700_000_060_000));
    written(etcd.release(SHARD, revision).expect("a release"));
    let current = etcd.read(SHARD).expect("a read");
    assert!(current.claim.is_none(), "the claim is still there: {current:?}");
    assert_eq!(current.mark.map(|mark| (mark.unix_ms, mark.by)), Some((1_700_000_060_000, first.holder)));
    // A move: the next server takes the shard without waiting, above the mark.
    assert_eq!(written(take(&etcd, &next, "node2", 60_000)).1, Some(1_700_000_060_000));
}

#[test]
fn the_registry_killed_and_started_again_keeps_claims_and_marks() {
    let mut server = EtcdMember::start("restart");
    let etcd =
        server.client(PREFIX).with_cluster_id(server.client(PREFIX).cluster_id().expect("its cluster id"));
    let me = holder(7301, 1, 11);
    let (revision, _) = written(take(&etcd, &me, "node1", 10_000));
    let (revision, _) = written(renew(&etcd, &me, "node1", revision, 10_000, 1_700_000_070_000));
    server.kill();
    match etcd.read(SHARD) {
        Err(Error::NoAnswer(_)) => {}
        other => panic!("a killed registry answered: {other:?}"),
    }
    server.run();
    // The mark was durable; the claim's lease was renewed by the new leader.
    let current = etcd.read(SHARD).expect("a read");
    assert_eq!(current.mark.map(|mark| mark.unix_ms), Some(1_700_000_070_000));
    assert_eq!(current.claim.map(|held| held.revision), Some(revision));
    written(renew(&etcd, &me, "node1", revision, 10_000, 1_700_000_080_000));
}

#[test]
fn answers_from_another_listener_on_the_address_are_refused() {
    let server = EtcdMember::start("impostor");
    let cluster_id = server.client(PREFIX).cluster_id().expect("its cluster id");
    // Something else listening where the registry was: it answers a take as a success.
    let impostor = TcpListener::bind("127.0.0.1:0").expect("a port");
    let port = impostor.local_addr().expect("its address").port();
    let answering = std::thread::spawn(move || {
        for stream in impostor.incoming().take(2) {
            let mut stream: TcpStream = stream.expect("a connection");
            let mut request = [0u8; 4096];
            let _ = std::io::Read::read(&mut stream, &mut request);
            let body = r#"{"header":{"cluster_id":"42","revision":"9"},"succeeded":true,"responses":[]}"#;
            let answer = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}", body.len());
            let _ = std::io::Write::write_all(&mut stream, answer.as_bytes());
        }
    });
    let url = format!("http://127.0.0.1:{port}");
    let fooled = Etcd::new(&url, PREFIX, Duration::from_millis(2_000)).expect("a client");
    assert!(
        matches!(fooled.take(SHARD, &FREE, &holder(1, 1, 1), "n", 1), Ok(Outcome::Written { .. })),
        "without the cluster's id, the impostor's answer passes (which is why the id is kept)"
    );
    let pinned =
        Etcd::new(&url, PREFIX, Duration::from_millis(2_000)).expect("a client").with_cluster_id(cluster_id);
    match pinned.take(SHARD, &FREE, &holder(1, 1, 1), "n", 1) {
        Err(Error::Answer(why)) => assert!(why.contains("not"), "{why}"),
        other => panic!("the impostor's answer was believed: {other:?}"),
    }
    answering.join().expect("the impostor");
}

#[test]
fn a_take_decided_on_a_stale_read_does_not_go_through() {
    let server = EtcdMember::start("stale-read");
    let etcd = server.client(PREFIX);
    let (old_primary, successor) = (holder(7301, 1, 11), holder(7301, 2, 33));
    let (revision, _) = written(take(&etcd, &old_primary, "node1", 2_000));
    written(renew(&etcd, &old_primary, "node1", revision, 2_000, 1_700_000_090_000));
    // The old primary stops renewing (paused); its claim runs out, and it reads the shard free,
    // marked by itself: a take would be allowed.
    let (stale, decided) = read_once_run_out(&etcd, &old_primary);
    assert_eq!(decided, Verdict::Take);
    // Meanwhile its successor takes the shard, marks it, and stops cleanly.
    let (revision, _) = written(take(&etcd, &successor, "node2", 2_000));
    let (revision, _) = written(renew(&etcd, &successor, "node2", revision, 2_000, 1_700_000_095_000));
    written(etcd.release(SHARD, revision).expect("a release"));
    // The old primary wakes and takes on its stale read: the mark moved, so it does not.
    let lease = etcd.grant(2_000).expect("a lease");
    match etcd.take(SHARD, &stale, &old_primary, "node1", lease).expect("a take") {
        Outcome::Lost { now: None } => {}
        other => panic!("a take on a stale read went through: {other:?}"),
    }
    assert_eq!(ask(&etcd, &old_primary).1, Verdict::Replaced { by: successor.holder });
}
