//! Building a [`Purgatory`]: its parts, its settings, and replaying the journal a
//! previous run wrote.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use grasp_sync_core::clock::{Clock, SystemClock};
use grasp_sync_core::metric_families::{MetricFamilies, MetricFamiliesError};
use grasp_sync_core::purgatory::{
    HostLimits, MaintainerIndex, OwnService, ReconcileSchedule, SyncQueue,
};
use grasp_sync_core::url_policy::CloneUrlPolicy;
use prometheus::Registry;
use tokio::sync::{watch, Notify};

use super::api::{Purgatory, Shared};
use super::pause::FetchPause;
use crate::config::{EnvError, PurgatoryConfig};
use crate::context::{ContextParts, GitSyncContext, SharedStore};
use crate::git::{
    check_git_version, CachedResolver, GitBackend, GitFetcher, GitFetcherConfig, GitVersionError,
    Resolver,
};
use crate::host::{HostPurgatory, WithHeld};
use crate::metrics::{family_names, Metrics};
use crate::refusals::EventRefusalLog;
use crate::repos::{Announcements, NpubLayout, RepoLocator};
use crate::serve::Reconciler;
use crate::sink::{ChannelSink, ReleaseSink};
use crate::status::PurgatoryStatus;
use crate::store::{HeldLimits, PurgatoryStore};
use crate::tasks::Tasks;
use crate::throttle_manager::ThrottleManager;

/// Why a purgatory could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PurgatoryBuildError {
    /// A required part was not given.
    #[error("purgatory needs {0}")]
    Missing(&'static str),
    /// An environment variable was malformed.
    #[error(transparent)]
    Env(#[from] EnvError),
    /// The installed git cannot be used: too old to pin clone URL hosts (and that is
    /// not allowed), or not runnable.
    #[error(transparent)]
    Git(#[from] GitVersionError),
    /// The metrics could not be registered.
    #[error("registering purgatory metrics failed: {0}")]
    Metrics(#[from] prometheus::Error),
    /// The per-family metric settings name a family purgatory does not export, give one
    /// a name Prometheus refuses, or give two families one name
    /// ([`PurgatoryBuilder::metric_name`]).
    #[error("purgatory metric families: {0}")]
    MetricFamilies(#[from] MetricFamiliesError),
    /// The journal could not be read or rewritten.
    #[error("restoring the purgatory journal {path} failed: {source}")]
    Restore {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

impl Purgatory {
    /// Starts building a purgatory.
    pub fn builder() -> PurgatoryBuilder {
        PurgatoryBuilder::new()
    }
}

/// Builds a [`Purgatory`].
///
/// Needs the announcements (for clone URLs), where the repositories are
/// ([`PurgatoryBuilder::repos_root`] or a [`RepoLocator`]) and where released events go.
#[must_use]
pub struct PurgatoryBuilder {
    config: PurgatoryConfig,
    announcements: Option<Arc<dyn Announcements>>,
    locator: Option<Arc<dyn RepoLocator>>,
    git: Option<Arc<dyn GitBackend>>,
    sink: Option<Arc<dyn ReleaseSink>>,
    registry: Option<Registry>,
    metric_families: MetricFamilies,
    clock: Option<Arc<dyn Clock>>,
    host: Option<Arc<dyn HostPurgatory>>,
    /// Whether the host tells purgatory of every announcement it serves
    /// ([`PurgatoryBuilder::announcements_followed`]).
    announcements_followed: bool,
}

impl std::fmt::Debug for PurgatoryBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PurgatoryBuilder")
            .field("config", &self.config)
            .field("host_purgatory", &self.host.is_some())
            .finish_non_exhaustive()
    }
}

impl PurgatoryBuilder {
    fn new() -> Self {
        PurgatoryBuilder {
            config: PurgatoryConfig::default(),
            announcements: None,
            locator: None,
            git: None,
            sink: None,
            registry: None,
            metric_families: MetricFamilies::new(),
            clock: None,
            host: None,
            announcements_followed: false,
        }
    }

    /// Replaces the whole configuration.
    pub fn config(mut self, config: PurgatoryConfig) -> Self {
        self.config = config;
        self
    }

    /// Applies the process environment (see [`crate::config::ENV_VARIABLES`]).
    pub fn from_env(mut self) -> Result<Self, PurgatoryBuildError> {
        self.config = self.config.apply_env(|name| std::env::var(name).ok())?;
        Ok(self)
    }

    /// Where repository announcements come from.
    pub fn announcements(mut self, announcements: Arc<dyn Announcements>) -> Self {
        self.announcements = Some(announcements);
        self
    }

    /// Repositories live at `<root>/<npub>/<identifier>.git` ([`NpubLayout`]).
    pub fn repos_root(mut self, root: impl Into<PathBuf>) -> Self {
        self.locator = Some(Arc::new(NpubLayout::new(root)));
        self
    }

    /// Finds repositories with a custom locator.
    pub fn repo_locator(mut self, locator: Arc<dyn RepoLocator>) -> Self {
        self.locator = Some(locator);
        self
    }

    /// Reads time from `clock` instead of the system's ([`SystemClock`]): under
    /// `tokio::time::pause`, give it `grasp_sync_tokio::TokioClock` (or any clock on
    /// tokio's timeline) so deadlines, backoff and expiry follow the paused time.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Where released and expired events go.
    pub fn sink(mut self, sink: Arc<dyn ReleaseSink>) -> Self {
        self.sink = Some(sink);
        self
    }

    /// Runs git through this backend instead of a [`GitFetcher`] built from the config.
    pub fn git_backend(mut self, git: Arc<dyn GitBackend>) -> Self {
        self.git = Some(git);
        self
    }

    /// The scheduler works for `host`'s held events instead of a store of its own: a
    /// GRASP server that keeps its own purgatory (it holds announcements, states and
    /// pull requests, and answers push authorisation from them) and wants only the
    /// queue, the throttles, the fetch, the `refs/purgatory/*` sweep and the served
    /// refs' reconciliation. The host calls [`Purgatory::schedule`] when it holds a new
    /// event; [`Purgatory::add`] and its kin are refused ([`AddError::HeldByHost`]).
    /// The journal ([`PurgatoryBuilder::persist_to`]), the expiry and the held limits
    /// are the host's business and are not used, and no [`ReleaseSink`] is needed (the
    /// host releases its events itself; one given is not called).
    ///
    /// [`AddError::HeldByHost`]: crate::AddError::HeldByHost
    pub fn host_purgatory(mut self, host: Arc<dyn HostPurgatory>) -> Self {
        self.host = Some(host);
        self
    }

    /// Registers the `purgatory_*` metrics in `registry` (a **prometheus 0.14**
    /// `Registry`, the version re-exported as [`crate::prometheus`]), but those left out
    /// ([`PurgatoryBuilder::leave_out_metric`]). A host on another prometheus version
    /// leaves this unset and appends [`Purgatory::metrics_handle`]'s
    /// [`MetricsHandle::text`](crate::MetricsHandle::text) to its own `/metrics` output.
    pub fn registry(mut self, registry: Registry) -> Self {
        self.registry = Some(registry);
        self
    }

    /// Exports the metric family `family` as `name` (the whole metric name): for a host
    /// that exports a family of that name already, or wants another. `family` is one of
    /// [`METRIC_FAMILIES`](crate::METRIC_FAMILIES), the family's default name
    /// (`purgatory_events_held`). It holds for the host's
    /// [registry](PurgatoryBuilder::registry) and [`Purgatory::metrics_handle`] alike.
    /// An unknown family, a name Prometheus does not accept, or two families under one
    /// name is a [`PurgatoryBuildError::MetricFamilies`]. Of two settings of one family,
    /// the later holds.
    pub fn metric_name(mut self, family: impl Into<String>, name: impl Into<String>) -> Self {
        self.metric_families = self.metric_families.name(family, name);
        self
    }

    /// Leaves the metric family `family` out (one of
    /// [`METRIC_FAMILIES`](crate::METRIC_FAMILIES)): it is registered in neither
    /// registry and [`Purgatory::metrics_handle`]'s text does not hold it, so a host
    /// keeps its own family of that name. Its values are still kept (the
    /// [status](Purgatory::status) reads some). An unknown family is a
    /// [`PurgatoryBuildError::MetricFamilies`].
    pub fn leave_out_metric(mut self, family: impl Into<String>) -> Self {
        self.metric_families = self.metric_families.leave_out(family);
        self
    }

    /// Applies every setting of `families` ([`MetricFamilies`], keyed as in
    /// [`METRIC_FAMILIES`](crate::METRIC_FAMILIES)) over those given before, as
    /// [`PurgatoryBuilder::metric_name`] and [`PurgatoryBuilder::leave_out_metric`] do
    /// one by one.
    pub fn metric_families(mut self, families: MetricFamilies) -> Self {
        self.metric_families = self.metric_families.with(families);
        self
    }

    /// Which clone URLs may be fetched from (https to public hosts by default).
    pub fn clone_policy(mut self, policy: CloneUrlPolicy) -> Self {
        self.config.git.policy = policy;
        self
    }

    /// How long one git command may run (at least 100 ms): the time limit of a fetch.
    pub fn fetch_timeout(mut self, timeout: Duration) -> Self {
        self.config.git.fetch_timeout = timeout.max(Duration::from_millis(100));
        self
    }

    /// The largest pack one fetch may write, in bytes (`None`: no limit); see
    /// [`GitFetcherConfig::max_pack_bytes`](crate::GitFetcherConfig::max_pack_bytes).
    pub fn max_pack_bytes(mut self, limit: Option<u64>) -> Self {
        self.config.git.max_pack_bytes = limit;
        self
    }

    /// The git program (`git` on `PATH` by default); checked at build.
    pub fn git_program(mut self, program: impl Into<PathBuf>) -> Self {
        self.config.git.git_program = program.into();
        self
    }

    /// Whether a git older than 2.37 (which cannot pin clone URL hosts) may be used,
    /// with a warning; see [`GitFetcherConfig::allow_old_git`](crate::GitFetcherConfig::allow_old_git).
    pub fn allow_old_git(mut self, allow: bool) -> Self {
        self.config.git.allow_old_git = allow;
        self
    }

    /// Resolves clone URL hosts with `resolver` (the system's by default); git connects
    /// to the address it gave, once checked.
    pub fn resolver(mut self, resolver: Arc<dyn Resolver>) -> Self {
        self.config.git.resolver = resolver;
        self
    }

    /// The most events held per repository, per author and in total.
    pub fn limits(mut self, limits: HeldLimits) -> Self {
        self.config.limits = limits;
        self
    }

    /// The most bytes of git objects the local repositories hold, in total and per
    /// owner ([`DiskLimits`](crate::DiskLimits)): a fetch into (or the creation of) a
    /// repository beyond is refused, logged and counted.
    pub fn disk_limits(mut self, limits: crate::DiskLimits) -> Self {
        self.config.disk = limits;
        self
    }

    /// Fetches in flight per domain: [`PurgatoryBuilder::host_max_concurrent`].
    pub fn domain_concurrent(self, max: u32) -> Self {
        self.host_max_concurrent(max)
    }

    /// Fetches started per domain per minute: [`PurgatoryBuilder::host_max_per_minute`].
    pub fn domain_rate_limit(self, per_minute: u32) -> Self {
        self.host_max_per_minute(per_minute)
    }

    /// Git fetches in flight per host (default 5, at least 1): per registrable domain
    /// (its subdomains share it), and per address block a host name resolves to (IPv4
    /// /24, IPv6 /48). A host given limits of its own ([`PurgatoryBuilder::host_limits`])
    /// has its override's instead. Also `NGIT_PURGATORY_HOST_MAX_CONCURRENT`.
    pub fn host_max_concurrent(mut self, max: u32) -> Self {
        self.config.throttle.max_concurrent = max.max(1);
        self
    }

    /// Git fetches started per host within a 60 s window (default 30, at least 1), per
    /// registrable domain and per address block as [`PurgatoryBuilder::host_max_concurrent`].
    /// A queue of `n` repositories on one host drains in about 60 s · ⌊(n − 1) / this⌋.
    /// Also `NGIT_PURGATORY_HOST_MAX_PER_MINUTE`.
    pub fn host_max_per_minute(mut self, per_minute: u32) -> Self {
        self.config.throttle.max_per_minute = per_minute.max(1);
        self
    }

    /// The operator's per-host overrides, replacing any set before: each host named
    /// (exactly, every port) is throttled under a key of its own with its override's
    /// limits (`unlimited`: no cap of its own) and takes no slot of the address block
    /// it resolves to; see [`HostLimits`] for how an override combines with the
    /// registrable-domain and address-block keys. Only for hosts you run or that agreed:
    /// anyone may list a clone URL on them. Also `NGIT_PURGATORY_HOST_LIMITS`
    /// (`git.example.org=120/10,git.mine.example=unlimited`).
    pub fn host_limits(mut self, limits: HostLimits) -> Self {
        self.config.host_limits = limits;
        self
    }

    /// Wait before syncing user-submitted events.
    pub fn default_delay(mut self, delay: Duration) -> Self {
        self.config.queue.default_delay = delay;
        self
    }

    /// Wait before syncing events that arrived by sync.
    pub fn immediate_delay(mut self, delay: Duration) -> Self {
        self.config.queue.immediate_delay = delay;
        self
    }

    /// How long an event waits for its data before it expires.
    pub fn expiry(mut self, expiry: Duration) -> Self {
        self.config.expiry = expiry;
        self
    }

    /// Our own git server's domain (every port of it), never fetched from. Adds to
    /// [`PurgatoryBuilder::own_service`].
    pub fn our_domain(mut self, domain: impl Into<String>) -> Self {
        let domain = domain.into();
        self.config.own_service = self.config.own_service.with_host(&domain);
        self
    }

    /// Our own service's hosts (the GRASP server's, or a sidecar's own relay and service
    /// URLs): clone URLs there are the destination of fetches, never a source. They are
    /// skipped when choosing where to fetch from, and counted
    /// (`purgatory_clone_urls_skipped_total{reason="own_service"}`,
    /// [`PurgatoryStatus::clone_urls_skipped_own_service`]); a repository whose only
    /// clone URLs are ours is reported not fetchable.
    pub fn own_service(mut self, own: OwnService) -> Self {
        self.config.own_service = own;
        self
    }

    /// Whether the repositories under the git root are created by someone else (a
    /// GRASP server that runs `git init --bare` when it accepts an announcement). By
    /// default (`false`) purgatory creates a missing repository itself, at the locator's
    /// [`RepoLocator::place`] (`<root>/<npub>/<identifier>.git` with
    /// [`PurgatoryBuilder::repos_root`]), with `refs/purgatory` hidden from serving,
    /// before fetching into it. With `true`, an event of a repository that does not
    /// exist waits, reported in the status as not fetchable
    /// ([`NotFetchable::RepositoryMissing`]). Also `NGIT_PURGATORY_GIT_ROOT_MANAGED_EXTERNALLY=1`.
    ///
    /// [`NotFetchable::RepositoryMissing`]: grasp_sync_core::purgatory::NotFetchable::RepositoryMissing
    pub fn repositories_managed_externally(mut self, external: bool) -> Self {
        self.config.repositories_managed_externally = external;
        self
    }

    /// How often each served repository is reconciled at least (default one hour,
    /// jittered by ±10 % per repository): its refs against its newest authorized state,
    /// `refs/nostr/*` against its pull requests, missing objects fetched. Also
    /// `NGIT_PURGATORY_RECONCILE_INTERVAL_SECS`.
    pub fn reconcile_interval(mut self, interval: Duration) -> Self {
        self.config.reconcile.interval = interval.max(Duration::from_secs(1));
        self
    }

    /// How many reconciliations run at once (default
    /// [`DEFAULT_RECONCILE_CONCURRENCY`], at least 1): each runs a few git processes
    /// (`init`, `cat-file`, `for-each-ref`, `symbolic-ref`, `update-ref`), so this bounds
    /// them however many repositories are due (at start, after a release). The due ones
    /// wait, their owners taking turns. Also `NGIT_PURGATORY_RECONCILE_CONCURRENCY`.
    ///
    /// [`DEFAULT_RECONCILE_CONCURRENCY`]: grasp_sync_core::purgatory::DEFAULT_RECONCILE_CONCURRENCY
    pub fn reconcile_concurrency(mut self, concurrency: usize) -> Self {
        self.config.reconcile.concurrency = concurrency.max(1);
        self
    }

    /// How long one attempt of a repository starts fetches of its clone URLs one after
    /// another (default 120 s); the URLs not tried by then wait in their domains'
    /// queues. Also `NGIT_PURGATORY_ATTEMPT_DEADLINE_SECS`.
    pub fn attempt_deadline(mut self, deadline: Duration) -> Self {
        self.config.attempt_deadline = deadline;
        self
    }

    /// The most pull request tips (`refs/nostr/<event id>`) served per repository, the
    /// newest by `created_at` (default
    /// [`DEFAULT_MAX_PULL_REQUEST_TIPS`](crate::DEFAULT_MAX_PULL_REQUEST_TIPS), at least
    /// 1); older ones are left out and logged. Also
    /// `NGIT_PURGATORY_MAX_PULL_REQUEST_TIPS`.
    pub fn max_pull_request_tips(mut self, max: usize) -> Self {
        self.config.max_pull_request_tips = max.max(1);
        self
    }

    /// Whether the host tells purgatory of every announcement the relay serves, as it
    /// is stored ([`Purgatory::track_announcement`]: the sidecar does it from its sync's
    /// self-subscription to the own relay). Then the source's announcements are listed
    /// at start and kept up to date by those calls: a new announcement costs its own
    /// reconciliation's few queries, not a listing of every announcement. The listing
    /// is read again once per reconciliation interval (an hour by default), for an
    /// announcement stored with an old `created_at`, which a live subscription's
    /// `since` hides. By default (`false`) it is read again every 5 minutes, to find
    /// repositories announced by a path purgatory does not see.
    pub fn announcements_followed(mut self, followed: bool) -> Self {
        self.announcements_followed = followed;
        self
    }

    /// Journals every event entering and leaving purgatory to `path`, and replays it on
    /// build (see [`crate::journal`]): nothing accepted is lost to a crash.
    pub fn persist_to(mut self, path: impl Into<PathBuf>) -> Self {
        self.config.persist_path = Some(path.into());
        self
    }

    /// Builds the purgatory, replaying its journal if one is set and rewriting it with
    /// the live events only (synchronous file I/O: call it before serving, or from a
    /// blocking context if the journal may be large).
    ///
    /// First checks the configured git ([`check_git_version`]): a git older than 2.37
    /// cannot pin clone URL hosts to their checked address, and is refused
    /// ([`PurgatoryBuildError::Git`]) unless
    /// [`GitFetcherConfig::allow_old_git`](crate::GitFetcherConfig::allow_old_git)
    /// (`NGIT_PURGATORY_ALLOW_OLD_GIT=1`) lets it run with a warning.
    pub fn build(self) -> Result<Purgatory, PurgatoryBuildError> {
        check_git_version(&self.config.git.git_program, self.config.git.allow_old_git)?;
        let announcements = self
            .announcements
            .ok_or(PurgatoryBuildError::Missing("announcements"))?;
        let locator = self
            .locator
            .ok_or(PurgatoryBuildError::Missing("a repository locator"))?;
        let sink = match (self.sink, &self.host) {
            (Some(sink), _) => sink,
            // The host releases its own events: nothing is ever handed to a sink, and
            // this one, with nobody listening, would refuse it.
            (None, Some(_)) => Arc::new(ChannelSink::new().0),
            (None, None) => return Err(PurgatoryBuildError::Missing("a release sink")),
        };
        let clock = self.clock.unwrap_or_else(|| Arc::new(SystemClock::new()));
        // The throttle keys a host name by the address block it resolves to, and the
        // fetch connects to what the name resolves to: one cache gives both the same
        // answer (a fetcher given by the caller resolves on its own).
        let resolver: Arc<dyn Resolver> = Arc::new(CachedResolver::new(
            Arc::clone(&self.config.git.resolver),
            Arc::clone(&clock),
        ));
        let git = self.git.unwrap_or_else(|| {
            Arc::new(GitFetcher::new(GitFetcherConfig {
                resolver: Arc::clone(&resolver),
                ..self.config.git.clone()
            }))
        });
        let names = family_names(&self.metric_families)?;
        let metrics = Metrics::named(&names)?;
        let metrics_handle = metrics.register_with_handle(self.registry.as_ref(), &names)?;
        let store: SharedStore =
            Arc::new(Mutex::new(PurgatoryStore::with_limits(self.config.limits)));
        let reconciler = Reconciler::new(
            Arc::clone(&announcements),
            Arc::clone(&locator),
            Arc::clone(&git),
            self.config.repositories_managed_externally,
            self.config.max_pull_request_tips,
        );
        // A host's held announcements count for fetching (clone URLs, owners), not for
        // what is served (the reconciler above).
        let announcements: Arc<dyn Announcements> = match &self.host {
            Some(host) => Arc::new(WithHeld::new(announcements, Arc::clone(host))),
            None => announcements,
        };
        let context = GitSyncContext::new(ContextParts {
            store: Arc::clone(&store),
            announcements,
            locator,
            git,
            sink: Arc::clone(&sink),
            own_service: self.config.own_service.clone(),
            creates_repositories: !self.config.repositories_managed_externally,
            clock: Arc::clone(&clock),
            expiry: self.config.expiry,
        });
        let context = match &self.host {
            Some(host) => context.for_host(Arc::clone(host)),
            None => context,
        };
        let ctx = Arc::new(
            context
                .with_metrics(metrics.clone())
                .with_disk_limits(self.config.disk),
        );
        let wake = Arc::new(Notify::new());
        let manager = Arc::new(
            ThrottleManager::new(
                self.config.throttle,
                Arc::clone(&clock),
                self.config.git.policy.clone(),
                self.config.max_clone_urls,
                metrics.clone(),
                resolver,
            )
            .with_attempt_deadline(self.config.attempt_deadline)
            .with_host_limits(self.config.host_limits.clone()),
        );
        let (shutdown, _) = watch::channel(false);
        let (status, _) = watch::channel(PurgatoryStatus::default());
        let persist_path = match (&self.host, &self.config.persist_path) {
            (Some(_), Some(path)) => {
                tracing::warn!(path = %path.display(), "a host purgatory keeps its own journal: persist_to is ignored");
                None
            }
            (_, path) => path.clone(),
        };
        let purgatory = Purgatory {
            shared: Arc::new(Shared {
                queue: Mutex::new(SyncQueue::new(self.config.queue)),
                store,
                wake,
                shutdown,
                manager,
                ctx,
                sink,
                clock,
                metrics,
                metrics_handle,
                status,
                tasks: Arc::new(Tasks::default()),
                restore_rejected: Mutex::new(Vec::new()),
                refusal_log: EventRefusalLog::default(),
                attempts: Mutex::new(BTreeMap::new()),
                reconciler,
                schedule: Mutex::new(ReconcileSchedule::new(self.config.reconcile)),
                maintainers: Mutex::new(MaintainerIndex::new()),
                served: Mutex::new(BTreeMap::new()),
                listed_at: Mutex::new(None),
                listed: Mutex::new(false),
                announcements_followed: self.announcements_followed,
                host: self.host,
                scheduled: Mutex::new(BTreeSet::new()),
                fetch_pause: FetchPause::default(),
                config: self.config,
            }),
        };
        if let Some(path) = persist_path {
            purgatory
                .restore(&path)
                .map_err(|source| PurgatoryBuildError::Restore { path, source })?;
        }
        purgatory.publish_status();
        Ok(purgatory)
    }
}
