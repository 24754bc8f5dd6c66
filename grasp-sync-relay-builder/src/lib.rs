//! # grasp-sync-relay-builder
//!
//! Embeds proactive sync (and purgatory) in a [nostr-relay-builder] 0.44
//! relay. The relay builder speaks nostr 0.44, the library nostr 0.45: this
//! crate is the bridge, so the relay author's code stays short.
//!
//! - [`Bridge::store`]: the sync's [`EventStore`](grasp_sync_core::store::EventStore) over the relay's
//!   database; a synced event is saved **and** delivered to the relay's
//!   live subscribers.
//! - [`Bridge::write_policy`]: a write policy for the relay that hands every
//!   announcement and root event it accepts (30617, 1617, 1618, 1621) to the
//!   sync (the in-process self-subscription).
//! - [`Bridge::announcements`]: purgatory's source of clone URLs, the
//!   relay's database.
//! - [`supported_grasps`]: what the host's NIP-11 document lists in
//!   `supported_grasps` (`GRASP-03` only while Sync+ is on); the relay
//!   builder serves no NIP-11 document itself.
//!
//! ```no_run
//! use std::sync::Arc;
//! use grasp_purgatory::{Purgatory, PurgatoryGate, StoreSink};
//! use grasp_sync_relay_builder::{r44, Bridge};
//! use grasp_sync_tokio::{nostr::prelude::RelayUrl, SyncManager};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let database = Arc::new(r44::MemoryDatabase::with_opts(r44::MemoryDatabaseOptions {
//!     events: true,
//!     max_events: None,
//! }));
//! let bridge = Bridge::new(database.clone());
//! let relay = r44::LocalRelay::new(
//!     r44::RelayBuilder::default()
//!         .database(database)
//!         .write_policy(bridge.write_policy()),
//! );
//! // Purgatory: states and PRs wait for their commits in /srv/git.
//! let purgatory = Purgatory::builder()
//!     .announcements(Arc::new(bridge.announcements()))
//!     .repos_root("/srv/git")
//!     .sink(Arc::new(StoreSink::new(bridge.store(relay.clone()))))
//!     .build()?;
//! let manager = SyncManager::builder()
//!     .service_relay(RelayUrl::parse("wss://relay.example.com")?)
//!     .store(Arc::new(PurgatoryGate::new(bridge.store(relay.clone()), purgatory.clone())))
//!     .build()?;
//! bridge.forward_accepted_to(manager.own_events_sender());
//! tokio::spawn(async move { purgatory.run().await });
//! tokio::spawn(manager.run());
//! relay.run().await?; // binds; the relay serves in the background
//! std::future::pending::<()>().await;
//! # Ok(())
//! # }
//! ```
//!
//! [nostr-relay-builder]: https://crates.io/crates/nostr-relay-builder
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod bridge;
pub mod convert;
mod grasps;

pub use bridge::{Bridge, ForwardAccepted, RelayBuilderAnnouncements, RelayBuilderStore};
pub use convert::ConvertError;
pub use grasps::supported_grasps;

/// The relay builder's types (nostr 0.44), under one name.
pub mod r44 {
    pub use nostr_relay_builder::prelude::{
        Event, EventId, Filter, LocalRelay, MemoryDatabase, MemoryDatabaseOptions, NostrDatabase,
        RateLimit, RelayBuilder, RelayUrl, Timestamp,
    };
}

/// The README's code blocks, compiled (and checked) as doc tests: a README
/// example that stops compiling fails CI.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;
