//! Spawning git: a cleared environment, no configuration beyond the repository's own,
//! capped output, a timeout, and a kill of the whole process group when it passes.

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

use super::error::GitError;

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
    spawned: Arc<AtomicU64>,
}

impl GitRunner {
    /// Runs `program`, killing each command after `timeout`.
    pub(super) fn new(program: PathBuf, timeout: Duration) -> Self {
        GitRunner {
            program,
            timeout,
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

    /// [`GitRunner::command`] run under `prlimit --fsize=<max_file_bytes>`: no file git
    /// (or a helper it starts, such as `index-pack`) writes can grow past that size; the
    /// kernel stops the writer at the limit.
    pub(super) fn limited_command(
        &self,
        repo: &Path,
        prlimit: &Path,
        max_file_bytes: u64,
    ) -> Command {
        let mut command = Command::new(prlimit);
        command
            .arg(format!("--fsize={max_file_bytes}"))
            .arg("--")
            .arg(&self.program);
        self.configure(&mut command, repo);
        command
    }

    fn configure(&self, command: &mut Command, repo: &Path) {
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
            // Dropping `group` kills git and its helpers (remote-http).
            Err(_) => Err(GitError::Timeout { operation, after }),
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
