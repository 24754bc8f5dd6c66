//! Benchmarks of grasp-sync.
//!
//! Criterion benchmarks in `benches/`: `planning` (re-planning after one new
//! root event among 100k repos / 1M root events / 1k relays versus a full
//! recompute; figures in `BENCHMARKS.md`) and `memory` (bytes per tracked
//! root event in the sync indexes at the same scale). Still to come:
//! historic sync of 100k events over NIP-77 and REQ, bytes to re-sync an
//! already-synced set.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub use grasp_sync_core as core;

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
