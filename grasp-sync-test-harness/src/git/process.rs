//! Killing processes and whole process groups through `kill(1)`: the project forbids
//! `unsafe`, so no libc.
//!
//! Every long-lived child the harness starts is put in its own process group
//! (`process_group(0)`, so its group id is its pid). Killing the group also reaches
//! grandchildren such as the real `git-daemon` behind the `git daemon` wrapper, the
//! per-connection `git upload-pack` processes, or `git-remote-http` behind `git fetch`.

use std::process::{Command, Stdio};

/// Sends `SIGKILL` to one process; errors (already gone) are ignored.
pub(crate) fn kill_pid(pid: u32) {
    send_sigkill(&pid.to_string());
}

/// Sends `SIGKILL` to every process in the group `pgid`; errors are ignored.
pub(crate) fn kill_group(pgid: u32) {
    send_sigkill(&format!("-{pgid}"));
}

/// Runs `kill -KILL -- <target>` with all stdio closed and waits for it.
fn send_sigkill(target: &str) {
    let _ = Command::new("kill")
        .args(["-KILL", "--", target])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// Kills a process group when dropped, unless disarmed first. Used around children
/// whose futures may be dropped mid-flight (timeouts, aborted server tasks).
#[derive(Debug)]
pub(crate) struct GroupKillGuard {
    pgid: Option<u32>,
}

impl GroupKillGuard {
    /// Guards the group `pgid` (`None`: nothing to guard, e.g. the pid is unknown).
    pub(crate) fn new(pgid: Option<u32>) -> GroupKillGuard {
        GroupKillGuard { pgid }
    }

    /// The group finished on its own: do not kill it on drop.
    pub(crate) fn disarm(&mut self) {
        self.pgid = None;
    }
}

impl Drop for GroupKillGuard {
    fn drop(&mut self) {
        if let Some(pgid) = self.pgid.take() {
            kill_group(pgid);
        }
    }
}
