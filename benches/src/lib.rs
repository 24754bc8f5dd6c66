//! Benchmarks of grasp-sync.
//!
//! This package will hold criterion benchmarks: re-planning after one new root
//! event among 100k repos / 1M root events / 1k relays versus a full recompute,
//! historic sync of 100k events over NIP-77 and REQ, bytes to re-sync an
//! already-synced set, and memory per tracked root event. No benchmark is built
//! yet; this crate only compiles against the core.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub use grasp_sync_core as core;
