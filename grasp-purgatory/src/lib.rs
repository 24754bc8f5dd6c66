//! Purgatory git-data sync for grasp-sync.
//!
//! Events that reference git objects the server does not have yet — repository states
//! (30618), pull requests (1618) and pull request updates (1619) — wait in a purgatory
//! until those objects are fetched from the repository's clone URLs; then they are
//! released to the caller's [`ReleaseSink`]. Sync is per repository, not per event: a
//! burst of events for one repository causes one fetch.
//!
//! A repository is a coordinate `30617:<owner>:<identifier>`, never a bare identifier:
//! a state belongs to its author's repository, a pull request to the one its `a` tag
//! names. Its objects are fetched into the owner's repository from the clone URLs of the
//! owner's announcement and of the maintainers it lists; another author announcing the
//! same identifier takes no part.
//!
//! Bounded and crash-safe: events held are limited in number and in bytes per
//! repository, per author and in total ([`HeldLimits`]; beyond its author's share an
//! event is refused with [`AddError::Full`], logged and counted; a full repository or
//! purgatory evicts the oldest event of the author who holds the most instead of
//! refusing a lighter newcomer); every event entering and leaving is
//! appended to a journal that is replayed on start, skipping and reporting a damaged
//! record, and compacted before it outgrows the held bytes ([`journal`]); `refs/purgatory/*` no held event needs are
//! deleted; one request to a host takes one slot of its domain's throttle; fetched packs
//! are checked (`fsck`) and limited in size and time; clone URL hosts are resolved once
//! through a replaceable [`Resolver`], checked, and git connects to the checked address.
//!
//! - [`Purgatory`] (built by [`PurgatoryBuilder`]): [`Purgatory::add_state`],
//!   [`Purgatory::add_pr`], [`Purgatory::trigger_immediate_sync`], the main loop
//!   ([`Purgatory::run`]) over the core's [`SyncQueue`](grasp_sync_core::purgatory::SyncQueue)
//!   (debounce 3 min for user-submitted events, 500 ms for synced ones; backoff 20 s,
//!   40 s, 80 s, then 2 min), expiry after 30 min (reported), a journal.
//! - [`ThrottleManager`]: per-domain limits (5 in flight, 30 per minute) and queues of
//!   repositories waiting for a throttled domain. It decides capacity only and yields
//!   the core's [`QueueStep`](grasp_sync_core::purgatory::QueueStep)s
//!   ([`ThrottleManager::poll_step`]); the purgatory's loop serves them.
//! - [`sync_identifier`], [`sync_identifier_next_url`], [`sync_identifier_from_url`]: the
//!   spec's sync functions over any [`SyncContext`](grasp_sync_core::purgatory::SyncContext);
//!   [`serve_queued_identifier`]: one turn of a domain's queue.
//! - [`GitSyncContext`] and [`GitFetcher`]: the real context, fetching exact objects with
//!   the git command line, safely (see [`git`]).
//! - [`HostPurgatory`], [`PurgatoryBuilder::host_purgatory`], [`Purgatory::schedule`]:
//!   the scheduler alone, over a host's own purgatory (see below).
//! - [`PurgatoryGate`]: wiring to `grasp-sync-tokio`, so events arriving by proactive
//!   sync enter purgatory with the immediate delay.
//! - [`PurgatoryStatus`]: what is held, releasing, released, expired, queued and being
//!   fetched, on a watch channel ([`Purgatory::status`]) or on demand
//!   ([`Purgatory::status_now`]); "done" is [`PurgatoryStatus::all_accounted`]: every
//!   held event released, expired or reported not fetchable with a reason.
//! - Next to any relay: a missing local repository is created before it is fetched
//!   into ([`create_bare_repository`], `refs/purgatory` hidden from serving) unless
//!   [`PurgatoryBuilder::repositories_managed_externally`]; clone URLs on our own
//!   service ([`PurgatoryBuilder::own_service`]) are never fetched from.
//!
//! Configuration: [`PurgatoryBuilder`] methods, or the environment variables of
//! [`config::ENV_VARIABLES`] through [`PurgatoryBuilder::from_env`]. Metrics (in the
//! registry given, and in the text handle): `purgatory_sync_queue_size`,
//! `purgatory_sync_attempts_total`, `purgatory_sync_oids_fetched_total`,
//! `purgatory_domain_in_flight`,
//! `purgatory_domain_requests_total` (the `domain` series of idle domains are removed),
//! plus `purgatory_events_held`, `purgatory_events_released_total`,
//! `purgatory_events_expired_total`, `purgatory_events_refused_total{reason}`,
//! `purgatory_events_evicted_total{reason}`,
//! `purgatory_events_refused_by_store_total` (released events the sink's store refused
//! for good, dropped), `purgatory_clone_url_refusals_total{reason}`,
//! `purgatory_clone_urls_skipped_total{reason}`, `purgatory_repositories_created_total`
//! and `purgatory_stale_refs_removed_total` (every family: [`METRIC_FAMILIES`]). Each
//! can be renamed or left out ([`PurgatoryBuilder::metric_name`],
//! [`PurgatoryBuilder::leave_out_metric`]); [`Purgatory::metrics_handle`] encodes them as
//! Prometheus text for a host on another prometheus version.
//!
//! Building and driving one (see [`Purgatory`] for a longer example):
//!
//! ```no_run
//! use std::sync::Arc;
//!
//! use grasp_purgatory::{ChannelSink, MemoryAnnouncements, Purgatory, PurgatoryBuildError};
//!
//! # async fn demo() -> Result<(), PurgatoryBuildError> {
//! let (sink, _outputs) = ChannelSink::new();
//! let purgatory = Purgatory::builder()
//!     .announcements(Arc::new(MemoryAnnouncements::new()))
//!     .repos_root("/srv/git")
//!     .sink(Arc::new(sink))
//!     .from_env()?
//!     .build()?;
//! tokio::spawn({
//!     let purgatory = purgatory.clone();
//!     async move { purgatory.run().await }
//! });
//! # Ok(())
//! # }
//! ```
//!
//! # Over a host's own purgatory
//!
//! A GRASP server that keeps its own purgatory (it holds announcements, states and pull
//! requests itself, and answers push authorisation from them) can use only the
//! scheduler: the per-repository queue with debounce and backoff, the per-domain
//! throttles, the safe git fetch, the `refs/purgatory/*` sweep and the served refs'
//! reconciliation (the refs follow the newest authorized state, pull request tips at
//! `refs/nostr/<id>`). It implements [`HostPurgatory`] over its held events and
//! [`Announcements`] over its database **and** its held announcements (clone URLs come
//! from there), builds with [`PurgatoryBuilder::host_purgatory`], and calls
//! [`Purgatory::schedule`] whenever it holds a new event. The scheduler asks the host
//! which objects are needed (minus those seen in the local repository), fetches them,
//! and calls [`HostPurgatory::release_satisfied`]; the host stores and serves what it
//! releases, and the repository is reconciled at once.
//!
//! What stays the host's: its events ([`Purgatory::add`], [`Purgatory::add_state`] and
//! [`Purgatory::add_pr`] are refused with [`AddError::HeldByHost`]), their journal
//! ([`PurgatoryBuilder::persist_to`] is ignored), their expiry and limits, and moving
//! events of an unannounced coordinate. A pull request's own `clone` URLs (its fork) are
//! fetched from when the host names them ([`HostPurgatory::event_sources`], none by
//! default). No [`ReleaseSink`] is needed. The
//! [`PurgatoryStatus`] reports what the scheduler knows: the repositories scheduled and
//! still held by the host (with their backoff and reasons), the queue, fetches in flight,
//! objects fetched and events the host released; `events_held` reads 0.
//!
//! ```no_run
//! use std::collections::BTreeSet;
//! use std::sync::{Arc, Mutex};
//!
//! use grasp_purgatory::core::nip34::{GitOid, RepoRef};
//! use grasp_purgatory::{
//!     HostPurgatory, MemoryAnnouncements, Origin, Purgatory, PurgatoryBuildError,
//!     ReleaseError,
//! };
//!
//! /// The server's held states: what each needs (its database is elsewhere).
//! struct Held(Mutex<Vec<(RepoRef, BTreeSet<GitOid>)>>);
//!
//! #[async_trait::async_trait]
//! impl HostPurgatory for Held {
//!     fn needed_oids(&self, repo: &RepoRef) -> BTreeSet<GitOid> {
//!         let held = self.0.lock().expect("not poisoned");
//!         let of_repo = held.iter().filter(|(r, _)| r == repo);
//!         of_repo.flat_map(|(_, needs)| needs.iter().cloned()).collect()
//!     }
//!
//!     fn has_pending(&self, repo: &RepoRef) -> bool {
//!         self.0.lock().expect("not poisoned").iter().any(|(r, _)| r == repo)
//!     }
//!
//!     async fn release_satisfied(
//!         &self,
//!         repo: &RepoRef,
//!         present: &(dyn for<'o> Fn(&'o GitOid) -> bool + Send + Sync),
//!     ) -> Result<usize, ReleaseError> {
//!         let mut held = self.0.lock().expect("not poisoned");
//!         let before = held.len();
//!         // A real server stores and serves each released event here.
//!         held.retain(|(r, needs)| r != repo || !needs.iter().all(present));
//!         Ok(before - held.len())
//!     }
//! }
//!
//! # async fn demo(repo: RepoRef) -> Result<(), PurgatoryBuildError> {
//! let held = Arc::new(Held(Mutex::new(Vec::new())));
//! // The server's own `Announcements`: over its database and its held announcements.
//! let announcements = Arc::new(MemoryAnnouncements::new());
//! let scheduler = Purgatory::builder()
//!     .announcements(announcements)
//!     .host_purgatory(held.clone())
//!     .repos_root("/srv/git")
//!     .repositories_managed_externally(true)
//!     .build()?;
//! tokio::spawn({
//!     let scheduler = scheduler.clone();
//!     async move { scheduler.run().await }
//! });
//! // The server accepted a state whose commits it lacks: held, then scheduled (a user
//! // pushing next: the 3 min debounce; an event that arrived by sync: at once).
//! scheduler.schedule(&repo, Origin::Submitted);
//! # Ok(())
//! # }
//! ```
//!
//! The crates an embedder needs to name this API are re-exported: [`nostr`],
//! [`prometheus`] and [`core`] (`grasp-sync-core`).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod config;
mod context;
mod disk;
pub mod git;
mod groups;
mod held;
mod hook;
mod host;
pub mod journal;
mod metrics;
mod refusals;
mod repos;
mod serve;
mod service;
mod sink;
mod status;
mod store;
mod sync;
mod tasks;
mod throttle_manager;

pub use config::{EnvError, PurgatoryConfig};
pub use context::{ContextParts, GitSyncContext, SharedStore};
pub use disk::{DiskLimits, QuotaError};
pub use git::{
    check_git_version, CachedResolver, FetchReport, GitBackend, GitError, GitFetcher,
    GitFetcherConfig, GitVersionError, PinnedUrl, Resolver, StaticResolver, SystemResolver,
};
pub use grasp_sync_core::metric_families::{MetricFamilies, MetricFamiliesError};
pub use held::{
    hold_event, hold_pull_request, hold_state, is_held_kind, HeldEvent, HeldKind, HoldError, Origin,
};
pub use hook::PurgatoryGate;
pub use host::HostPurgatory;
pub use metrics::{MetricsHandle, METRIC_FAMILIES};
pub use repos::{
    create_bare_repository, homes_of, repository_data, AnnouncementError, Announcements,
    CreateRepoError, DatabaseAnnouncements, MemoryAnnouncements, NpubLayout, RepoLocator,
    MAX_FILE_NAME_BYTES,
};
pub use serve::{ServedRepository, Serving, DEFAULT_MAX_PULL_REQUEST_TIPS};
pub use service::{Purgatory, PurgatoryBuildError, PurgatoryBuilder, ScheduleIdentifierError};
pub use sink::{ChannelSink, PurgatoryOutput, ReleaseError, ReleaseSink, StoreSink};
pub use status::{
    HeldRepository, HeldState, PurgatoryStatus, ReleaseRefusal, ThrottledHost, MAX_LISTED_HOSTS,
    MAX_LISTED_REPOSITORIES,
};
pub use store::{AddError, Cap, HeldLimits, Inserted, PurgatoryStore};
pub use sync::{
    serve_queued_identifier, sync_identifier, sync_identifier_from_url, sync_identifier_next_url,
    FromUrl, SyncOutcome, SyncReport, MAX_SINGLE_FETCHES,
};
pub use throttle_manager::{DomainStep, Slot, ThrottleManager, DEFAULT_ATTEMPT_DEADLINE};

pub use grasp_sync_core as core;
/// The nostr crate we build on (0.45), whole: its modules
/// (`grasp_purgatory::nostr::prelude`, `::event`, `::filter` …) and, at this
/// module's root, everything of its prelude, so a host names our types
/// without a nostr dependency of its own at our version:
///
/// ```
/// use grasp_purgatory::nostr::{Event, EventId, Filter, Kind, PublicKey, RelayUrl, Timestamp};
///
/// let url = RelayUrl::parse("wss://relay.example.com").unwrap();
/// let filter = Filter::new().kind(Kind::GitRepoAnnouncement).since(Timestamp::from(0));
/// let _: Option<(Event, EventId, PublicKey)> = None;
/// assert_eq!(url.as_str(), "wss://relay.example.com");
/// assert_eq!(filter.kinds.map(|kinds| kinds.len()), Some(1));
/// ```
pub mod nostr {
    pub use ::nostr::prelude::*;
    pub use ::nostr::*;
}
pub use prometheus;
