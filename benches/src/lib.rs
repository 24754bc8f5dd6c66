//! Benchmarks of grasp-sync.
//!
//! Criterion benchmarks in `benches/`: `planning` (re-planning after one new
//! root event among 100k repos / 1M root events / 1k relays versus a full
//! recompute; figures in `BENCHMARKS.md`). Still to come: historic sync of
//! 100k events over NIP-77 and REQ, bytes to re-sync an already-synced set,
//! and memory per tracked root event.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub use grasp_sync_core as core;
