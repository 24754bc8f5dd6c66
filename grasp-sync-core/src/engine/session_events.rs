//! What a relay's session tells the engine happened while it handled an
//! input ([`SessionEvent`]), queued in [`SessionEvents`] and drained by the
//! engine after the input: the engine reacts to what reaches beyond the
//! relay (a batch opened or ended, a connection opened or lost, a history
//! read complete) and counts every event into
//! [`EngineStats`](super::EngineStats) ([`EngineStats::count`](super::EngineStats::count)).
//! A session never touches the engine's counters, and the engine never
//! compares a counter to learn what an input did.

use crate::model::BatchId;
use crate::screen::Refused;

/// Something that happened in a relay's session (or the own relay's).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum SessionEvent {
    /// The connection opened.
    Connected,
    /// The open connection was lost or closed.
    Disconnected,
    /// A batch of work was opened.
    BatchOpened(BatchId),
    /// A batch was confirmed. `history`: it was a history read (Layer 1 or
    /// Layers 2+3 items), whose announcements and root events are planned
    /// at once.
    BatchConfirmed {
        /// The batch.
        batch: BatchId,
        /// A Layer 1 or Layers 2+3 history read.
        history: bool,
    },
    /// A batch failed; its items are planned again.
    BatchFailed(BatchId),
    /// The own relay's history was read completely: what is queued for the
    /// self-subscriber is planned now.
    OwnHistoryRead,
    /// An event the own relay serves, for the self-subscriber's batch.
    OwnEvent(Box<nostr::prelude::Event>),
    /// Something only counted.
    Noted(Noted),
}

/// What a session notes only to be counted (and logged where it happens).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Noted {
    /// An event dropped before it could be stored, and why.
    Dropped(Dropped),
    /// A message too large for the connection.
    Oversized,
    /// The relay sent too many bad events and was cut off.
    RelayCut,
    /// A negentropy message over the relay's frame budget.
    NegentropyOverLimit,
    /// An event the relay had sent lately already.
    ReceivedAgain,
    /// Ids a fetch asked for that the relay did not send.
    FetchMissing(u64),
    /// A fetch asked again for what was missing.
    FetchRetry,
    /// Seconds work waited for a subscription slot.
    Crowded(u64),
    /// The relay's frame budget was lowered.
    FrameBudgetLowered,
    /// A learned limit was raised again.
    LimitsRaised,
    /// The store could not list its items for a negentropy session.
    LocalItemsFailed,
    /// A negentropy session was cut short.
    NegentropySessionCut,
    /// The relay refused NIP-77.
    NegentropyRefused,
    /// A negentropy round was answered.
    NegentropyRound,
    /// A missing id was not fetched: stored lately or on its way.
    FetchSaved,
    /// Live subscriptions were consolidated.
    Consolidated,
    /// Live filters that do not fit were polled with `since`.
    UncoveredPoll,
    /// Fresh root events whose replies were reconciled against what the
    /// relay sent.
    FreshRootsReconciled(u64),
    /// Fresh root events whose replies were fetched by REQ.
    FreshRootsByReq(u64),
    /// A historic REQ the relay stopped answering was asked again.
    ReqResumed,
    /// The relay refused a subscription (its limit was lowered).
    SubscriptionRefused,
    /// The relay rate-limited us.
    RateLimited,
    /// The own relay's echo of an event we stored.
    OwnEcho,
    /// An input that does not fit the state.
    InputIgnored,
}

/// Why an event was dropped before it could be stored (one [`Refused`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dropped {
    /// Its id or signature did not verify.
    Forged,
    /// On a subscription we do not have open.
    UnknownSubscription,
    /// It matched no filter of its subscription.
    OffFilter,
    /// Over the size limits.
    Oversized,
    /// Not a readable event.
    Malformed,
}

impl Dropped {
    /// Why `refused` was dropped.
    pub(crate) fn of(refused: &Refused) -> Dropped {
        match refused {
            Refused::Forged(_) => Dropped::Forged,
            Refused::UnknownSubscription { .. } => Dropped::UnknownSubscription,
            Refused::OffFilter { .. } => Dropped::OffFilter,
            Refused::Oversized { .. } => Dropped::Oversized,
            Refused::Malformed { .. } => Dropped::Malformed,
        }
    }
}

impl From<Noted> for SessionEvent {
    fn from(noted: Noted) -> Self {
        SessionEvent::Noted(noted)
    }
}

/// The session events of one input, in the order they happened.
#[derive(Debug, Default)]
pub(crate) struct SessionEvents {
    queue: Vec<SessionEvent>,
}

impl SessionEvents {
    /// Queues `event`.
    pub(crate) fn push(&mut self, event: impl Into<SessionEvent>) {
        self.queue.push(event.into());
    }

    /// Takes every event queued, oldest first.
    pub(crate) fn take(&mut self) -> Vec<SessionEvent> {
        std::mem::take(&mut self.queue)
    }
}

/// What the session events of an input reached beyond its relay
/// ([`Reached::note`]), gathered by the engine until it acts on them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Reached {
    /// Other relays may have work or a confirmation because of it: a batch
    /// opened or ended, a connection opened or lost, a relay added or
    /// dropped, the store falling behind or catching up.
    pub(crate) others: bool,
    /// A history read completed (a remote relay's or the own relay's):
    /// what the self-subscriber queued is planned now.
    pub(crate) history_read: bool,
}

impl Reached {
    /// Notes what `event` reaches.
    pub(crate) fn note(&mut self, event: &SessionEvent) {
        match event {
            SessionEvent::Connected
            | SessionEvent::Disconnected
            | SessionEvent::BatchOpened(_)
            | SessionEvent::BatchFailed(_) => self.others = true,
            SessionEvent::BatchConfirmed { history, .. } => {
                self.others = true;
                self.history_read |= history;
            }
            SessionEvent::OwnHistoryRead => self.history_read = true,
            SessionEvent::OwnEvent(_) | SessionEvent::Noted(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_spans_relays_reaches_the_others() {
        let mut reached = Reached::default();
        reached.note(&Noted::RateLimited.into());
        reached.note(&SessionEvent::OwnHistoryRead);
        assert!(!reached.others && reached.history_read);
        reached.history_read = false;
        reached.note(&SessionEvent::BatchConfirmed {
            batch: BatchId(1),
            history: false,
        });
        assert!(reached.others && !reached.history_read);
        reached.note(&SessionEvent::BatchConfirmed {
            batch: BatchId(2),
            history: true,
        });
        assert!(reached.history_read);
    }

    #[test]
    fn events_are_taken_in_the_order_they_happened() {
        let mut events = SessionEvents::default();
        events.push(SessionEvent::Connected);
        events.push(Noted::ReqResumed);
        assert_eq!(
            events.take(),
            vec![SessionEvent::Connected, Noted::ReqResumed.into()]
        );
        assert!(events.take().is_empty());
    }
}
