//! # grasp-sync-tokio
//!
//! Runs the pure [`grasp_sync_core`] sync engine against real relays: one
//! driver task per relay connection, each opened through a
//! [`RelayTransport`] ([`WebSocketTransport`] by default: rustls for
//! `wss://`, ping keep-alive, frame and message size limits; a host plugs
//! its own with [`SyncManagerBuilder::transport`]), a self-subscription to the own
//! relay (or an in-process channel for relays that embed us), a store that
//! publishes to the own relay and reports its `OK`, Prometheus metrics and a
//! graceful shutdown. What is synced, stored or complete is the engine's
//! decision ([`SyncStatus::historic_sync_complete`] is
//! `SyncEngine::historic_sync_complete` as it is). The adapter decides three
//! things of its own, all I/O because they follow how fast a socket or a
//! database answers in wall time and change only throughput or when a dead
//! connection is noticed: how fast work reaches the store (at most 256 events
//! in flight, up to 64 in one `ingest_many`; [`RelayStore`] keeps a window of
//! events awaiting their `OK` on each publishing connection, 64 at first,
//! halved by a `rate-limited:` answer and grown up to [`INGEST_WINDOW`], and
//! paces its publishing connections by the relay's answers); how many
//! received bytes wait in memory (each relay's inbound budget and one all
//! relays share, [`ConnectionConfig::inbound_bytes_per_relay`] and
//! [`ConnectionConfig::inbound_bytes_total`]: a connection reads its next
//! message only once both have room); and closing a connection
//! whose pong does not come back within the ping interval (the transport's
//! duty: [`WebSocketTransport`] does it). Whether a relay is
//! alive is otherwise the engine's (each pong is fed to
//! `SyncEngine::handle_relay_alive`); the missed pong stays here because the
//! ping is a WebSocket control frame the engine never sees, and the engine
//! drops a silent connection only while work waits on it (a stalled batch, an
//! unanswered live subscription): an idle connection whose socket died is
//! noticed only by its missed pong.
//!
//! Which relays' resolved addresses go unchecked is the core's
//! (`Identity::is_configured_relay`: the bootstrap relays and the own
//! relay); the adapter resolves each name once and checks every other
//! relay's addresses with the relay policy. A frame that does not parse as a
//! relay message is dropped and counted only in the metrics: it never reaches
//! the engine, so it does not count toward a relay's refused events (a known
//! gap).
//!
//! Stores: [`RelayStore`] publishes to the own relay over WebSocket and
//! reports its `OK`; [`DatabaseStore`] writes into any `nostr-database`
//! `NostrDatabase` (a nostr-relay-builder relay's LMDB or memory store).
//!
//! ```no_run
//! use std::sync::Arc;
//! use grasp_sync_tokio::{RelayStore, SyncManager};
//! use nostr::prelude::RelayUrl;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let own = RelayUrl::parse("wss://relay.example.com")?;
//! let manager = SyncManager::builder()
//!     .own_relay(own.clone())
//!     .store(Arc::new(RelayStore::new(own, std::time::Duration::from_secs(10))))
//!     .from_env()?
//!     .build()?;
//! let shutdown = manager.shutdown_handle();
//! let summary = tokio::spawn(manager.run());
//! // ... later:
//! shutdown.shutdown();
//! let summary = summary.await?;
//! println!("{summary:?}");
//! # Ok(())
//! # }
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod budget;
mod clock;
mod connection;
mod database;
mod decode;
mod delivery;
mod inbound;
mod manager;
mod metrics;
mod nip11;
mod resolve;
mod status;
mod store;
mod tls;
mod transport;
mod websocket;

pub use clock::TokioClock;
pub use connection::{ConnectionConfig, DEFAULT_MAX_MESSAGE_BYTES};
pub use database::DatabaseStore;
/// The futures-util crate (0.3) whose `Sink`, `Stream` and `BoxFuture` the
/// [`RelayTransport`] trait names.
pub use futures_util;
pub use grasp_sync_core as core;
pub use grasp_sync_core::metric_families::{MetricFamilies, MetricFamiliesError};
pub use grasp_sync_core::nip34::RepoRef;
pub use manager::{
    BuildError, HeldRepositories, ManagerStopped, ShutdownHandle, Summary, SyncManager,
    SyncManagerBuilder,
};
pub use metrics::{MetricsHandle, METRIC_FAMILIES, REFERENCE_SERVER_FAMILIES};
pub use nip11::Nip11Error;
/// The nostr crate we build on (0.45), whole: its modules
/// (`grasp_sync_tokio::nostr::prelude`, `::event`, `::filter` …) and, at this
/// module's root, everything of its prelude, so a host names our types
/// without a nostr dependency of its own at our version:
///
/// ```
/// use grasp_sync_tokio::nostr::{Event, EventId, Filter, Kind, PublicKey, RelayUrl, Timestamp};
///
/// let url = RelayUrl::parse("wss://relay.example.com").unwrap();
/// let filter = Filter::new().kind(Kind::GitRepoAnnouncement).since(Timestamp::from(0));
/// let _: Option<(Event, EventId, PublicKey)> = None;
/// assert_eq!(url.as_str(), "wss://relay.example.com");
/// assert_eq!(filter.kinds.map(|kinds| kinds.len()), Some(1));
/// ```
pub mod nostr {
    pub use ::nostr::prelude::*;
    pub use ::nostr::*;
}
pub use nostr_database;
pub use prometheus;
pub use resolve::{DialError, Resolver, StaticResolver, SystemResolver};
pub use status::{RelayStatus, SyncStatus};
pub use store::{RelayStore, INGEST_CONNECTIONS, INGEST_WINDOW};
pub use transport::{
    ConnectError, ConnectRequest, Incoming, RelayConnection, RelayTransport, SendError, TextFrame,
};
pub use websocket::WebSocketTransport;
