//! One etcd member for tests (the feature `test-member`): Debian's `etcd-server`, as the Patroni
//! kit uses it, on loopback ports and in a folder of its own; killed by its pid (`kill`) and
//! started again on its data (`run`), stopped and its folder removed when dropped, also when a
//! test fails. This crate's tests and the extension's integration tests start it.

use crate::{base64, Etcd};
use serde_json::json;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const ETCD: &str = "/usr/bin/etcd";

pub struct EtcdMember {
    child: Option<Child>,
    dir: PathBuf,
    client_port: u16,
    peer_port: u16,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").expect("a free port").local_addr().expect("its address").port()
}

impl EtcdMember {
    /// Starts a member and waits until it answers.
    pub fn start(name: &str) -> EtcdMember {
        assert!(
            std::path::Path::new(ETCD).exists(),
            "{ETCD} is missing: ./scripts/setup.sh installs Debian's etcd-server"
        );
        let dir = std::env::temp_dir().join(format!("snowflake-etcd-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("the etcd folder");
        let mut member = EtcdMember { child: None, dir, client_port: free_port(), peer_port: free_port() };
        member.run();
        member
    }

    /// Its client address: what `snowflake_id.registry_url` is set to.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    /// A client of it under `prefix`, each request within 2 s.
    pub fn client(&self, prefix: &str) -> Etcd {
        Etcd::new(&self.url(), prefix, Duration::from_millis(2_000)).expect("a client")
    }

    /// Starts the member (again, on its data folder and ports) and waits until it answers.
    pub fn run(&mut self) {
        let (client, peer) = (self.url(), format!("http://127.0.0.1:{}", self.peer_port));
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
        while self.client("/").cluster_id().is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "etcd did not answer within 30 s: {:?}",
                self.dir
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `value` put at `key`, bound to no lease, as another writer of the keyspace would.
    pub fn put(&self, key: &str, value: &str) {
        let body = json!({"key": base64(key.as_bytes()), "value": base64(value.as_bytes())});
        self.client("/").post("/v3/kv/put", &body).expect("etcd refused the put");
    }

    /// `key` deleted.
    pub fn delete(&self, key: &str) {
        let body = json!({"key": base64(key.as_bytes())});
        self.client("/").post("/v3/kv/deleterange", &body).expect("etcd refused the delete");
    }

    /// `kill -9` of this member alone, by its pid.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for EtcdMember {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
