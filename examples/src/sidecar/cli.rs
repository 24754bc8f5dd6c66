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
#[derive(Debug, Parser)]
#[command(name = "grasp-sync", version)]
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
    /// Exit 0 once historic sync is complete on every reachable relay.
    #[arg(long)]
    pub(crate) once: bool,
    /// With `--once`: give up (exit 3) after this many seconds.
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
