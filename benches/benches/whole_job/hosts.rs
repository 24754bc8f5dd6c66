//! The git hosts: smart-HTTP servers (`git http-backend` as CGI, the purgatory tests'
//! [`GitHttpServer`]) on `127.0.k.1`, one address block each, in a process of their
//! own (this program run again), so that their CPU is not counted as the sidecar's
//! children's and the sidecar's CPU is read exactly from this process's children.

use std::io::{BufRead as _, BufReader, Write as _};
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitCode, Stdio};

use crate::git_support::GitHttpServer;

/// Set (to `addr=root;…`) in the environment of this program run as the git hosts.
pub(crate) const AS_GIT_HOSTS: &str = "GRASP_BENCH_AS_GIT_HOSTS";

/// The address of host `k`: `127.0.(k+1).1`, a /24 of its own (purgatory throttles an
/// address block as one host).
pub(crate) fn host_address(k: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, (k + 1) as u8, 1))
}

/// The running git hosts' process.
pub(crate) struct GitHosts {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    /// Each host's `http://addr:port`.
    pub(crate) urls: Vec<String>,
    /// Each host's project root.
    pub(crate) roots: Vec<PathBuf>,
}

impl GitHosts {
    /// Starts `count` hosts serving `root/host-<k>` (made empty now).
    pub(crate) fn start(count: usize, root: &std::path::Path) -> GitHosts {
        let roots: Vec<PathBuf> = (0..count).map(|k| root.join(format!("host-{k}"))).collect();
        for dir in &roots {
            std::fs::create_dir_all(dir).expect("a host root");
        }
        let spec: Vec<String> = roots
            .iter()
            .enumerate()
            .map(|(k, dir)| format!("{}={}", host_address(k), dir.display()))
            .collect();
        let mut child = Command::new(std::env::current_exe().expect("this program"))
            .env(AS_GIT_HOSTS, spec.join(";"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting the git hosts");
        let mut stdout = BufReader::new(child.stdout.take().expect("the hosts' stdout"));
        let mut urls = Vec::new();
        loop {
            let mut line = String::new();
            if stdout.read_line(&mut line).expect("a line from the hosts") == 0 {
                break;
            }
            match line.trim().strip_prefix("host ") {
                Some(url) => urls.push(url.to_owned()),
                None if line.trim() == "ready" => break,
                None => {}
            }
        }
        assert_eq!(urls.len(), count, "every git host started");
        let stdin = child.stdin.take();
        GitHosts {
            child,
            stdin,
            stdout,
            urls,
            roots,
        }
    }
}

impl GitHosts {
    /// The fetches (`GET …/info/refs`) the hosts served so far, all together.
    pub(crate) fn fetches(&mut self) -> usize {
        let Some(stdin) = self.stdin.as_mut() else {
            return 0;
        };
        if writeln!(stdin, "stats")
            .and_then(|()| stdin.flush())
            .is_err()
        {
            return 0;
        }
        let mut line = String::new();
        let _ = self.stdout.read_line(&mut line);
        line.trim()
            .strip_prefix("fetches ")
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for GitHosts {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

/// This program as the git hosts: serves each `addr=root` of the variable until stdin
/// closes.
pub(crate) fn serve() -> ExitCode {
    let spec = std::env::var(AS_GIT_HOSTS).unwrap_or_default();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let mut servers = Vec::new();
        for part in spec.split(';').filter(|part| !part.is_empty()) {
            let (addr, root) = part.split_once('=').expect("addr=root");
            let ip: IpAddr = addr.parse().expect("an address");
            servers.push(GitHttpServer::start(PathBuf::from(root), ip).await);
        }
        let mut out = std::io::stdout().lock();
        for server in &servers {
            let _ = writeln!(out, "host http://{}", server.addr());
        }
        let _ = writeln!(out, "ready");
        let _ = out.flush();
        drop(out);
        let (asks, mut asked) = tokio::sync::mpsc::channel::<()>(1);
        tokio::task::spawn_blocking(move || {
            let mut line = String::new();
            while std::io::stdin().read_line(&mut line).is_ok_and(|n| n > 0) {
                if asks.blocking_send(()).is_err() {
                    break;
                }
                line.clear();
            }
        });
        while asked.recv().await.is_some() {
            let fetches: usize = servers.iter().map(|server| server.stats().fetches()).sum();
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "fetches {fetches}");
            let _ = out.flush();
        }
    });
    ExitCode::SUCCESS
}
