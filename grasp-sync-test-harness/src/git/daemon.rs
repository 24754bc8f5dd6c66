//! `git daemon` serving a base directory over `git://` on 127.0.0.1.
//!
//! Trap: `git daemon` is a wrapper that runs the real `git-daemon` as a child, which in
//! turn forks one process per connection. Killing only the wrapper orphans the daemon,
//! and an orphan holding the test's stdout/stderr hangs the test runner. So the daemon:
//! * gets `/dev/null` as stdin/stdout and a log FILE (never a pipe) as stderr;
//! * runs in its own process group, killed as a whole on stop;
//! * writes `--pid-file`, whose pid is killed as well (belt and braces).

use std::fs::File;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use super::cli::git_command;
use super::net::{free_port, wait_for_tcp_refused};
use super::process::{kill_group, kill_pid};
use super::tempdir::TempDir;

/// Ports tried before giving up (another process may grab a free port first).
const START_ATTEMPTS: usize = 5;
/// Bound on waiting for the daemon to accept connections.
const READY_TIMEOUT: Duration = Duration::from_secs(5);
/// Bound on waiting for the port to refuse connections after a stop.
const STOP_TIMEOUT: Duration = Duration::from_secs(2);
/// Pause between two readiness checks.
const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// A running `git daemon --export-all --enable=upload-pack` on 127.0.0.1; every
/// repository under the base path is served. Stopped (all processes killed) on drop.
#[derive(Debug)]
pub struct GitDaemon {
    child: Option<Child>,
    addr: SocketAddr,
    run_dir: TempDir,
}

impl GitDaemon {
    /// Starts the daemon on a free port and waits (bounded) until it accepts TCP
    /// connections. Panics, with the daemon's log, if that fails `START_ATTEMPTS` times.
    pub fn start(base_path: &Path) -> GitDaemon {
        let base_path = std::path::absolute(base_path).expect("absolute base path");
        let mut failures = Vec::new();
        for _ in 0..START_ATTEMPTS {
            match Self::try_start(&base_path) {
                Ok(daemon) => return daemon,
                Err(failure) => failures.push(failure),
            }
        }
        panic!("git daemon did not start: {failures:#?}");
    }

    /// The socket address the daemon listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `git://127.0.0.1:<port>/<repo_name>` (`repo_name` is relative to the base path;
    /// git daemon also tries `<repo_name>.git`).
    pub fn url(&self, repo_name: &str) -> String {
        format!("git://{}/{repo_name}", self.addr)
    }

    /// The daemon's process group id (its wrapper's pid) while running.
    pub fn process_group(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// What the daemon wrote to stderr so far (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(log_path(self.run_dir.path())).unwrap_or_default()
    }

    /// Kills the wrapper, the real daemon and its per-connection children, reaps the
    /// wrapper and waits (bounded) until the port refuses connections. Idempotent.
    pub fn stop(&mut self) {
        let Some(child) = self.child.take() else {
            return;
        };
        kill_daemon(child, &pid_file_path(self.run_dir.path()));
        wait_for_tcp_refused(self.addr, STOP_TIMEOUT);
    }

    /// One attempt on one free port.
    fn try_start(base_path: &Path) -> Result<GitDaemon, String> {
        let run_dir = TempDir::new("git-daemon");
        let addr = SocketAddr::new(LOCALHOST, free_port(LOCALHOST));
        let child = spawn_daemon(base_path, addr.port(), run_dir.path())?;
        let mut daemon = GitDaemon {
            child: Some(child),
            addr,
            run_dir,
        };
        match daemon.wait_ready() {
            Ok(()) => Ok(daemon),
            Err(reason) => {
                let log = daemon.log();
                daemon.stop();
                Err(format!("{reason}; log: {log}"))
            }
        }
    }

    /// Polls until a connection succeeds, the daemon exits, or the bound elapses.
    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(status) = self.exit_status() {
                return Err(format!("git daemon exited early ({status})"));
            }
            if TcpStream::connect_timeout(&self.addr, POLL_INTERVAL * 10).is_ok() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "no listener on {} after {READY_TIMEOUT:?}",
                    self.addr
                ));
            }
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    /// The wrapper's exit status if it has exited.
    fn exit_status(&mut self) -> Option<std::process::ExitStatus> {
        self.child
            .as_mut()
            .and_then(|child| child.try_wait().ok().flatten())
    }
}

impl Drop for GitDaemon {
    fn drop(&mut self) {
        self.stop();
    }
}

/// 127.0.0.1, the only address the daemon listens on.
const LOCALHOST: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// Spawns `git daemon` in its own process group, stdio detached from the test.
fn spawn_daemon(base_path: &Path, port: u16, run_dir: &Path) -> Result<Child, String> {
    let log = File::create(log_path(run_dir)).map_err(|e| format!("creating log: {e}"))?;
    git_command(base_path)
        .arg("daemon")
        .args(daemon_args(base_path, port, run_dir))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .process_group(0)
        .spawn()
        .map_err(|e| format!("spawning git daemon: {e}"))
}

/// Arguments after `git daemon`.
fn daemon_args(base_path: &Path, port: u16, run_dir: &Path) -> Vec<String> {
    vec![
        "--reuseaddr".to_owned(),
        "--export-all".to_owned(),
        "--enable=upload-pack".to_owned(),
        "--informative-errors".to_owned(),
        "--log-destination=stderr".to_owned(),
        "--listen=127.0.0.1".to_owned(),
        format!("--port={port}"),
        format!("--base-path={}", base_path.display()),
        format!("--pid-file={}", pid_file_path(run_dir).display()),
    ]
}

/// Kills the whole group, the pid from the pid file and the wrapper; reaps the wrapper.
fn kill_daemon(mut child: Child, pid_file: &Path) {
    kill_group(child.id());
    if let Some(pid) = read_pid(pid_file) {
        kill_pid(pid);
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// The pid written by `--pid-file`, if readable.
fn read_pid(pid_file: &Path) -> Option<u32> {
    std::fs::read_to_string(pid_file).ok()?.trim().parse().ok()
}

/// `<run_dir>/daemon.pid`.
fn pid_file_path(run_dir: &Path) -> PathBuf {
    run_dir.join("daemon.pid")
}

/// `<run_dir>/daemon.log`.
fn log_path(run_dir: &Path) -> PathBuf {
    run_dir.join("daemon.log")
}
