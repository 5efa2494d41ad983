//! What a run reached, counted for the coverage line.

#[derive(Clone, Debug, Default)]
pub struct Stats {
    pub(super) runs: u64,
    pub(super) ids: u64,
    pub(super) takes: u64,
    pub(super) take_overs: u64,
    pub(super) replaced: u64,
    pub(super) waits: u64,
    pub(super) held_elsewhere: u64,
    pub(super) lost: u64,
    pub(super) clones: u64,
    pub(super) promotions: u64,
    pub(super) registry_down: u64,
    pub(super) issued_while_down: u64,
}

impl Stats {
    pub fn add(&mut self, other: &Stats) {
        self.runs += other.runs;
        self.ids += other.ids;
        self.takes += other.takes;
        self.take_overs += other.take_overs;
        self.replaced += other.replaced;
        self.waits += other.waits;
        self.held_elsewhere += other.held_elsewhere;
        self.lost += other.lost;
        self.clones += other.clones;
        self.promotions += other.promotions;
        self.registry_down += other.registry_down;
        self.issued_while_down += other.issued_while_down;
    }

    pub fn line(&self) -> String {
        format!(
            "claims taken {} (taken over by a promotion {}); reads that found this server replaced {}, a copy or an \
             earlier start holding {}, another server holding {}; claims lost {}, clones {}, promotions {}, registry outages {}, IDs {} ({} issued while the registry was down)",
            self.takes,
            self.take_overs,
            self.replaced,
            self.waits,
            self.held_elsewhere,
            self.lost,
            self.clones,
            self.promotions,
            self.registry_down,
            self.ids,
            self.issued_while_down
        )
    }
}
