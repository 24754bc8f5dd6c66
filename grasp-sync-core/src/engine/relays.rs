//! Every relay's session, by URL: what the engine routes inputs to.

use indexmap::IndexMap;
use nostr::prelude::RelayUrl;

use super::relay_session::RelaySession;
use crate::model::{ItemsInFlight, RelayProgress, RelayState};

/// Every relay's session, by URL, in the order they were first met (so
/// every walk over them is deterministic).
#[derive(Debug, Default)]
pub(crate) struct Relays {
    sessions: IndexMap<RelayUrl, RelaySession>,
    /// How many sessions have a state (tracked relays).
    tracked: usize,
}

/// The session of a relay the engine does not know: nothing learned.
static UNKNOWN: std::sync::LazyLock<RelaySession> = std::sync::LazyLock::new(RelaySession::default);

impl Relays {
    /// Starts tracking `relay` (its session is created if needed);
    /// registering a tracked relay as bootstrap marks it bootstrap, it never
    /// unmarks. `true` if the relay was not tracked before.
    pub(crate) fn register(&mut self, relay: RelayUrl, is_bootstrap: bool) -> bool {
        let new = self.sessions.entry(relay).or_default().track(is_bootstrap);
        if new {
            self.tracked += 1;
        }
        new
    }

    /// What `relay` confirmed, if it is tracked.
    pub(crate) fn state(&self, relay: &RelayUrl) -> Option<&RelayState> {
        self.sessions.get(relay)?.state()
    }

    /// Every tracked relay with its state, in the order first met.
    pub(crate) fn tracked(&self) -> impl Iterator<Item = (&RelayUrl, &RelayState)> {
        self.sessions
            .iter()
            .filter_map(|(relay, session)| Some((relay, session.state()?)))
    }

    /// How many relays are tracked.
    pub(crate) fn tracked_count(&self) -> usize {
        self.tracked
    }

    /// `true` when no relay, tracked or not, has a batch in flight, and
    /// every open connection is quiet ([`RelaySession::is_quiet`]: nothing
    /// queued, no live coverage waiting, only live subscriptions open).
    pub(crate) fn all_quiet(&self) -> bool {
        self.sessions.values().all(|session| {
            session.batch_count() == 0 && (!session.is_connected() || session.is_quiet())
        })
    }

    /// The session of `relay`, or an empty one (nothing learned) if the
    /// engine does not know it: for questions whose answer for an unknown
    /// relay is the configured default.
    pub(crate) fn view(&self, relay: &RelayUrl) -> &RelaySession {
        self.sessions.get(relay).unwrap_or(&UNKNOWN)
    }

    /// The session of `relay`, if the engine knows it.
    pub(crate) fn get(&self, relay: &RelayUrl) -> Option<&RelaySession> {
        self.sessions.get(relay)
    }

    /// [`Relays::get`], to change.
    pub(crate) fn get_mut(&mut self, relay: &RelayUrl) -> Option<&mut RelaySession> {
        self.sessions.get_mut(relay)
    }

    /// The session of `relay`, created empty on first use.
    pub(crate) fn entry(&mut self, relay: RelayUrl) -> &mut RelaySession {
        self.sessions.entry(relay).or_default()
    }

    /// Forgets `relay` and everything about it.
    pub(crate) fn remove(&mut self, relay: &RelayUrl) -> Option<RelaySession> {
        let session = self.sessions.shift_remove(relay)?;
        if session.is_tracked() {
            self.tracked -= 1;
        }
        Some(session)
    }

    /// Every relay the engine knows.
    pub(crate) fn urls(&self) -> impl Iterator<Item = &RelayUrl> {
        self.sessions.keys()
    }

    /// `true` while `relay`'s connection is open
    /// ([`RelaySession::is_connected`]).
    pub(crate) fn is_connected(&self, relay: &RelayUrl) -> bool {
        self.sessions
            .get(relay)
            .is_some_and(RelaySession::is_connected)
    }

    /// Every relay with an open connection ([`RelaySession::is_connected`]).
    pub(crate) fn connected(&self) -> impl Iterator<Item = &RelayUrl> {
        self.sessions
            .iter()
            .filter(|(_, session)| session.is_connected())
            .map(|(relay, _)| relay)
    }

    /// The session of `relay` while its connection is open.
    pub(crate) fn connected_mut(&mut self, relay: &RelayUrl) -> Option<&mut RelaySession> {
        self.sessions
            .get_mut(relay)
            .filter(|session| session.is_connected())
    }
}

impl RelayProgress for Relays {
    fn connected_state(&self, relay: &RelayUrl) -> Option<&RelayState> {
        self.sessions
            .get(relay)
            .filter(|session| session.is_connected())?
            .state()
    }

    fn pending(&self, relay: &RelayUrl) -> Option<&ItemsInFlight> {
        self.sessions.get(relay).map(RelaySession::items_in_flight)
    }
}
