//! A stand-in HA manager: an HTTP server on loopback answering as Patroni's `GET /primary`
//! does, for `snowflake_id.lease_url`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What a stand-in HA manager answers (`HaStandIn`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// 200, as Patroni's `GET /primary` on the leader.
    Leader,
    /// 503, as on a replica.
    Replica,
    /// Nothing: each connection closed unanswered, as when the manager is dead.
    Gone,
    /// These bytes, whatever they are: a peer that is not an HTTP server, or lies like one.
    Raw(&'static str),
    /// This answer one byte at a time, one byte per interval: a slow or hostile peer.
    Dribble(&'static str, Duration),
}

/// Patroni's answers, as `Raw` or `Dribble` take them.
pub const LEADER_ANSWER: &str = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
pub const REPLICA_ANSWER: &str = "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n";

/// A stand-in for an HA manager's REST API: an HTTP server on a loopback port answering every
/// request as told (`Answer`), for the lease (`snowflake_id.lease_url`). Stopped when dropped.
pub struct HaStandIn {
    port: u16,
    answer: Arc<Mutex<Answer>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl HaStandIn {
    pub fn start() -> HaStandIn {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let answer = Arc::new(Mutex::new(Answer::Leader));
        let stop = Arc::new(AtomicBool::new(false));
        let (answer_of_thread, stop_of_thread) = (answer.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            use std::io::{Read, Write};
            while !stop_of_thread.load(Ordering::SeqCst) {
                let Ok((mut stream, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                };
                let (response, byte_every) = match *answer_of_thread.lock().unwrap() {
                    Answer::Leader => (LEADER_ANSWER, None),
                    Answer::Replica => (REPLICA_ANSWER, None),
                    Answer::Gone => continue, // dropped: the connection closes unanswered
                    Answer::Raw(bytes) => (bytes, None),
                    Answer::Dribble(bytes, every) => (bytes, Some(every)),
                };
                stream.set_nonblocking(false).unwrap();
                stream.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
                let mut request = [0u8; 512];
                let _ = stream.read(&mut request);
                match byte_every {
                    None => {
                        let _ = stream.write_all(response.as_bytes());
                    }
                    // Each dribble on a thread of its own, so that the next request is accepted
                    // meanwhile, as a real server would.
                    Some(every) => {
                        std::thread::spawn(move || {
                            for byte in response.as_bytes() {
                                if stream.write_all(std::slice::from_ref(byte)).is_err() {
                                    return;
                                }
                                std::thread::sleep(every);
                            }
                        });
                    }
                }
            }
        });
        HaStandIn { port, answer, stop, thread: Some(thread) }
    }

    pub fn answer(&self, answer: Answer) {
        *self.answer.lock().unwrap() = answer;
    }

    /// The postgresql.conf line that points a server's lease at this stand-in.
    pub fn lease_url_setting(&self) -> String {
        format!("snowflake_id.lease_url = '{}'", self.lease_url())
    }

    /// The URL of this stand-in's `/primary`.
    pub fn lease_url(&self) -> String {
        format!("http://127.0.0.1:{}/primary", self.port)
    }
}

impl Drop for HaStandIn {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
