//! Real git servers on loopback, for purgatory's integration tests and everything
//! that runs a purgatory (formerly `grasp-purgatory/tests/support`).
//!
//! Everything here starts real processes (`git daemon`, `git http-backend`) or real
//! sockets bound to `127.0.0.1` / `::1` only, and tears them down on `Drop`.
//!
//! * [`TempDir`]: a unique temporary directory removed on drop.
//! * [`CountingGit`]: a git program that logs its invocations (peak concurrency).
//! * [`git`](fn@git), [`git_with_input`], [`fetch_by_sha`]: run the `git` CLI with an isolated
//!   environment (no system or user config, no prompts, `safe.directory=*`).
//! * [`SourceRepo`]: a bare repository that tests put commits into.
//! * [`GitDaemon`]: `git daemon` serving a base directory over `git://`.
//! * [`GitHttpServer`]: smart HTTP (`git http-backend` as CGI) with request statistics.
//! * [`HangingServer`]: accepts TCP connections and never answers.
//! * [`StallingProxy`]: passes a server's first bytes on, then stalls.
//! * [`closed_port_url`]: a URL where nothing listens.
//! * [`until`](fn@until), [`pairs`]: waiting on a purgatory's status, ref listings to compare.
//! * [`RelaySink`], [`state`], [`served()`]: the relay released events reach, states, and
//!   what a local repository serves.

mod cli;
mod counting_git;
mod daemon;
mod hanging;
mod http;
mod net;
mod process;
mod repo;
mod served;
mod stalling;
mod status;
mod tempdir;

pub use cli::{
    fetch_by_sha, git, git_command, git_with_input, has_object, init_bare_repo, isolated_git_home,
    tokio_git_command, FetchOutcome,
};
pub use counting_git::{peak_rss_bytes, CountingGit};
pub use daemon::GitDaemon;
pub use hanging::HangingServer;
pub use http::{GitHttpServer, GitHttpServerBuilder, HttpStats, RequestRecord};
pub use net::{closed_port_url, free_port, wait_for_tcp, wait_for_tcp_refused};
pub use repo::SourceRepo;
pub use served::{
    loopback_policy, served, serving_builder, serving_builder_with_git, state, RelaySink, T0,
};
pub use stalling::StallingProxy;
pub use status::{pairs, until, SETTLE};
pub use tempdir::TempDir;

/// The counter `name` in `registry`, summed over the series whose label
/// `label` is `value` (0 when there is none).
pub fn counter(registry: &prometheus::Registry, name: &str, label: &str, value: &str) -> f64 {
    registry
        .gather()
        .iter()
        .filter(|family| family.name() == name)
        .flat_map(|family| family.get_metric())
        .filter(|metric| {
            metric
                .get_label()
                .iter()
                .any(|pair| pair.name() == label && pair.value() == value)
        })
        .map(|metric| metric.get_counter().get_value())
        .sum()
}
