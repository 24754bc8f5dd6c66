//! The self-subscriber: one connection to the own relay, a live REQ for what
//! it accepts from now on and its history read page by page. When to
//! connect and from when to read are the engine's decisions
//! ([`SyncEngine::own_relay_reconnect_at`](grasp_sync_core::engine::SyncEngine::own_relay_reconnect_at),
//! [`SyncEngine::own_subscription_filter`](grasp_sync_core::engine::SyncEngine::own_subscription_filter)).

use std::time::Duration;

use grasp_sync_core::clock::Now;
use grasp_sync_core::pagination::{PageOutcome, PaginationState};
use grasp_sync_core::transport::RelayTransport;
use nostr::prelude::{Filter, RelayMessage, RelayUrl, SubscriptionId};
use tracing::warn;

use super::Runner;
use crate::connection::WsTransport;
use crate::inbound::Report;

const OWN_LIVE: &str = "grasp-sync-own-live";
const OWN_HISTORY: &str = "grasp-sync-own-history";
/// Events per page of the own relay's history.
const OWN_PAGE: usize = 500;
/// How long opening the own relay connection may take.
const OWN_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The self-subscriber's connection to the own relay.
pub(super) struct OwnConnection {
    transport: WsTransport,
    /// The current connection is being opened or is open.
    open: bool,
    /// Paging through the own relay's history, until done.
    history: Option<PaginationState>,
}

impl OwnConnection {
    /// A connection to the own relay, not opened yet.
    pub(super) fn new(transport: WsTransport) -> Self {
        OwnConnection {
            transport,
            open: false,
            history: None,
        }
    }

    /// `true` if reports of `relay` are ours.
    pub(super) fn is_for(&self, relay: &RelayUrl) -> bool {
        self.transport.relay_url() == relay
    }

    /// `true` while a connection is being opened or is open.
    pub(super) fn is_open(&self) -> bool {
        self.open
    }

    /// The connection, to wait for its task at shutdown.
    pub(super) fn transport_mut(&mut self) -> &mut WsTransport {
        &mut self.transport
    }
}

impl Runner {
    /// Opens the own relay connection when the engine says it is due.
    pub(super) fn connect_own(&mut self) {
        let now = self.clock_now();
        let Some(own) = &mut self.own else {
            return;
        };
        let due = !own.open
            && self
                .engine
                .own_relay_reconnect_at()
                .is_some_and(|at| at <= now.instant);
        if due {
            own.open = true;
            self.engine.handle_own_relay_connecting(now);
            if let Err(error) = own.transport.connect(OWN_CONNECT_TIMEOUT) {
                self.own_lost(now, &error.to_string());
            }
        }
    }

    /// A report from the own relay's connection task.
    pub(super) fn on_own(&mut self, generation: u64, report: Report) {
        let now = self.clock_now();
        let Some(own) = &mut self.own else {
            return;
        };
        if own.transport.generation() != generation {
            return;
        }
        match report {
            Report::Connected => {
                self.engine.handle_own_relay_connected(now);
                let filter = self.engine.own_subscription_filter();
                self.subscribe_own(filter);
            }
            Report::Message(message, _) => self.on_own_message(now, *message),
            Report::ConnectFailed(reason)
            | Report::AddressRefused(reason)
            | Report::Disconnected(reason) => self.own_lost(now, &reason),
            // `Event` only comes from connections that verify (not this).
            Report::Malformed(_) | Report::Limits(_) | Report::Event { .. } | Report::Alive => {}
        }
    }

    /// The self-subscription: a live REQ for what comes, and the history
    /// read page by page with `until` (a relay caps each REQ, and root events
    /// would crowd old announcements out of a single one).
    fn subscribe_own(&mut self, filter: Filter) {
        let Some(own) = &mut self.own else {
            return;
        };
        let live = filter.clone().limit(0);
        let mut history = filter;
        history.limit = Some(OWN_PAGE);
        let _ = own
            .transport
            .subscribe(&SubscriptionId::new(OWN_LIVE), &[live]);
        let _ = own
            .transport
            .subscribe(&SubscriptionId::new(OWN_HISTORY), &[history.clone()]);
        own.history = Some(PaginationState::new(history));
    }

    fn on_own_message(&mut self, now: Now, message: RelayMessage<'static>) {
        match message {
            RelayMessage::Event {
                subscription_id,
                event,
            } => {
                let event = event.into_owned();
                if subscription_id.as_str() == OWN_HISTORY {
                    if let Some(paging) = self.own.as_mut().and_then(|own| own.history.as_mut()) {
                        paging.on_event(event.id, event.created_at);
                    }
                }
                self.engine.handle_own_events(now, [event]);
            }
            RelayMessage::EndOfStoredEvents(id) if id.as_str() == OWN_HISTORY => {
                self.next_own_page(now)
            }
            RelayMessage::Closed {
                subscription_id,
                message,
            } => {
                // The own relay ended the self-subscription: start over.
                warn!(id = %subscription_id, %message, "own relay closed the self-subscription; reconnecting");
                if let Some(own) = &mut self.own {
                    let _ = own.transport.close();
                }
                self.own_lost(now, "self-subscription closed");
            }
            _ => {}
        }
    }

    /// The end of a history page: the next page, or the history is complete.
    fn next_own_page(&mut self, now: Now) {
        let Some(own) = &mut self.own else {
            return;
        };
        let history = SubscriptionId::new(OWN_HISTORY);
        match own.history.as_mut().map(|paging| paging.on_eose(None)) {
            Some(PageOutcome::NextPage(filter)) => {
                let _ = own.transport.subscribe(&history, &[filter]);
            }
            _ => {
                own.history = None;
                let _ = own.transport.unsubscribe(&history);
                self.engine.handle_own_history_complete(now);
            }
        }
    }

    /// The own relay connection is gone (or never opened): the engine
    /// decides when to try again.
    fn own_lost(&mut self, now: Now, reason: &str) {
        let Some(own) = &mut self.own else {
            return;
        };
        warn!(reason, "own relay connection lost; retrying");
        own.open = false;
        own.history = None;
        self.engine.handle_own_relay_disconnected(now);
    }
}
