//! Fetching exact objects from a clone URL with the `git` command line, safely.
//!
//! Clone URLs and object ids come from strangers' events. Before a process is spawned:
//! the URL must pass the [`CloneUrlPolicy`] (https only by default; no `file:`, `ext::`,
//! `ssh`, credentials, option-like hosts, local or private addresses), a host name must
//! not resolve to a forbidden address, and object ids are [`GitOid`]s (hex, checked when
//! the event was read). The command itself:
//!
//! - takes the URL and refspecs after `--`, so nothing can be read as an option;
//! - allows only the protocols the policy allows (`protocol.allow=never` plus explicit
//!   `protocol.<name>.allow=always`), never follows redirects, uses protocol v2 (which
//!   fetches any object by id), and reads no system or global configuration;
//! - never prompts (`GIT_TERMINAL_PROMPT=0`, empty environment apart from `PATH` and
//!   proxy settings);
//! - runs in its own process group and is killed, group and all, when the per-fetch
//!   timeout passes; HTTP transfers also give up when they stall for that long.
//!
//! Fetched objects are written under `refs/purgatory/<oid>` so that a `git gc` cannot
//! prune them before the events that need them are released. When all requested ids
//! cannot be fetched at once (a server that lacks one refuses the whole request), each id
//! is fetched on its own, so a partial success keeps what it got.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use grasp_sync_core::nip34::GitOid;
use grasp_sync_core::url_policy::{is_forbidden_address, CloneUrl, CloneUrlPolicy, UrlPolicyError};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;
use tokio::sync::Semaphore;

/// The ref namespace fetched objects are kept under until their events are released.
pub const PURGATORY_REF_PREFIX: &str = "refs/purgatory/";

/// The ref namespace pull request tips are written under (GRASP-02).
pub const NOSTR_REF_PREFIX: &str = "refs/nostr/";

/// How long resolving a clone URL's host may take.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(10);

/// Object ids asked for in one fetch; the rest wait for the next attempt.
pub const MAX_OIDS_PER_FETCH: usize = 256;

/// When a server lacks some ids, at most this many are then fetched one by one (each a
/// git process), so a flood of unknown ids cannot multiply the requests.
pub const MAX_SINGLE_FETCHES: usize = 16;

/// Object ids checked for connectivity in one `rev-list`.
const CONNECTIVITY_CHUNK: usize = 100;

/// When a chunk is not connected, at most this many of its ids are checked alone.
const MAX_SINGLE_CHECKS: usize = 32;

/// How git says the server does not have an object that was asked for.
const MISSING_ON_SERVER: &[&str] = &[
    "not our ref",
    "couldn't find remote ref",
    "no such remote ref",
    "unadvertised object",
];

/// Environment variables passed through to git (proxies); everything else is cleared.
const PASSED_ENV: &[&str] = &[
    "PATH",
    "http_proxy",
    "https_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "no_proxy",
    "NO_PROXY",
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

/// Why a fetch (or a local git query) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GitError {
    /// The clone URL was refused by the policy; no process was spawned.
    #[error("clone url {url:?} refused: {source}")]
    Policy {
        /// The URL as given.
        url: String,
        /// Which rule refused it.
        #[source]
        source: UrlPolicyError,
    },
    /// The URL's host resolves to a forbidden address; no process was spawned.
    #[error("clone url {url} resolves to forbidden address {address}")]
    ForbiddenAddress {
        /// The URL.
        url: String,
        /// The first forbidden address found.
        address: IpAddr,
    },
    /// The URL's host could not be resolved; no process was spawned.
    #[error("cannot resolve the host of {url}: {source}")]
    Resolve {
        /// The URL.
        url: String,
        /// The resolver's error.
        #[source]
        source: std::io::Error,
    },
    /// Nothing was asked for.
    #[error("no object ids to fetch")]
    NothingToFetch,
    /// git could not be started or talked to.
    #[error("running git ({operation}) failed")]
    Io {
        /// What was being done.
        operation: &'static str,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// git ran longer than the timeout and was killed.
    #[error("git {operation} timed out after {after:?}")]
    Timeout {
        /// What was being done.
        operation: &'static str,
        /// The timeout.
        after: Duration,
    },
    /// git exited with an error.
    #[error("git {operation} failed ({status}): {stderr}")]
    Failed {
        /// What was being done.
        operation: &'static str,
        /// The exit status.
        status: String,
        /// The last lines git wrote to stderr.
        stderr: String,
    },
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

/// The git operations purgatory needs. [`GitFetcher`] runs the git command line; tests
/// may put an in-memory implementation in its place.
#[async_trait]
pub trait GitBackend: Send + Sync {
    /// Fetches `oids` from `url` into the bare repository at `repo` and reports which
    /// are present afterwards. Must refuse URLs its policy refuses without side effects.
    async fn fetch(&self, repo: &Path, url: &str, oids: &[GitOid])
        -> Result<FetchReport, GitError>;

    /// Which of `oids` exist in the repository at `repo`.
    async fn existing(&self, repo: &Path, oids: &[GitOid]) -> Result<BTreeSet<GitOid>, GitError>;

    /// Points refs at objects (`Some`) or deletes them (`None`).
    async fn update_refs(
        &self,
        repo: &Path,
        updates: &[(String, Option<GitOid>)],
    ) -> Result<(), GitError>;
}

#[async_trait]
impl GitBackend for GitFetcher {
    async fn fetch(
        &self,
        repo: &Path,
        url: &str,
        oids: &[GitOid],
    ) -> Result<FetchReport, GitError> {
        GitFetcher::fetch(self, repo, url, oids).await
    }

    async fn existing(&self, repo: &Path, oids: &[GitOid]) -> Result<BTreeSet<GitOid>, GitError> {
        GitFetcher::existing(self, repo, oids).await
    }

    async fn update_refs(
        &self,
        repo: &Path,
        updates: &[(String, Option<GitOid>)],
    ) -> Result<(), GitError> {
        GitFetcher::update_refs(self, repo, updates).await
    }
}

/// Runs git to fetch exact objects from clone URLs into local bare repositories.
///
/// Cloning the fetcher shares its count of spawned processes.
#[derive(Clone, Debug)]
pub struct GitFetcher {
    config: Arc<GitFetcherConfig>,
    spawned: Arc<AtomicU64>,
    fetches: Arc<AtomicU64>,
    permits: Arc<Semaphore>,
}

impl GitFetcher {
    /// A fetcher with this configuration.
    pub fn new(config: GitFetcherConfig) -> Self {
        GitFetcher {
            permits: Arc::new(Semaphore::new(config.max_concurrent_fetches.max(1))),
            config: Arc::new(config),
            spawned: Arc::new(AtomicU64::new(0)),
            fetches: Arc::new(AtomicU64::new(0)),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &GitFetcherConfig {
        &self.config
    }

    /// How many git processes this fetcher (and its clones) started.
    pub fn processes_spawned(&self) -> u64 {
        self.spawned.load(Ordering::Relaxed)
    }

    /// How many of those processes were `git fetch` (the others query or update the
    /// local repository).
    pub fn fetch_processes_spawned(&self) -> u64 {
        self.fetches.load(Ordering::Relaxed)
    }

    /// Checks `url` against the policy and, for host names, the addresses they resolve
    /// to. Spawns nothing.
    pub async fn check_url(&self, url: &str) -> Result<CloneUrl, GitError> {
        let checked = self
            .config
            .policy
            .check(url)
            .map_err(|source| GitError::Policy {
                url: url.to_owned(),
                source,
            })?;
        if self.config.check_resolved_addresses && !self.config.policy.allows_local_addresses() {
            check_resolved(&checked).await?;
        }
        Ok(checked)
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
        let exist = self.objects_exist(repo, oids).await?;
        let mut connected = BTreeSet::new();
        let exist: Vec<GitOid> = exist.into_iter().collect();
        for chunk in exist.chunks(CONNECTIVITY_CHUNK) {
            if self.is_connected(repo, chunk).await? {
                connected.extend(chunk.iter().cloned());
                continue;
            }
            for oid in chunk.iter().take(MAX_SINGLE_CHECKS) {
                if self.is_connected(repo, std::slice::from_ref(oid)).await? {
                    connected.insert(oid.clone());
                }
            }
        }
        Ok(connected)
    }

    /// Which of `oids` exist as objects, connected or not.
    async fn objects_exist(
        &self,
        repo: &Path,
        oids: &[GitOid],
    ) -> Result<BTreeSet<GitOid>, GitError> {
        if oids.is_empty() {
            return Ok(BTreeSet::new());
        }
        let input: String = oids.iter().map(|oid| format!("{oid}\n")).collect();
        let mut command = self.command(repo);
        command.args(["cat-file", "--batch-check"]);
        let output = self.run(command, "cat-file", Some(input)).await?;
        Ok(present_in_batch_check(&output.stdout, oids))
    }

    /// Whether everything reachable from `oids` is in the repository.
    async fn is_connected(&self, repo: &Path, oids: &[GitOid]) -> Result<bool, GitError> {
        let mut command = self.command(repo);
        command.args(["rev-list", "--objects", "--quiet"]);
        command.args(oids.iter().map(GitOid::as_str));
        command.args(["--not", "--all"]);
        match self.run(command, "rev-list", None).await {
            Ok(_) => Ok(true),
            Err(GitError::Failed { .. }) => Ok(false),
            Err(error) => Err(error),
        }
    }

    /// Sets refs in the repository at `repo` (`git update-ref --stdin`): `Some(oid)`
    /// points the ref at the object, `None` deletes it.
    pub async fn update_refs(
        &self,
        repo: &Path,
        updates: &[(String, Option<GitOid>)],
    ) -> Result<(), GitError> {
        if updates.is_empty() {
            return Ok(());
        }
        let input: String = updates
            .iter()
            .map(|(name, oid)| match oid {
                Some(oid) => format!("update {name} {oid}\n"),
                None => format!("delete {name}\n"),
            })
            .collect();
        let mut command = self.command(repo);
        command.args(["update-ref", "--stdin"]);
        self.run(command, "update-ref", Some(input)).await.map(drop)
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
        self.run(command, "fetch", None).await.map(drop)
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
        let mut command = self.command(repo);
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
    fn protocol_settings(&self) -> Vec<(&'static str, String)> {
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

    /// A git command in `repo` with a cleared environment and no configuration beyond
    /// the repository's own.
    fn command(&self, repo: &Path) -> Command {
        let mut command = Command::new(&self.config.git_program);
        command.env_clear();
        for name in PASSED_ENV {
            if let Some(value) = std::env::var_os(name) {
                command.env(name, value);
            }
        }
        command
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("HOME", "/nonexistent")
            .env("LC_ALL", "C")
            .arg("-c")
            .arg(safe_directory(repo))
            .arg("-C")
            .arg(repo)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .process_group(0);
        command
    }

    /// Runs `command` under the timeout, feeding it `input`; kills its process group when
    /// the timeout passes.
    async fn run(
        &self,
        mut command: Command,
        operation: &'static str,
        input: Option<String>,
    ) -> Result<Output, GitError> {
        if input.is_some() {
            command.stdin(Stdio::piped());
        }
        let mut child = command
            .spawn()
            .map_err(|source| GitError::Io { operation, source })?;
        self.spawned.fetch_add(1, Ordering::Relaxed);
        let mut group = GroupKill(child.id());
        if let (Some(input), Some(mut stdin)) = (input, child.stdin.take()) {
            tokio::spawn(async move {
                if let Err(error) = stdin.write_all(input.as_bytes()).await {
                    tracing::debug!(%error, "writing to git's stdin failed");
                }
            });
        }
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let after = self.config.fetch_timeout;
        let finished = tokio::time::timeout(after, async {
            let (status, stdout, stderr) = tokio::join!(
                child.wait(),
                read_capped(stdout, MAX_STDOUT),
                read_capped(stderr, MAX_STDERR)
            );
            status.map(|status| Output {
                status,
                stdout,
                stderr,
            })
        })
        .await;
        match finished {
            Ok(Ok(output)) => {
                group.disarm();
                check_status(operation, output)
            }
            Ok(Err(source)) => Err(GitError::Io { operation, source }),
            // Dropping `group` kills git and its helpers (remote-http).
            Err(_) => Err(GitError::Timeout { operation, after }),
        }
    }
}

/// Most of git's standard output kept (queries only print a line per id).
const MAX_STDOUT: usize = 16 * 1024 * 1024;

/// Most of git's standard error kept: a server can stream "remote:" lines for as long
/// as the fetch lasts.
const MAX_STDERR: usize = 64 * 1024;

/// Reads a pipe to its end, keeping at most `cap` bytes.
async fn read_capped(pipe: Option<impl AsyncRead + Unpin>, cap: usize) -> Vec<u8> {
    let Some(mut pipe) = pipe else {
        return Vec::new();
    };
    let mut kept = Vec::new();
    let mut buffer = [0u8; 8192];
    loop {
        match pipe.read(&mut buffer).await {
            Ok(0) | Err(_) => return kept,
            Ok(read) => {
                let room = cap.saturating_sub(kept.len());
                kept.extend_from_slice(&buffer[..read.min(room)]);
            }
        }
    }
}

/// Kills a git process group when dropped, unless disarmed: a git command that timed
/// out, or whose task was aborted, never leaves helpers behind.
struct GroupKill(Option<u32>);

impl GroupKill {
    fn disarm(&mut self) {
        self.0 = None;
    }
}

impl Drop for GroupKill {
    fn drop(&mut self) {
        let Some(group) = self.0 else {
            return;
        };
        let result = std::process::Command::new("kill")
            .args(["-KILL", "--", &format!("-{group}")])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if let Err(error) = result {
            tracing::warn!(%error, group, "killing a git process group failed");
        }
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

/// Trusts the target repository even when another user owns it (the git server's
/// user, typically); git honours `safe.directory` given on the command line.
fn safe_directory(repo: &Path) -> std::ffi::OsString {
    let mut setting = std::ffi::OsString::from("safe.directory=");
    setting.push(repo.as_os_str());
    setting
}

fn purgatory_refspec(oid: &GitOid) -> String {
    format!("{oid}:{PURGATORY_REF_PREFIX}{oid}")
}

fn check_status(operation: &'static str, output: Output) -> Result<Output, GitError> {
    if output.status.success() {
        return Ok(output);
    }
    Err(GitError::Failed {
        operation,
        status: output.status.to_string(),
        stderr: last_lines(&output.stderr),
    })
}

/// The last few lines of git's stderr, lossily decoded, for error messages.
fn last_lines(stderr: &[u8]) -> String {
    const KEPT_LINES: usize = 4;
    let text = String::from_utf8_lossy(stderr);
    let lines: Vec<&str> = text
        .lines()
        .filter(|line| !line.trim().is_empty())
        .collect();
    lines[lines.len().saturating_sub(KEPT_LINES)..].join(" | ")
}

/// The ids `git cat-file --batch-check` reported as existing (`<oid> <type> <size>`).
fn present_in_batch_check(stdout: &[u8], asked: &[GitOid]) -> BTreeSet<GitOid> {
    let text = String::from_utf8_lossy(stdout);
    text.lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let oid = GitOid::parse(words.next()?).ok()?;
            let kind = words.next()?;
            (kind != "missing" && asked.contains(&oid)).then_some(oid)
        })
        .collect()
}

/// Refuses host names that resolve to a forbidden address. IP literals were checked by
/// the policy already.
async fn check_resolved(url: &CloneUrl) -> Result<(), GitError> {
    let host = url.domain();
    if host.parse::<IpAddr>().is_ok() {
        return Ok(());
    }
    let lookup = tokio::time::timeout(RESOLVE_TIMEOUT, tokio::net::lookup_host((host, 443)));
    let resolve_error = |source| GitError::Resolve {
        url: url.as_str().to_owned(),
        source,
    };
    let addresses = lookup
        .await
        .map_err(|_| resolve_error(std::io::Error::from(std::io::ErrorKind::TimedOut)))?
        .map_err(resolve_error)?;
    for address in addresses {
        if is_forbidden_address(address.ip()) {
            return Err(GitError::ForbiddenAddress {
                url: url.as_str().to_owned(),
                address: address.ip(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn oid(byte: char) -> GitOid {
        GitOid::parse(&byte.to_string().repeat(40)).unwrap()
    }

    #[test]
    fn batch_check_output_gives_the_existing_ids_only() {
        let asked = [oid('a'), oid('b'), oid('c')];
        let stdout = format!(
            "{} commit 210\n{} missing\n{} tag 150\n{} commit 1\n",
            oid('a'),
            oid('b'),
            oid('c'),
            oid('d')
        );
        let present = present_in_batch_check(stdout.as_bytes(), &asked);
        assert_eq!(present, BTreeSet::from([oid('a'), oid('c')]));
    }

    #[test]
    fn refspecs_keep_objects_under_the_purgatory_namespace() {
        assert_eq!(
            purgatory_refspec(&oid('e')),
            format!("{0}:refs/purgatory/{0}", oid('e'))
        );
    }

    #[test]
    fn error_text_keeps_the_last_lines() {
        let stderr = b"one\ntwo\n\nthree\nfour\nfive\n";
        assert_eq!(last_lines(stderr), "two | three | four | five");
    }

    #[test]
    fn fetch_settings_allow_only_the_protocols_the_policy_allows() {
        let strict = GitFetcher::new(GitFetcherConfig::default());
        let keys: Vec<&str> = strict.protocol_settings().iter().map(|(k, _)| *k).collect();
        assert!(keys.contains(&"protocol.https.allow"));
        assert!(!keys.contains(&"protocol.http.allow"));
        assert!(!keys.contains(&"protocol.git.allow"));
        let loose = GitFetcher::new(GitFetcherConfig {
            policy: CloneUrlPolicy::new()
                .allow_http(true)
                .allow_git_protocol(true),
            ..GitFetcherConfig::default()
        });
        let keys: Vec<&str> = loose.protocol_settings().iter().map(|(k, _)| *k).collect();
        assert!(keys.contains(&"protocol.http.allow"));
        assert!(keys.contains(&"protocol.git.allow"));
    }

    #[tokio::test]
    async fn refused_urls_spawn_nothing() {
        let fetcher = GitFetcher::new(GitFetcherConfig::default());
        let hostile = [
            "file:///etc",
            "ext::sh -c touch% /tmp/pwned",
            "-u/bin/sh",
            "--upload-pack=touch /tmp/pwned",
            "https://user:pass@example.com/r.git",
            "https://127.0.0.1/r.git",
            "https://10.0.0.1/r.git",
            "git://example.com/r.git",
            "http://example.com/r.git",
            "ssh://example.com/r.git",
            "git@example.com:r.git",
        ];
        for url in hostile {
            let result = fetcher
                .fetch(Path::new("/nonexistent"), url, &[oid('a')])
                .await;
            assert!(
                matches!(result, Err(GitError::Policy { .. })),
                "{url}: {result:?}"
            );
        }
        assert_eq!(fetcher.processes_spawned(), 0);
    }
}
