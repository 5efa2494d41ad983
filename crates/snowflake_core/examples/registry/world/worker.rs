//! The reservation worker's side of the registry, for one shard at a time: keep the claim (renew,
//! raise the mark, publish within it), or ask for it, as `snowflake_core::registry` decides.

use super::*;

impl World {
    /// One turn of the reservation worker for one shard: keep the claim (renew, raise the mark,
    /// publish within it), or ask for it.
    pub(super) fn worker(&mut self, i: usize, shard: usize) {
        let now = self.clock(i);
        let server = &self.servers[i];
        let me = server.me;
        let state = server.state[shard];
        let Some(held) = state.held else {
            self.ask_for(i, shard, state.to_take);
            return;
        };
        // Ahead of the clock, or of the floor, or of the IDs already issued: a holder that
        // resumed at a mark ahead of its clock borrows time until its clock catches up (it keeps
        // the lead, as a promotion keeps the old primary's).
        let wanted = now.max(state.floor).max((state.last_id + 1) / PER_MS) + RESERVE_MS;
        let keepalive_due = self.t - state.renewed_at >= self.ttl_ms / 3;
        let mut mark = held.mark;
        if keepalive_due || rules::mark_due(now, wanted, held.mark, self.registry_reserve_ms) {
            let new_mark = rules::mark_to_record(now, wanted, held.mark, self.registry_reserve_ms);
            match self.ask(i, shard, Request::Renew { revision: held.revision, mark: new_mark }) {
                Some(Answer::Renewed { mark: accepted }) => {
                    mark = accepted;
                    let state = &mut self.servers[i].state[shard];
                    state.held = Some(Held { mark, ..held });
                    state.renewed_at = self.t;
                    state.fenced = false;
                }
                Some(Answer::Lost { live }) => {
                    self.stats.lost += 1;
                    let verdict = rules::verdict(me, live, None);
                    trace!(self, "server {i} shard {shard}: claim lost ({verdict:?}); fenced at its ceiling");
                    self.servers[i].state[shard] =
                        ShardState { floor: state.floor, last_id: state.last_id, ..Default::default() };
                    return;
                }
                Some(other) => unreachable!("a renewal answered {other:?}"),
                None => {
                    match rules::ceiling_while_down(self.servers[i].when_down, wanted, held.mark) {
                        None => self.servers[i].state[shard].fenced = true,
                        Some(ceiling) => self.publish(i, shard, ceiling),
                    }
                    return;
                }
            }
        }
        let ceiling = rules::ceiling_within_mark(wanted, mark);
        self.publish(i, shard, ceiling);
    }

    /// Records the ceiling durably, then publishes it (a ceiling only rises).
    pub(super) fn publish(&mut self, i: usize, shard: usize, ceiling: u64) {
        let server = &mut self.servers[i];
        if ceiling > server.state[shard].ceiling {
            server.recorded[shard] = server.recorded[shard].max(ceiling);
            server.state[shard].ceiling = ceiling;
        }
    }

    /// A shard not held: take the claim a read of the last tick found free, or read it.
    pub(super) fn ask_for(&mut self, i: usize, shard: usize, to_take: Option<(u64, u64)>) {
        let me = self.servers[i].me;
        if let Some((expected, expected_mark)) = to_take {
            self.servers[i].state[shard].to_take = None;
            match self.ask(i, shard, Request::Take { expected, expected_mark }) {
                Some(Answer::Taken { revision, mark }) => {
                    let own = self.servers[i].recorded[shard];
                    let floor = rules::resume_floor(own, Some(mark));
                    let above = self.issued[shard].iter().next_back().map(|(_, &last)| last);
                    trace!(
                        self,
                        "server {i} shard {shard}: claim taken (revision {revision}), resumes at {floor} (own {own}, mark {mark}); IDs so far below {above:?}"
                    );
                    self.stats.takes += 1;
                    let state = &mut self.servers[i].state[shard];
                    *state = ShardState {
                        held: Some(Held { revision, mark }),
                        floor,
                        ceiling: floor,
                        last_id: state.last_id,
                        renewed_at: self.t,
                        above,
                        ..Default::default()
                    };
                }
                Some(Answer::Lost { .. }) | None => {}
                Some(other) => unreachable!("a take answered {other:?}"),
            }
            return;
        }
        let Some(Answer::Current { live, revision, marked_by, mark_revision }) =
            self.ask(i, shard, Request::Read)
        else {
            return;
        };
        match rules::verdict(me, live, marked_by) {
            Verdict::Take | Verdict::Renew => {
                self.servers[i].state[shard].to_take = Some((revision, mark_revision))
            }
            Verdict::TakeOver => {
                self.stats.take_overs += 1;
                self.servers[i].state[shard].to_take = Some((revision, mark_revision));
            }
            Verdict::Replaced { .. } => self.stats.replaced += 1,
            Verdict::WaitForExpiry { .. } => self.stats.waits += 1,
            Verdict::HeldElsewhere { .. } => self.stats.held_elsewhere += 1,
        }
    }
}
