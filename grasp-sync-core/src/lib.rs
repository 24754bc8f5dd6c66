//! # grasp-sync-core
//!
//! The pure core of grasp-sync: every decision of GRASP-02 proactive sync and
//! of purgatory git-data sync, as plain functions and state machines.
//!
//! **What this crate does not do:** no I/O, no sockets, no tokio, and it never
//! reads a clock. Time comes in as an argument (`now`), read once per input by
//! whoever drives the core from a [`clock::Clock`]; effects go out through the
//! traits [`transport::RelayTransport`], [`store::EventStore`] and
//! [`purgatory::SyncContext`]. An in-memory implementation ships beside each
//! trait, so every state can be reached in a unit test without sleeping.
//!
//! ## Map
//! - [`nip34`] — parse repository announcements, states, patches, PRs, issues.
//! - [`url_policy`] — which relay and clone URLs from strangers may be used.
//! - [`model`] — the spec's data model: confirmed and pending indexes.
//! - [`planner`] — the repository index, `derive_relay_targets` and
//!   `compute_actions`, the only place that decides new subscriptions.
//! - [`filters`] and [`pagination`] — Layer 1/2/3 filters and lossless
//!   `until` paging.
//! - [`health`] — relay health: backoff, dead relays, rate-limit cooldown.
//! - [`purgatory`] — sync queue, domain throttle and clone-URL selection.
//! - [`clock`], [`backoff`], [`transport`], [`store`] — time, the shared
//!   backoff formula, and the effect traits.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod clock;
pub mod engine;
pub mod filters;
pub mod health;
pub use health::backoff;
pub mod model;
pub mod nip34;
pub mod pagination;
pub mod planner;
pub mod purgatory;
pub mod store;
pub mod transport;
pub mod url_policy;

pub use clock::{Clock, Instant, ManualClock, Now, SystemClock};
pub use nip34::RepoRef;
