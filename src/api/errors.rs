//! Every error the SQL surface raises: SQLSTATE, message, detail and hint in one place, so
//! the wording stays consistent and the pg_regress files can pin it.
//!
//! Messages follow PostgreSQL's style: lower case, no final period; details and hints are
//! sentences. Every refusal happens before anything is issued.

use crate::postgres::registry::shared::{ClaimState, ClaimView};
use crate::postgres::{clock, fence, fixed_layout, settings};
use pgrx::pg_sys::panic::ErrorReport;
use pgrx::{PgLogLevel, PgSqlErrorCode};
use snowflake_core::fence::ShardFence;
use snowflake_core::generator::Refusal;
use snowflake_core::layout::LayoutError;
use snowflake_core::utc::format_utc_ms;

use PgSqlErrorCode::{
    ERRCODE_INSUFFICIENT_PRIVILEGE as NO_PRIVILEGE, ERRCODE_INVALID_PARAMETER_VALUE as INVALID_PARAMETER,
    ERRCODE_NULL_VALUE_NOT_ALLOWED as NULL_VALUE, ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE as OUT_OF_RANGE,
    ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE as NOT_READY, ERRCODE_READ_ONLY_SQL_TRANSACTION as READ_ONLY,
};

/// Raises an ERROR; `function` is the SQL function reported as the error's location.
fn raise(code: PgSqlErrorCode, function: &'static str, message: String, detail: String, hint: String) -> ! {
    ErrorReport::new(code, message, function).set_detail(detail).set_hint(hint).report(PgLogLevel::ERROR);
    unreachable!("an ERROR report returns control to PostgreSQL")
}

pub fn not_preloaded(function: &'static str) -> ! {
    raise(
        NOT_READY,
        function,
        "snowflake_id must be loaded via shared_preload_libraries".into(),
        "The generator keeps its state in shared memory, which only a preloaded library has; \
         it never falls back to per-backend state, which would issue duplicates."
            .into(),
        "Add snowflake_id to shared_preload_libraries in postgresql.conf and restart the server.".into(),
    )
}

pub fn during_recovery(function: &'static str) -> ! {
    raise(
        READ_ONLY,
        function,
        format!("cannot execute {function}() during recovery"),
        "This server is a hot standby or is still recovering; IDs are issued only by a primary.".into(),
        "Issue IDs on the primary. The decoding functions, such as snowflake_decode(), work here.".into(),
    )
}

/// `snowflake_horizon()` on a hot standby: the horizon is the primary's, where the IDs are issued.
pub fn horizon_on_standby(function: &'static str) -> ! {
    raise(
        READ_ONLY,
        function,
        format!("cannot execute {function}() during recovery"),
        "This server is a hot standby or is still recovering: the transactions that hold IDs run on the \
         primary, which alone knows them."
            .into(),
        "Take the horizon on the primary, and read pg_current_wal_insert_lsn() there right after it; on this \
         standby, read below that horizon once pg_last_wal_replay_lsn() has reached that LSN \
         (docs/reading-in-order.md)."
            .into(),
    )
}

/// `snowflake_horizon(shard)` for a shard this server does not issue.
pub fn horizon_of_a_shard_elsewhere(function: &'static str, shard: u32, fence: &str) -> ! {
    raise(
        NOT_READY,
        function,
        format!("shard {shard} is not issued by this server"),
        format!(
            "snowflake_id.shards = '{fence}' names the shards this server issues: the horizon of another shard \
             is known only where its IDs are issued."
        ),
        format!("Take the horizon of shard {shard} on the server that issues it, and read that shard's rows there."),
    )
}

/// A shard the fence (`snowflake_id.shards`, whose text is `fence`) does not give this server.
pub fn shard_fenced(function: &'static str, shard: u32, fence: &str) -> ! {
    raise(
        NOT_READY,
        function,
        format!("shard {shard} is not issued by this server"),
        format!(
            "snowflake_id.shards = '{fence}' names the shards this server may issue. Nothing was issued."
        ),
        format!(
            "Issue shard {shard} on the server that owns it. If it moved here, add it to \
             snowflake_id.shards in postgresql.conf and reload, once no other server's list names it."
        ),
    )
}

/// A shard this session's `snowflake_id.allowed_shards` (whose text is `allowed`) does not name.
pub fn shard_not_allowed(function: &'static str, shard: u32, allowed: &str) -> ! {
    raise(
        NO_PRIVILEGE,
        function,
        format!("permission denied to issue shard {shard}"),
        format!(
            "snowflake_id.allowed_shards = '{allowed}' names the shards this session may issue. Nothing was issued."
        ),
        format!(
            "Issue one of those shards, or have a superuser give the role shard {shard}: \
             ALTER ROLE name SET snowflake_id.allowed_shards = '...' (docs/security.md)."
        ),
    )
}

/// A shard this session's fence gives, which the server-wide fence still refuses after the
/// call waited for the reservation worker to apply the reload.
pub fn fence_not_applied(function: &'static str, shard: u32, fence: &str, waited_ms: u64) -> ! {
    raise(
        NOT_READY,
        function,
        format!("shard {shard} is not issued by this server yet"),
        format!(
            "This session has snowflake_id.shards = '{}', but the reservation worker has not applied it \
             for every call yet: the fence in force was still '{fence}' after {waited_ms} ms. Nothing was \
             issued.",
            fence::setting_text()
        ),
        "The worker applies a reload as soon as it receives it, and logs the new fence: check that it \
         runs (process title \"postgres: snowflake_id reservation\"), then retry."
            .into(),
    )
}

pub fn null_argument(function: &'static str, argument: &str) -> ! {
    raise(
        NULL_VALUE,
        function,
        format!("{argument} must not be NULL"),
        format!("{function}() was called with a NULL {argument}."),
        match argument {
            "shard" => shard_range_hint(),
            "count" => "Pass the number of IDs wanted, 1 or more.".into(),
            _ => "Pass an ID, such as the largest one of the table: SELECT max(id) FROM ...".into(),
        },
    )
}

pub fn shard_unset(function: &'static str) -> ! {
    raise(
        NOT_READY,
        function,
        "snowflake_id.shard is not set".into(),
        format!("{function}() without an argument issues IDs for the shard in snowflake_id.shard."),
        "Pass the shard, as in snowflake_nextval(3), or have a superuser set a default with \
         ALTER DATABASE name SET snowflake_id.shard = 3 (or ALTER ROLE)."
            .into(),
    )
}

pub fn count_not_positive(function: &'static str, count: i32) -> ! {
    raise(
        INVALID_PARAMETER,
        function,
        format!("count must be positive, not {count}"),
        format!("{function}(shard, count) returns count new IDs."),
        "Request at least one ID.".into(),
    )
}

pub fn set_not_accepted(function: &'static str) -> ! {
    raise(
        PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
        function,
        "set-valued function called in context that cannot accept a set".into(),
        format!("{function}() returns its IDs as a set of rows."),
        format!("Call it in FROM or in the select list: SELECT id FROM {function}(3, 100) AS id."),
    )
}

pub fn infinite_timestamp(function: &'static str) -> ! {
    raise(
        OUT_OF_RANGE,
        function,
        "an infinite timestamp cannot be held in a snowflake ID".into(),
        format!("IDs hold milliseconds from {} to {}.", epoch_text(), end_text()),
        "Pass a finite timestamp in that range.".into(),
    )
}

/// `snowflake_advance` was refused; an ID too far ahead gets its own explanation.
pub fn advance_refused(function: &'static str, shard: u32, refusal: Refusal) -> ! {
    let Refusal::TooFarAhead { lead_ms, policy, .. } = refusal else {
        self::refusal(function, shard, refusal)
    };
    raise(
        NOT_READY,
        function,
        format!("cannot advance shard {shard} to an ID {lead_ms} ms ahead of the wall clock"),
        format!(
            "snowflake_id.max_lead_ms = {} ms: the shard could issue no ID until the clock caught up.",
            policy.max_lead_ms
        ),
        "Check that this server's clock agrees with the server that issued the ID, or raise \
         snowflake_id.max_lead_ms (takes effect on reload)."
            .into(),
    )
}

/// `snowflake_observe` refused: the ID is further ahead of this server's clock than the lead
/// bound, or the worker did not reserve past it in time (a clock refusal as any call's).
/// Nothing was moved.
pub fn observe_refused(function: &'static str, id: i64, refusal: Refusal) -> ! {
    match refusal {
        Refusal::TooFarAhead { lead_ms, policy, .. } => raise(
            NOT_READY,
            function,
            format!("cannot observe ID {id}: it is {lead_ms} ms ahead of the wall clock"),
            format!(
                "snowflake_id.max_lead_ms = {} ms: every shard of this server would issue no ID until the clock \
                 caught up. Nothing was moved.",
                policy.max_lead_ms
            ),
            "Check that this server's clock agrees with the server that issued the ID (within max_lead_ms), or \
             raise snowflake_id.max_lead_ms (takes effect on reload)."
                .into(),
        ),
        Refusal::NotReserved { policy, .. } => raise(
            NOT_READY,
            function,
            format!("cannot observe ID {id}: the durable reservation did not reach it"),
            format!(
                "Every later ID must stay above it across a restart, so it is recorded on disk first; the \
                 reservation did not move within snowflake_id.max_reservation_wait_ms = {} ms. Nothing was moved.",
                policy.max_reservation_wait_ms
            ),
            "Check the server log for the snowflake_id reservation worker (a failing or very slow disk, or the \
             worker not running), then retry."
                .into(),
        ),
        other => self::refusal(function, 0, other),
    }
}

/// A value that does not fit the layout.
pub fn layout_error(function: &'static str, error: LayoutError) -> ! {
    let bits = fixed_layout::get().shard_bits();
    match error {
        LayoutError::ShardOutOfRange { shard, max_shard } => raise(
            INVALID_PARAMETER,
            function,
            format!("shard {shard} is out of range"),
            format!("snowflake_id.shard_bits = {bits} allows shards 0 to {max_shard}."),
            shard_range_hint(),
        ),
        LayoutError::SeqOutOfRange { seq, max_seq } => raise(
            INVALID_PARAMETER,
            function,
            format!("seq {seq} is out of range"),
            format!(
                "snowflake_id.seq_bits = {} allows sequence numbers 0 to {max_seq} per millisecond.",
                fixed_layout::get().seq_bits()
            ),
            format!("Pass a seq from 0 to {max_seq}."),
        ),
        LayoutError::NegativeId { id } => raise(
            INVALID_PARAMETER,
            function,
            format!("{id} is not a snowflake ID"),
            "Snowflake IDs are never negative.".into(),
            "Pass an ID issued by snowflake_nextval() or built by snowflake_compose().".into(),
        ),
        LayoutError::AboveLayout { id, max_id } => raise(
            INVALID_PARAMETER,
            function,
            format!("{id} is not a snowflake ID of this layout"),
            format!(
                "The layout's IDs have {} bits: they are at most {max_id}.",
                u64::BITS - (max_id as u64).leading_zeros()
            ),
            "Decode it under the layout it was issued in (snowflake_timestamp(id, 'twitter') ...), or pass an ID \
             issued by snowflake_nextval() under this one."
                .into(),
        ),
        LayoutError::BeforeEpoch { unix_ms, .. } => raise(
            OUT_OF_RANGE,
            function,
            format!("timestamp {} is before the snowflake_id epoch", format_utc_ms(unix_ms)),
            format!("snowflake_id.epoch is {}; IDs cannot hold earlier times.", epoch_text()),
            format!("Pass a timestamp at or after {}.", epoch_text()),
        ),
        LayoutError::PastEnd { unix_ms, .. } => raise(
            OUT_OF_RANGE,
            function,
            format!(
                "timestamp {} is past the last millisecond a snowflake ID can hold",
                format_utc_ms(unix_ms)
            ),
            format!("{} bits of milliseconds after snowflake_id.epoch end at {}.", time_bits(), end_text()),
            format!("Pass a timestamp at or before {}.", end_text()),
        ),
    }
}

/// The generator refused to issue (or to advance) a shard.
pub fn refusal(function: &'static str, shard: u32, refusal: Refusal) -> ! {
    let layout = fixed_layout::get();
    match refusal {
        Refusal::TooFarAhead { lead_ms, first_time_part, policy } => raise(
            NOT_READY,
            function,
            format!("shard {shard} would run {lead_ms} ms ahead of the wall clock"),
            format!(
                "{}snowflake_id.max_lead_ms = {} and snowflake_id.max_wait_ms = {} allow {} ms at \
                 most. The system clock moved back, or IDs were requested faster than {} per \
                 millisecond. Nothing was issued.",
                ahead_of_the_clock(first_time_part),
                policy.max_lead_ms,
                policy.max_wait_ms,
                policy.max_lead_ms + policy.max_wait_ms,
                layout.ids_per_ms()
            ),
            "Retry once the clock has caught up and check the server's time synchronization, \
             or raise snowflake_id.max_lead_ms (takes effect on reload)."
                .into(),
        ),
        Refusal::BatchTooLarge { count, max_count } => raise(
            INVALID_PARAMETER,
            function,
            format!("count {count} is too large"),
            format!(
                "One call can issue at most {max_count} IDs: {} per millisecond for \
                 snowflake_id.max_lead_ms = {} ms of lead plus the current millisecond.",
                layout.ids_per_ms(),
                settings::clock_policy().max_lead_ms
            ),
            format!("Request at most {max_count} IDs per call."),
        ),
        Refusal::NotReserved { time_part, ceiling, policy } => raise(
            NOT_READY,
            function,
            format!("shard {shard} has used up the durable reservation of IDs"),
            format!(
                "IDs are issued only below a reservation already recorded on disk. It ends at {}, the next ID \
                 needs {}, and it did not move within snowflake_id.max_reservation_wait_ms = {} ms. Nothing \
                 was issued.",
                format_utc_ms(layout.unix_ms(ceiling)),
                format_utc_ms(layout.unix_ms(time_part)),
                policy.max_reservation_wait_ms
            ),
            "Check the server log for the snowflake_id reservation worker (a failing or very slow disk, or \
             the worker not running: it needs a free slot in max_worker_processes), then retry. A disk \
             whose fsync takes longer than snowflake_id.max_lead_ms + reserve_ms needs those raised."
                .into(),
        ),
        // What a sequence raises at its MAXVALUE.
        Refusal::Exhausted => raise(
            PgSqlErrorCode::ERRCODE_SEQUENCE_GENERATOR_LIMIT_EXCEEDED,
            function,
            "snowflake IDs have run out".into(),
            format!("{} bits of milliseconds after snowflake_id.epoch end at {}.", time_bits(), end_text()),
            "A new epoch means a new ID space: plan a migration; never change the epoch of a \
             running fleet."
                .into(),
        ),
        Refusal::Clock(error) => {
            let (LayoutError::BeforeEpoch { unix_ms, .. } | LayoutError::PastEnd { unix_ms, .. }) = error
            else {
                layout_error(function, error)
            };
            raise(
                NOT_READY,
                function,
                "the system clock is outside the range of snowflake IDs".into(),
                format!(
                    "The clock reads {}; IDs hold times from {} to {}.",
                    format_utc_ms(unix_ms),
                    epoch_text(),
                    end_text()
                ),
                "Fix the system clock.".into(),
            )
        }
    }
}

/// Why a shard's next ID lies ahead of the clock, with its time: IDs were issued up there
/// (a clock that jumped ahead then back, or calls faster than the clock), or the server
/// resumed there after a restart.
fn ahead_of_the_clock(first_time_part: u64) -> String {
    let layout = fixed_layout::get();
    // A batch that starts at the clock is too long for the bound: nothing to explain here.
    let now = layout.time_part(clock::wall_clock_unix_ms()).unwrap_or(0);
    if first_time_part <= now + 1 {
        return String::new();
    }
    let next = format_utc_ms(layout.unix_ms(first_time_part));
    format!(
        "Its next ID would carry {next}: IDs of this shard were issued up to there, or this server \
         resumed there after a restart (it had recorded a reservation up to there, as it does \
         when IDs are issued there). "
    )
}

fn shard_range_hint() -> String {
    format!(
        "Pass a shard id from 0 to {}, each generated on one server only.",
        fixed_layout::get().max_shard()
    )
}

fn epoch_text() -> String {
    format_utc_ms(fixed_layout::get().epoch_unix_ms())
}

fn end_text() -> String {
    format_utc_ms(fixed_layout::get().last_unix_ms())
}

fn time_bits() -> u32 {
    fixed_layout::get().time_bits()
}

/// A decoder's layout argument that names no layout.
pub fn unknown_layout(function: &'static str, name: &str) -> ! {
    raise(
        INVALID_PARAMETER,
        function,
        format!("\"{name}\" is not a named layout"),
        format!("The named layouts are {}.", snowflake_core::layout::layout_names()),
        "Pass one of them, in lowercase; for this server's own layout, call the decoder without it.".into(),
    )
}

/// `snowflake_id.auto_keys` holds a value its parser does not read: one set before 0.7.1, whose
/// parser trimmed more whitespace than PostgreSQL's, kept in a database's or role's settings.
pub fn auto_keys_unreadable(function: &'static str, reason: &str) -> ! {
    raise(
        INVALID_PARAMETER,
        function,
        "snowflake_id.auto_keys is not a list of schema names".into(),
        format!("{reason} (Read as the setting's check reads it; the automatic keys do nothing with it.)"),
        "Set it again in the form 'public, app': ALTER DATABASE name SET snowflake_id.auto_keys = 'public' \
         (or ALTER ROLE, or SET), or RESET it."
            .into(),
    )
}

/// Every shard is fenced because the lease is lost (`fence::lease`): the HA manager at
/// `snowflake_id.lease_url` has not said since `since_unix_ms` that this server leads.
pub fn lease_lost(function: &'static str, shard: u32, since_unix_ms: u64) -> ! {
    let (url, lease_ms) = crate::postgres::fence::lease::settings_text();
    raise(
        NOT_READY,
        function,
        format!("shard {shard} is not issued by this server: it cannot show that it is the primary"),
        format!(
            "The lease is lost since {}: {url} (snowflake_id.lease_url) did not answer 200 for \
             snowflake_id.lease_ms = {lease_ms} ms, so another server may have been promoted, and every shard is \
             fenced so that no ID is issued twice. Nothing was issued.",
            format_utc_ms(since_unix_ms as i64)
        ),
        format!(
            "Check the HA manager of this server (curl {url}); the fence lifts at its next 200. If this server \
             is no longer the leader, let the HA manager rejoin it as a standby, or stop it."
        ),
    )
}

/// A shard of this server's fence that the registry keeps closed (`postgres::registry`): not
/// claimed yet, held by another server, or lost; `view` says which, and by whom.
pub fn registry_refused(function: &'static str, shard: u32, view: ClaimView) -> ! {
    let url = crate::postgres::registry::configured().map(|config| config.url).unwrap_or_default();
    let holder = view.holder.map_or(String::from("another server"), |(system, timeline)| {
        format!("the server of system identifier {system} (timeline {timeline})")
    });
    let since =
        view.since_unix_ms.map_or(String::new(), |since| format!(" since {}", format_utc_ms(since as i64)));
    let (why, hint) = match view.state {
        ClaimState::HeldElsewhere => (
            format!("It is held in the registry by {holder}{since}: two servers are configured with this shard."),
            format!(
                "Give this server another shard in snowflake_id.shards, or move shard {shard} here with the \
                 documented steps (its holder stops issuing it first). Shards of this server held by no other \
                 are issued."
            ),
        ),
        ClaimState::Waiting => (
            format!(
                "It is held in the registry by another postmaster of this data directory{since}: a copy of it \
                 started beside it, or this server before a crash restart, whose claim runs out within \
                 snowflake_id.registry_ttl_ms."
            ),
            "After a crash restart, retry once the old claim has run out. If this server is a copy of another \
             (a snapshot, a restored backup), stop it: its original holds the shard."
                .into(),
        ),
        ClaimState::Replaced => (
            format!("A promoted standby of this server ({holder}) took it over: this server was replaced."),
            "Stop this server, or rebuild it as a standby of the new primary.".into(),
        ),
        ClaimState::Lost => (
            "Its claim in the registry was lost (taken by another holder, or run out).".into(),
            "The worker asks again; check the server log for who holds it.".into(),
        ),
        ClaimState::Unreachable => (
            format!("The registry at {url} does not answer, and snowflake_id.registry_down = 'stop'."),
            format!("Check the registry (etcdctl --endpoints={url} endpoint health); the shard opens at its answer."),
        ),
        ClaimState::NotYet | ClaimState::Held if fence::session_fence() == ShardFence::Open => (
            "With the registry on, this server claims only the shards snowflake_id.shards names, and it names \
             none (every shard)."
                .into(),
            "Name this server's shards in snowflake_id.shards, such as '3,4', and reload.".into(),
        ),
        ClaimState::NotYet | ClaimState::Held => (
            format!("This server has not claimed it in the registry at {url} yet."),
            "Retry in a moment; if it lasts, check that the registry answers and the server log.".into(),
        ),
    };
    raise(
        NOT_READY,
        function,
        format!("shard {shard} is not issued by this server: the registry does not give it to this server"),
        format!("{why} Nothing was issued."),
        hint,
    )
}
