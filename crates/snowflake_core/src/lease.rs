//! The lease's rules, without PostgreSQL or sockets: which URLs can be asked, which answers
//! count as "this server leads", and when the lease is lost. The extension's reservation worker
//! asks the HA manager (`snowflake_id.lease_url`) from a thread of its own and applies the
//! verdict to the server-wide fence; the rules it follows are these.
//!
//! Time is in milliseconds of a clock that keeps counting while the machine is suspended
//! (Linux's CLOCK_BOOTTIME, `boot_clock_ms`): a host suspended longer than the HA manager's ttl
//! wakes with its lease expired, where CLOCK_MONOTONIC (Rust's `Instant`) stops during a
//! suspend and would count the lease as fresh for up to `lease_ms` more while another node was
//! promoted.

/// Where to ask: a plain HTTP URL (`http://host:port/path`), as the setting's check and the
/// worker both parse it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseUrl {
    /// A name, an IPv4 address, or an IPv6 address without its brackets.
    pub host: String,
    pub port: u16,
    /// What is sent in the request line: `/` when the URL has none, never a fragment.
    pub path: String,
}

/// The URL, or why it is not one the worker can ask: `http://` in any case (the HA manager's
/// REST API on this machine; no TLS), a host (a name or an IPv4 address; an IPv6 one in
/// brackets), an optional port (80), a path (`/` when none); a fragment is dropped, as every
/// client does; user information is refused (nothing would send it).
pub fn parse_url(text: &str) -> Result<LeaseUrl, String> {
    let scheme_end = text.find("://").unwrap_or(0);
    if !text[..scheme_end].eq_ignore_ascii_case("http") {
        let why = if text[..scheme_end].eq_ignore_ascii_case("https") {
            "the lease is asked without TLS; give the HA manager's plain HTTP address on this node"
        } else {
            "a lease URL starts with http://"
        };
        return Err(format!("\"{text}\" is not an http:// URL: {why}."));
    }
    let rest = &text[scheme_end + 3..];
    let rest = rest.split_once('#').map_or(rest, |(before, _fragment)| before);
    let (authority, path) = rest.split_at(rest.find(['/', '?']).unwrap_or(rest.len()));
    if authority.contains('@') {
        return Err(format!(
            "\"{authority}\" holds user information: the lease's request sends no credentials."
        ));
    }
    let (host, port) = if let Some(bracketed) = authority.strip_prefix('[') {
        let (host, after) = bracketed
            .split_once(']')
            .ok_or_else(|| format!("\"{authority}\" opens an IPv6 address with [ and does not close it."))?;
        if host.is_empty() || !host.chars().all(|c| c.is_ascii_hexdigit() || ":.".contains(c)) {
            return Err(format!("\"{host}\" is not an IPv6 address."));
        }
        match after {
            "" => (host, 80),
            _ => (host, parse_port(after.strip_prefix(':').unwrap_or(after))?),
        }
    } else {
        match authority.split_once(':') {
            Some((host, port)) => (host, parse_port(port)?),
            None => (authority, 80),
        }
    };
    if host.is_empty() || !host.chars().all(|c| c.is_ascii_alphanumeric() || ".-:".contains(c)) {
        return Err(format!("\"{authority}\" is not a host and port."));
    }
    if path.chars().any(|c| c.is_ascii_control() || c == ' ') {
        return Err("The path holds a space or a control character.".into());
    }
    let path = if path.starts_with('/') { path.to_string() } else { format!("/{path}") };
    Ok(LeaseUrl { host: host.to_string(), port, path })
}

fn parse_port(text: &str) -> Result<u16, String> {
    match text.parse::<u16>() {
        Ok(port) if port > 0 && text.bytes().all(|b| b.is_ascii_digit()) => Ok(port),
        _ => Err(format!("\"{text}\" is not a port number (1 to 65535).")),
    }
}

/// What the first bytes of an answer say, read strictly: `HTTP/1.0` or `HTTP/1.1`, one space,
/// three digits, then a space or the line's end. Anything else (`HTTP/1.x 200`, `HTTP/1.1
/// 2000`, `HTTP/2 200`, a line that never ends) is not an answer from an HTTP server, and
/// counts as no.
#[derive(Debug, PartialEq, Eq)]
pub enum StatusLine {
    /// Not all of it has arrived yet.
    Incomplete,
    /// The status code.
    Status(u16),
    /// Not an HTTP/1 status line.
    Malformed,
}

/// The longest status line read: a real one is about 20 bytes; longer is refused.
pub const STATUS_LINE_MAX: usize = 256;

/// Reads the status line from the start of an answer (`head`: what has arrived so far).
pub fn parse_status_line(head: &[u8]) -> StatusLine {
    const PREFIX_LEN: usize = b"HTTP/1.1 200".len();
    let checked = head.len().min(PREFIX_LEN);
    let pattern = |i: usize, b: u8| match i {
        0..=4 => b == b"HTTP/"[i],
        5 => b == b'1',
        6 => b == b'.',
        7 => b == b'0' || b == b'1',
        8 => b == b' ',
        _ => b.is_ascii_digit(),
    };
    if !head[..checked].iter().enumerate().all(|(i, &b)| pattern(i, b)) {
        return StatusLine::Malformed;
    }
    match head.get(PREFIX_LEN) {
        None => StatusLine::Incomplete,
        Some(b' ') | Some(b'\r') | Some(b'\n') => {
            let code = head[9..12].iter().fold(0u16, |code, digit| code * 10 + u16::from(digit - b'0'));
            StatusLine::Status(code)
        }
        Some(_) => StatusLine::Malformed,
    }
}

/// How often to ask: every 100 ms while the fence is closed (so that it opens soon after the
/// HA manager says yes), every `lease_ms / 5` (50 ms to 1 s) while open.
pub fn ask_interval_ms(lease_ms: u64, fence_closed: bool) -> u64 {
    if fence_closed {
        100
    } else {
        (lease_ms / 5).clamp(50, 1000)
    }
}

/// Whether the lease holds, judged at `now_ms` by whoever keeps it (the worker).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Off, or shown within the lease: the fence is the setting's.
    Held,
    /// Not shown for longer than the lease (or not yet): every shard is fenced.
    Lost,
}

/// The lease as its keeper knows it: when a request that got 200 was last *sent*. A slow 200
/// therefore counts against the lease, never for it; an answer that is not 200 (a slow 503,
/// nothing, a dribble cut off by the request's deadline) changes nothing, and the lease runs
/// out `lease_ms` after the last 200's request was sent, judged whenever the keeper looks,
/// however long an answer takes to come.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LeaseJudge {
    last_yes_sent_ms: Option<u64>,
}

impl LeaseJudge {
    /// A request sent at `sent_ms` got 200.
    pub fn yes_sent_at(&mut self, sent_ms: u64) {
        self.last_yes_sent_ms = Some(self.last_yes_sent_ms.map_or(sent_ms, |last| last.max(sent_ms)));
    }

    /// The URL changed: an earlier 200 spoke for another address, and counts no more.
    pub fn forget(&mut self) {
        self.last_yes_sent_ms = None;
    }

    /// When the last request that got 200 was sent, if any.
    pub fn last_yes_sent_ms(&self) -> Option<u64> {
        self.last_yes_sent_ms
    }

    /// The verdict at `now_ms` for a lease of `lease_ms`: by the same deadline every call
    /// checks (`deadline_ms`), so that the worker's fence and the calls go by one rule.
    pub fn verdict(&self, now_ms: u64, lease_ms: u64) -> Verdict {
        match self.deadline_ms(lease_ms) {
            Some(deadline) if deadline_holds(deadline, now_ms) => Verdict::Held,
            _ => Verdict::Lost,
        }
    }

    /// Until when (boot clock ms) the lease holds: `lease_ms` after the last 200's request was
    /// sent. What the worker publishes for every call to check (`deadline_holds`).
    pub fn deadline_ms(&self, lease_ms: u64) -> Option<u64> {
        self.last_yes_sent_ms.map(|yes| yes.saturating_add(lease_ms))
    }
}

/// Whether a call may hand out the IDs it has just claimed, by the lease's deadline the worker
/// published (`LeaseJudge::deadline_ms`; `NO_DEADLINE` with the lease off): before it, on the
/// boot clock.
///
/// Why every call, and not only the fence the worker closes (finding F11 of
/// docs/reliability.md, found by the simulation): a machine paused past its lease (SIGSTOP of
/// every process, a frozen VM) wakes with its backends and its worker at once, and a call that
/// runs before the worker's first look would issue under the reservation the old primary still
/// holds, after another server was promoted. Checked after the claim, as the fence is: a call
/// paused between its claim and this check finds the deadline passed when it wakes, and its IDs
/// are dropped (a gap, as a rolled-back sequence leaves).
#[inline(always)]
pub fn deadline_holds(deadline_ms: u64, now_ms: u64) -> bool {
    now_ms < deadline_ms
}

/// The published deadline while the lease is off: never passed.
pub const NO_DEADLINE: u64 = u64::MAX;

/// Milliseconds on CLOCK_BOOTTIME: monotonic, not stepped by the wall clock's changes, and
/// counting the time the machine was suspended (see the top of this file). Elsewhere than
/// Linux, CLOCK_MONOTONIC.
pub fn boot_clock_ms() -> u64 {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    const CLOCK: libc::clockid_t = libc::CLOCK_BOOTTIME;
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    const CLOCK: libc::clockid_t = libc::CLOCK_MONOTONIC;
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec it is given; the clock exists on this system.
    unsafe { libc::clock_gettime(CLOCK, &mut now) };
    now.tv_sec as u64 * 1000 + now.tv_nsec as u64 / 1_000_000
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(host: &str, port: u16, path: &str) -> Result<LeaseUrl, String> {
        Ok(LeaseUrl { host: host.into(), port, path: path.into() })
    }

    #[test]
    fn lease_urls_are_parsed_as_the_check_parses_them() {
        assert_eq!(parse_url("http://127.0.0.1:8008/primary"), url("127.0.0.1", 8008, "/primary"));
        assert_eq!(parse_url("HTTP://127.0.0.1:8008/primary"), url("127.0.0.1", 8008, "/primary"));
        assert_eq!(parse_url("http://localhost/primary"), url("localhost", 80, "/primary"));
        assert_eq!(parse_url("http://[::1]:8008/primary"), url("::1", 8008, "/primary"));
        assert_eq!(parse_url("http://[::1]/primary"), url("::1", 80, "/primary"));
        assert_eq!(parse_url("http://127.0.0.1:8008"), url("127.0.0.1", 8008, "/"));
        assert_eq!(parse_url("http://127.0.0.1:8008/primary#x"), url("127.0.0.1", 8008, "/primary"));
        assert_eq!(parse_url("http://h:8008?lag=1"), url("h", 8008, "/?lag=1"));
        assert_eq!(parse_url("http://h:8008/read-write?lag=1"), url("h", 8008, "/read-write?lag=1"));
    }

    #[test]
    fn lease_urls_that_cannot_be_asked_are_refused_with_the_reason() {
        for (text, reason) in [
            ("https://127.0.0.1:8008/primary", "without TLS"),
            ("127.0.0.1:8008/primary", "starts with http://"),
            ("ftp://127.0.0.1/primary", "starts with http://"),
            ("http://127.0.0.1:80080/primary", "is not a port number"),
            ("http://127.0.0.1:0/primary", "is not a port number"),
            ("http://127.0.0.1:+80/primary", "is not a port number"),
            ("http://:8008/primary", "is not a host and port"),
            ("http://a b/primary", "is not a host and port"),
            ("http://u:p@127.0.0.1:8008/primary", "user information"),
            ("http://[::1/primary", "does not close it"),
            ("http://[::1]x/primary", "is not a port number"),
            ("http://[zz]/primary", "is not an IPv6 address"),
            ("http://host/pri mary", "space or a control character"),
        ] {
            let error = parse_url(text).unwrap_err();
            assert!(error.contains(reason), "{text}: {error}");
        }
    }

    #[test]
    fn only_a_strict_http1_status_line_is_an_answer() {
        assert_eq!(parse_status_line(b"HTTP/1.1 200 OK\r\n"), StatusLine::Status(200));
        assert_eq!(parse_status_line(b"HTTP/1.0 200\r\n"), StatusLine::Status(200));
        assert_eq!(parse_status_line(b"HTTP/1.1 503 Service Unavailable\r\n"), StatusLine::Status(503));
        // Not all there yet.
        for head in [&b""[..], b"HTTP/1.", b"HTTP/1.1 20", b"HTTP/1.1 200"] {
            assert_eq!(
                parse_status_line(head),
                StatusLine::Incomplete,
                "{:?}",
                String::from_utf8_lossy(head)
            );
        }
        // What 0.8.0 took for 200, and other impostors.
        for head in [
            &b"HTTP/1.1 2000 OK\r\n"[..],
            b"HTTP/1.x 200 OK\r\n",
            b"HTTP/1.2 200 OK\r\n",
            b"HTTP/2 200\r\n",
            b"HTTP/1.1  200 OK\r\n",
            b"HTTP/1.1 20O OK\r\n",
            b"http/1.1 200 OK\r\n",
            b"SSH-2.0-OpenSSH\r\n",
        ] {
            assert_eq!(parse_status_line(head), StatusLine::Malformed, "{:?}", String::from_utf8_lossy(head));
        }
    }

    #[test]
    fn the_lease_runs_from_when_the_last_200_was_sent() {
        let mut judge = LeaseJudge::default();
        assert_eq!(judge.verdict(1_000, 2_000), Verdict::Lost, "not shown yet");
        judge.yes_sent_at(1_000);
        assert_eq!(judge.verdict(2_999, 2_000), Verdict::Held);
        assert_eq!(judge.verdict(3_000, 2_000), Verdict::Lost);
        // A slow 200 whose request was sent earlier than the last one moves nothing back.
        judge.yes_sent_at(2_500);
        judge.yes_sent_at(1_500);
        assert_eq!(judge.last_yes_sent_ms(), Some(2_500));
        assert_eq!(judge.verdict(4_499, 2_000), Verdict::Held);
        // A slow "no" that arrives 5 s after it was asked: judged when the keeper looks, not as
        // of when it was asked (0.8.0 judged at the moment of asking, so the lease held on
        // while an answer dribbled in).
        assert_eq!(judge.verdict(2_500 + 5_000, 2_000), Verdict::Lost);
        judge.forget();
        assert_eq!(judge.verdict(2_600, 2_000), Verdict::Lost, "a new URL's lease starts unshown");
    }

    /// The deadline every call checks is the verdict's own edge: held one millisecond before
    /// it, lost at it, and never passed with the lease off.
    #[test]
    fn a_call_checks_the_same_deadline_the_verdict_uses() {
        let mut judge = LeaseJudge::default();
        assert_eq!(judge.deadline_ms(2_000), None);
        judge.yes_sent_at(10_000);
        let deadline = judge.deadline_ms(2_000).expect("a 200 was sent");
        assert_eq!(deadline, 12_000);
        assert!(deadline_holds(deadline, 11_999));
        assert!(!deadline_holds(deadline, 12_000));
        assert_eq!(judge.verdict(11_999, 2_000), Verdict::Held);
        assert_eq!(judge.verdict(12_000, 2_000), Verdict::Lost);
        assert!(deadline_holds(NO_DEADLINE, u64::MAX - 1));
    }

    /// A resume from suspend: CLOCK_BOOTTIME jumps by the time suspended, CLOCK_MONOTONIC does
    /// not. Judged on the clock that counts the suspend, the lease is lost the moment the
    /// machine wakes; judged on one that does not, it would hold on.
    #[test]
    fn a_suspend_longer_than_the_lease_loses_it_at_resume() {
        let lease_ms = 2_000;
        let mut judge = LeaseJudge::default();
        let (boot_before, monotonic_before) = (50_000, 40_000);
        judge.yes_sent_at(boot_before);
        assert_eq!(judge.verdict(boot_before + 100, lease_ms), Verdict::Held);
        let suspended_ms = 45_000; // longer than Patroni's default ttl of 30 s
        let boot_after = boot_before + 200 + suspended_ms;
        let monotonic_after = monotonic_before + 200;
        assert_eq!(judge.verdict(boot_after, lease_ms), Verdict::Lost);
        // The same lease measured on a clock that stopped during the suspend looks fresh.
        let mut on_monotonic = LeaseJudge::default();
        on_monotonic.yes_sent_at(monotonic_before);
        assert_eq!(on_monotonic.verdict(monotonic_after, lease_ms), Verdict::Held);
    }

    #[test]
    fn the_boot_clock_counts_like_proc_uptime() {
        // /proc/uptime is CLOCK_BOOTTIME in seconds; CLOCK_MONOTONIC falls behind it by every
        // suspend since boot. Read between two readings of our clock.
        let Ok(uptime) = std::fs::read_to_string("/proc/uptime") else { return };
        let before = boot_clock_ms();
        let uptime: f64 = uptime.split_whitespace().next().unwrap().parse().unwrap();
        let uptime_ms = (uptime * 1000.0) as u64;
        let after = boot_clock_ms();
        assert!(uptime_ms + 20 >= before && uptime_ms <= after + 20, "{before} {uptime_ms} {after}");
        assert!(ask_interval_ms(2_000, true) == 100 && ask_interval_ms(2_000, false) == 400);
        assert_eq!(ask_interval_ms(60_000, false), 1_000);
    }
}
