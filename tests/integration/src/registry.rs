//! A registry for the tests of `snowflake_id.registry_url`: one etcd member
//! (`snowflake_registry::test_member`, on loopback ports of its own), killed by its pid (`kill`)
//! and started again on its data (`run`), stopped when dropped; and the faults a test plays on
//! its keys (a claim stolen and given back).

use snowflake_registry::test_member::EtcdMember;

pub struct Registry {
    member: EtcdMember,
}

impl Registry {
    /// Starts a member and waits until it answers.
    pub fn start(name: &str) -> Registry {
        Registry { member: EtcdMember::start(name) }
    }

    /// The setting that points a server at it.
    pub fn url(&self) -> String {
        self.member.url()
    }

    /// Starts the member again, on its data and ports, and waits until it answers.
    pub fn run(&mut self) {
        self.member.run();
    }

    /// `kill -9`, by its pid.
    pub fn kill(&mut self) {
        self.member.kill();
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
        self.member.put(&format!("{prefix}claim/{shard}"), &claim);
    }

    /// The stolen claim deleted: the shard is free again.
    pub fn give_back(&self, prefix: &str, shard: i32) {
        self.member.delete(&format!("{prefix}claim/{shard}"));
    }
}
