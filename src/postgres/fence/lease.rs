//! The lease: an opt-in fence for servers run by an HA manager (Patroni). A primary issues IDs
//! only while it can show that it is the leader: the reservation worker asks the HA manager
//! (`snowflake_id.lease_url`, such as Patroni's `http://127.0.0.1:8008/primary`, which answers
//! 200 only on the leader) and, after `snowflake_id.lease_ms` without a 200, closes the
//! server-wide fence for every shard (`shared`): every call then fails with 55000 naming the
//! lease, and nothing is issued, until the next 200 reopens it.
//!
//! Why: an HA manager that dies alone (its process killed, no watchdog) leaves PostgreSQL
//! running as a primary; once its leader key expires (Patroni's `ttl`, 30 s by default) another
//! node is promoted, and two primaries issue the same shard. With `lease_ms` below that ttl,
//! the old primary has stopped issuing before the other can be promoted (docs/high-availability.md
//! weighs this against a watchdog, a lease file and callbacks).
//!
//! The rules (which URLs and answers count, when the lease is lost, the clock that counts a
//! suspend) are `snowflake_core::lease`'s. Here:
//! - the settings, and a start refused when one configured cannot be used: a lease that
//!   silently fell back to "off" is the split brain it exists to prevent;
//! - the asking, on a thread of the worker's own (`Asker`): the worker's loop, which renews the
//!   reservation and closes the fence, never waits on the HA manager. Each request has one
//!   deadline of `ANSWER_DEADLINE` for all of it (connecting, writing, reading the status
//!   line), so a peer that dribbles its answer byte by byte gets no more time than a silent
//!   one; the host's name is resolved once per setting, not per request;
//! - who may answer: on a loopback address, the answer counts only from a listening socket of
//!   this server's own OS user or root (`lease_question`, which asks one question), so that a
//!   local user who binds the port of a dead HA manager cannot speak for it;
//! - the keeper (`Keeper`), which the worker asks each turn of its loop whether the lease
//!   holds, judged at that moment;
//! - the deadline (`shared::lease_deadline_holds`): when the lease runs out on the boot clock,
//!   published at each 200 and each look, which every call checks after its claim. The fence
//!   closes only when the worker looks; a machine paused past its lease wakes with its backends
//!   running at once, and without the deadline a call before the worker's first look would
//!   issue after another server was promoted (finding F11 of docs/reliability.md).
//!
//! The fence starts closed: a worker that starts (the server's start, a promotion, the worker's
//! restart) has not yet been told that this server leads. It asks every 100 ms while closed and
//! every `lease_ms / 5` (at most once a second) while open.
//!
//! | setting | context | why |
//! |---|---|---|
//! | `lease_url` | reload (SIGHUP) | the HA manager's address, the server's configuration: each node's own (its REST port) |
//! | `lease_ms` | reload (SIGHUP) | 0 (off) by default; keep it well below the HA manager's ttl |
//!
//! A value refused at start stops the server; one refused at a reload keeps the value before.

use super::super::guc::{self, ConfiguredAtStart};
use super::super::{clock, worker_thread};
use super::lease_question::{self, ANSWER_DEADLINE};
use pgrx::guc::{GucContext, GucFlags, GucRegistry, GucSetting};
use pgrx::pg_sys;
use snowflake_core::lease::{ask_interval_ms, boot_clock_ms, LeaseJudge, LeaseUrl, NO_DEADLINE};
pub use snowflake_core::lease::{parse_url, Verdict};
use std::ffi::{c_char, c_void, CStr, CString};
use std::net::SocketAddr;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

const LEASE_URL_SETTING: &CStr = c"snowflake_id.lease_url";
const LEASE_MS_SETTING: &CStr = c"snowflake_id.lease_ms";

static LEASE_URL: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(Some(c""));
static LEASE_MS: GucSetting<i32> = GucSetting::<i32>::new(0);

/// Defines the two settings; called from `settings::init` while preloading. Stops the server
/// when either was configured with a value PostgreSQL refused (it would keep its default, and
/// the lease would be off while the configuration says on).
pub fn define() {
    let url_configured = ConfiguredAtStart::capture(LEASE_URL_SETTING);
    let ms_configured = ConfiguredAtStart::capture(LEASE_MS_SETTING);
    // SAFETY: the hook is `#[pg_guard]`ed and only reads its argument.
    unsafe {
        GucRegistry::define_string_guc_with_hooks(
            LEASE_URL_SETTING,
            c"The HA manager's address that answers 200 only on the leader (Patroni: http://127.0.0.1:8008/primary).",
            c"With snowflake_id.lease_ms above 0, this server issues no ID once this address has not answered \
              200 for that long.",
            &LEASE_URL,
            GucContext::Sighup,
            GucFlags::default(),
            Some(check_lease_url),
            None,
            None,
        );
    }
    GucRegistry::define_int_guc(
        LEASE_MS_SETTING,
        c"How long this server issues IDs after the HA manager last said it is the leader; 0 for always.",
        c"Keep it well below the time the HA manager takes to promote another node (Patroni's ttl), so \
          that a primary whose HA manager died stops issuing before another is promoted.",
        &LEASE_MS,
        0,
        3_600_000,
        GucContext::Sighup,
        GucFlags::UNIT_MS,
    );
    const OFF_INSTEAD: &str = "snowflake_id will not start with a lease setting it cannot apply: the lease would be \
                               off, and this server would issue IDs while its HA manager says another server leads.";
    url_configured.stop_unless_applied_because(OFF_INSTEAD, |text| guc::text(&LEASE_URL) == text);
    ms_configured.stop_unless_applied_because(OFF_INSTEAD, |text| {
        guc::parse_int_with_unit(text, pg_sys::GUC_UNIT_MS) == Some(guc::read(&LEASE_MS))
    });
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn check_lease_url(
    newval: *mut *mut c_char,
    _extra: *mut *mut c_void,
    _source: pg_sys::GucSource::Type,
) -> bool {
    let hint =
        "Give the HA manager's REST address of this node, such as 'http://127.0.0.1:8008/primary' for \
                Patroni; '' for none.";
    // SAFETY: PostgreSQL's arguments of a check hook.
    unsafe { guc::check_text(newval, guc::url_or_off, hint) }
}

/// The settings as this process has them: the URL and the lease, or `None` while off.
pub fn configured() -> Option<(LeaseUrl, u64)> {
    let lease_ms = guc::read(&LEASE_MS);
    let text = guc::text(&LEASE_URL);
    if lease_ms <= 0 || text.is_empty() {
        return None;
    }
    parse_url(&text).ok().map(|url| (url, lease_ms as u64))
}

/// The URL and the lease, as configured, for messages.
pub fn settings_text() -> (String, i32) {
    (guc::text(&LEASE_URL), guc::read(&LEASE_MS))
}

/// What the worker wants asked, and what its asking thread last learnt: one lock, held only to
/// copy these few fields (never across I/O), so the worker never waits on a request.
#[derive(Default)]
struct Exchange {
    /// The URL to ask (`None`: the lease is off) and how often; the lease, for the deadline the
    /// asking thread publishes at each 200.
    url: Option<LeaseUrl>,
    interval_ms: u64,
    lease_ms: u64,
    /// Bumped whenever the URL changes: an answer is recorded only for the URL it was asked of.
    generation: u64,
    /// When the last request that got 200 was sent, for `generation`, on the boot clock: the
    /// one record of it, which the worker judges the lease by.
    judge: LeaseJudge,
    /// The same moment on the wall clock, for `snowflake_status()`.
    last_yes_wall_ms: Option<i64>,
    /// Why the last request did not get 200 (`None` after a 200), for the log.
    last_failure: Option<String>,
}

impl Exchange {
    /// Asks `url` from now on (`None`: nothing): what was learnt of another URL counts no more.
    fn ask_about(&mut self, url: Option<LeaseUrl>) {
        if self.url != url {
            self.url = url;
            self.generation += 1;
            self.judge.forget();
            self.last_yes_wall_ms = None;
            self.last_failure = None;
        }
    }
}

/// The asking thread's handle: the exchange and the condition that wakes the thread when the
/// worker changes what to ask.
struct Asker {
    shared: Arc<(Mutex<Exchange>, Condvar)>,
}

impl Asker {
    /// Starts the thread (`worker_thread`: every signal blocked in it, nothing of PostgreSQL
    /// called).
    fn start() -> std::io::Result<Asker> {
        let shared = Arc::new((Mutex::new(Exchange::default()), Condvar::new()));
        let for_thread = Arc::clone(&shared);
        worker_thread::spawn("snowflake lease", move || ask_forever(&for_thread)).map(|()| Asker { shared })
    }
}

/// The asking thread's loop: one request per interval to the URL the worker last set, each
/// answer recorded for that URL's generation.
fn ask_forever(shared: &(Mutex<Exchange>, Condvar)) {
    let (exchange, wake) = shared;
    let mut resolved: Option<(LeaseUrl, Result<SocketAddr, String>)> = None;
    loop {
        let (url, generation, interval_ms) = {
            let mut state = exchange.lock().unwrap_or_else(|e| e.into_inner());
            while state.url.is_none() {
                state = wake.wait(state).unwrap_or_else(|e| e.into_inner());
            }
            (state.url.clone().expect("set"), state.generation, state.interval_ms)
        };
        // The name is resolved when the URL changes, not per request: a slow resolver delays
        // the first answer only (the lease is lost meanwhile, as for any missing answer).
        if resolved.as_ref().is_none_or(|(for_url, address)| *for_url != url || address.is_err()) {
            resolved = Some((url.clone(), lease_question::resolve(&url)));
        }
        let address = resolved.as_ref().map(|(_, address)| address.clone()).expect("just set");
        let sent_boot_ms = boot_clock_ms();
        let sent_wall_ms = clock::wall_clock_unix_ms();
        let started = Instant::now();
        let answer =
            address.and_then(|address| lease_question::ask(&url, address, started + ANSWER_DEADLINE));
        {
            let mut state = exchange.lock().unwrap_or_else(|e| e.into_inner());
            if state.generation == generation {
                match answer {
                    Ok(()) => {
                        if state.judge.last_yes_sent_ms().is_none_or(|last| last < sent_boot_ms) {
                            state.last_yes_wall_ms = Some(sent_wall_ms);
                        }
                        state.judge.yes_sent_at(sent_boot_ms);
                        state.last_failure = None;
                        // At once, not at the worker's next look: a worker slow to look (a
                        // stalled fdatasync) does not make calls refuse a lease that holds.
                        publish_deadline(state.judge.deadline_ms(state.lease_ms));
                    }
                    Err(why) => state.last_failure = Some(why),
                }
            }
            // Waits out the rest of the interval, or until the worker changes the URL or the
            // interval.
            let rest = Duration::from_millis(interval_ms).saturating_sub(started.elapsed());
            if !rest.is_zero() && state.generation == generation && state.interval_ms == interval_ms {
                let _ = wake.wait_timeout(state, rest);
            }
        }
    }
}

/// What the worker keeps of the lease (see the top): its asking thread, started on first use,
/// whose exchange holds what was learnt.
#[derive(Default)]
pub struct Keeper {
    asker: Option<Asker>,
    /// The last reason for a missing 200 written to the log: each reason is logged once, until
    /// a 200 comes.
    logged_failure: Option<String>,
}

impl Keeper {
    /// Tells the asking thread what to ask and how often, takes in what it learnt, and says
    /// whether the lease holds now. `fence_closed`: whether the lease's fence is closed now, so
    /// that it is asked about more often. Never waits on the HA manager.
    pub fn look(&mut self, fence_closed: bool) -> Verdict {
        let Some((url, lease_ms)) = configured() else {
            // Off: the asking thread, if any, goes idle until the lease is on again.
            if let Some(asker) = &self.asker {
                asker.shared.0.lock().unwrap_or_else(|e| e.into_inner()).ask_about(None);
            }
            publish_last_yes(None);
            super::shared::set_lease_deadline(NO_DEADLINE);
            return Verdict::Held;
        };
        if self.asker.is_none() {
            match Asker::start() {
                Ok(asker) => self.asker = Some(asker),
                Err(error) => {
                    pgrx::warning!("snowflake_id: could not start the lease's asking thread: {error}");
                    return Verdict::Lost;
                }
            }
        }
        let (exchange, wake) = &*self.asker.as_ref().expect("started").shared;
        let (verdict, last_yes_wall_ms, failure) = {
            let mut state = exchange.lock().unwrap_or_else(|e| e.into_inner());
            let interval_ms = ask_interval_ms(lease_ms, fence_closed);
            if state.url.as_ref() != Some(&url) || state.interval_ms != interval_ms {
                state.ask_about(Some(url));
                state.interval_ms = interval_ms;
                wake.notify_one();
            }
            // Under the lock, so that the asking thread's publish of a 200 and this one come in
            // the order of the lock: the last one written is for the current lease.
            state.lease_ms = lease_ms;
            publish_deadline(state.judge.deadline_ms(lease_ms));
            (
                state.judge.verdict(boot_clock_ms(), lease_ms),
                state.last_yes_wall_ms,
                state.last_failure.clone(),
            )
        };
        if failure != self.logged_failure {
            if let Some(why) = &failure {
                let (url, _) = settings_text();
                pgrx::log!("snowflake_id: the lease's request to {url} got no 200: {why}");
            }
            self.logged_failure = failure;
        }
        publish_last_yes(last_yes_wall_ms);
        verdict
    }
}

/// Publishes the lease's deadline, which every call checks (`None`: no 200 yet, passed).
fn publish_deadline(deadline_ms: Option<u64>) {
    super::shared::set_lease_deadline(deadline_ms.unwrap_or(0));
}

/// Publishes when the last 200's request was sent, for `snowflake_status()` (`None`: none).
fn publish_last_yes(last_yes_wall_ms: Option<i64>) {
    super::shared::set_lease_last_yes(last_yes_wall_ms.map_or(0, |ms| ms.max(1) as u64));
}
