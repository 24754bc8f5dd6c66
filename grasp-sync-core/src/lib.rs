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
//! - [`health`] — relay health and every retry delay (connects, failed work,
//!   the store, the own relay).
//! - [`engine`] — the sync engine: a deterministic state machine driven by
//!   `handle_*` inputs, its commands executed through [`engine::CommandSink`].
//! - [`purgatory`] — sync queue, domain throttle and clone-URL selection.
//! - [`verified`] — the type only a checked event has, and the shared
//!   cache of signatures verified lately.
//! - [`clock`], [`backoff`], [`transport`], [`store`] — time, the shared
//!   backoff formula, and the effect traits.
//!
//! `ARCHITECTURE.md` at the repository root names the function behind each
//! decision.
//!
//! ## Driving the engine
//!
//! ```
//! use std::collections::HashMap;
//! use grasp_sync_core::engine::{CommandSink, EngineConfig, SyncEngine};
//! use grasp_sync_core::transport::{MemoryTransport, RelayTransport, Wire};
//! use grasp_sync_core::{Instant, Now};
//! use nostr::prelude::{Event, Filter, RelayUrl, SubscriptionId, Timestamp};
//!
//! /// Records what the engine asks for (a real driver sends it).
//! #[derive(Default)]
//! struct Recorder {
//!     transports: HashMap<RelayUrl, MemoryTransport>,
//!     stored: Vec<Event>,
//! }
//!
//! impl CommandSink for Recorder {
//!     fn transport(&mut self, relay: &RelayUrl) -> &mut dyn RelayTransport {
//!         self.transports
//!             .entry(relay.clone())
//!             .or_insert_with(|| MemoryTransport::new(relay.clone()))
//!     }
//!     fn store(&mut self, _relay: RelayUrl, event: Box<Event>) {
//!         self.stored.push(*event);
//!     }
//!     fn query_local_items(&mut self, _relay: RelayUrl, _id: SubscriptionId, _filter: Filter) {}
//! }
//!
//! let relay = RelayUrl::parse("wss://relay.example.com").unwrap();
//! let now = Now::new(Instant::ZERO, Timestamp::from_secs(1_750_000_000));
//! let config = EngineConfig {
//!     bootstrap_relays: vec![relay.clone()],
//!     ..EngineConfig::default()
//! };
//! let mut engine = SyncEngine::new(config, now);
//! let mut sink = Recorder::default();
//! engine.handle_timeout(now);
//! engine.execute_commands(now, &mut sink);
//! // The bootstrap relay's transport was asked to connect.
//! let log = sink.transports.get_mut(&relay).unwrap().take_log();
//! assert!(matches!(log.as_slice(), [Wire::Connect(_)]));
//! ```
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
mod recent;
pub mod resolve;
pub mod store;
pub mod transport;
pub mod url_policy;
pub mod verified;

pub use clock::{Clock, Instant, ManualClock, Now, SystemClock};
pub use nip34::RepoRef;
