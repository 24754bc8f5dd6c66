//! [`GitFetcher`]: fetching exact objects from a checked, pinned clone URL with one
//! request per call, the pack checked (`fsck`) and limited in size, the whole command
//! limited in time.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use grasp_sync_core::nip34::GitOid;
use grasp_sync_core::purgatory::RefChange;
use grasp_sync_core::url_policy::CloneUrlPolicy;
use tokio::process::Command;

use super::connectivity;
use super::error::GitError;
use super::permits::FairPermits;
use super::policy::{check_url, PinnedUrl};
use super::process::{GitRunner, ProcessLimits};
use super::refs::{purgatory_refs, purgatory_refspec, update_refs, LocalRefs};
use super::resolve::{Resolver, SystemResolver};

/// Object ids asked for in one fetch; the rest wait for the next attempt.
pub const MAX_OIDS_PER_FETCH: usize = 256;

/// The default [`GitFetcherConfig::max_pack_bytes`]: 512 MiB.
pub const DEFAULT_MAX_PACK_BYTES: u64 = 512 * 1024 * 1024;

/// The default [`GitFetcherConfig::max_memory_bytes`]: 2 GiB.
pub const DEFAULT_MAX_MEMORY_BYTES: u64 = 2 * 1024 * 1024 * 1024;

/// The files a fetch writes into `objects/pack/` before they are complete
/// (`tmp_pack_*`, `tmp_idx_*`, `tmp_rev_*`…): what a cut-off fetch leaves behind.
const TEMPORARY_PREFIX: &str = "tmp_";

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
    /// however many domains the announcements name. Shared round-robin per owner (the
    /// directory a repository sits in: its owner's npub under the GRASP layout), never
    /// first come.
    pub max_concurrent_fetches: usize,
    /// The largest pack one fetch may write, in bytes ([`DEFAULT_MAX_PACK_BYTES`]);
    /// `None`: no limit. Enforced by the kernel: git runs under
    /// `prlimit --fsize=<limit>` (util-linux), so no file it writes grows past it, and
    /// a cut-off pack is removed ([`GitError::PackTooLarge`]).
    pub max_pack_bytes: Option<u64>,
    /// The `prlimit` program (`prlimit`, found on `PATH`), used when
    /// [`GitFetcherConfig::max_pack_bytes`] or [`GitFetcherConfig::max_memory_bytes`] is
    /// set.
    pub prlimit_program: PathBuf,
    /// The data memory (heap and private writable mappings, `prlimit --data`) of each
    /// `git fetch` and the helpers it starts, in bytes ([`DEFAULT_MAX_MEMORY_BYTES`]);
    /// `None`: no limit. A ref flood or a delta bomb makes an allocation fail and git
    /// die, instead of the machine run out of memory. Packs git maps to read them
    /// (read-only file mappings) do not count.
    pub max_memory_bytes: Option<u64>,
    /// Whether a git older than 2.37, which ignores `http.curloptResolve` and so
    /// resolves clone URL hosts itself (DNS rebinding then reaches whatever the name
    /// points at a moment later), may be used, with a warning at start. `false` (the
    /// default): purgatory refuses to start with it.
    pub allow_old_git: bool,
    /// Whether git keeps our proxy variables (`http_proxy`, `https_proxy`, `ALL_PROXY`,
    /// `no_proxy`, …). A proxy connects to the host *name*, bypassing the address
    /// purgatory checked and pinned, so they are cleared by default (`false`); keep them
    /// only when the proxy guards what it connects to.
    pub keep_proxy_env: bool,
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
            max_memory_bytes: Some(DEFAULT_MAX_MEMORY_BYTES),
            allow_old_git: false,
            keep_proxy_env: false,
        }
    }
}

/// Whose turn a fetch into the repository at `repo` takes: the directory it sits in
/// (`<git root>/<owner npub>/<identifier>.git`), or the repository itself when it has
/// none.
fn owner_of(repo: &Path) -> String {
    repo.parent().unwrap_or(repo).to_string_lossy().into_owned()
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
///
/// Fetches into one repository run one at a time (a lock per repository): a failed or
/// cut-off fetch removes the temporary files it left in `objects/pack/`, which must not
/// be another fetch's work in progress.
#[derive(Clone, Debug)]
pub struct GitFetcher {
    config: Arc<GitFetcherConfig>,
    runner: GitRunner,
    fetches: Arc<AtomicU64>,
    permits: FairPermits,
    repo_locks: Arc<RepoLocks>,
}

impl GitFetcher {
    /// A fetcher with this configuration.
    pub fn new(config: GitFetcherConfig) -> Self {
        GitFetcher {
            permits: FairPermits::new(config.max_concurrent_fetches),
            runner: GitRunner::new(
                config.git_program.clone(),
                config.fetch_timeout,
                config.keep_proxy_env,
            ),
            config: Arc::new(config),
            fetches: Arc::new(AtomicU64::new(0)),
            repo_locks: Arc::new(RepoLocks::default()),
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

    /// How many of those processes were `git fetch` from a clone URL (the others query
    /// or update the local repository, or copy objects between local repositories).
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
    /// Never asks for an object the repository already has (with its whole history,
    /// [`GitFetcher::existing`]): they are looked up first, under the repository's lock,
    /// so a fetch that waited for another one into the same repository asks only for
    /// what that one did not bring, and none runs when everything is present.
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
        let _permit = self.permits.acquire(&owner_of(repo)).await;
        let _only_fetch = self.repo_locks.lock(repo).await;
        let already = self.existing(repo, oids).await?;
        let absent: Vec<GitOid> = oids
            .iter()
            .filter(|oid| !already.contains(*oid))
            .cloned()
            .collect();
        if absent.is_empty() {
            tracing::debug!(url = %url.url(), oids = oids.len(), "every object asked for is present: nothing fetched");
            return Ok(FetchReport {
                present: already,
                ..FetchReport::default()
            });
        }
        let asked = &absent[..absent.len().min(MAX_OIDS_PER_FETCH)];
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

    /// [`GitFetcher::existing`] in a repository whose refs `refs` were just read (one
    /// `for-each-ref` less).
    pub async fn existing_given_refs(
        &self,
        repo: &Path,
        oids: &[GitOid],
        refs: &LocalRefs,
    ) -> Result<BTreeSet<GitOid>, GitError> {
        let at_refs: HashSet<GitOid> = refs.refs.values().cloned().collect();
        connectivity::existing_given_refs(&self.runner, repo, oids, Some(&at_refs)).await
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

    /// Deletes the objects no ref of `repo` reaches, with no fetch into it running
    /// meanwhile (see [`GitBackend::prune_unreachable`](super::GitBackend::prune_unreachable)).
    pub async fn prune_unreachable(&self, repo: &Path) -> Result<(), GitError> {
        let _only_one = self.repo_locks.lock(repo).await;
        super::init::prune_unreachable(&self.runner, repo).await
    }

    /// One `git fetch` of `oids` from the pinned `url` (the caller holds `repo`'s lock:
    /// it is the only fetch into `repo` while it runs); when it fails (cut off by the
    /// timeout or the pack limit, refused by `fsck`, anything), the temporary files it
    /// left in `objects/pack/` are removed.
    async fn fetch_once(
        &self,
        repo: &Path,
        url: &PinnedUrl,
        oids: &[GitOid],
    ) -> Result<(), GitError> {
        let mut command = self.fetch_command(repo, self.protocol_settings());
        if let Some(resolve) = url.curl_resolve() {
            command
                .arg("-c")
                .arg(format!("http.curloptResolve={resolve}"));
        }
        command.args(FETCH_ARGS);
        command.arg("--").arg(url.git_url());
        command.args(oids.iter().map(purgatory_refspec));
        self.fetches.fetch_add(1, Ordering::Relaxed);
        self.run_cleaning_up(repo, command, url.url().as_str())
            .await
    }

    /// Copies `oids` (at most [`MAX_OIDS_PER_FETCH`]) from the local bare repository at
    /// `from` into the one at `to` with one `git fetch` from the path `from` (protocol
    /// v2 over the `file` transport, which is allowed for this command only; every
    /// object checked by `fsck`, kept in one pack within the pack limit, under
    /// `refs/purgatory/<oid>`), and reports which of `oids` are present in `to`
    /// afterwards. Only the objects `from` holds with their whole history are asked for
    /// (none: nothing runs); those `to` already has are not asked for either.
    ///
    /// `from` is a path of ours (another repository's local copy under the git root),
    /// never a URL from an event; it is made absolute (the command runs in `to`) and
    /// given after `--`. Takes `to`'s lock, as a fetch does, and a fetch permit. Not
    /// counted in [`GitFetcher::fetch_processes_spawned`] (no server is asked).
    pub async fn copy_objects(
        &self,
        from: &Path,
        to: &Path,
        oids: &[GitOid],
    ) -> Result<BTreeSet<GitOid>, GitError> {
        if oids.is_empty() {
            return Err(GitError::NothingToFetch);
        }
        let from = std::path::absolute(from).map_err(|source| GitError::Io {
            operation: "copy",
            source,
        })?;
        let held = self.existing(&from, oids).await?;
        let _permit = self.permits.acquire(&owner_of(to)).await;
        let _only_fetch = self.repo_locks.lock(to).await;
        let already = self.existing(to, oids).await?;
        let absent: Vec<GitOid> = oids
            .iter()
            .filter(|oid| held.contains(*oid) && !already.contains(*oid))
            .take(MAX_OIDS_PER_FETCH)
            .cloned()
            .collect();
        if absent.is_empty() {
            return Ok(already);
        }
        let mut command = self.fetch_command(to, copy_settings());
        command.args(FETCH_ARGS);
        command.arg("--").arg(&from);
        command.args(absent.iter().map(purgatory_refspec));
        let source = from.to_string_lossy();
        self.run_cleaning_up(to, command, &source).await?;
        self.existing(to, oids).await
    }

    /// Runs the `git fetch` `command` into `repo` from `source` (named in the logs);
    /// when it fails, removes the temporary files it left in `objects/pack/` and names
    /// a pack cut off at the limit [`GitError::PackTooLarge`].
    async fn run_cleaning_up(
        &self,
        repo: &Path,
        command: Command,
        source: &str,
    ) -> Result<(), GitError> {
        let before = temporary_files(repo);
        let result = self.runner.run(command, "fetch", None).await;
        let Err(error) = result else {
            return Ok(());
        };
        let left = remove_new_temporary_files(repo, &before);
        if left.removed > 0 {
            tracing::debug!(source, removed = left.removed, %error, "removed what a failed fetch left behind");
        }
        match self.config.max_pack_bytes {
            Some(limit) if left.largest >= limit => {
                tracing::warn!(source, limit, %error, "the server sent a pack over the limit");
                Err(GitError::PackTooLarge { limit })
            }
            _ => Err(error),
        }
    }

    /// `git [-c ...]` for a fetch with these `settings`, under `prlimit` when the pack
    /// size or memory is limited (the caller adds `fetch` and its arguments).
    fn fetch_command(&self, repo: &Path, settings: Vec<(&'static str, String)>) -> Command {
        let config = &self.config;
        let limits = ProcessLimits {
            max_file_bytes: config.max_pack_bytes,
            max_data_bytes: config.max_memory_bytes,
        };
        let mut command = self
            .runner
            .limited_command(repo, &config.prlimit_program, limits);
        for (key, value) in settings {
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

/// `-c` settings of a copy between local repositories ([`GitFetcher::copy_objects`]):
/// protocol v2 (any object by id) over the `file` transport only, every object checked
/// (`fsck`) and kept in one pack.
pub(super) fn copy_settings() -> Vec<(&'static str, String)> {
    [
        ("protocol.version", "2"),
        ("protocol.allow", "never"),
        ("protocol.file.allow", "always"),
        ("fetch.fsckObjects", "true"),
        ("transfer.fsckObjects", "true"),
        ("fetch.unpackLimit", "1"),
        ("transfer.unpackLimit", "1"),
    ]
    .into_iter()
    .map(|(key, value)| (key, value.to_owned()))
    .collect()
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

/// The temporary files ([`TEMPORARY_PREFIX`]) in `repo`'s `objects/pack/`.
fn temporary_files(repo: &Path) -> BTreeSet<std::ffi::OsString> {
    let Ok(entries) = std::fs::read_dir(repo.join("objects").join("pack")) else {
        return BTreeSet::new();
    };
    entries
        .flatten()
        .map(|entry| entry.file_name())
        .filter(|name| name.to_string_lossy().starts_with(TEMPORARY_PREFIX))
        .collect()
}

/// What [`remove_new_temporary_files`] removed.
#[derive(Clone, Copy, Debug, Default)]
struct LeftBehind {
    /// Files removed.
    removed: usize,
    /// The size of the largest, in bytes (a pack cut off at the size limit is as large
    /// as the limit).
    largest: u64,
}

/// Removes the temporary files in `repo`'s `objects/pack/` that are not in `before`:
/// those a failed fetch left behind (a killed or refused `index-pack` cannot clean up).
fn remove_new_temporary_files(repo: &Path, before: &BTreeSet<std::ffi::OsString>) -> LeftBehind {
    let pack_dir = repo.join("objects").join("pack");
    let mut left = LeftBehind::default();
    for name in temporary_files(repo).difference(before) {
        let path = pack_dir.join(name);
        let size = std::fs::metadata(&path).map_or(0, |meta| meta.len());
        match std::fs::remove_file(&path) {
            Ok(()) => {
                left.removed += 1;
                left.largest = left.largest.max(size);
            }
            Err(error) => {
                tracing::warn!(%error, path = %path.display(), "removing what a failed fetch left failed");
            }
        }
    }
    left
}

/// One lock per repository, so fetches into it run one at a time. Entries nobody holds
/// are dropped when the next lock is taken, so the map follows the fetches in flight.
#[derive(Debug, Default)]
pub(super) struct RepoLocks {
    locks: std::sync::Mutex<HashMap<PathBuf, Arc<tokio::sync::Mutex<()>>>>,
}

impl RepoLocks {
    /// Waits for `repo`'s lock.
    pub(super) async fn lock(&self, repo: &Path) -> tokio::sync::OwnedMutexGuard<()> {
        let lock = {
            let mut locks = self
                .locks
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            locks.retain(|_, lock| Arc::strong_count(lock) > 1);
            Arc::clone(locks.entry(repo.to_owned()).or_default())
        };
        lock.lock_owned().await
    }

    /// How many repositories have a lock entry (held, waited for, or not yet pruned).
    #[cfg(test)]
    pub(super) fn entries(&self) -> usize {
        self.locks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
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
