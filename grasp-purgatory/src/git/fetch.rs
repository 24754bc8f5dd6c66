//! [`GitFetcher`]: fetching exact objects from a checked clone URL, all ids at once and,
//! when the server lacks some, one by one, so a partial success keeps what it got.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use grasp_sync_core::nip34::GitOid;
use grasp_sync_core::url_policy::{CloneUrl, CloneUrlPolicy};
use tokio::process::Command;
use tokio::sync::Semaphore;

use super::connectivity;
use super::error::GitError;
use super::policy::check_url;
use super::process::GitRunner;
use super::refs::{purgatory_refspec, update_refs};

/// Object ids asked for in one fetch; the rest wait for the next attempt.
pub const MAX_OIDS_PER_FETCH: usize = 256;

/// When a server lacks some ids, at most this many are then fetched one by one (each a
/// git process), so a flood of unknown ids cannot multiply the requests.
pub const MAX_SINGLE_FETCHES: usize = 16;

/// How git says the server does not have an object that was asked for.
const MISSING_ON_SERVER: &[&str] = &[
    "not our ref",
    "couldn't find remote ref",
    "no such remote ref",
    "unadvertised object",
];

/// How [`GitFetcher`] runs git.
#[derive(Clone, Debug)]
pub struct GitFetcherConfig {
    /// The git program (`git`, found on `PATH`).
    pub git_program: PathBuf,
    /// How long one git command may run before it is killed (60 s).
    pub fetch_timeout: Duration,
    /// Which clone URLs may be fetched from (https to public hosts by default).
    pub policy: CloneUrlPolicy,
    /// Git fetches running at once across all domains (16): a bound on processes
    /// however many domains the announcements name.
    pub max_concurrent_fetches: usize,
    /// Resolve host names before fetching and refuse those that resolve to a local,
    /// private or otherwise forbidden address (on by default; turn off only together
    /// with a policy that allows local addresses). IP literals are checked by the policy.
    pub check_resolved_addresses: bool,
}

impl Default for GitFetcherConfig {
    fn default() -> Self {
        GitFetcherConfig {
            git_program: PathBuf::from("git"),
            fetch_timeout: Duration::from_secs(60),
            policy: CloneUrlPolicy::new(),
            max_concurrent_fetches: 16,
            check_resolved_addresses: true,
        }
    }
}

/// What one [`GitFetcher::fetch`] obtained.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FetchReport {
    /// Requested objects present in the repository after the fetch.
    pub present: BTreeSet<GitOid>,
    /// Requested objects still missing.
    pub missing: BTreeSet<GitOid>,
    /// git's error, when some objects could not be fetched (partial success).
    pub error: Option<String>,
}

/// Runs git to fetch exact objects from clone URLs into local bare repositories.
///
/// Cloning the fetcher shares its count of spawned processes.
#[derive(Clone, Debug)]
pub struct GitFetcher {
    config: Arc<GitFetcherConfig>,
    runner: GitRunner,
    fetches: Arc<AtomicU64>,
    permits: Arc<Semaphore>,
}

impl GitFetcher {
    /// A fetcher with this configuration.
    pub fn new(config: GitFetcherConfig) -> Self {
        GitFetcher {
            permits: Arc::new(Semaphore::new(config.max_concurrent_fetches.max(1))),
            runner: GitRunner::new(config.git_program.clone(), config.fetch_timeout),
            config: Arc::new(config),
            fetches: Arc::new(AtomicU64::new(0)),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &GitFetcherConfig {
        &self.config
    }

    /// How many git processes this fetcher (and its clones) started.
    pub fn processes_spawned(&self) -> u64 {
        self.runner.spawned()
    }

    /// How many of those processes were `git fetch` (the others query or update the
    /// local repository).
    pub fn fetch_processes_spawned(&self) -> u64 {
        self.fetches.load(Ordering::Relaxed)
    }

    /// Checks `url` against the policy and, for host names, the addresses they resolve
    /// to. Spawns nothing.
    pub async fn check_url(&self, url: &str) -> Result<CloneUrl, GitError> {
        let config = &self.config;
        check_url(&config.policy, config.check_resolved_addresses, url).await
    }

    /// Fetches `oids` from `url` into the bare repository at `repo`, keeping them under
    /// `refs/purgatory/<oid>`, and reports which are present afterwards.
    ///
    /// Returns an error without spawning anything when the URL is refused; returns the
    /// timeout error when git hangs. A fetch that fails for some ids only is a report
    /// with `error` set, not an error.
    pub async fn fetch(
        &self,
        repo: &Path,
        url: &str,
        oids: &[GitOid],
    ) -> Result<FetchReport, GitError> {
        if oids.is_empty() {
            return Err(GitError::NothingToFetch);
        }
        let url = self.check_url(url).await?;
        let _permit = self.permits.acquire().await.ok();
        let asked = &oids[..oids.len().min(MAX_OIDS_PER_FETCH)];
        let error = match self.fetch_all(repo, &url, asked).await {
            Ok(()) => None,
            Err(GitError::Failed { stderr, .. }) if asked.len() > 1 && lacks_some(&stderr) => {
                tracing::debug!(url = %url, %stderr, "the server lacks some ids; fetching one by one");
                self.fetch_each(repo, &url, asked).await?
            }
            Err(error) => return Err(error),
        };
        let present = self.existing(repo, oids).await?;
        let missing = oids
            .iter()
            .filter(|oid| !present.contains(*oid))
            .cloned()
            .collect();
        Ok(FetchReport {
            present,
            missing,
            error,
        })
    }

    /// Which of `oids` are present in the repository at `repo` with their whole
    /// history: the object exists (`git cat-file --batch-check`) and everything it
    /// reaches is there too (`git rev-list --objects`, stopping at existing refs).
    ///
    /// An object a failed or cut-off fetch left behind without its ancestors is not
    /// present: releasing an event over it would point refs at broken history.
    pub async fn existing(
        &self,
        repo: &Path,
        oids: &[GitOid],
    ) -> Result<BTreeSet<GitOid>, GitError> {
        connectivity::existing(&self.runner, repo, oids).await
    }

    /// Sets refs in the repository at `repo` (`git update-ref --stdin`): `Some(oid)`
    /// points the ref at the object, `None` deletes it.
    pub async fn update_refs(
        &self,
        repo: &Path,
        updates: &[(String, Option<GitOid>)],
    ) -> Result<(), GitError> {
        update_refs(&self.runner, repo, updates).await
    }

    async fn fetch_all(
        &self,
        repo: &Path,
        url: &CloneUrl,
        oids: &[GitOid],
    ) -> Result<(), GitError> {
        let mut command = self.fetch_command(repo);
        command.arg("--").arg(url.as_str());
        command.args(oids.iter().map(purgatory_refspec));
        self.fetches.fetch_add(1, Ordering::Relaxed);
        self.runner.run(command, "fetch", None).await.map(drop)
    }

    /// Fetches each id on its own (at most [`MAX_SINGLE_FETCHES`]); returns the last
    /// error, if any. Stops at a timeout or a failure that is not a missing id.
    async fn fetch_each(
        &self,
        repo: &Path,
        url: &CloneUrl,
        oids: &[GitOid],
    ) -> Result<Option<String>, GitError> {
        let mut last_error = None;
        for oid in oids.iter().take(MAX_SINGLE_FETCHES) {
            match self.fetch_all(repo, url, std::slice::from_ref(oid)).await {
                Ok(()) => {}
                Err(GitError::Failed { stderr, .. }) if lacks_some(&stderr) => {
                    last_error = Some(stderr);
                }
                Err(GitError::Failed { stderr, .. }) => return Ok(Some(stderr)),
                Err(error) => return Err(error),
            }
        }
        Ok(last_error)
    }

    fn fetch_command(&self, repo: &Path) -> Command {
        let mut command = self.runner.command(repo);
        for (key, value) in self.protocol_settings() {
            command.arg("-c").arg(format!("{key}={value}"));
        }
        command.args([
            "fetch",
            "--quiet",
            "--no-tags",
            "--no-write-fetch-head",
            "--no-recurse-submodules",
            "--no-auto-gc",
        ]);
        command
    }

    /// `-c` settings of every fetch: protocols, redirects, stalls, no credentials.
    pub(super) fn protocol_settings(&self) -> Vec<(&'static str, String)> {
        let stall_secs = self.config.fetch_timeout.as_secs().max(1).to_string();
        let mut settings = vec![
            ("protocol.version", "2".to_owned()),
            ("protocol.allow", "never".to_owned()),
            ("protocol.https.allow", "always".to_owned()),
            ("http.followRedirects", "false".to_owned()),
            ("http.lowSpeedLimit", "1".to_owned()),
            ("http.lowSpeedTime", stall_secs),
            ("credential.helper", String::new()),
            ("core.askPass", String::new()),
        ];
        if self.config.policy.allows_http() {
            settings.push(("protocol.http.allow", "always".to_owned()));
        }
        if self.config.policy.allows_git_protocol() {
            settings.push(("protocol.git.allow", "always".to_owned()));
        }
        settings
    }
}

/// Whether git's error says the server lacks some of the ids (rather than failing as a
/// whole: unreachable, refused, not a repository).
fn lacks_some(stderr: &str) -> bool {
    let stderr = stderr.to_ascii_lowercase();
    MISSING_ON_SERVER
        .iter()
        .any(|pattern| stderr.contains(pattern))
}
