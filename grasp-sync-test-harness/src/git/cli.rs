//! Running the `git` CLI with an isolated environment.
//!
//! Every git the harness runs gets: `HOME` and `XDG_CONFIG_HOME` pointing to an empty
//! directory, `GIT_CONFIG_NOSYSTEM=1`, no terminal prompts, `LC_ALL=C`, and through
//! `GIT_CONFIG_COUNT`: `safe.directory=*` (tests may run as root on directories owned
//! by someone else), `gc.auto=0` and `maintenance.auto=false` (no background gc
//! outliving a test). Variables that would redirect git to another repository
//! (`GIT_DIR`, ... as set inside git hooks) are removed.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use tokio::io::AsyncReadExt;

use super::process::GroupKillGuard;

/// Variables removed from every git's environment.
const REMOVED_ENV: &[&str] = &[
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
    "GIT_PREFIX",
    "GIT_QUARANTINE_PATH",
    "GIT_CONFIG",
    "GIT_CONFIG_GLOBAL",
    "GIT_CONFIG_SYSTEM",
    "GIT_CONFIG_PARAMETERS",
    "GIT_PROTOCOL",
];

/// `key=value` pairs passed through `GIT_CONFIG_COUNT` / `GIT_CONFIG_KEY_n`.
const CONFIG: &[(&str, &str)] = &[
    ("safe.directory", "*"),
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
];

/// What [`fetch_by_sha`] observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FetchOutcome {
    /// git exited successfully.
    Fetched,
    /// git exited with an error.
    Failed {
        /// git's stderr.
        stderr: String,
    },
    /// The timeout elapsed first; git (and its children) were killed.
    TimedOut,
}

/// An empty directory used as `HOME` for every git the harness runs (shared by all
/// test processes, never written to, never removed).
pub fn isolated_git_home() -> &'static Path {
    static HOME: OnceLock<PathBuf> = OnceLock::new();
    HOME.get_or_init(|| {
        let home = std::env::temp_dir().join("grasp-purgatory-test-git-home");
        std::fs::create_dir_all(&home)
            .unwrap_or_else(|e| panic!("creating {}: {e}", home.display()));
        home
    })
}

/// The variables set for every git the harness runs (see the module docs).
pub(crate) fn isolated_env() -> Vec<(String, OsString)> {
    let home = isolated_git_home().as_os_str().to_owned();
    let mut env = vec![
        ("HOME".to_owned(), home.clone()),
        ("XDG_CONFIG_HOME".to_owned(), home),
        ("GIT_CONFIG_NOSYSTEM".to_owned(), "1".into()),
        ("GIT_TERMINAL_PROMPT".to_owned(), "0".into()),
        ("LC_ALL".to_owned(), "C".into()),
        (
            "GIT_CONFIG_COUNT".to_owned(),
            CONFIG.len().to_string().into(),
        ),
    ];
    for (index, (key, value)) in CONFIG.iter().enumerate() {
        env.push((format!("GIT_CONFIG_KEY_{index}"), (*key).into()));
        env.push((format!("GIT_CONFIG_VALUE_{index}"), (*value).into()));
    }
    env
}

/// A `git` command running in `dir` with the isolated environment.
pub fn git_command(dir: &Path) -> Command {
    let mut cmd = Command::new("git");
    cmd.current_dir(dir).envs(isolated_env());
    for name in REMOVED_ENV {
        cmd.env_remove(name);
    }
    cmd
}

/// The tokio twin of [`git_command`]; also `kill_on_drop(true)`.
pub fn tokio_git_command(dir: &Path) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new("git");
    cmd.current_dir(dir).envs(isolated_env()).kill_on_drop(true);
    for name in REMOVED_ENV {
        cmd.env_remove(name);
    }
    cmd
}

/// Runs `git <args>` in `dir`; returns stdout without the trailing newline.
/// Panics with git's stderr if git fails.
pub fn git(dir: &Path, args: &[&str]) -> String {
    git_with_input(dir, args, &[])
}

/// Like [`git`], feeding `input` on stdin (for `hash-object --stdin`, `mktree`, ...).
/// The input is written before the output is read: keep it small.
pub fn git_with_input(dir: &Path, args: &[&str], input: &[u8]) -> String {
    let mut cmd = git_command(dir);
    cmd.args(args);
    let output = run_with_input(&mut cmd, input);
    expect_success(&cmd, output)
}

/// Creates `path` (and parents) and makes it an empty bare repository whose `HEAD`
/// is `refs/heads/main`.
pub fn init_bare_repo(path: &Path) {
    std::fs::create_dir_all(path).unwrap_or_else(|e| panic!("creating {}: {e}", path.display()));
    git(
        path,
        &["init", "--quiet", "--bare", "--initial-branch=main"],
    );
}

/// Whether the repository at `repo` holds object `oid`.
pub fn has_object(repo: &Path, oid: &str) -> bool {
    git_command(repo)
        .args(["cat-file", "-e", oid])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|status| status.success())
        .unwrap_or(false)
}

/// Runs `git -c protocol.version=2 fetch --no-tags -- <url> <oid>:refs/fetched/<oid>`
/// in the repository `dest`, bounded by `timeout`. git runs in its own process group,
/// which is killed on timeout (so `git-remote-http` does not outlive the test).
pub async fn fetch_by_sha(dest: &Path, url: &str, oid: &str, timeout: Duration) -> FetchOutcome {
    let refspec = format!("{oid}:refs/fetched/{oid}");
    let mut cmd = tokio_git_command(dest);
    cmd.args([
        "-c",
        "protocol.version=2",
        "fetch",
        "--quiet",
        "--no-tags",
        "--",
    ])
    .args([url, refspec.as_str()])
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .process_group(0);
    let mut child = cmd.spawn().expect("spawning git fetch");
    let mut guard = GroupKillGuard::new(child.id());
    let stderr = child.stderr.take();
    let finished = tokio::time::timeout(timeout, async {
        let stderr = read_all(stderr).await;
        (child.wait().await, stderr)
    })
    .await;
    let Ok((status, stderr)) = finished else {
        return FetchOutcome::TimedOut;
    };
    guard.disarm();
    match status {
        Ok(status) if status.success() => FetchOutcome::Fetched,
        _ => FetchOutcome::Failed { stderr },
    }
}

/// Reads a child's pipe to the end (lossy UTF-8; empty if absent or unreadable).
async fn read_all(pipe: Option<tokio::process::ChildStderr>) -> String {
    let mut text = Vec::new();
    if let Some(mut pipe) = pipe {
        let _ = pipe.read_to_end(&mut text).await;
    }
    String::from_utf8_lossy(&text).into_owned()
}

/// Spawns `cmd` with piped stdio, writes `input`, closes stdin, collects the output.
fn run_with_input(cmd: &mut Command, input: &[u8]) -> Output {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {}: {e}", describe(cmd)));
    if let Some(mut stdin) = child.stdin.take() {
        use std::io::Write as _;
        stdin
            .write_all(input)
            .unwrap_or_else(|e| panic!("writing stdin of {}: {e}", describe(cmd)));
    }
    child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("waiting for {}: {e}", describe(cmd)))
}

/// Returns stdout (trailing newline trimmed), or panics with stderr.
fn expect_success(cmd: &Command, output: Output) -> String {
    if !output.status.success() {
        panic!(
            "{} failed ({}): {}",
            describe(cmd),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    String::from_utf8_lossy(&output.stdout)
        .trim_end()
        .to_owned()
}

/// `git arg1 arg2 ... (in <dir>)` for panic messages.
fn describe(cmd: &Command) -> String {
    let args: Vec<String> = cmd
        .get_args()
        .map(|arg| arg.to_string_lossy().into_owned())
        .collect();
    let dir = cmd
        .get_current_dir()
        .map(|dir| dir.display().to_string())
        .unwrap_or_default();
    format!("git {} (in {dir})", args.join(" "))
}
