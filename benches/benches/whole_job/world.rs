//! What both parts start from: a run directory, the git hosts, the remote strfry
//! loaded with the data set, and the port the own relay will listen on (the
//! announcements list it, so it is chosen before the data set is made).

use std::path::Path;
use std::time::Instant;

use grasp_sync_test_support::strfry::Strfry;

use crate::data::{dataset, Dataset, Places};
use crate::hosts::GitHosts;
use crate::RunDir;

/// The data set on its remote, its sources on their git hosts.
pub(crate) struct World {
    pub(crate) dir: RunDir,
    pub(crate) hosts: GitHosts,
    pub(crate) remote: Strfry,
    pub(crate) own_port: u16,
    pub(crate) own_url: String,
    pub(crate) data: Dataset,
    /// How long making the data set and loading the remote took.
    pub(crate) made_in: f64,
}

impl World {
    /// `repositories` repositories over `hosts` git hosts, in a run directory named
    /// after `label`.
    pub(crate) fn make(strfry: &Path, label: &str, hosts: usize, repositories: usize) -> World {
        let dir = RunDir::new(label);
        let git_hosts = GitHosts::start(hosts, dir.path());
        let remote = Strfry::start_in(strfry, dir.path(), "");
        let own_port = grasp_sync_test_support::net::free_port();
        let own_url = format!("ws://127.0.0.1:{own_port}");
        let started = Instant::now();
        let data = dataset(
            repositories,
            &Places {
                host_urls: &git_hosts.urls,
                host_roots: &git_hosts.roots,
                own_relay: &own_url,
                own_port,
                remote: remote.url().as_str(),
            },
        );
        remote.import(&data.events);
        World {
            dir,
            hosts: git_hosts,
            remote,
            own_port,
            own_url,
            data,
            made_in: started.elapsed().as_secs_f64(),
        }
    }

    /// A fresh, empty own relay (strfry at its defaults) on the announced port.
    pub(crate) fn own_relay(&self, strfry: &Path) -> Strfry {
        Strfry::start_at(strfry, self.dir.path(), self.own_port, "")
    }

    /// The sidecar's flags as an operator gives them: the own relay, the remote as
    /// bootstrap relay, `git_root`, loopback addresses and plain HTTP allowed (the git
    /// hosts are on 127.0.k.1), its defaults otherwise; `--once` with `once`.
    pub(crate) fn sidecar_args(&self, git_root: &Path, once: Option<u64>) -> Vec<String> {
        let mut args: Vec<String> = vec![
            "--own-relay".into(),
            self.own_url.clone(),
            "--bootstrap-relay".into(),
            self.remote.url().to_string(),
            "--git-root".into(),
            git_root.display().to_string(),
            "--allow-local-addresses".into(),
            "--allow-insecure-clone-urls".into(),
        ];
        if let Some(timeout) = once {
            args.extend(["--once".into(), "--timeout".into(), timeout.to_string()]);
        }
        args
    }
}
