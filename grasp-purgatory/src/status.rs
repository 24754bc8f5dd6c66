//! What a running [`Purgatory`](crate::Purgatory) holds and does, as a cheap snapshot on
//! a `tokio::sync::watch` channel: a program that embeds it (or a sidecar's `--once`)
//! waits on [`PurgatoryStatus::all_accounted`] instead of guessing from quiet time
//! (see [`Purgatory::status`](crate::Purgatory::status) for an example).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::serve::ServedRepository;
use std::fmt;

use grasp_sync_core::job::PurgatoryProgress;
use grasp_sync_core::nip34::RepoRef;
use grasp_sync_core::relay_text::RelayText;
use nostr::prelude::{EventId, Kind, Timestamp};

use crate::held::HeldEvent;
use grasp_sync_core::purgatory::{HostLimit, NotFetchable};

/// The most repositories [`PurgatoryStatus::not_fetchable`] and
/// [`PurgatoryStatus::still_waiting`] list each (the counts cover all of them).
pub const MAX_LISTED_REPOSITORIES: usize = 32;

/// The most throttles [`PurgatoryStatus::throttled_hosts`] lists (the count covers all
/// of them).
pub const MAX_LISTED_HOSTS: usize = 32;

/// One per-host fetch throttle in a [`PurgatoryStatus`]: its limits, what it has in
/// flight and queued, and how long its queue needs to drain.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ThrottledHost {
    /// The throttle key: a registrable domain (`example.org`, shared by its subdomains),
    /// an address block (`203.0.113.0/24`, `2001:db8:1::/48`: IP literals, and the
    /// addresses host names resolve to), or a host the operator gave limits of its own
    /// ([`HostLimits`](grasp_sync_core::purgatory::HostLimits)).
    pub key: String,
    /// Its limits: fetches started per minute and in flight, or unlimited.
    pub limit: HostLimit,
    /// Whether [`ThrottledHost::limit`] is an operator's override (else the default,
    /// [`PurgatoryConfig::throttle`](crate::PurgatoryConfig::throttle)).
    pub overridden: bool,
    /// Fetches in flight.
    pub in_flight: u32,
    /// Fetches started within the last window (60 s).
    pub started_in_window: usize,
    /// Repositories waiting in (or being served from) its queue.
    pub queued: usize,
    /// How long its queue needs to drain, estimated from the repositories waiting their
    /// turn, the per-minute limit and the window
    /// ([`DomainThrottle::drain_estimate`](grasp_sync_core::purgatory::DomainThrottle::drain_estimate):
    /// 60 s · ⌊(n − 1) / r⌋ for n waiting at r a minute and an empty window; fetch time
    /// not counted).
    pub drain_estimate: Duration,
}

/// Where a held repository stands, as the status reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum HeldState {
    /// Its sync is running.
    Syncing,
    /// Its sync is due now (or within the immediate delay).
    Due,
    /// It waits for (or is being served by) a throttled domain's queue.
    WaitingForDomain,
    /// Some of its events are being released.
    Releasing,
    /// Waiting for its next attempt: a backoff after a failed one (with its last error,
    /// if the attempt had one), or the debounce of submitted events.
    BackingOff {
        /// The last failure of the last attempt.
        last_error: Option<String>,
    },
    /// Not fetchable as things stand, with the reason: accounted for.
    NotFetchable(NotFetchable),
}

impl fmt::Display for HeldState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HeldState::Syncing => f.write_str("fetching"),
            HeldState::Due => f.write_str("sync due"),
            HeldState::WaitingForDomain => f.write_str("waiting for a throttled domain"),
            HeldState::Releasing => f.write_str("releasing"),
            HeldState::BackingOff { last_error: None } => f.write_str("backing off"),
            HeldState::BackingOff {
                last_error: Some(error),
            } => write!(f, "fetch failed: {error}, backing off"),
            HeldState::NotFetchable(reason) => write!(f, "not fetchable: {reason}"),
        }
    }
}

/// One held repository in a [`PurgatoryStatus`] list.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct HeldRepository {
    /// The repository, `30617:<owner>:<identifier>`.
    pub repo: String,
    /// How many of its events are held (0 over a host's purgatory: the host counts its
    /// events, see [`PurgatoryBuilder::host_purgatory`](crate::PurgatoryBuilder::host_purgatory)).
    pub events: usize,
    /// Where it stands.
    pub state: HeldState,
}

impl fmt::Display for HeldRepository {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.repo, self.state)
    }
}

/// A snapshot of a purgatory. Obtain the receiver with
/// [`Purgatory::status`](crate::Purgatory::status) (before or after `run()`); the run
/// loop refreshes it at most every 100 ms while something changes, and at least every
/// loop interval (1 s by default). [`Purgatory::status_now`](crate::Purgatory::status_now)
/// computes one on demand.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PurgatoryStatus {
    /// Events waiting for their git data, including those being released.
    pub events_held: usize,
    /// Held events handed to the sink whose release is not confirmed yet.
    pub events_releasing: usize,
    /// Bytes of the held events (their journal records), bounded by
    /// [`HeldLimits::total_bytes`](crate::HeldLimits::total_bytes).
    pub bytes_held: usize,
    /// Bytes in the journal file (0 without one).
    pub journal_bytes: u64,
    /// Journal lines skipped when the purgatory was built (not UTF-8, unreadable, a
    /// torn last record) and read events that could not be held again; listed by
    /// [`Purgatory::restore_rejected`](crate::Purgatory::restore_rejected).
    pub journal_records_rejected: usize,
    /// Events released since the purgatory was built.
    pub events_released: u64,
    /// Events dropped because their git data never arrived, since the purgatory was
    /// built.
    pub events_expired: u64,
    /// Events refused since the purgatory was built because a limit was reached (per
    /// repository, per author, in total) or the journal could not be written
    /// (`purgatory_events_refused_total` by reason). Malformed events are not counted.
    pub events_refused: u64,
    /// Events dropped from a full purgatory since it was built to make room for another
    /// author's event, their author holding the most
    /// (`purgatory_events_evicted_total` by reason).
    pub events_evicted: u64,
    /// Events whose git data arrived but that the sink's store (the own relay) refused
    /// for good, since the purgatory was built: dropped from purgatory, accounted for,
    /// not offered again (`purgatory_events_refused_by_store_total`).
    pub events_refused_by_store: u64,
    /// The last of those, in one line (`kind 30618 <id> of 30617:<owner>:<d>: <reason>`).
    pub last_store_refusal: Option<ReleaseRefusal>,
    /// Repositories (`30617:<owner>:<identifier>`) in the sync queue (waiting, backing
    /// off or being synced).
    pub identifiers_queued: usize,
    /// Identifiers whose sync is due now or within the immediate delay (a burst of
    /// synced events being debounced) and not running yet. An identifier backing off
    /// after a failed attempt, or waiting out the longer delay of user-submitted events
    /// for a push, is not ready.
    pub identifiers_ready: usize,
    /// Identifiers with held events whose main sync is running.
    pub identifiers_syncing: usize,
    /// Identifiers waiting in (or being served from) the queue of a throttled domain.
    pub identifiers_waiting_for_domain: usize,
    /// Git fetches in flight, over every domain.
    pub fetches_in_flight: u32,
    /// Git fetches in flight per clone-URL domain (only domains with one or more).
    pub fetches_by_domain: BTreeMap<String, u32>,
    /// The per-host fetch throttles with a fetch in flight or within their window, or a
    /// repository queued (at most [`MAX_LISTED_HOSTS`], the most queued first), each with
    /// its limits, whether they are an operator's override, and its queue's drain time.
    pub throttled_hosts: Vec<ThrottledHost>,
    /// Those throttles in total.
    pub throttled_hosts_total: usize,
    /// Git objects fetched into local repositories since the purgatory was built.
    pub oids_fetched: u64,
    /// Nothing can move right now: no identifier is ready, syncing or waiting for a
    /// throttled domain, no fetch is in flight and no event is being released. What is
    /// still held waits for a backoff, a push or its expiry. This is *not* "done": an
    /// identifier backing off after a failed fetch will be tried again; see
    /// [`PurgatoryStatus::all_accounted`].
    pub nothing_ready: bool,
    /// Every held event is accounted for: each one that came in was released or
    /// expired, or is still held because its repository is reported
    /// [`not fetchable`](PurgatoryStatus::not_fetchable) with a reason (no announcement,
    /// no usable clone URL, only our own service's, no local repository while the git
    /// root is managed externally). A repository backing off after a failed fetch, due,
    /// being fetched, waiting for a throttled domain or releasing is still on its way:
    /// then this is `false`. So is a repository whose stale `refs/purgatory/*` are still
    /// to be deleted ([`PurgatoryStatus::repositories_sweeping`]). `true` when nothing is
    /// held and nothing is left to sweep. This is what "done" means: a sidecar's `--once`
    /// exits when proactive sync is complete and this is `true`. It also needs every
    /// served repository reconciled since anything it serves last changed (listed once,
    /// none due or being reconciled, no release not yet reconciled): each then serves its
    /// newest state, or says in [`PurgatoryStatus::served`] why not.
    pub all_accounted: bool,
    /// Repositories whose `refs/purgatory/*` no held event needs are still to be deleted
    /// (an event of theirs was released, expired or replaced, or purgatory restarted).
    pub repositories_sweeping: usize,
    /// Held events whose repository is not fetchable as things stand.
    pub events_not_fetchable: usize,
    /// Not fetchable repositories per [`NotFetchable::label`].
    pub not_fetchable_by_reason: BTreeMap<&'static str, usize>,
    /// The not fetchable repositories (at most [`MAX_LISTED_REPOSITORIES`], in
    /// coordinate order), each with its reason.
    pub not_fetchable: Vec<HeldRepository>,
    /// Held repositories that are not accounted for yet (at most
    /// [`MAX_LISTED_REPOSITORIES`], in coordinate order), each with where it stands.
    pub still_waiting: Vec<HeldRepository>,
    /// Held repositories not accounted for yet, in total.
    pub repositories_waiting: usize,
    /// Clone URLs skipped because they are on our own service (counted once per sync
    /// attempt that met them), since the purgatory was built.
    pub clone_urls_skipped_own_service: u64,
    /// Local bare repositories purgatory created, since it was built.
    pub repositories_created: u64,
    /// Repositories served (every announcement the source holds), reconciled or not.
    pub repositories_served: usize,
    /// Served repositories that serve their newest state (or have none yet) and every
    /// pull request tip.
    pub repositories_serving_newest: usize,
    /// Served repositories that are behind after their last reconciliation.
    pub repositories_behind: usize,
    /// Served repositories due for a reconciliation now, or being reconciled.
    pub repositories_reconciling: usize,
    /// The served repositories (at most [`MAX_LISTED_REPOSITORIES`]; those behind
    /// first, then in coordinate order), each with how it stood after its last
    /// reconciliation and when that was.
    pub served: Vec<ServedRepository>,
    /// Reconciliations run since the purgatory was built.
    pub reconciliations: u64,
    /// Served refs written (created, moved or deleted) since the purgatory was built.
    pub refs_updated: u64,
}

/// A released event the sink's store refused for good ([`ReleaseError::Refused`]):
/// which event, of which repository, why (the store's words, clipped and cleaned) and
/// when. Shown as one line: `kind 30618 <event id> of 30617:<owner>:<d>: <reason>`.
///
/// [`ReleaseError::Refused`]: crate::ReleaseError::Refused
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReleaseRefusal {
    /// The event's kind.
    pub kind: Kind,
    /// The event's id.
    pub id: EventId,
    /// Its repository.
    pub repo: RepoRef,
    /// The store's reason, clipped and cleaned.
    pub reason: RelayText,
    /// When it was refused (wall clock).
    pub at: Timestamp,
}

impl ReleaseRefusal {
    /// `held` refused for `reason` at `at`.
    pub fn new(held: &HeldEvent, reason: &str, at: Timestamp) -> Self {
        ReleaseRefusal {
            kind: held.event.kind,
            id: held.event.id,
            repo: held.repo.clone(),
            reason: RelayText::new(reason),
            at,
        }
    }
}

impl fmt::Display for ReleaseRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "kind {} {} of {}: {}",
            self.kind.as_u16(),
            self.id,
            self.repo,
            self.reason
        )
    }
}

impl PurgatoryStatus {
    /// Its accounting, as [`job_done`](grasp_sync_core::job::job_done) reads it.
    pub fn progress(&self) -> PurgatoryProgress {
        PurgatoryProgress {
            all_accounted: self.all_accounted,
            events_held: self.events_held,
        }
    }
}
