//! The own relay as the self-subscriber sees it: its connection (the
//! engine asks for it with [`Command::Connect`] like for any relay, and is
//! told of it with the same inputs, routed here by URL), the live
//! subscription and the history read page by page with `until`
//! ([`PaginationState`]), the catch-up point, and the batch window of the
//! events it reports.
//!
//! Without [`Identity::own_relay`](super::Identity::own_relay) (a
//! relay that embeds the library) there is no connection: the embedder
//! hands accepted events to [`SyncEngine::handle_own_events`].

use crate::health::Retry;
use std::collections::HashMap;
use std::time::Duration;

use nostr::prelude::{Event, EventId, RelayUrl, Timestamp};

use crate::clock::Instant;
use crate::nip34::RepoRef;
use crate::pagination::PaginationState;

/// Subscription id of the live self-subscription (`limit: 0`).
pub(super) const OWN_LIVE: &str = "grasp-sync-own-live";
/// Subscription id of the self-subscription's history pages.
pub(super) const OWN_HISTORY: &str = "grasp-sync-own-history";
/// How long opening the own relay connection may take.
pub(super) const OWN_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Where the own relay connection is.
#[derive(Debug, Default)]
pub(super) enum OwnLink {
    /// No own relay connection: the embedder feeds accepted events.
    #[default]
    Unused,
    /// Closed; the next attempt is due then (`HealthConfig::own_relay_backoff`).
    Closed {
        /// When to connect again.
        reconnect_at: Instant,
    },
    /// [`Command::Connect`] sent; given up at `deadline`.
    Connecting {
        /// When the attempt is abandoned.
        deadline: Instant,
    },
    /// Open: the live subscription runs, the history is paged until read.
    Open {
        /// Paging through the history; `None` once it was read completely.
        history: Option<Box<PaginationState>>,
    },
}

/// The own relay as the self-subscriber sees it.
#[derive(Debug, Default)]
pub(super) struct OwnRelay {
    /// The own relay's URL ([`Identity::own_relay`](super::Identity::own_relay)).
    pub(super) url: Option<RelayUrl>,
    /// The connection.
    pub(super) link: OwnLink,
    /// Accepted events waiting for the batch window.
    pub(super) queued: Vec<Event>,
    /// Everything the own relay held was read up to this moment (wall
    /// clock): its history was read completely and the live subscription ran
    /// until then. The next self-subscription catches up from here.
    pub(super) caught_up_to: Option<Timestamp>,
    /// `created_at` and id of the announcement applied per repository, so an
    /// older announcement never replaces a newer one and the same one is
    /// applied once (NIP-01: of two with the same `created_at`, the lower id
    /// stands).
    pub(super) announced_at: HashMap<RepoRef, (Timestamp, EventId)>,
    /// Lost connections in a row and their backoff
    /// ([`HealthConfig::own_relay_backoff`](crate::health::HealthConfig::own_relay_backoff));
    /// `None` once connected.
    pub(super) retry: Option<Retry>,
}

impl OwnRelay {
    /// The state of an engine with (`url`) or without an own relay
    /// connection; the first attempt is due at `now`.
    pub(super) fn new(url: Option<RelayUrl>, now: Instant) -> Self {
        let link = match url {
            Some(_) => OwnLink::Closed { reconnect_at: now },
            None => OwnLink::Unused,
        };
        OwnRelay {
            url,
            link,
            ..OwnRelay::default()
        }
    }

    /// `true` if `relay` is the own relay connection's URL: its inputs are
    /// the self-subscriber's.
    pub(super) fn is_for(&self, relay: &RelayUrl) -> bool {
        self.url.as_ref() == Some(relay)
    }

    /// When the connection has work for `handle_timeout`: the reconnect or
    /// the end of the connect attempt.
    pub(super) fn deadline(&self) -> Option<Instant> {
        match self.link {
            OwnLink::Closed { reconnect_at } => Some(reconnect_at),
            OwnLink::Connecting { deadline } => Some(deadline),
            OwnLink::Unused | OwnLink::Open { .. } => None,
        }
    }

    /// `true` while the connection is open and its history was read.
    pub(super) fn history_complete(&self) -> bool {
        matches!(self.link, OwnLink::Open { history: None })
    }
}
