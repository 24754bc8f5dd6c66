//! The sidecar's command line: flags, and checking them into a
//! [`Settings`] with one clear line per mistake.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;
use nostr::prelude::RelayUrl;

/// GRASP-02 proactive sync next to a relay you already run (strfry,
/// nostr-rs-relay, khatru, a nostr-relay-builder relay): reads the
/// repository announcements your relay accepted, pulls their patches, PRs,
/// issues and replies from every relay they name, and publishes them to your
/// relay. Every `NGIT_SYNC_*` environment variable of the spec applies.
///
/// With `--git-root`, states and PRs wait in purgatory until their commits are
/// fetched: purgatory creates each repository's bare repository
/// (`<dir>/<npub>/<identifier>.git`, `refs/purgatory` hidden from serving) and
/// never fetches from clone URLs on your own service (the hosts of `--own-relay`
/// and `--service-url`).
#[derive(Debug, Parser)]
#[command(
    name = "grasp-sync",
    version,
    after_help = "Exit codes with --once: 0 done (historic sync complete, every purgatory \
event released or expired); 4 done, but events are held as not fetchable (no usable \
clone URL, only your own service's, no announcement, or a missing repository with \
--git-root-managed-externally), named on the last line; 3 --timeout passed first, the \
last line names what is still held and why; 2 bad arguments; 1 failure; 130 signal."
)]
pub(crate) struct Args {
    /// Your relay: accepted announcements are read from it, synced events are
    /// published to it.
    #[arg(long, value_name = "URL")]
    pub(crate) own_relay: String,
    /// A URL under which announcements list your service (repeatable);
    /// defaults to the own relay's URL.
    #[arg(long = "service-url", value_name = "URL")]
    pub(crate) service_urls: Vec<String>,
    /// A relay synced from the start and never dropped (repeatable).
    #[arg(long = "bootstrap-relay", value_name = "URL")]
    pub(crate) bootstrap_relays: Vec<String>,
    /// Purgatory's bare repositories (`<dir>/<npub>/<identifier>.git`):
    /// states and PRs wait until their commits are fetched from the
    /// repository's clone URLs. Omit to run without purgatory.
    #[arg(long, value_name = "DIR")]
    pub(crate) git_root: Option<PathBuf>,
    /// The repositories under `--git-root` are created by your GRASP server:
    /// purgatory does not create a missing one, its events wait (reported as
    /// not fetchable). Also `NGIT_PURGATORY_GIT_ROOT_MANAGED_EXTERNALLY=1`.
    #[arg(long, requires = "git_root")]
    pub(crate) git_root_managed_externally: bool,
    /// Let purgatory fetch over plain `http://` and `git://` (https only
    /// otherwise).
    #[arg(long)]
    pub(crate) allow_insecure_clone_urls: bool,
    /// Serve Prometheus `/metrics` and a JSON `/status` on this address.
    #[arg(long, value_name = "ADDR")]
    pub(crate) metrics_addr: Option<SocketAddr>,
    /// Allow relays on loopback and private addresses.
    #[arg(long)]
    pub(crate) allow_local_addresses: bool,
    /// Exit once the job is done: historic sync complete on every reachable
    /// relay and, with `--git-root`, every held event released, expired or
    /// reported not fetchable (exit codes below).
    #[arg(long)]
    pub(crate) once: bool,
    /// With `--once`: give up (exit 3, naming what is still held and why)
    /// after this many seconds.
    #[arg(long, value_name = "SECS", default_value_t = 600)]
    pub(crate) timeout: u64,
    /// Log JSON lines instead of human-readable text (`RUST_LOG` filters).
    #[arg(long)]
    pub(crate) log_json: bool,
}

/// The checked settings.
#[derive(Debug)]
pub(crate) struct Settings {
    pub(crate) own_relay: RelayUrl,
    pub(crate) git_root: Option<PathBuf>,
    pub(crate) git_root_managed_externally: bool,
    pub(crate) allow_insecure_clone_urls: bool,
    pub(crate) service_urls: Vec<RelayUrl>,
    pub(crate) bootstrap_relays: Vec<RelayUrl>,
    pub(crate) metrics_addr: Option<SocketAddr>,
    pub(crate) allow_local_addresses: bool,
    pub(crate) once: bool,
    pub(crate) timeout: std::time::Duration,
}

/// Checks the flags; the error is one line for the user.
pub(crate) fn settings(args: &Args) -> Result<Settings, String> {
    if let Some(root) = &args.git_root {
        if !root.is_dir() {
            return Err(format!("--git-root {}: not a directory", root.display()));
        }
    }
    let url = |flag: &str, value: &str| {
        RelayUrl::parse(value)
            .map_err(|error| format!("{flag} {value:?} is not a relay URL: {error}"))
    };
    Ok(Settings {
        own_relay: url("--own-relay", &args.own_relay)?,
        git_root: args.git_root.clone(),
        git_root_managed_externally: args.git_root_managed_externally,
        allow_insecure_clone_urls: args.allow_insecure_clone_urls,
        service_urls: args
            .service_urls
            .iter()
            .map(|value| url("--service-url", value))
            .collect::<Result<_, _>>()?,
        bootstrap_relays: args
            .bootstrap_relays
            .iter()
            .map(|value| url("--bootstrap-relay", value))
            .collect::<Result<_, _>>()?,
        metrics_addr: args.metrics_addr,
        allow_local_addresses: args.allow_local_addresses,
        once: args.once,
        timeout: std::time::Duration::from_secs(args.timeout),
    })
}
