//! Purgatory settings, with the spec's defaults and environment variables.

use std::path::PathBuf;
use std::time::Duration;

use grasp_sync_core::purgatory::{
    HostLimitError, HostLimits, OwnService, ReconcileConfig, SyncQueueConfig, ThrottleConfig,
    DEFAULT_MAX_CLONE_URLS,
};

use crate::disk::DiskLimits;
use crate::git::GitFetcherConfig;
use crate::serve::DEFAULT_MAX_PULL_REQUEST_TIPS;
use crate::store::HeldLimits;
use crate::throttle_manager::DEFAULT_ATTEMPT_DEADLINE;

/// The environment variables [`PurgatoryConfig::apply_env`] reads, with the setting each
/// one sets.
pub const ENV_VARIABLES: &[(&str, &str)] = &[
    (
        "NGIT_SYNC_LOOP_INTERVAL_MS",
        "longest sleep of the main sync loop (1000)",
    ),
    (
        "NGIT_PURGATORY_HOST_MAX_CONCURRENT",
        "fetches in flight per host (per registrable domain, and per address block a host name resolves to), at least 1 (5)",
    ),
    (
        "NGIT_PURGATORY_HOST_MAX_PER_MINUTE",
        "fetches started per host per minute (per registrable domain, and per address block a host name resolves to), at least 1 (30)",
    ),
    (
        "NGIT_PURGATORY_HOST_LIMITS",
        "per-host overrides, comma-separated HOST=PER_MINUTE/CONCURRENT or HOST=unlimited: the exact host gets a throttle of its own with these limits, not charged to its address block (none)",
    ),
    (
        "NGIT_SYNC_DOMAIN_CONCURRENT",
        "the spec's name of NGIT_PURGATORY_HOST_MAX_CONCURRENT, which wins when both are set (5)",
    ),
    (
        "NGIT_SYNC_DOMAIN_RATE_LIMIT",
        "the spec's name of NGIT_PURGATORY_HOST_MAX_PER_MINUTE, which wins when both are set (30)",
    ),
    (
        "NGIT_SYNC_DEFAULT_DELAY_SECS",
        "wait before syncing user-submitted events (180)",
    ),
    (
        "NGIT_SYNC_IMMEDIATE_DELAY_MS",
        "wait before syncing events that arrived by sync (500)",
    ),
    (
        "NGIT_PURGATORY_EXPIRY_SECS",
        "how long an event waits for its data (1800)",
    ),
    (
        "NGIT_PURGATORY_FETCH_TIMEOUT_SECS",
        "how long one git command may run (60)",
    ),
    (
        "NGIT_PURGATORY_MAX_PACK_BYTES",
        "largest pack one fetch may write, 0 for no limit (536870912)",
    ),
    ("NGIT_PURGATORY_MAX_HELD", "events held in total (10000)"),
    (
        "NGIT_PURGATORY_MAX_HELD_PER_REPOSITORY",
        "events held per repository (1000)",
    ),
    (
        "NGIT_PURGATORY_MAX_HELD_PER_AUTHOR",
        "events held per author (1000)",
    ),
    (
        "NGIT_PURGATORY_MAX_HELD_BYTES",
        "bytes of the events held in total (67108864)",
    ),
    (
        "NGIT_PURGATORY_MAX_HELD_BYTES_PER_REPOSITORY",
        "bytes of the events held per repository (16777216)",
    ),
    (
        "NGIT_PURGATORY_MAX_HELD_BYTES_PER_AUTHOR",
        "bytes of the events held per author (16777216)",
    ),
    (
        "NGIT_PURGATORY_MAX_DISK_BYTES",
        "bytes of git objects of the repositories under the git root, 0 for no limit (68719476736)",
    ),
    (
        "NGIT_PURGATORY_MAX_DISK_BYTES_PER_AUTHOR",
        "bytes of git objects of one owner's repositories, 0 for no limit (4294967296)",
    ),
    (
        "NGIT_PURGATORY_RECONCILE_INTERVAL_SECS",
        "every served repository is reconciled at least this often, jittered by 10%; one left behind (objects that never come) is retried after 300 s, doubling up to this (3600)",
    ),
    (
        "NGIT_PURGATORY_RECONCILE_CONCURRENCY",
        "reconciliations running at once (each runs a few git processes); the due ones wait, owners in turn (4)",
    ),
    (
        "NGIT_PURGATORY_GIT_ROOT_MANAGED_EXTERNALLY",
        "1: the GRASP server creates repositories, purgatory waits for them (0)",
    ),
    (
        "NGIT_PURGATORY_MAX_CLONE_URLS",
        "distinct clone URLs one attempt of a repository tries; the rest are counted and left out (32)",
    ),
    (
        "NGIT_PURGATORY_ATTEMPT_DEADLINE_SECS",
        "how long one attempt of a repository starts fetches of its clone URLs in turn; the rest wait in their domains' queues (120)",
    ),
    (
        "NGIT_PURGATORY_MAX_PULL_REQUEST_TIPS",
        "pull request tips served per repository (refs/nostr/<id>), the newest; the rest are left out and logged (10000)",
    ),
    (
        "NGIT_PURGATORY_GIT_MAX_MEMORY_BYTES",
        "data memory of each git process (prlimit --data), 0 for no limit (2147483648)",
    ),
    (
        "NGIT_PURGATORY_ALLOW_OLD_GIT",
        "1: start with a git older than 2.37 (which cannot pin clone URL hosts), warning; 0 refuses to start (0)",
    ),
    (
        "NGIT_PURGATORY_GIT_PROXY",
        "1: git keeps the proxy variables (http_proxy, https_proxy, ALL_PROXY, no_proxy...) of the environment; 0 clears them (0)",
    ),
];

/// Everything a purgatory can be configured with.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct PurgatoryConfig {
    /// The main loop wakes at the next queue deadline, on new events, and at least this
    /// often (to expire events): 1 s.
    pub loop_interval: Duration,
    /// Debounce delays and backoff of the sync queue.
    pub queue: SyncQueueConfig,
    /// Per-host limits of git fetches: per registrable domain, and per address block a
    /// host name resolves to (5 in flight, 30 a minute;
    /// `NGIT_PURGATORY_HOST_MAX_CONCURRENT`, `NGIT_PURGATORY_HOST_MAX_PER_MINUTE`).
    pub throttle: ThrottleConfig,
    /// The operator's per-host overrides of [`PurgatoryConfig::throttle`] (none;
    /// `NGIT_PURGATORY_HOST_LIMITS`): an overridden host is throttled on its own with its
    /// override's limits and takes no slot of its address block (see [`HostLimits`]).
    pub host_limits: HostLimits,
    /// How long an event may wait for its git data before it is dropped and reported
    /// (30 min, as GRASP-01 asks).
    pub expiry: Duration,
    /// How git runs: timeout, pack size limit, clone-URL policy, resolver.
    pub git: GitFetcherConfig,
    /// The most events (and bytes of them) held per repository, per author and in
    /// total.
    pub limits: HeldLimits,
    /// The most bytes of git objects the local repositories hold, in total and per
    /// owner: fetches (and creations) beyond are refused.
    pub disk: DiskLimits,
    /// Our own service's hosts: clone URLs there are never fetched from.
    pub own_service: OwnService,
    /// Whether someone else (a GRASP server) creates the repositories under the git
    /// root: then purgatory waits for a missing one instead of creating it.
    pub repositories_managed_externally: bool,
    /// The journal: every event entering and leaving purgatory is appended to it, and it
    /// is replayed on start (see [`crate::journal`]). `None`: nothing survives a restart.
    pub persist_path: Option<PathBuf>,
    /// How often each served repository is reconciled (GRASP-02: at least hourly).
    pub reconcile: ReconcileConfig,
    /// The most distinct clone URLs (announcements' and pull requests' together) one
    /// attempt of a repository tries ([`DEFAULT_MAX_CLONE_URLS`], 32): the rest are
    /// counted (`purgatory_clone_urls_skipped_total{reason="over_cap"}`) and left out.
    pub max_clone_urls: usize,
    /// The most pull request tips (`refs/nostr/<event id>`) served per repository: the
    /// newest by `created_at` ([`DEFAULT_MAX_PULL_REQUEST_TIPS`], 10 000). Anybody may
    /// open pull requests; this bounds what one reconciliation checks and writes.
    pub max_pull_request_tips: usize,
    /// How long one attempt of a repository starts fetches of its clone URLs, one after
    /// another ([`DEFAULT_ATTEMPT_DEADLINE`], 120 s): 32 URLs that hang for the whole
    /// fetch timeout keep an attempt for this and one timeout, not 32 timeouts. The
    /// URLs not tried by then wait in their domains' queues.
    pub attempt_deadline: Duration,
}

impl Default for PurgatoryConfig {
    fn default() -> Self {
        PurgatoryConfig {
            loop_interval: Duration::from_secs(1),
            queue: SyncQueueConfig::default(),
            throttle: ThrottleConfig::default(),
            host_limits: HostLimits::new(),
            expiry: Duration::from_secs(30 * 60),
            git: GitFetcherConfig::default(),
            limits: HeldLimits::default(),
            disk: DiskLimits::default(),
            own_service: OwnService::new(),
            repositories_managed_externally: false,
            persist_path: None,
            reconcile: ReconcileConfig::default(),
            max_clone_urls: DEFAULT_MAX_CLONE_URLS,
            max_pull_request_tips: DEFAULT_MAX_PULL_REQUEST_TIPS,
            attempt_deadline: DEFAULT_ATTEMPT_DEADLINE,
        }
    }
}

/// An environment variable held something it cannot.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EnvError {
    /// A number's variable held something that is not a whole number.
    #[error("environment variable {name} is not a whole number: {value:?}")]
    NotANumber {
        /// The variable.
        name: &'static str,
        /// Its value.
        value: String,
    },
    /// `NGIT_PURGATORY_HOST_LIMITS` held an entry that is not an override.
    #[error("environment variable {name}: {source}")]
    HostLimits {
        /// The variable.
        name: &'static str,
        /// What is wrong with it.
        #[source]
        source: HostLimitError,
    },
}

impl EnvError {
    /// The variable at fault.
    pub fn name(&self) -> &'static str {
        match self {
            EnvError::NotANumber { name, .. } | EnvError::HostLimits { name, .. } => name,
        }
    }
}

impl PurgatoryConfig {
    /// Applies the variables of [`ENV_VARIABLES`] found by `lookup` (use
    /// `|name| std::env::var(name).ok()` for the process environment). Unset variables
    /// keep the current value; a value that is not a whole number (or, for
    /// `NGIT_PURGATORY_HOST_LIMITS`, not a list of overrides) is an error.
    pub fn apply_env(mut self, lookup: impl Fn(&str) -> Option<String>) -> Result<Self, EnvError> {
        let number = |name: &'static str| -> Result<Option<u64>, EnvError> {
            match lookup(name) {
                None => Ok(None),
                Some(value) => value
                    .trim()
                    .parse()
                    .map(Some)
                    .map_err(|_| EnvError::NotANumber { name, value }),
            }
        };
        if let Some(ms) = number("NGIT_SYNC_LOOP_INTERVAL_MS")? {
            self.loop_interval = Duration::from_millis(ms.max(1));
        }
        // The spec's names first: the purgatory's own win when both are set.
        for name in [
            "NGIT_SYNC_DOMAIN_CONCURRENT",
            "NGIT_PURGATORY_HOST_MAX_CONCURRENT",
        ] {
            if let Some(n) = number(name)? {
                self.throttle.max_concurrent = clamp_u32(n.max(1));
            }
        }
        for name in [
            "NGIT_SYNC_DOMAIN_RATE_LIMIT",
            "NGIT_PURGATORY_HOST_MAX_PER_MINUTE",
        ] {
            if let Some(n) = number(name)? {
                self.throttle.max_per_minute = clamp_u32(n.max(1));
            }
        }
        let name = "NGIT_PURGATORY_HOST_LIMITS";
        if let Some(text) = lookup(name) {
            self.host_limits = text
                .parse()
                .map_err(|source| EnvError::HostLimits { name, source })?;
        }
        if let Some(secs) = number("NGIT_SYNC_DEFAULT_DELAY_SECS")? {
            self.queue.default_delay = Duration::from_secs(secs);
        }
        if let Some(ms) = number("NGIT_SYNC_IMMEDIATE_DELAY_MS")? {
            self.queue.immediate_delay = Duration::from_millis(ms);
        }
        if let Some(secs) = number("NGIT_PURGATORY_EXPIRY_SECS")? {
            self.expiry = Duration::from_secs(secs);
        }
        if let Some(secs) = number("NGIT_PURGATORY_FETCH_TIMEOUT_SECS")? {
            self.git.fetch_timeout = Duration::from_secs(secs.max(1));
        }
        if let Some(bytes) = number("NGIT_PURGATORY_MAX_PACK_BYTES")? {
            self.git.max_pack_bytes = (bytes > 0).then_some(bytes);
        }
        if let Some(n) = number("NGIT_PURGATORY_MAX_HELD")? {
            self.limits.total = clamp_usize(n);
        }
        if let Some(n) = number("NGIT_PURGATORY_MAX_HELD_PER_REPOSITORY")? {
            self.limits.per_repository = clamp_usize(n);
        }
        if let Some(n) = number("NGIT_PURGATORY_MAX_HELD_PER_AUTHOR")? {
            self.limits.per_author = clamp_usize(n);
        }
        if let Some(n) = number("NGIT_PURGATORY_MAX_HELD_BYTES")? {
            self.limits.total_bytes = clamp_usize(n);
        }
        if let Some(n) = number("NGIT_PURGATORY_MAX_HELD_BYTES_PER_REPOSITORY")? {
            self.limits.per_repository_bytes = clamp_usize(n);
        }
        if let Some(n) = number("NGIT_PURGATORY_MAX_HELD_BYTES_PER_AUTHOR")? {
            self.limits.per_author_bytes = clamp_usize(n);
        }
        if let Some(bytes) = number("NGIT_PURGATORY_MAX_DISK_BYTES")? {
            self.disk.total_bytes = (bytes > 0).then_some(bytes);
        }
        if let Some(bytes) = number("NGIT_PURGATORY_MAX_DISK_BYTES_PER_AUTHOR")? {
            self.disk.per_author_bytes = (bytes > 0).then_some(bytes);
        }
        if let Some(secs) = number("NGIT_PURGATORY_RECONCILE_INTERVAL_SECS")? {
            self.reconcile.interval = Duration::from_secs(secs.max(1));
        }
        if let Some(n) = number("NGIT_PURGATORY_RECONCILE_CONCURRENCY")? {
            self.reconcile.concurrency = clamp_usize(n.max(1));
        }
        if let Some(n) = number("NGIT_PURGATORY_GIT_ROOT_MANAGED_EXTERNALLY")? {
            self.repositories_managed_externally = n != 0;
        }
        if let Some(n) = number("NGIT_PURGATORY_MAX_CLONE_URLS")? {
            self.max_clone_urls = clamp_usize(n.max(1));
        }
        if let Some(secs) = number("NGIT_PURGATORY_ATTEMPT_DEADLINE_SECS")? {
            self.attempt_deadline = Duration::from_secs(secs);
        }
        if let Some(n) = number("NGIT_PURGATORY_MAX_PULL_REQUEST_TIPS")? {
            self.max_pull_request_tips = clamp_usize(n.max(1));
        }
        if let Some(bytes) = number("NGIT_PURGATORY_GIT_MAX_MEMORY_BYTES")? {
            self.git.max_memory_bytes = (bytes > 0).then_some(bytes);
        }
        if let Some(n) = number("NGIT_PURGATORY_ALLOW_OLD_GIT")? {
            self.git.allow_old_git = n != 0;
        }
        if let Some(n) = number("NGIT_PURGATORY_GIT_PROXY")? {
            self.git.keep_proxy_env = n != 0;
        }
        Ok(self)
    }
}

fn clamp_u32(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn clamp_usize(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        }
    }

    #[test]
    fn defaults_are_the_spec_values() {
        let config = PurgatoryConfig::default();
        assert_eq!(config.loop_interval, Duration::from_millis(1000));
        assert_eq!(config.throttle.max_concurrent, 5);
        assert_eq!(config.throttle.max_per_minute, 30);
        assert_eq!(config.queue.default_delay, Duration::from_secs(180));
        assert_eq!(config.queue.immediate_delay, Duration::from_millis(500));
        assert_eq!(config.expiry, Duration::from_secs(1800));
        assert_eq!(config.git.max_pack_bytes, Some(512 * 1024 * 1024));
        assert_eq!(config.limits, HeldLimits::default());
        assert_eq!(config.disk.total_bytes, Some(64 * 1024 * 1024 * 1024));
        assert_eq!(config.disk.per_author_bytes, Some(4 * 1024 * 1024 * 1024));
        assert!(!config.repositories_managed_externally);
        assert!(config.own_service.is_empty());
        assert_eq!(config.reconcile.interval, Duration::from_secs(3600));
        assert_eq!(config.max_clone_urls, 32);
        assert_eq!(config.max_pull_request_tips, 10_000);
        assert_eq!(config.attempt_deadline, Duration::from_secs(120));
        assert_eq!(config.git.max_memory_bytes, Some(2 * 1024 * 1024 * 1024));
        assert!(!config.git.allow_old_git);
        assert!(!config.git.keep_proxy_env);
    }

    #[test]
    fn every_variable_sets_its_value() {
        let config = PurgatoryConfig::default()
            .apply_env(env(&[
                ("NGIT_SYNC_LOOP_INTERVAL_MS", "250"),
                ("NGIT_PURGATORY_HOST_MAX_CONCURRENT", "2"),
                ("NGIT_PURGATORY_HOST_MAX_PER_MINUTE", " 12 "),
                ("NGIT_PURGATORY_HOST_LIMITS", "git.example.org=120/10"),
                ("NGIT_SYNC_DEFAULT_DELAY_SECS", "60"),
                ("NGIT_SYNC_IMMEDIATE_DELAY_MS", "100"),
                ("NGIT_PURGATORY_EXPIRY_SECS", "600"),
                ("NGIT_PURGATORY_FETCH_TIMEOUT_SECS", "9"),
                ("NGIT_PURGATORY_MAX_PACK_BYTES", "0"),
                ("NGIT_PURGATORY_MAX_HELD", "50"),
                ("NGIT_PURGATORY_MAX_HELD_PER_REPOSITORY", "5"),
                ("NGIT_PURGATORY_MAX_HELD_PER_AUTHOR", "7"),
                ("NGIT_PURGATORY_MAX_HELD_BYTES", "5000"),
                ("NGIT_PURGATORY_MAX_HELD_BYTES_PER_REPOSITORY", "3000"),
                ("NGIT_PURGATORY_MAX_HELD_BYTES_PER_AUTHOR", "2000"),
                ("NGIT_PURGATORY_MAX_DISK_BYTES", "0"),
                ("NGIT_PURGATORY_MAX_DISK_BYTES_PER_AUTHOR", "1000000"),
                ("NGIT_PURGATORY_GIT_ROOT_MANAGED_EXTERNALLY", "1"),
                ("NGIT_PURGATORY_RECONCILE_INTERVAL_SECS", "90"),
                ("NGIT_PURGATORY_RECONCILE_CONCURRENCY", "2"),
                ("NGIT_PURGATORY_MAX_CLONE_URLS", "4"),
                ("NGIT_PURGATORY_MAX_PULL_REQUEST_TIPS", "100000"),
                ("NGIT_PURGATORY_ATTEMPT_DEADLINE_SECS", "30"),
                ("NGIT_PURGATORY_GIT_MAX_MEMORY_BYTES", "0"),
                ("NGIT_PURGATORY_ALLOW_OLD_GIT", "1"),
                ("NGIT_PURGATORY_GIT_PROXY", "1"),
            ]))
            .unwrap();
        assert_eq!(config.loop_interval, Duration::from_millis(250));
        assert_eq!(config.throttle.max_concurrent, 2);
        assert_eq!(config.throttle.max_per_minute, 12);
        assert_eq!(config.host_limits.to_string(), "git.example.org=120/10");
        assert_eq!(config.queue.default_delay, Duration::from_secs(60));
        assert_eq!(config.queue.immediate_delay, Duration::from_millis(100));
        assert_eq!(config.expiry, Duration::from_secs(600));
        assert_eq!(config.git.fetch_timeout, Duration::from_secs(9));
        assert_eq!(config.git.max_pack_bytes, None);
        assert_eq!(
            config.limits,
            HeldLimits {
                per_repository: 5,
                per_author: 7,
                total: 50,
                per_repository_bytes: 3000,
                per_author_bytes: 2000,
                total_bytes: 5000,
            }
        );
        assert_eq!(
            config.disk,
            DiskLimits {
                total_bytes: None,
                per_author_bytes: Some(1_000_000),
            }
        );
        assert!(config.repositories_managed_externally);
        assert_eq!(config.reconcile.interval, Duration::from_secs(90));
        assert_eq!(config.reconcile.concurrency, 2);
        assert_eq!(config.max_clone_urls, 4);
        assert_eq!(config.max_pull_request_tips, 100_000);
        assert_eq!(config.attempt_deadline, Duration::from_secs(30));
        assert_eq!(config.git.max_memory_bytes, None);
        assert!(config.git.allow_old_git);
        assert!(config.git.keep_proxy_env);
        assert_eq!(ENV_VARIABLES.len(), 28);
    }

    #[test]
    fn a_bad_number_names_the_variable() {
        let error = PurgatoryConfig::default()
            .apply_env(env(&[("NGIT_SYNC_DOMAIN_RATE_LIMIT", "lots")]))
            .unwrap_err();
        assert_eq!(error.name(), "NGIT_SYNC_DOMAIN_RATE_LIMIT");
    }

    #[test]
    fn the_per_host_limits_default_to_five_and_thirty_and_the_purgatory_s_names_win() {
        let config = PurgatoryConfig::default().apply_env(env(&[])).unwrap();
        assert_eq!(config.throttle.max_concurrent, 5);
        assert_eq!(config.throttle.max_per_minute, 30);
        assert!(config.host_limits.is_empty());
        let config = PurgatoryConfig::default()
            .apply_env(env(&[
                ("NGIT_SYNC_DOMAIN_CONCURRENT", "2"),
                ("NGIT_SYNC_DOMAIN_RATE_LIMIT", "12"),
                ("NGIT_PURGATORY_HOST_MAX_CONCURRENT", "3"),
                ("NGIT_PURGATORY_HOST_MAX_PER_MINUTE", "0"),
                (
                    "NGIT_PURGATORY_HOST_LIMITS",
                    "git.example.org=120/10, git.mine.example=unlimited",
                ),
            ]))
            .unwrap();
        assert_eq!(config.throttle.max_concurrent, 3);
        assert_eq!(config.throttle.max_per_minute, 1, "at least 1");
        assert_eq!(
            config.host_limits.to_string(),
            "git.example.org=120/10,git.mine.example=unlimited"
        );
    }

    #[test]
    fn a_bad_host_limit_names_the_variable_and_the_entry_in_one_line() {
        let error = PurgatoryConfig::default()
            .apply_env(env(&[(
                "NGIT_PURGATORY_HOST_LIMITS",
                "git.example.org=fast",
            )]))
            .unwrap_err();
        assert_eq!(error.name(), "NGIT_PURGATORY_HOST_LIMITS");
        let message = error.to_string();
        assert!(message.contains("git.example.org"), "{message}");
        assert!(message.contains("\"fast\""), "{message}");
        assert!(!message.contains('\n'), "{message}");
    }
}
