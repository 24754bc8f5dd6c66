//! # grasp-sync-relay-builder
//!
//! Embeds proactive sync (and purgatory) in a [nostr-relay-builder] 0.44
//! relay. The relay builder speaks nostr 0.44, the library nostr 0.45: this
//! crate is the bridge, so the relay author's code stays short.
//!
//! - [`Bridge::store`]: the sync's [`EventStore`](grasp_sync_core::store::EventStore) over the relay's
//!   database; a synced event is saved **and** delivered to the relay's
//!   live subscribers.
//! - [`Bridge::database`]: the relay's database, to give its builder: it
//!   hands every announcement and root event the relay **stored** (30617,
//!   1617, 1618, 1621; after the relay's write policies, duplicate and
//!   deletion checks) to the sync (the in-process self-subscription), and
//!   never makes the relay wait for the sync.
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
//! let bridge = Bridge::new(database);
//! let relay = r44::LocalRelay::new(r44::RelayBuilder::default().database(bridge.database()));
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
mod report;

pub use bridge::{Bridge, RelayBuilderAnnouncements, RelayBuilderStore};
pub use convert::ConvertError;
pub use grasps::supported_grasps;
pub use report::ReportingDatabase;

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
