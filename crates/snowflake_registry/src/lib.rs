//! The registry's etcd client (docs/registry.md): the few requests the reservation worker will
//! make of etcd v3's JSON gateway, each one blocking HTTP/1.0 request on a connection of its own,
//! all of it within one deadline, its answer read up to a bounded size. Who may take a claim,
//! where a holder resumes and how far ahead the mark stands are `snowflake_core::registry`'s
//! rules; this crate only reads and writes the two records of a shard, with the compares that
//! make a claim one holder's:
//!
//! * the claim, `<prefix>claim/<shard>`: who holds the shard, bound to an etcd lease, so that it
//!   frees itself when its holder stops renewing;
//! * the mark, `<prefix>mark/<shard>`: the shard's high-water mark, bound to no lease, written
//!   only by a transaction that finds the claim still the writer's (its `mod_revision`).
//!
//! A renewal writes the claim again under a fresh lease (granted just before) together with the
//! mark, so every request is unary: no keep-alive stream to hold open, and a renewal's answer is
//! the claim's new revision, which the holder's next write compares.
//!
//! The reservation worker's asking thread calls it (`src/postgres/registry/asker.rs`). With the
//! feature `test-member`, `test_member` starts a real etcd for tests.

use serde_json::{json, Value};
use snowflake_core::lease::{parse_url, LeaseUrl};
use snowflake_core::registry::{Claim, Holder};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

#[cfg(feature = "test-member")]
pub mod test_member;

/// The most of an answer read: a shard's two records and etcd's header are far smaller; a peer
/// that sends more is not etcd, or not answering this.
const ANSWER_MAX: usize = 64 * 1024;

/// Why a request got no usable answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// No answer within the deadline, or none at all (refused, reset, closed early): the
    /// registry down, for `snowflake_core::registry::WhenDown`.
    NoAnswer(String),
    /// An answer that is not etcd's: a status other than 200, or a body that does not parse.
    Answer(String),
    /// A claim whose value is not one this client wrote: something else uses the prefix.
    Foreign(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::NoAnswer(why) => write!(f, "the registry did not answer: {why}"),
            Error::Answer(why) => write!(f, "the registry's answer is not etcd's: {why}"),
            Error::Foreign(why) => write!(f, "the registry holds something else under the prefix: {why}"),
        }
    }
}

/// A claim as the registry holds it, with the revision of its last write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeldClaim {
    pub claim: Claim,
    /// What the holder wrote for the operator to read (`cluster_name`, or host and port).
    pub node: String,
    /// The claim key's `mod_revision`: what the holder's next write compares.
    pub revision: i64,
}

/// A shard's two records as one read found them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Current {
    /// The live claim (etcd deletes one whose lease ran out).
    pub claim: Option<HeldClaim>,
    /// The mark, `None` before any holder wrote one.
    pub mark: Option<Mark>,
}

/// A shard's high-water mark, and who wrote it last: it outlives the claim, and tells an old
/// primary that a later timeline of its data directory held the shard after it
/// (`snowflake_core::registry::verdict`'s `marked_by`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mark {
    pub unix_ms: u64,
    pub by: Holder,
    /// The mark key's `mod_revision`: what a take compares, so that a take decided on a read
    /// that went stale (the server paused; a successor held the shard and wrote the mark
    /// meanwhile) does not go through.
    pub revision: i64,
}

/// What a take or a renewal came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Written: the claim's new revision, and the mark as it stands after the write.
    Written { revision: i64, mark: Option<Mark> },
    /// The claim was not what the compare expected: as it is now (`None`: gone).
    Lost { now: Option<HeldClaim> },
}

/// An etcd v3 endpoint (`http://host:port`, the JSON gateway) and the prefix of this keyspace.
pub struct Etcd {
    url: LeaseUrl,
    address: SocketAddr,
    prefix: String,
    deadline: Duration,
    /// The etcd cluster every answer must come from (its header's `cluster_id`), once known:
    /// whoever else answers on the address (a process that took the port after etcd stopped,
    /// another etcd) could otherwise hand out claims.
    cluster_id: Option<u64>,
}

impl Etcd {
    /// `url` as the lease's URLs are parsed (`http://`, a host, a port); `prefix`, the keys'
    /// (one per layout: two layouts make the same numbers); `deadline`, for each request whole.
    pub fn new(url: &str, prefix: &str, deadline: Duration) -> Result<Etcd, String> {
        let url = parse_url(url)?;
        let address = (url.host.as_str(), url.port)
            .to_socket_addrs()
            .map_err(|e| format!("{} could not be resolved: {e}", url.host))?
            .next()
            .ok_or_else(|| format!("{} has no address", url.host))?;
        Ok(Etcd { url, address, prefix: prefix.to_owned(), deadline, cluster_id: None })
    }

    /// Answers count only from the etcd cluster `cluster_id` (as `etcdctl endpoint status`
    /// prints it, or as `cluster_id` learned it).
    pub fn with_cluster_id(mut self, cluster_id: u64) -> Etcd {
        self.cluster_id = Some(cluster_id);
        self
    }

    /// The id of the cluster that answers on the address now.
    pub fn cluster_id(&self) -> Result<u64, Error> {
        let answer = self.post("/v3/maintenance/status", &json!({}))?;
        header_cluster_id(&answer)
    }

    fn claim_key(&self, shard: u32) -> String {
        format!("{}claim/{shard}", self.prefix)
    }

    fn mark_key(&self, shard: u32) -> String {
        format!("{}mark/{shard}", self.prefix)
    }

    /// A lease of `ttl_ms` (rounded up to whole seconds, etcd's unit): its id.
    pub fn grant(&self, ttl_ms: u64) -> Result<i64, Error> {
        let answer = self.post("/v3/lease/grant", &json!({ "TTL": ttl_ms.div_ceil(1_000) }))?;
        int_field(&answer, "ID")
    }

    /// The shard's claim and mark, in one read.
    pub fn read(&self, shard: u32) -> Result<Current, Error> {
        let answer = self.post(
            "/v3/kv/txn",
            &json!({ "success": [range(&self.claim_key(shard)), range(&self.mark_key(shard))] }),
        )?;
        let responses = responses(&answer)?;
        Ok(Current { claim: claim_of(responses.first())?, mark: mark_of(responses.get(1))? })
    }

    /// Takes the claim if it and the mark are still what `read` found (each's revision, or
    /// absent), bound to `lease`; the mark comes back with it.
    pub fn take(
        &self,
        shard: u32,
        read: &Current,
        holder: &Claim,
        node: &str,
        lease: i64,
    ) -> Result<Outcome, Error> {
        let compares = vec![
            compare(&self.claim_key(shard), read.claim.as_ref().map(|held| held.revision)),
            compare(&self.mark_key(shard), read.mark.map(|mark| mark.revision)),
        ];
        let put = self.put_claim(shard, holder, node, lease);
        self.write(shard, compares, vec![put, range(&self.mark_key(shard))])
    }

    /// Renews the claim of revision `revision` under `lease` (granted for this renewal) and
    /// records `mark_unix_ms`, both only if the claim is still that one.
    pub fn renew(
        &self,
        shard: u32,
        revision: i64,
        holder: &Claim,
        node: &str,
        lease: i64,
        mark_unix_ms: u64,
    ) -> Result<Outcome, Error> {
        let mut mark = holder_json(&holder.holder);
        mark["unix_ms"] = json!(mark_unix_ms.to_string());
        let puts = vec![
            self.put_claim(shard, holder, node, lease),
            json!({ "request_put": { "key": base64(self.mark_key(shard).as_bytes()),
                                     "value": base64(mark.to_string().as_bytes()) } }),
            range(&self.mark_key(shard)),
        ];
        self.write(shard, vec![compare(&self.claim_key(shard), Some(revision))], puts)
    }

    /// Deletes the claim of revision `revision` (a clean stop: its last ceiling is in the mark
    /// already), so the next holder need not wait for its lease. The mark stays.
    pub fn release(&self, shard: u32, revision: i64) -> Result<Outcome, Error> {
        let delete = json!({ "request_delete_range": { "key": base64(self.claim_key(shard).as_bytes()) } });
        self.write(shard, vec![compare(&self.claim_key(shard), Some(revision))], vec![delete])
    }

    fn put_claim(&self, shard: u32, holder: &Claim, node: &str, lease: i64) -> Value {
        let mut value = holder_json(&holder.holder);
        value["node"] = json!(node);
        value["since_unix_ms"] = json!(holder.since_unix_ms);
        json!({ "request_put": { "key": base64(self.claim_key(shard).as_bytes()),
                                 "value": base64(value.to_string().as_bytes()),
                                 "lease": lease.to_string() } })
    }

    /// A transaction: `success` if every compare holds, else the claim read back.
    fn write(&self, shard: u32, compares: Vec<Value>, success: Vec<Value>) -> Result<Outcome, Error> {
        let answer = self.post(
            "/v3/kv/txn",
            &json!({ "compare": compares, "success": success, "failure": [range(&self.claim_key(shard))] }),
        )?;
        let responses = responses(&answer)?;
        // proto3's JSON leaves out a false `succeeded`.
        if answer.get("succeeded").and_then(Value::as_bool) != Some(true) {
            return Ok(Outcome::Lost { now: claim_of(responses.first())? });
        }
        let header = answer
            .get("header")
            .ok_or_else(|| Error::Answer("a transaction's answer without a header".into()))?;
        let revision = int_field(header, "revision")?;
        let mark = responses.iter().rev().find_map(|response| response.get("response_range"));
        let mark = match mark {
            Some(_) => mark_of(responses.last())?,
            None => None,
        };
        Ok(Outcome::Written { revision, mark })
    }

    /// One POST, all of it within the deadline: the answer's JSON body, from a 200.
    pub(crate) fn post(&self, path: &str, body: &Value) -> Result<Value, Error> {
        let deadline = Instant::now() + self.deadline;
        let left = || {
            let left = deadline.saturating_duration_since(Instant::now());
            (!left.is_zero())
                .then_some(left)
                .ok_or_else(|| Error::NoAnswer(format!("none within {:?}", self.deadline)))
        };
        let no_answer =
            |step: &str, e: std::io::Error| Error::NoAnswer(format!("{step} {}: {e}", self.address));
        let mut stream =
            TcpStream::connect_timeout(&self.address, left()?).map_err(|e| no_answer("connecting to", e))?;
        let body = body.to_string();
        let host =
            if self.url.host.contains(':') { format!("[{}]", self.url.host) } else { self.url.host.clone() };
        let request = format!(
            "POST {path} HTTP/1.0\r\nHost: {host}:{}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            self.url.port,
            body.len()
        );
        stream.set_write_timeout(Some(left()?)).map_err(|e| no_answer("writing to", e))?;
        stream.write_all(request.as_bytes()).map_err(|e| no_answer("writing to", e))?;
        let mut answer = Vec::new();
        let mut buffer = [0u8; 4096];
        loop {
            stream.set_read_timeout(Some(left()?)).map_err(|e| no_answer("reading from", e))?;
            match stream.read(&mut buffer) {
                Ok(0) => break,
                Ok(read) if answer.len() + read > ANSWER_MAX => {
                    return Err(Error::Answer(format!("longer than {ANSWER_MAX} bytes")))
                }
                Ok(read) => answer.extend_from_slice(&buffer[..read]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(no_answer("reading from", e)),
            }
        }
        let answer = parse_answer(&answer)?;
        if let Some(expected) = self.cluster_id {
            let cluster_id = header_cluster_id(&answer)?;
            if cluster_id != expected {
                return Err(Error::Answer(format!(
                    "it comes from etcd cluster {cluster_id:x}, not {expected:x}, the registry's"
                )));
            }
        }
        Ok(answer)
    }
}

fn header_cluster_id(answer: &Value) -> Result<u64, Error> {
    let header = answer.get("header").ok_or_else(|| Error::Answer("an answer without a header".into()))?;
    match header.get("cluster_id") {
        Some(Value::String(text)) => text.parse().ok(),
        Some(number) => number.as_u64(),
        None => None,
    }
    .ok_or_else(|| Error::Answer(format!("no cluster_id in {header}")))
}

/// The JSON body of an HTTP/1 answer whose status is 200.
fn parse_answer(answer: &[u8]) -> Result<Value, Error> {
    let split = answer
        .windows(4)
        .position(|window| window == b"\r\n\r\n")
        .ok_or_else(|| Error::NoAnswer("the connection closed before the answer's headers ended".into()))?;
    let head =
        std::str::from_utf8(&answer[..split]).map_err(|_| Error::Answer("headers not UTF-8".into()))?;
    let status = head.lines().next().unwrap_or_default();
    let mut parts = status.split(' ');
    let (version, code) = (parts.next().unwrap_or_default(), parts.next().unwrap_or_default());
    if !version.starts_with("HTTP/1.") {
        return Err(Error::Answer(format!("not an HTTP/1 status line: {status:?}")));
    }
    let body = &answer[split + 4..];
    if code != "200" {
        let text = String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned();
        return Err(Error::Answer(format!("status {code}: {text}")));
    }
    serde_json::from_slice(body).map_err(|e| Error::Answer(format!("a body that is not JSON: {e}")))
}

/// A compare of a key: its `mod_revision` is `expected`, or, for `None`, it is absent (created
/// at revision 0).
fn compare(key: &str, expected: Option<i64>) -> Value {
    match expected {
        Some(revision) => json!({ "key": base64(key.as_bytes()), "result": "EQUAL", "target": "MOD",
                                  "mod_revision": revision.to_string() }),
        None => json!({ "key": base64(key.as_bytes()), "result": "EQUAL", "target": "CREATE",
                        "create_revision": "0" }),
    }
}

fn range(key: &str) -> Value {
    json!({ "request_range": { "key": base64(key.as_bytes()) } })
}

fn responses(answer: &Value) -> Result<&Vec<Value>, Error> {
    static NONE: Vec<Value> = Vec::new();
    match answer.get("responses") {
        None => Ok(&NONE),
        Some(Value::Array(responses)) => Ok(responses),
        Some(_) => Err(Error::Answer("a transaction's responses that are not a list".into())),
    }
}

/// The one key a range response holds, if any: its value and `mod_revision`.
fn only_kv(response: Option<&Value>) -> Result<Option<(Vec<u8>, i64)>, Error> {
    let Some(kvs) = response.and_then(|r| r.get("response_range")).and_then(|r| r.get("kvs")) else {
        return Ok(None);
    };
    let Some(kv) = kvs.as_array().and_then(|kvs| kvs.first()) else { return Ok(None) };
    let value = kv.get("value").and_then(Value::as_str).unwrap_or_default();
    let value = unbase64(value).ok_or_else(|| Error::Answer("a value that is not base64".into()))?;
    Ok(Some((value, int_field(kv, "mod_revision")?)))
}

/// A holder as a record carries it (the 64-bit numbers as strings, as etcd writes its own).
fn holder_json(holder: &Holder) -> Value {
    json!({
        "system_identifier": holder.system_identifier.to_string(),
        "timeline": holder.timeline,
        "incarnation": holder.incarnation.to_string(),
    })
}

/// A record's JSON, if it parses.
fn record_of(value: &[u8]) -> Option<Value> {
    serde_json::from_slice(value).ok()
}

/// A number of a record: a string (as `holder_json` writes them) or a JSON number.
fn number(record: &Value, name: &str) -> Option<u64> {
    match record.get(name)? {
        Value::String(text) => text.parse().ok(),
        other => other.as_u64(),
    }
}

fn holder_of(record: &Value) -> Option<Holder> {
    Some(Holder {
        system_identifier: number(record, "system_identifier")?,
        timeline: u32::try_from(number(record, "timeline")?).ok()?,
        incarnation: number(record, "incarnation")?,
    })
}

fn foreign(what: &str, value: &[u8]) -> Error {
    Error::Foreign(format!("{what} not written by snowflake_id: {}", String::from_utf8_lossy(value)))
}

fn claim_of(response: Option<&Value>) -> Result<Option<HeldClaim>, Error> {
    let Some((value, revision)) = only_kv(response)? else { return Ok(None) };
    let parsed = record_of(&value).and_then(|record| {
        let claim =
            Claim { holder: holder_of(&record)?, since_unix_ms: record.get("since_unix_ms")?.as_i64()? };
        let node = record.get("node").and_then(Value::as_str).unwrap_or_default().to_owned();
        Some(HeldClaim { claim, node, revision })
    });
    parsed.map(Some).ok_or_else(|| foreign("a claim", &value))
}

fn mark_of(response: Option<&Value>) -> Result<Option<Mark>, Error> {
    let Some((value, revision)) = only_kv(response)? else { return Ok(None) };
    let parsed = record_of(&value).and_then(|record| {
        Some(Mark { unix_ms: number(&record, "unix_ms")?, by: holder_of(&record)?, revision })
    });
    parsed.map(Some).ok_or_else(|| foreign("a mark", &value))
}

/// An int64 of etcd's JSON: proto3 writes them as strings.
fn int_field(value: &Value, name: &str) -> Result<i64, Error> {
    match value.get(name) {
        Some(Value::String(text)) => text.parse().ok(),
        Some(number) => number.as_i64(),
        None => None,
    }
    .ok_or_else(|| Error::Answer(format!("no integer {name} in {value}")))
}

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding, as the gateway writes keys and values.
pub fn base64(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let word = chunk.iter().enumerate().fold(0u32, |word, (k, &b)| word | (b as u32) << (16 - 8 * k));
        for k in 0..4 {
            if k <= chunk.len() {
                out.push(ALPHABET[(word >> (18 - 6 * k) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The bytes of standard base64 (padding optional), or `None`.
pub fn unbase64(text: &str) -> Option<Vec<u8>> {
    let digits: Vec<u8> = text
        .trim_end_matches('=')
        .bytes()
        .map(|c| ALPHABET.iter().position(|&a| a == c).map(|p| p as u8))
        .collect::<Option<_>>()?;
    if digits.len() % 4 == 1 {
        return None;
    }
    Some(
        digits
            .chunks(4)
            .flat_map(|chunk| {
                let word =
                    chunk.iter().enumerate().fold(0u32, |word, (k, &d)| word | (d as u32) << (18 - 6 * k));
                (0..chunk.len() - 1).map(move |k| (word >> (16 - 8 * k)) as u8)
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_both_ways() {
        for (bytes, text) in [
            (&b""[..], ""),
            (b"f", "Zg=="),
            (b"fo", "Zm8="),
            (b"foo", "Zm9v"),
            (b"/snowflake_id/claim/3", "L3Nub3dmbGFrZV9pZC9jbGFpbS8z"),
        ] {
            assert_eq!(base64(bytes), text);
            assert_eq!(unbase64(text).as_deref(), Some(bytes));
        }
        assert_eq!(unbase64("Z"), None);
        assert_eq!(unbase64("Zm9v!"), None);
    }

    #[test]
    fn answers_that_are_not_etcd_s_are_refused() {
        assert!(parse_answer(b"HTTP/1.1 200 OK\r\n\r\n{\"a\":1}").is_ok());
        assert!(matches!(parse_answer(b"HTTP/1.1 503 Service Unavailable\r\n\r\nno"), Err(Error::Answer(_))));
        assert!(matches!(parse_answer(b"SSH-2.0-OpenSSH\r\n\r\n"), Err(Error::Answer(_))));
        assert!(matches!(parse_answer(b"HTTP/1.1 200 OK\r\n\r\nnot json"), Err(Error::Answer(_))));
        assert!(matches!(parse_answer(b"HTTP/1.1 200 OK\r\nContent-Length: 9"), Err(Error::NoAnswer(_))));
    }
}
