//! A registry for the tests of `snowflake_id.registry_url`: one etcd member (Debian's
//! `etcd-server`, as the Patroni kit uses it) on loopback ports of its own, in a folder of its
//! own; killed by its pid (`kill`) and started again on its data (`run`), stopped when dropped.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const ETCD: &str = "/usr/bin/etcd";

pub struct Registry {
    child: Option<Child>,
    dir: PathBuf,
    client_port: u16,
    peer_port: u16,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").expect("a free port").local_addr().expect("its address").port()
}

impl Registry {
    /// Starts a member and waits until it answers.
    pub fn start(name: &str) -> Registry {
        assert!(
            std::path::Path::new(ETCD).exists(),
            "{ETCD} is missing: ./scripts/setup.sh installs etcd-server"
        );
        let dir = std::env::temp_dir().join(format!("snowflake-etcd-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("the etcd folder");
        let mut registry = Registry { child: None, dir, client_port: free_port(), peer_port: free_port() };
        registry.run();
        registry
    }

    /// The setting that points a server at it.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    /// Starts the member (again, on its data and ports) and waits until it answers.
    pub fn run(&mut self) {
        let client = self.url();
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let log = std::fs::File::create(self.dir.join("etcd.log")).expect("its log");
        let child = Command::new(ETCD)
            .args(["--name", "registry", "--data-dir"])
            .arg(self.dir.join("data"))
            .args(["--listen-client-urls", &client, "--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("registry={peer}")])
            // Short elections, so that its shortest lease (1.5 elections) is a second or two.
            .args(["--heartbeat-interval", "50", "--election-timeout", "500"])
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone().expect("its log")))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("etcd starts");
        self.child = Some(child);
        let started = Instant::now();
        while !self.answers() {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "etcd did not answer within 30 s: {:?}",
                self.dir
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Whether it answers a status request with 200.
    fn answers(&self) -> bool {
        self.post("/v3/maintenance/status", "{}").is_some()
    }

    /// One request to etcd's JSON gateway; its answer's body when the status is 200.
    fn post(&self, path: &str, body: &str) -> Option<String> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.client_port)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        let request = format!(
            "POST {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        );
        let mut answer = String::new();
        stream.write_all(request.as_bytes()).ok()?;
        stream.read_to_string(&mut answer).ok()?;
        let body = answer.split_once("\r\n\r\n").map(|(_, body)| body.to_string());
        answer.starts_with("HTTP/1.0 200").then_some(body).flatten()
    }

    /// A shard's claim under `prefix` written over by a holder of another data directory
    /// (`system_identifier`), bound to no lease: the shard's holder loses it at its next
    /// renewal, and every server finds it held elsewhere until `give_back`.
    pub fn steal_claim(&self, prefix: &str, shard: i32, system_identifier: u64) {
        let claim = format!(
            "{{\"system_identifier\":\"{system_identifier}\",\"timeline\":1,\"incarnation\":\"1\",\
             \"node\":\"a thief\",\"since_unix_ms\":{}}}",
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis()
        );
        let body = format!(
            "{{\"key\":\"{}\",\"value\":\"{}\"}}",
            base64(format!("{prefix}claim/{shard}").as_bytes()),
            base64(claim.as_bytes())
        );
        assert!(self.post("/v3/kv/put", &body).is_some(), "etcd refused the stolen claim");
    }

    /// The stolen claim deleted: the shard is free again.
    pub fn give_back(&self, prefix: &str, shard: i32) {
        let body = format!("{{\"key\":\"{}\"}}", base64(format!("{prefix}claim/{shard}").as_bytes()));
        assert!(self.post("/v3/kv/deleterange", &body).is_some(), "etcd refused to delete the claim");
    }

    /// `kill -9`, by its pid.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Standard base64 with padding, as etcd's JSON gateway takes keys and values.
fn base64(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut text = String::new();
    for chunk in bytes.chunks(3) {
        let word =
            chunk.iter().enumerate().fold(0u32, |word, (i, &byte)| word | u32::from(byte) << (16 - 8 * i));
        for i in 0..4 {
            text.push(if i <= chunk.len() {
                DIGITS[(word >> (18 - 6 * i) & 63) as usize] as char
            } else {
                '='
            });
        }
    }
    text
}

#[cfg(test)]
mod tests {
    #[test]
    fn base64_is_the_standard_one() {
        assert_eq!(super::base64(b""), "");
        assert_eq!(super::base64(b"f"), "Zg==");
        assert_eq!(super::base64(b"fo"), "Zm8=");
        assert_eq!(super::base64(b"foo"), "Zm9v");
        assert_eq!(super::base64(b"/snowflake_id/claim/5"), "L3Nub3dmbGFrZV9pZC9jbGFpbS81");
    }
}
