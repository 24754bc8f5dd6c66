//! The own relay, as the engine holds it ([`OwnRelay`]): its URL and its
//! session — a [`RelaySession`] in the own role, connected, backed off and
//! timed out like any relay's, which reads the self-subscription
//! (`relay_session/own_read.rs`) — and the self-subscriber's side: the
//! events waiting for its batch window and the announcements applied.
//!
//! Without [`Identity::own_relay`](super::Identity::own_relay) (a relay
//! that embeds the library) there is no session: the embedder hands
//! accepted events to
//! [`SyncEngine::handle_own_events`](super::SyncEngine::handle_own_events).

use std::collections::HashMap;

use nostr::prelude::{Event, EventId, Filter, RelayUrl, Timestamp};

use super::config::EngineConfig;
use super::relay_session::RelaySession;
use crate::clock::Instant;
use crate::nip34::RepoRef;

/// The own relay's session and the self-subscriber's queue and
/// announcements.
#[derive(Debug, Default)]
pub(super) struct OwnRelay {
    /// The own relay connection's URL and session, if the engine reads one.
    session: Option<(RelayUrl, RelaySession)>,
    /// Accepted events waiting for the batch window.
    queued: Vec<Event>,
    /// `created_at` and id of the announcement applied per repository, so an
    /// older announcement never replaces a newer one and the same one is
    /// applied once (NIP-01: of two with the same `created_at`, the lower id
    /// stands).
    announced_at: HashMap<RepoRef, (Timestamp, EventId)>,
}

impl OwnRelay {
    /// The own relay of an engine with (`url`) or without an own relay
    /// connection; its first attempt is due at once.
    pub(super) fn new(url: Option<RelayUrl>) -> Self {
        OwnRelay {
            session: url.map(|url| (url, RelaySession::own())),
            ..OwnRelay::default()
        }
    }

    // --- Questions ------------------------------------------------------------

    /// `true` if `relay` is the own relay connection's URL: its inputs go to
    /// the own relay's session.
    pub(super) fn is_for(&self, relay: &RelayUrl) -> bool {
        self.url() == Some(relay)
    }

    /// The own relay connection's URL, if the engine reads one.
    pub(super) fn url(&self) -> Option<&RelayUrl> {
        self.session.as_ref().map(|(url, _)| url)
    }

    /// The own relay's session, if the engine reads one.
    pub(super) fn session_mut(&mut self) -> Option<&mut RelaySession> {
        self.session.as_mut().map(|(_, session)| session)
    }

    /// When the own relay's session has work for its timers, after `now`.
    pub(super) fn next_deadline(&self, now: Instant, config: &EngineConfig) -> Option<Instant> {
        let (_, session) = self.session.as_ref()?;
        session.next_deadline(now, config).map(|(_, at)| at)
    }

    /// `true` once the history was read completely on the current
    /// connection, and always without an own relay connection.
    pub(super) fn history_complete(&self) -> bool {
        self.session
            .as_ref()
            .is_none_or(|(_, session)| session.own_history_read())
    }

    /// The filter of the self-subscription
    /// (`RelaySession::own_subscription_filter`; without an own relay
    /// connection, the one a first connection would use).
    pub(super) fn subscription_filter(&self, config: &EngineConfig) -> Filter {
        self.session
            .as_ref()
            .and_then(|(_, session)| session.own_subscription_filter(config))
            .unwrap_or_else(|| crate::filters::own_relay_filter(config.sync_plus.enabled))
    }

    // --- The self-subscriber's batch -----------------------------------------

    /// Queues accepted events for the self-subscriber's batch; `true` if
    /// any was queued (the batch window starts unless it runs).
    pub(super) fn queue<I>(&mut self, events: I) -> bool
    where
        I: IntoIterator<Item = Event>,
    {
        let before = self.queued.len();
        self.queued.extend(events);
        self.queued.len() > before
    }

    /// The events of the batch, taken for planning.
    pub(super) fn take_queued(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.queued)
    }

    /// `true` when no event waits for the batch.
    pub(super) fn nothing_queued(&self) -> bool {
        self.queued.is_empty()
    }

    /// The `created_at` and id of the announcement applied for `repo`.
    pub(super) fn announced(&self, repo: &RepoRef) -> Option<&(Timestamp, EventId)> {
        self.announced_at.get(repo)
    }

    /// The announcement `at` was applied for `repo`.
    pub(super) fn note_announced(&mut self, repo: RepoRef, at: (Timestamp, EventId)) {
        self.announced_at.insert(repo, at);
    }

    /// How many repositories have an announcement applied.
    pub(super) fn announced_count(&self) -> usize {
        self.announced_at.len()
    }
}
