//! Purgatory git-data sync for grasp-sync.
//!
//! This crate will hold NIP-34 events that reference git objects the server does
//! not have yet (repository state 30618, pull requests 1618 and PR updates 1619),
//! fetch the missing objects from the repository's clone URLs with per-domain
//! throttling and backoff, and release each event once its data is present. The
//! decisions (sync queue backoff, domain throttle, URL selection, clone-URL
//! policy) live in [`grasp_sync_core`]; this crate will add the tokio loop and a
//! git-backed `SyncContext`.
//!
//! Status: not built yet (see the issue "grasp-purgatory: identifier-based
//! git-data sync"). Today it only re-exports the core so the workspace compiles.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub use grasp_sync_core as core;
