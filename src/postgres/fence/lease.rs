//! The lease: an opt-in fence for servers run by an HA manager (Patroni). A primary issues IDs
//! only while it can show that it is the leader: the reservation worker asks the HA manager
//! (`snowflake_id.lease_url`, such as Patroni's `http://127.0.0.1:8008/primary`, which answers
//! 200 only on the leader) and, after `snowflake_id.lease_ms` without a 200, closes the
//! server-wide fence for every shard (`shared`): every call then fails with 55000 naming the
//! lease, and nothing is issued, until the next 200 reopens it.
//!
//! Why: an HA manager that dies alone (its process killed, no watchdog) leaves PostgreSQL
//! running as a primary; once its leader key expires (Patroni's `ttl`, 30 s by default) another
//! node is promoted, and two primaries issue the same shard. With `lease_ms` below that ttl,
//! the old primary has stopped issuing before the other can be promoted (docs/high-availability.md
//! weighs this against a watchdog, a lease file and callbacks).
//!
//! The fence starts closed: a worker that starts (the server's start, a promotion, the worker's
//! restart) has not yet been told that this server leads. It asks every 100 ms while closed and
//! every `lease_ms / 5` (at most once a second) while open, each answer awaited at most 250 ms,
//! in the worker's own loop: a hung HA manager delays the reservation's renewal by that much at
//! most, and the reservation keeps 250 ms to 500 ms ahead. What it measures from is the moment a
//! request that got 200 was *sent*, so a slow answer counts against the lease, never for it, and
//! it measures on the monotonic clock, which steps of the wall clock do not move.
//!
//! | setting | context | why |
//! |---|---|---|
//! | `lease_url` | reload (SIGHUP) | the HA manager's address, the server's configuration: each node's own (its REST port) |
//! | `lease_ms` | reload (SIGHUP) | 0 (off) by default; keep it well below the HA manager's ttl |

use super::super::guc::{self, refuse_setting};
use pgrx::guc::{GucContext, GucFlags, GucRegistry, GucSetting};
use pgrx::pg_sys;
use std::ffi::{c_char, c_void, CString};
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

static LEASE_URL: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(Some(c""));
static LEASE_MS: GucSetting<i32> = GucSetting::<i32>::new(0);

/// Each answer is awaited at most this long.
const ANSWER_TIMEOUT: Duration = Duration::from_millis(250);
/// How often a closed fence asks again.
const ASK_WHILE_CLOSED_MS: u64 = 100;

/// Defines the two settings; called from `settings::init` while preloading.
pub fn define() {
    // SAFETY: the hook is `#[pg_guard]`ed and only reads its argument.
    unsafe {
        GucRegistry::define_string_guc_with_hooks(
            c"snowflake_id.lease_url",
            c"The HA manager's address that answers 200 only on the leader (Patroni: http://127.0.0.1:8008/primary).",
            c"With snowflake_id.lease_ms above 0, this server issues no ID once this address has not answered \
              200 for that long.",
            &LEASE_URL,
            GucContext::Sighup,
            GucFlags::default(),
            Some(check_lease_url),
            None,
            None,
        );
    }
    GucRegistry::define_int_guc(
        c"snowflake_id.lease_ms",
        c"How long this server issues IDs after the HA manager last said it is the leader; 0 for always.",
        c"Keep it well below the time the HA manager takes to promote another node (Patroni's ttl), so \
          that a primary whose HA manager died stops issuing before another is promoted.",
        &LEASE_MS,
        0,
        3_600_000,
        GucContext::Sighup,
        GucFlags::UNIT_MS,
    );
}

/// Where to ask: a plain HTTP URL (`http://host:port/path`), parsed by the setting's check and
/// by the worker alike.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseUrl {
    host: String,
    port: u16,
    path: String,
}

/// The URL, or why it is not one the worker can ask: `http://` (the HA manager's REST API
/// on this machine; no TLS), a host (a name or an IPv4 address; an IPv6 one in brackets), an
/// optional port (80), and a path (`/` when none).
pub fn parse_url(text: &str) -> Result<LeaseUrl, String> {
    let rest = text
        .strip_prefix("http://")
        .ok_or_else(|| format!("\"{text}\" does not start with http:// (the worker asks without TLS)."))?;
    let (authority, path) = match rest.find('/') {
        Some(slash) => (&rest[..slash], &rest[slash..]),
        None => (rest, "/"),
    };
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) if !host.ends_with(']') || host.starts_with('[') => {
            (host, port.parse::<u16>().map_err(|_| format!("\"{port}\" is not a port number."))?)
        }
        _ => (authority, 80),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() || !host.chars().all(|c| c.is_ascii_alphanumeric() || ".-:".contains(c)) {
        return Err(format!("\"{authority}\" is not a host and port."));
    }
    if path.chars().any(|c| c.is_ascii_control() || c == ' ') {
        return Err("The path holds a space or a control character.".into());
    }
    Ok(LeaseUrl { host: host.to_string(), port, path: path.to_string() })
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn check_lease_url(
    newval: *mut *mut c_char,
    _extra: *mut *mut c_void,
    _source: pg_sys::GucSource::Type,
) -> bool {
    // SAFETY: PostgreSQL passes a valid pointer to a string or to NULL.
    let checked = unsafe { guc::hook_text_utf8(*newval) }.and_then(|text| {
        if text.is_empty() {
            Ok(())
        } else {
            parse_url(text).map(|_| ())
        }
    });
    match checked {
        Ok(()) => true,
        Err(reason) => refuse_setting(
            &reason,
            "Give the HA manager's REST address of this node, such as 'http://127.0.0.1:8008/primary' for \
             Patroni; '' for none.",
        ),
    }
}

/// The settings as this process has them: the URL and the lease, or `None` while off.
pub fn configured() -> Option<(LeaseUrl, u64)> {
    let lease_ms = guc::read(&LEASE_MS);
    let text = guc::text(&LEASE_URL);
    if lease_ms <= 0 || text.is_empty() {
        return None;
    }
    parse_url(&text).ok().map(|url| (url, lease_ms as u64))
}

/// The URL and the lease, as configured, for messages.
pub fn settings_text() -> (String, i32) {
    (guc::text(&LEASE_URL), guc::read(&LEASE_MS))
}

/// Whether `url` answers 200 now: one HTTP/1.0 GET, each step within `ANSWER_TIMEOUT`.
fn answers_yes(url: &LeaseUrl) -> bool {
    let ask = || -> std::io::Result<bool> {
        let address = (url.host.as_str(), url.port)
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| std::io::Error::other("no address"))?;
        let mut stream = TcpStream::connect_timeout(&address, ANSWER_TIMEOUT)?;
        stream.set_read_timeout(Some(ANSWER_TIMEOUT))?;
        stream.set_write_timeout(Some(ANSWER_TIMEOUT))?;
        write!(stream, "GET {} HTTP/1.0\r\nHost: {}\r\nConnection: close\r\n\r\n", url.path, url.host)?;
        // The status line is all that is read: "HTTP/1.x 200 ...".
        let mut head = [0u8; 12];
        stream.read_exact(&mut head)?;
        Ok(head.starts_with(b"HTTP/1.") && &head[8..12] == b" 200")
    };
    ask().unwrap_or(false)
}

/// What the worker knows of the lease: when it last asked, and when a request that got 200 was
/// sent (`None`: never, in this worker). On the monotonic clock: a wall clock stepped back or
/// ahead (NTP, a faked clock) neither lengthens nor cuts the lease.
#[derive(Default)]
pub struct Keeper {
    last_asked: Option<Instant>,
    last_yes: Option<Instant>,
}

/// What one look at the lease decided, for the worker to apply to the fence.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Off, or held: the fence is the setting's.
    Held,
    /// Not shown for longer than the lease (or not yet): every shard is fenced.
    Lost,
}

impl Keeper {
    /// Asks when it is time to (see the top), and says whether the lease holds now.
    /// `fence_closed`: whether the lease's fence is closed now, so that it is asked about more
    /// often.
    pub fn look(&mut self, fence_closed: bool) -> Verdict {
        let Some((url, lease_ms)) = configured() else { return Verdict::Held };
        let interval_ms = if fence_closed { ASK_WHILE_CLOSED_MS } else { (lease_ms / 5).clamp(50, 1000) };
        let now = Instant::now();
        if self.last_asked.is_none_or(|asked| now.duration_since(asked) >= Duration::from_millis(interval_ms))
        {
            self.last_asked = Some(now);
            if answers_yes(&url) {
                self.last_yes = Some(now);
            }
        }
        match self.last_yes {
            Some(yes) if now.duration_since(yes) < Duration::from_millis(lease_ms) => Verdict::Held,
            _ => Verdict::Lost,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{parse_url, LeaseUrl};

    #[test]
    fn lease_urls_are_parsed_as_the_check_parses_them() {
        let url = |host: &str, port, path: &str| Ok(LeaseUrl { host: host.into(), port, path: path.into() });
        assert_eq!(parse_url("http://127.0.0.1:8008/primary"), url("127.0.0.1", 8008, "/primary"));
        assert_eq!(parse_url("http://localhost/primary"), url("localhost", 80, "/primary"));
        assert_eq!(parse_url("http://[::1]:8008/primary"), url("::1", 8008, "/primary"));
        assert_eq!(parse_url("http://127.0.0.1:8008"), url("127.0.0.1", 8008, "/"));
        assert!(parse_url("https://127.0.0.1:8008/primary").is_err());
        assert!(parse_url("http://127.0.0.1:80080/primary").is_err());
        assert!(parse_url("http://:8008/primary").is_err());
        assert!(parse_url("http://a b/primary").is_err());
        assert!(parse_url("http://host/pri mary").is_err());
    }
}
