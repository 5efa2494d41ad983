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
        let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.client_port)) else { return false };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
        let request = "POST /v3/maintenance/status HTTP/1.0\r\nHost: 127.0.0.1\r\n\
                       Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}";
        let mut answer = String::new();
        stream.write_all(request.as_bytes()).is_ok()
            && stream.read_to_string(&mut answer).is_ok()
            && answer.starts_with("HTTP/1.0 200")
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
