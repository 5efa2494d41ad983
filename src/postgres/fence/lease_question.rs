//! One question to the HA manager for the lease (`lease`): is this server the leader? Asked by
//! the lease's own thread, with one deadline for all of it (`ANSWER_DEADLINE`):
//! connecting, checking who listens, writing the request, reading the status line, which
//! `snowflake_core::lease::parse_status_line` judges strictly.

use snowflake_core::lease::{parse_status_line, LeaseUrl, StatusLine, STATUS_LINE_MAX};
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// All of one request (connecting, writing, reading the status line) gets at most this long.
pub const ANSWER_DEADLINE: Duration = Duration::from_millis(250);

/// The address of the lease's URL, resolved once per setting.
pub fn resolve(url: &LeaseUrl) -> Result<SocketAddr, String> {
    (url.host.as_str(), url.port)
        .to_socket_addrs()
        .map_err(|e| format!("{} could not be resolved: {e}", url.host))?
        .next()
        .ok_or_else(|| format!("{} has no address", url.host))
}

/// One request, all of it before `deadline`: `Ok` when the answer's status line says 200, from a
/// listener this server trusts; otherwise why not.
pub fn ask(url: &LeaseUrl, address: SocketAddr, deadline: Instant) -> Result<(), String> {
    let left = || {
        let left = deadline.saturating_duration_since(Instant::now());
        (!left.is_zero()).then_some(left).ok_or_else(|| format!("no answer within {ANSWER_DEADLINE:?}"))
    };
    let failed = |step: &str, e: std::io::Error| format!("{step} {address}: {e}");
    let mut stream = TcpStream::connect_timeout(&address, left()?).map_err(|e| failed("connecting to", e))?;
    listener_owner_trusted(&stream)?;
    let host = if url.host.contains(':') { format!("[{}]", url.host) } else { url.host.clone() };
    stream.set_write_timeout(Some(left()?)).map_err(|e| failed("writing to", e))?;
    // In one write: a server may answer and close after its first read.
    let request =
        format!("GET {} HTTP/1.0\r\nHost: {host}:{}\r\nConnection: close\r\n\r\n", url.path, url.port);
    stream.write_all(request.as_bytes()).map_err(|e| failed("writing to", e))?;
    let mut head = Vec::with_capacity(64);
    let mut buffer = [0u8; 64];
    loop {
        match parse_status_line(&head) {
            StatusLine::Status(200) => return Ok(()),
            StatusLine::Status(code) => return Err(format!("answered {code}")),
            StatusLine::Malformed => {
                return Err("answered with something that is not an HTTP/1 status line".into())
            }
            StatusLine::Incomplete if head.len() >= STATUS_LINE_MAX => {
                return Err("answered with a status line that does not end".into())
            }
            StatusLine::Incomplete => {}
        }
        stream.set_read_timeout(Some(left()?)).map_err(|e| failed("reading from", e))?;
        match stream.read(&mut buffer) {
            Ok(0) => return Err("closed the connection before a status line".into()),
            Ok(read) => head.extend_from_slice(&buffer[..read]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(failed("reading from", e)),
        }
    }
}

/// On a loopback connection, the OS user that owns the socket that accepted it must be this
/// server's own (the HA manager runs PostgreSQL, so it runs as its user: Patroni does) or root.
/// Any other local user could have bound the port after the HA manager died, and would speak
/// for it. Read from /proc/net/tcp(6), where the accepted socket is listed with its listener's
/// owner; a connection to another host is not checked (no way to see its owner).
fn listener_owner_trusted(stream: &TcpStream) -> Result<(), String> {
    let (Ok(ours), Ok(theirs)) = (stream.local_addr(), stream.peer_addr()) else { return Ok(()) };
    if !theirs.ip().is_loopback() {
        return Ok(());
    }
    let table = if theirs.is_ipv4() { "/proc/net/tcp" } else { "/proc/net/tcp6" };
    let Ok(text) = std::fs::read_to_string(table) else { return Ok(()) };
    let (local, remote) = (proc_net_address(theirs), proc_net_address(ours));
    let owner = text.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        (fields.get(1) == Some(&local.as_str()) && fields.get(2) == Some(&remote.as_str()))
            .then(|| fields.get(7).and_then(|uid| uid.parse::<u32>().ok()))
            .flatten()
    });
    // SAFETY: geteuid has no preconditions.
    let server_uid = unsafe { libc::geteuid() };
    match owner {
        Some(uid) if uid == server_uid || uid == 0 => Ok(()),
        Some(uid) => Err(format!(
            "the answer on {theirs} comes from a socket of OS user {uid}, neither this server's ({server_uid}) nor \
             root: not counted (another user may hold the HA manager's port)"
        )),
        None => Err(format!("the socket that accepted the connection on {theirs} is not listed in {table}")),
    }
}

/// An address as /proc/net/tcp(6) prints it: the address's 32-bit words in the machine's
/// byte order, each as 8 hex digits, then the port as 4.
fn proc_net_address(address: SocketAddr) -> String {
    let octets = match address.ip() {
        IpAddr::V4(ip) => ip.octets().to_vec(),
        IpAddr::V6(ip) => ip.octets().to_vec(),
    };
    let words: String = octets
        .chunks(4)
        .map(|word| format!("{:08X}", u32::from_ne_bytes([word[0], word[1], word[2], word[3]])))
        .collect();
    format!("{words}:{:04X}", address.port())
}

#[cfg(test)]
mod tests {
    use super::proc_net_address;

    #[test]
    fn addresses_are_written_as_proc_net_tcp_writes_them() {
        // As the kernel prints them on a little-endian machine (x86_64, arm64).
        if cfg!(target_endian = "little") {
            assert_eq!(proc_net_address("127.0.0.1:8008".parse().unwrap()), "0100007F:1F48");
            assert_eq!(
                proc_net_address("[::1]:8008".parse().unwrap()),
                "000000000000000000000000".to_owned() + "01000000:1F48"
            );
        }
    }
}
