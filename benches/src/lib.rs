//! Benchmarks of grasp-sync (figures and commands in `BENCHMARKS.md`):
//! `planning` (re-planning after one new root event among 100k repos / 1M
//! root events / 1k relays versus a full recompute), `memory` (bytes per
//! tracked root event in the sync indexes at the same scale),
//! `engine_input` (the engine's cost per input against its relays),
//! `throughput` (historic sync of 100k events from relay processes, against
//! nostr-sdk and `Event::verify`; re-sync bytes), `req_relay` (a REQ-only
//! relay against a NIP-77 one, on a busy machine), `strfry_sync` (the
//! field's 4 000 repositories from real strfry relays, beside `strfry sync`) and
//! `whole_job` (the sidecar's whole job, sync and git data, against real strfry
//! relays and smart-HTTP git hosts at 400 and 1 000 repositories, and the live
//! latency of a new state).
//! This library holds what they share.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub use grasp_sync_core as core;

use grasp_sync_core::RepoRef;
use nostr::prelude::{EventId, Keys, RelayUrl};

/// Repositories of the planning and memory benchmarks.
pub const REPOS: usize = 100_000;
/// Root events of the planning and memory benchmarks.
pub const ROOT_EVENTS: usize = 1_000_000;
/// Relays of the planning and memory benchmarks.
pub const RELAYS: usize = 1_000;
/// Relays each repository lists.
pub const RELAYS_PER_REPO: usize = 3;

/// The `n`th root event id of the planning and memory benchmarks.
pub fn event_id(n: u64) -> EventId {
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&n.to_be_bytes());
    bytes[8] = 0xee;
    EventId::from_byte_array(bytes)
}

/// The planning and memory benchmarks' inputs, sizes divided by [`scale`].
#[derive(Debug)]
pub struct Inputs {
    /// The divisor the sizes were divided by.
    pub scale: usize,
    /// The relays (at least [`RELAYS_PER_REPO`]).
    pub relays: Vec<RelayUrl>,
    /// The repositories, owned by 64 keys.
    pub repos: Vec<RepoRef>,
    /// How many root events to spread over them.
    pub root_events: usize,
}

/// [`Inputs`] at the scale `GRASP_BENCH_SCALE` asks for.
pub fn inputs() -> Inputs {
    let scale = scale();
    let relays = (0..(RELAYS / scale).max(RELAYS_PER_REPO))
        .map(|n| RelayUrl::parse(&format!("wss://relay{n}.example.com")).expect("relay url"))
        .collect();
    let owners: Vec<Keys> = (0..64).map(|_| Keys::generate()).collect();
    let repos = (0..REPOS / scale)
        .map(|n| {
            RepoRef::new(owners[n % owners.len()].public_key(), format!("repo-{n}")).expect("repo")
        })
        .collect();
    Inputs {
        scale,
        relays,
        repos,
        root_events: ROOT_EVENTS / scale,
    }
}

/// `GRASP_BENCH_SCALE`: what the sizes are divided by (1 unless set).
pub fn scale() -> usize {
    std::env::var("GRASP_BENCH_SCALE")
        .ok()
        .and_then(|scale| scale.parse().ok())
        .filter(|scale| *scale > 0)
        .unwrap_or(1)
}

/// The 1, 5 and 15 minute load averages (other work on the machine shows
/// here: the figures are only as good as the machine was quiet); empty off
/// Linux.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

/// The process's resident memory in bytes: the `resident` field of
/// `/proc/self/statm` (in pages) times the page size. The page size is
/// learned from `VmRSS` of `/proc/self/status` (read right after): the
/// nearest of 4, 16 and 64 KiB; 4 KiB if that fails. `None` off Linux.
pub fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * page_size(pages))
}

fn page_size(pages: u64) -> u64 {
    let vm_rss_kib = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("VmRSS:"))
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|kib| kib.parse::<u64>().ok())
        });
    match vm_rss_kib {
        Some(kib) if pages > 0 => {
            let ratio = kib * 1024 / pages;
            [4096, 16384, 65536]
                .into_iter()
                .min_by_key(|size: &u64| size.abs_diff(ratio))
                .unwrap_or(4096)
        }
        _ => 4096,
    }
}
