//! Spawning git: a cleared environment, no configuration beyond the repository's own,
//! capped output, a timeout, and a kill of the whole process group when it passes.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

use super::error::GitError;

/// The environment variables git always gets from ours; everything else is cleared.
const KEPT_ENV: &[&str] = &["PATH"];

/// Proxy variables (curl's and git's): a proxy connects on git's behalf, to the host
/// *name*, so the address purgatory checked and pinned would not be the one reached.
/// Cleared unless the operator keeps them
/// ([`GitFetcherConfig::keep_proxy_env`](super::GitFetcherConfig::keep_proxy_env)).
pub(super) const PROXY_ENV: &[&str] = &[
    "http_proxy",
    "https_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "all_proxy",
    "ALL_PROXY",
    "no_proxy",
    "NO_PROXY",
    "GIT_PROXY_COMMAND",
    "GIT_SSL_NO_VERIFY",
];

/// The environment git is given, read through `lookup`: [`KEPT_ENV`], and the proxy
/// variables of [`PROXY_ENV`] only when `keep_proxy` is set.
pub(super) fn passed_environment(
    lookup: impl Fn(&str) -> Option<OsString>,
    keep_proxy: bool,
) -> Vec<(&'static str, OsString)> {
    let proxy: &[&'static str] = if keep_proxy { PROXY_ENV } else { &[] };
    KEPT_ENV
        .iter()
        .chain(proxy)
        .filter_map(|name| lookup(name).map(|value| (*name, value)))
        .collect()
}

/// Kernel limits a git process runs under (`prlimit`); `None`: not limited.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct ProcessLimits {
    /// The largest file it may write (`--fsize`), in bytes.
    pub(super) max_file_bytes: Option<u64>,
    /// Its data segment, heap and private writable mappings (`--data`), in bytes.
    pub(super) max_data_bytes: Option<u64>,
}

impl ProcessLimits {
    /// The `prlimit` options for these limits (none when nothing is limited).
    fn prlimit_args(&self) -> Vec<String> {
        let file = self.max_file_bytes.map(|bytes| format!("--fsize={bytes}"));
        let data = self.max_data_bytes.map(|bytes| format!("--data={bytes}"));
        file.into_iter().chain(data).collect()
    }
}

/// `program` as a path: a bare name (`git`) is looked up in the directories of `path`
/// once, here, rather than by every spawn. The standard library starts a child with
/// `posix_spawn` (the parent's memory is not copied) only when the program is a path
/// and the child's environment sets `PATH`, as ours does; a bare name makes it
/// `fork` the whole process for every git it runs, a cost that grows with the
/// process's memory, so with the repositories served (measured: the kernel time per
/// git process doubled from 400 to 1 000 repositories). A name found nowhere is kept
/// (the spawn then reports it missing).
pub(super) fn on_path(program: PathBuf, path: Option<&std::ffi::OsStr>) -> PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    if program.components().count() != 1 || program.is_absolute() {
        return program;
    }
    let executable = |candidate: &Path| {
        std::fs::metadata(candidate)
            .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
    };
    path.into_iter()
        .flat_map(std::env::split_paths)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(&program))
        .find(|candidate| executable(candidate))
        .unwrap_or(program)
}

/// Most of git's standard output kept (queries only print a line per id).
const MAX_STDOUT: usize = 16 * 1024 * 1024;

/// Most of git's standard error kept: a server can stream "remote:" lines for as long
/// as the fetch lasts.
const MAX_STDERR: usize = 64 * 1024;

/// Runs git commands under a timeout and counts the processes it spawned. Clones share
/// the count.
#[derive(Clone, Debug)]
pub(super) struct GitRunner {
    program: PathBuf,
    timeout: Duration,
    /// The environment git gets (see [`passed_environment`]), read once.
    env: Arc<Vec<(&'static str, OsString)>>,
    spawned: Arc<AtomicU64>,
}

impl GitRunner {
    /// Runs `program`, killing each command after `timeout`; git keeps our proxy
    /// variables only if `keep_proxy`.
    pub(super) fn new(program: PathBuf, timeout: Duration, keep_proxy: bool) -> Self {
        GitRunner {
            program: on_path(program, std::env::var_os("PATH").as_deref()),
            timeout,
            env: Arc::new(passed_environment(
                |name| std::env::var_os(name),
                keep_proxy,
            )),
            spawned: Arc::new(AtomicU64::new(0)),
        }
    }

    /// How many git processes were started.
    pub(super) fn spawned(&self) -> u64 {
        self.spawned.load(Ordering::Relaxed)
    }

    /// A git command in `repo` with a cleared environment and no configuration beyond
    /// the repository's own.
    pub(super) fn command(&self, repo: &Path) -> Command {
        let mut command = Command::new(&self.program);
        self.configure(&mut command, repo);
        command
    }

    /// [`GitRunner::command`] run under `prlimit` with `limits` (plain when nothing is
    /// limited): with `--fsize`, no file git (or a helper it starts, such as
    /// `index-pack`) writes can grow past that size, the kernel stops the writer at the
    /// limit; with `--data`, an allocation past that size fails and git dies.
    pub(super) fn limited_command(
        &self,
        repo: &Path,
        prlimit: &Path,
        limits: ProcessLimits,
    ) -> Command {
        let args = limits.prlimit_args();
        if args.is_empty() {
            return self.command(repo);
        }
        let mut command = Command::new(on_path(
            prlimit.to_path_buf(),
            std::env::var_os("PATH").as_deref(),
        ));
        command.args(args).arg("--").arg(&self.program);
        self.configure(&mut command, repo);
        command
    }

    fn configure(&self, command: &mut Command, repo: &Path) {
        command.env_clear();
        for (name, value) in self.env.iter() {
            command.env(name, value);
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
    }

    /// Runs `command` under the timeout, feeding it `input`; kills its process group when
    /// the timeout passes.
    pub(super) async fn run(
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
        let after = self.timeout;
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
            Err(_) => {
                // Kills git and its helpers (remote-http, index-pack) and waits until
                // they are gone, so nothing writes after the caller cleans up.
                group.kill_and_wait(&mut child).await;
                Err(GitError::Timeout { operation, after })
            }
        }
    }
}

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

/// How long [`GroupKill::kill_and_wait`] waits for a killed group to be gone.
const GROUP_EXIT_WAIT: Duration = Duration::from_secs(5);

impl GroupKill {
    fn disarm(&mut self) {
        self.0 = None;
    }

    /// Kills the group now, reaps `leader` (git itself, whose group it is) and waits
    /// (at most [`GROUP_EXIT_WAIT`]) until no process of the group is left; disarms.
    async fn kill_and_wait(&mut self, leader: &mut tokio::process::Child) {
        let Some(group) = self.0.take() else {
            return;
        };
        signal_group(group, "-KILL");
        let gone = async {
            if let Err(error) = leader.wait().await {
                tracing::debug!(%error, group, "reaping a killed git failed");
            }
            while signal_group(group, "-0") {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        if tokio::time::timeout(GROUP_EXIT_WAIT, gone).await.is_err() {
            tracing::warn!(group, "a killed git process group is still there");
        }
    }
}

/// Sends `signal` (`-KILL`, or `-0` to ask whether it exists) to the process group
/// `group` with `kill(1)`; returns whether it was delivered.
fn signal_group(group: u32, signal: &str) -> bool {
    let result = std::process::Command::new("kill")
        .args([signal, "--", &format!("-{group}")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    match result {
        Ok(status) => status.success(),
        Err(error) => {
            tracing::warn!(%error, group, "signalling a git process group failed");
            false
        }
    }
}

impl Drop for GroupKill {
    fn drop(&mut self) {
        if let Some(group) = self.0 {
            signal_group(group, "-KILL");
        }
    }
}

/// Trusts the target repository even when another user owns it (the git server's
/// user, typically); git honours `safe.directory` given on the command line.
fn safe_directory(repo: &Path) -> std::ffi::OsString {
    let mut setting = std::ffi::OsString::from("safe.directory=");
    setting.push(repo.as_os_str());
    setting
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
pub(super) fn last_lines(stderr: &[u8]) -> String {
    const KEPT_LINES: usize = 4;
    let text = String::from_utf8_lossy(stderr);
    let lines: Vec<&str> = text
        .lines()
        .filter(|line| !line.trim().is_empty())
        .collect();
    lines[lines.len().saturating_sub(KEPT_LINES)..].join(" | ")
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    /// A bare name is found in the first directory of `PATH` holding an executable of
    /// that name (so the spawn can use `posix_spawn`); a path, or a name found nowhere,
    /// is kept.
    #[test]
    fn a_bare_program_name_is_resolved_once_on_path() {
        let base = std::env::temp_dir().join(format!("on-path-{}", std::process::id()));
        let (empty, plain, bin) = (base.join("empty"), base.join("plain"), base.join("bin"));
        for dir in [&empty, &plain, &bin] {
            std::fs::create_dir_all(dir).unwrap();
        }
        // Not executable: skipped.
        std::fs::write(plain.join("git"), "").unwrap();
        std::fs::write(bin.join("git"), "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(bin.join("git"), std::fs::Permissions::from_mode(0o755)).unwrap();
        let path =
            std::env::join_paths(["relative/dir".as_ref(), empty.as_path(), &plain, &bin]).unwrap();
        assert_eq!(on_path("git".into(), Some(&path)), bin.join("git"));
        assert_eq!(
            on_path("nowhere".into(), Some(&path)),
            PathBuf::from("nowhere")
        );
        assert_eq!(on_path("git".into(), None), PathBuf::from("git"));
        assert_eq!(
            on_path("/usr/local/bin/git".into(), Some(&path)),
            PathBuf::from("/usr/local/bin/git")
        );
        assert_eq!(
            on_path("./git".into(), Some(&path)),
            PathBuf::from("./git"),
            "a relative path is the operator's"
        );
        let _ = std::fs::remove_dir_all(&base);
    }
}
