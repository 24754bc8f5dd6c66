//! One run of the `grasp-sync` sidecar as an operator runs it (this program run again
//! as `grasp_sync::main`, the same release build), and what it cost: wall time from
//! spawn to exit, CPU user and system (this process's children's ticks before and
//! after: the sidecar and every process it waited for, its git processes included),
//! peak RSS (`VmHWM`, read while it runs), the git processes it spawned (a `git` on
//! its `PATH` that logs each start, then runs the real one).

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::relays::stat_field_seconds;

/// Set in the environment of this program run again as the sidecar.
pub(crate) const AS_SIDECAR: &str = "GRASP_BENCH_AS_SIDECAR";

/// What one run cost.
#[derive(Clone, Debug, Default)]
pub(crate) struct Cost {
    /// Spawn to exit.
    pub(crate) secs: f64,
    /// CPU seconds in user mode, the sidecar with its git processes.
    pub(crate) user: f64,
    /// CPU seconds in the kernel, the same.
    pub(crate) sys: f64,
    /// The sidecar's peak resident set, bytes.
    pub(crate) peak_rss: u64,
    /// Git processes it started.
    pub(crate) git_processes: usize,
    /// Its exit code.
    pub(crate) code: Option<i32>,
    /// The last lines of its log, when it failed.
    pub(crate) log_tail: String,
}

/// CPU seconds (user, system) of the children this process waited for.
pub(crate) fn children_cpu() -> (f64, f64) {
    (
        stat_field_seconds("/proc/self/stat", 13),
        stat_field_seconds("/proc/self/stat", 14),
    )
}

/// `VmHWM` of `pid`, bytes (0 once it is gone).
fn peak_rss(pid: u32) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    text.lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

/// A directory holding a `git` that logs each start to `log` and runs the real git.
pub(crate) struct CountingPath {
    dir: PathBuf,
    log: PathBuf,
}

impl CountingPath {
    /// Writes the wrapper under `base`.
    pub(crate) fn install(base: &Path) -> CountingPath {
        let dir = base.join("counting-git");
        std::fs::create_dir_all(&dir).expect("the wrapper's directory");
        let real = String::from_utf8(
            Command::new("sh")
                .args(["-c", "command -v git"])
                .output()
                .expect("finding git")
                .stdout,
        )
        .expect("a path")
        .trim()
        .to_owned();
        let log = dir.join("starts.log");
        let script = format!(
            "#!/bin/sh\necho \"$*\" >> '{}'\nexec '{real}' \"$@\"\n",
            log.display()
        );
        let program = dir.join("git");
        std::fs::write(&program, script).expect("the wrapper");
        std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755))
            .expect("an executable wrapper");
        std::fs::write(&log, "").expect("the log");
        CountingPath { dir, log }
    }

    /// Starts logged so far.
    pub(crate) fn starts(&self) -> usize {
        std::fs::read(&self.log).map_or(0, |bytes| bytes.iter().filter(|&&b| b == b'\n').count())
    }

    /// The starts logged so far by git command (`fetch`, `update-ref`, …), most first.
    pub(crate) fn by_command(&self) -> Vec<(String, usize)> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let mut counts: std::collections::BTreeMap<String, usize> = Default::default();
        for line in text.lines() {
            let mut words = line.split_whitespace();
            let mut command = "?";
            while let Some(word) = words.next() {
                if word == "-c" || word == "-C" {
                    words.next();
                } else if !word.starts_with('-') {
                    command = word;
                    break;
                }
            }
            *counts.entry(command.to_owned()).or_default() += 1;
        }
        let mut counts: Vec<(String, usize)> = counts.into_iter().collect();
        counts.sort_by_key(|(_, count)| std::cmp::Reverse(*count));
        counts
    }

    /// `PATH` with the wrapper first.
    fn path(&self) -> std::ffi::OsString {
        let mut paths = vec![self.dir.clone()];
        if let Some(path) = std::env::var_os("PATH") {
            paths.extend(std::env::split_paths(&path));
        }
        std::env::join_paths(paths).expect("a PATH")
    }
}

/// The sidecar as a child: `program` (this program run as the sidecar when `None`),
/// `args` its flags, every `NGIT_*` variable removed, git counted by `git`.
pub(crate) fn spawn(
    program: Option<&Path>,
    args: &[String],
    git: &CountingPath,
    log: &Path,
) -> std::process::Child {
    let exe = std::env::current_exe().expect("this program");
    let mut command = Command::new(program.unwrap_or(&exe));
    command
        .env(AS_SIDECAR, "1")
        .env(
            "RUST_LOG",
            std::env::var("GRASP_BENCH_SIDECAR_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .env("PATH", git.path())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).expect("the sidecar's log"));
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("NGIT_") {
            command.env_remove(name);
        }
    }
    command.spawn().expect("running the sidecar")
}

/// Runs the sidecar to its exit (`--once`) and measures it.
pub(crate) fn run_once(
    program: Option<&Path>,
    args: &[String],
    git: &CountingPath,
    log: &Path,
) -> Cost {
    let starts_before = git.starts();
    let (user_before, sys_before) = children_cpu();
    let started = Instant::now();
    let mut child = spawn(program, args, git, log);
    let watching = Arc::new(AtomicBool::new(true));
    let peak = Arc::new(AtomicU64::new(0));
    let watcher = {
        let (watching, peak, pid) = (Arc::clone(&watching), Arc::clone(&peak), child.id());
        std::thread::spawn(move || {
            while watching.load(Ordering::Relaxed) {
                peak.fetch_max(peak_rss(pid), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    let status = child.wait().expect("waiting for the sidecar");
    let secs = started.elapsed().as_secs_f64();
    watching.store(false, Ordering::Relaxed);
    let _ = watcher.join();
    let (user_after, sys_after) = children_cpu();
    let log_text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = log_text.lines().collect();
    Cost {
        secs,
        user: user_after - user_before,
        sys: sys_after - sys_before,
        peak_rss: peak.load(Ordering::Relaxed),
        git_processes: git.starts() - starts_before,
        code: status.code(),
        log_tail: lines[lines.len().saturating_sub(20)..].join("\n"),
    }
}
