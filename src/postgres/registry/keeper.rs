//! The reservation worker's side of the registry: tells the asking thread which shards to
//! claim, takes in what it learnt each turn of the worker's loop, and decides what the fence
//! publishes and how far the ceiling may go.
//!
//! The rules it keeps, in this order:
//! - a shard is published in the fence (`fence::shared::set_claimed`) only while this server
//!   holds its claim, and only once the reservation's ceiling lies at or below the shard's
//!   mark: every ID it issues stays below what the next holder resumes above;
//! - a shard taken from another holder is first moved above the mark that holder left
//!   (`Taken`, which the worker applies: recorded, then the shard's counter moved), and
//!   published after;
//! - the ceiling is never raised past the lowest mark of the shards published (`cap_unix_ms`),
//!   so a holder that cannot renew its mark (the registry down, `keep_to_mark`) stops at it;
//! - a claim lost, refused, or unanswered under `registry_down = stop` closes the shard at
//!   once.

use super::asker::{self, Report, Shared, Wanted};
use super::shared::{self, claim, ClaimState};
use super::{configured, me, Config};
use crate::postgres::{fence, fixed_layout};
use snowflake_core::fence::ShardFence;
use snowflake_core::registry::{Verdict, WhenDown};
use std::collections::BTreeMap;

/// A shard the thread took from another holder: the worker resumes it above `above_unix_ms`
/// before it publishes it (`Keeper::publish`).
pub struct Taken {
    pub shard: u32,
    pub above_unix_ms: Option<u64>,
}

/// The worker's view of the registry (off: every method does nothing).
#[derive(Default)]
pub struct Keeper {
    config: Option<Config>,
    shared: Option<Shared>,
    /// The shards published in the fence, with their marks (Unix ms).
    published: BTreeMap<u32, u64>,
    /// The last state logged per shard: each change is logged once.
    logged: BTreeMap<u32, ClaimState>,
    logged_failure: Option<String>,
    /// Whether the warning that `snowflake_id.shards` names no shard was given since it last did.
    warned_open: bool,
}

impl Keeper {
    /// At the worker's start: nothing is published until claimed again (a worker restarted
    /// after an error left its bits behind), and the asking thread started.
    pub fn start() -> Keeper {
        let Some(config) = configured() else { return Keeper::default() };
        shared::set_last_answer_unix_ms(None);
        for shard in 0..fixed_layout::get().shard_count() {
            fence::shared::set_claimed(shard, false);
        }
        let shared = match asker::start() {
            Ok(shared) => Some(shared),
            Err(error) => {
                pgrx::warning!(
                    "snowflake_id: could not start the registry's asking thread: {error}; no shard is issued"
                );
                None
            }
        };
        Keeper { config: Some(config), shared, ..Keeper::default() }
    }

    /// One turn: tells the thread what to ask (the shards of `snowflake_id.shards`, the ceiling
    /// wanted), takes in its reports, closes what is no longer held, and returns the shards
    /// newly held for the worker to resume and publish.
    pub fn look(&mut self, ceiling_unix_ms: u64) -> Vec<Taken> {
        let (Some(config), Some(shared)) = (&self.config, &self.shared) else { return Vec::new() };
        let shards = match fence::session_fence() {
            ShardFence::Open => {
                if !self.warned_open {
                    pgrx::warning!(
                        "snowflake_id: the registry is on but snowflake_id.shards names no shards: this server claims \
                         none and issues none; name its shards in snowflake_id.shards and reload"
                    );
                    self.warned_open = true;
                }
                Vec::new()
            }
            fence @ ShardFence::Only(_) => {
                self.warned_open = false;
                (0..fixed_layout::get().shard_count()).filter(|&shard| fence.allows(shard)).collect()
            }
        };
        let (reports, failure) = {
            let mut state = shared.0.lock().unwrap_or_else(|e| e.into_inner());
            let wanted = Wanted { config: config.clone(), me: me(), node: node(), shards };
            if state.wanted.as_ref() != Some(&wanted) {
                state.wanted = Some(wanted);
                shared.1.notify_all();
            }
            state.ceiling_unix_ms = ceiling_unix_ms;
            shared::set_last_answer_unix_ms(state.last_answer_unix_ms);
            (state.reports.clone(), state.last_failure.clone())
        };
        if failure != self.logged_failure {
            if let Some(why) = &failure {
                pgrx::log!("snowflake_id: a request to the registry at {} failed: {why}", config.url);
            }
            self.logged_failure = failure;
        }
        let when_down = config.when_down;
        let mut taken = Vec::new();
        // Shards no longer asked about (moved away by a reload) are closed like a lost claim.
        let gone: Vec<u32> =
            self.published.keys().copied().filter(|shard| !reports.contains_key(shard)).collect();
        for shard in gone {
            self.close(shard, ClaimState::NotYet, None, None);
        }
        for (&shard, report) in &reports {
            match *report {
                Report::Held { mark_unix_ms, resume_above_unix_ms, since_unix_ms } => {
                    if let Some(mark) = self.published.get_mut(&shard) {
                        *mark = mark_unix_ms;
                    } else {
                        taken.push(Taken { shard, above_unix_ms: resume_above_unix_ms });
                    }
                    let me = me();
                    let holder = Some((me.system_identifier, me.timeline));
                    let since = Some(since_unix_ms.max(1) as u64);
                    if let Some(claim) = claim(shard) {
                        claim.set(ClaimState::Held, holder, since, Some(mark_unix_ms));
                    }
                }
                Report::Unanswered { .. } if when_down == WhenDown::KeepToMark => {}
                Report::Unanswered { mark_unix_ms } => {
                    self.close(shard, ClaimState::Unreachable, None, Some(mark_unix_ms))
                }
                Report::Lost => self.close(shard, ClaimState::Lost, None, None),
                Report::Refused { verdict } => {
                    let (state, holder, since) = match verdict {
                        Verdict::HeldElsewhere { held } => {
                            (ClaimState::HeldElsewhere, Some(held.holder), Some(held.since_unix_ms))
                        }
                        Verdict::WaitForExpiry { held } => {
                            (ClaimState::Waiting, Some(held.holder), Some(held.since_unix_ms))
                        }
                        Verdict::Replaced { by } => (ClaimState::Replaced, Some(by), None),
                        _ => (ClaimState::NotYet, None, None),
                    };
                    let holder = holder.map(|holder| (holder.system_identifier, holder.timeline));
                    self.close(shard, state, holder, since.map(|since| since.max(1) as u64));
                }
            }
        }
        taken
    }

    /// Publishes a shard newly held, once the worker has resumed it above the mark it found
    /// and the ceiling lies at or below its own mark; otherwise it waits for the next turn
    /// (the thread records a higher mark when the ceiling comes near it).
    pub fn publish(&mut self, shard: u32, ceiling_unix_ms: u64) {
        let Some(view) = claim(shard).map(|claim| claim.view()) else { return };
        let Some(mark) = view.mark_unix_ms.filter(|&mark| ceiling_unix_ms <= mark) else { return };
        self.published.insert(shard, mark);
        fence::shared::set_claimed(shard, true);
        if self.logged.insert(shard, ClaimState::Held) != Some(ClaimState::Held) {
            pgrx::log!(
                "snowflake_id: this server holds shard {shard} in the registry, its mark at {}",
                snowflake_core::utc::format_utc_ms(mark as i64)
            );
        }
    }

    /// The highest ceiling the worker may publish (Unix ms): the lowest mark of the shards
    /// published; `None` while nothing is (or the registry is off).
    pub fn cap_unix_ms(&self) -> Option<u64> {
        self.published.values().copied().min()
    }

    fn close(&mut self, shard: u32, state: ClaimState, holder: Option<(u64, u32)>, since: Option<u64>) {
        if self.published.remove(&shard).is_some() {
            fence::shared::set_claimed(shard, false);
        }
        let mark = claim(shard).and_then(|claim| claim.view().mark_unix_ms);
        if let Some(claim) = claim(shard) {
            claim.set(state, holder, since, mark);
        }
        if self.logged.insert(shard, state) != Some(state) && state != ClaimState::NotYet {
            let who = holder.map_or(String::new(), |(system, timeline)| {
                format!(" (held by system {system}, timeline {timeline})")
            });
            pgrx::warning!(
                "snowflake_id: shard {shard} is fenced: its claim in the registry is {}{who}",
                state.name()
            );
        }
    }

    /// At a clean stop of the worker: the claims released, so the next holder need not wait
    /// out their lease (their marks stay, above every ID issued here). Waits up to two seconds.
    pub fn release(&mut self) {
        let Some(shared) = &self.shared else { return };
        for shard in std::mem::take(&mut self.published).into_keys() {
            fence::shared::set_claimed(shard, false);
            // Calls meanwhile wait for the next worker's claim, as at a start.
            if let Some(claim) = claim(shard) {
                claim.set(ClaimState::NotYet, None, None, None);
            }
        }
        let (exchange, wake) = &**shared;
        let mut state = exchange.lock().unwrap_or_else(|e| e.into_inner());
        state.release = true;
        wake.notify_all();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while state.release {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                break;
            }
            state = wake.wait_timeout(state, left).unwrap_or_else(|e| e.into_inner()).0;
        }
    }
}

/// What a claim says for the operator: `cluster_name`, else the port.
fn node() -> String {
    // SAFETY: reads two settings' globals in the worker's own thread.
    unsafe {
        let name = pgrx::pg_sys::cluster_name;
        let port = pgrx::pg_sys::PostPortNumber;
        match name.as_ref().map(|_| std::ffi::CStr::from_ptr(name).to_string_lossy().into_owned()) {
            Some(name) if !name.is_empty() => name,
            _ => format!("port {port}"),
        }
    }
}
