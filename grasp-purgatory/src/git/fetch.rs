//! [`GitFetcher`]: fetching exact objects from a checked, pinned clone URL with one
//! request per call, the pack checked (`fsck`) and limited in size, the whole command
//! limited in time.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use grasp_sync_core::nip34::GitOid;
use grasp_sync_core::purgatory::RefChange;
use grasp_sync_core::url_policy::CloneUrlPolicy;
use tokio::process::Command;
use tokio::sync::Semaphore;

use super::connectivity;
use super::error::GitError;
use super::policy::{check_url, PinnedUrl};
use super::process::GitRunner;
use super::refs::{purgatory_refs, purgatory_refspec, update_refs, LocalRefs};
use super::resolve::{Resolver, SystemResolver};

/// Object ids asked for in one fetch; the rest wait for the next attempt.
pub const MAX_OIDS_PER_FETCH: usize = 256;

/// The default [`GitFetcherConfig::max_pack_bytes`]: 512 MiB.
pub const DEFAULT_MAX_PACK_BYTES: u64 = 512 * 1024 * 1024;

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
    /// How long one git command may run before it is killed, with its process group
    /// (60 s): the time limit of a whole fetch. HTTP transfers also give up when they
    /// stall for that long.
    pub fetch_timeout: Duration,
    /// Which clone URLs may be fetched from (https to public hosts by default). Unless
    /// it allows local addresses, every address a host name resolves to is checked too.
    pub policy: CloneUrlPolicy,
    /// Resolves clone URL hosts, once per fetch; git connects to the checked address
    /// ([`SystemResolver`] by default; replace it to pin names, or in tests).
    pub resolver: Arc<dyn Resolver>,
    /// Git fetches running at once across all domains (16): a bound on processes
    /// however many domains the announcements name.
    pub max_concurrent_fetches: usize,
    /// The largest pack one fetch may write, in bytes ([`DEFAULT_MAX_PACK_BYTES`]);
    /// `None`: no limit. Enforced by the kernel: git runs under
    /// `prlimit --fsize=<limit>` (util-linux), so no file it writes grows past it, and
    /// a cut-off pack is removed ([`GitError::PackTooLarge`]).
    pub max_pack_bytes: Option<u64>,
    /// The `prlimit` program (`prlimit`, found on `PATH`), used when
    /// [`GitFetcherConfig::max_pack_bytes`] is set.
    pub prlimit_program: PathBuf,
}

impl Default for GitFetcherConfig {
    fn default() -> Self {
        GitFetcherConfig {
            git_program: PathBuf::from("git"),
            fetch_timeout: Duration::from_secs(60),
            policy: CloneUrlPolicy::new(),
            resolver: Arc::new(SystemResolver),
            max_concurrent_fetches: 16,
            max_pack_bytes: Some(DEFAULT_MAX_PACK_BYTES),
            prlimit_program: PathBuf::from("prlimit"),
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
    /// git's message when the server lacks some of the ids asked for: it refused the
    /// whole request, so nothing was fetched (ask for fewer ids, each as its own
    /// request, to get those it has).
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

    /// Checks `url` against the policy, resolves its host once (through the configured
    /// [`Resolver`]), checks every address and pins the URL to the checked one. Spawns
    /// nothing.
    pub async fn check_url(&self, url: &str) -> Result<PinnedUrl, GitError> {
        let config = &self.config;
        check_url(&config.policy, config.resolver.as_ref(), url).await
    }

    /// Fetches `oids` (at most [`MAX_OIDS_PER_FETCH`]) from `url` into the bare
    /// repository at `repo` with one git request, keeping them under
    /// `refs/purgatory/<oid>`, and reports which are present afterwards.
    ///
    /// Returns an error without spawning anything when the URL is refused; the timeout
    /// error when git runs too long; [`GitError::PackTooLarge`] when the server sends
    /// more than the pack limit. A server that lacks some of the ids refuses the whole
    /// request: that is a report with `error` set (nothing fetched; ask for fewer).
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
        let error = match self.fetch_once(repo, &url, asked).await {
            Ok(()) => None,
            Err(GitError::Failed { stderr, .. }) if lacks_some(&stderr) => {
                tracing::debug!(url = %url.url(), %stderr, "the server lacks some of the ids");
                Some(stderr)
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

    /// The names of the refs under `refs/purgatory/` in the repository at `repo`.
    pub async fn purgatory_refs(&self, repo: &Path) -> Result<Vec<String>, GitError> {
        purgatory_refs(&self.runner, repo).await
    }

    /// Every ref of the repository at `repo` and `HEAD`'s target.
    pub async fn local_refs(&self, repo: &Path) -> Result<LocalRefs, GitError> {
        super::refs::local_refs(&self.runner, repo).await
    }

    /// Applies `changes` in one `update-ref` transaction checking each old value, then
    /// points `HEAD` at `head` when given.
    pub async fn apply_ref_changes(
        &self,
        repo: &Path,
        changes: &[RefChange],
        head: Option<&str>,
    ) -> Result<(), GitError> {
        super::refs::apply_ref_changes(&self.runner, repo, changes, head).await
    }

    /// Makes the existing, empty directory `repo` a bare repository with
    /// `refs/purgatory` hidden from serving (see [`super::HIDE_REFS_KEYS`]).
    pub async fn init_bare(&self, repo: &Path) -> Result<(), GitError> {
        super::init::init_bare(&self.runner, repo).await
    }

    /// One `git fetch` of `oids` from the pinned `url`.
    async fn fetch_once(
        &self,
        repo: &Path,
        url: &PinnedUrl,
        oids: &[GitOid],
    ) -> Result<(), GitError> {
        let mut command = self.fetch_command(repo);
        if let Some(resolve) = url.curl_resolve() {
            command
                .arg("-c")
                .arg(format!("http.curloptResolve={resolve}"));
        }
        command.args(FETCH_ARGS);
        command.arg("--").arg(url.git_url());
        command.args(oids.iter().map(purgatory_refspec));
        self.fetches.fetch_add(1, Ordering::Relaxed);
        let result = self.runner.run(command, "fetch", None).await.map(drop);
        match (result, self.config.max_pack_bytes) {
            (Err(error), Some(limit)) if remove_cut_packs(repo, limit) => {
                tracing::warn!(url = %url.url(), limit, %error, "the server sent a pack over the limit");
                Err(GitError::PackTooLarge { limit })
            }
            (result, _) => result,
        }
    }

    /// `git [-c ...]` for a fetch, under `prlimit` when the pack size is limited (the
    /// caller adds `fetch` and its arguments).
    fn fetch_command(&self, repo: &Path) -> Command {
        let config = &self.config;
        let mut command = match config.max_pack_bytes {
            Some(limit) => self
                .runner
                .limited_command(repo, &config.prlimit_program, limit),
            None => self.runner.command(repo),
        };
        for (key, value) in self.protocol_settings() {
            command.arg("-c").arg(format!("{key}={value}"));
        }
        command
    }

    /// `-c` settings of every fetch: protocols, redirects, stalls, no credentials, every
    /// object checked (`fsck`) and kept in one pack (so the size limit applies to it).
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
            ("fetch.fsckObjects", "true".to_owned()),
            ("transfer.fsckObjects", "true".to_owned()),
            ("fetch.unpackLimit", "1".to_owned()),
            ("transfer.unpackLimit", "1".to_owned()),
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

/// The arguments of `git fetch` (before `--`, the URL and the refspecs).
const FETCH_ARGS: [&str; 6] = [
    "fetch",
    "--quiet",
    "--no-tags",
    "--no-write-fetch-head",
    "--no-recurse-submodules",
    "--no-auto-gc",
];

/// Removes the temporary packs (`objects/pack/tmp_pack_*`) a fetch cut off at `limit`
/// bytes left behind (the kernel stopped the writer, which could not clean up); returns
/// whether there was one.
fn remove_cut_packs(repo: &Path, limit: u64) -> bool {
    let Ok(entries) = std::fs::read_dir(repo.join("objects").join("pack")) else {
        return false;
    };
    let mut found = false;
    for entry in entries.flatten() {
        let cut = entry.file_name().to_string_lossy().starts_with("tmp_pack_")
            && entry.metadata().is_ok_and(|meta| meta.len() >= limit);
        if cut {
            found = true;
            if let Err(error) = std::fs::remove_file(entry.path()) {
                tracing::warn!(%error, path = %entry.path().display(), "removing a cut-off pack failed");
            }
        }
    }
    found
}

/// Whether git's error says the server lacks some of the ids (rather than failing as a
/// whole: unreachable, refused, not a repository).
fn lacks_some(stderr: &str) -> bool {
    let stderr = stderr.to_ascii_lowercase();
    MISSING_ON_SERVER
        .iter()
        .any(|pattern| stderr.contains(pattern))
}
