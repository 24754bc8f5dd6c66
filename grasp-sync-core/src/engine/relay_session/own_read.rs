//! What the own relay's session does that a remote relay's does not
//! ([`Role::Own`](super::Role::Own)): the self-subscription — a live
//! subscription and the history read page by page with `until`
//! ([`PaginationState`]) — and the catch-up point. Its connection, health,
//! backoff and timers are the session's, like any relay's; the events it
//! reads go to the self-subscriber ([`SessionEvent::OwnEvent`]), not to the
//! store.

use nostr::prelude::{Event, EventId, Filter, RelayMessage, SubscriptionId, Timestamp};
use tracing::{info, warn};

use super::super::config::EngineConfig;
use super::super::session_events::{Noted, SessionEvent};
use super::super::Command;
use super::Ctx;
use crate::clock::Now;
use crate::health::HealthConfig;
use crate::pagination::{PageOutcome, PaginationState};

/// Subscription id of the live self-subscription (`limit: 0`).
const OWN_LIVE: &str = "grasp-sync-own-live";
/// Subscription id of the self-subscription's history pages.
const OWN_HISTORY: &str = "grasp-sync-own-history";

/// The own relay's self-subscription: the history paging of the current
/// connection and the catch-up point.
#[derive(Debug, Default)]
pub(crate) struct OwnRead {
    /// Paging through the history on the open connection; `None` before
    /// it opened and once the history was read completely.
    history: Option<Box<PaginationState>>,
    /// The history was read completely on the open connection.
    read: bool,
    /// Everything the own relay held was read up to this moment (wall
    /// clock): its history was read completely and the live subscription ran
    /// until then. The next self-subscription catches up from here.
    caught_up_to: Option<Timestamp>,
}

/// What the session must do after a message of the own relay.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum OwnStep {
    /// Nothing more.
    Done,
    /// The relay closed the self-subscription: reconnect.
    Reconnect,
}

impl OwnRead {
    /// The own relay's health timing: any relay's, with the own relay's
    /// reconnect backoff (`HealthConfig::own_relay_backoff`); the connect
    /// timeout stays any relay's.
    pub(crate) fn health(config: &HealthConfig) -> HealthConfig {
        HealthConfig {
            backoff: config.own_relay_backoff,
            ..config.clone()
        }
    }

    /// `true` once the history was read completely on the open connection.
    pub(crate) fn history_read(&self) -> bool {
        self.read
    }

    /// The filter of the self-subscription: kinds 30617, 1617, 1618, 1621
    /// (and 10002, 10317 with Sync+ on), and once the history was read
    /// completely, `since` the catch-up point minus the quick-reconnect
    /// window.
    pub(crate) fn subscription_filter(&self, config: &EngineConfig) -> Filter {
        let since = self.caught_up_to.map(|at| {
            Timestamp::from_secs(
                at.as_secs()
                    .saturating_sub(config.timeouts.quick_reconnect_window.as_secs()),
            )
        });
        let filter = crate::filters::own_relay_filter(config.sync_plus.enabled);
        match since {
            Some(since) => filter.since(since),
            None => filter,
        }
    }

    /// The connection opened: the live subscription and the first history
    /// page (a relay caps each REQ, and root events would crowd old
    /// announcements out of a single one: the history is paged).
    pub(crate) fn opened(&mut self, cx: &mut Ctx<'_>) {
        let filter = self.subscription_filter(cx.config);
        let live = filter.clone().limit(0);
        let history = filter.limit(cx.config.limits.page_limit);
        cx.out.push(Command::Subscribe {
            relay: cx.relay.clone(),
            id: SubscriptionId::new(OWN_LIVE),
            filters: vec![live],
        });
        cx.out.push(Command::Subscribe {
            relay: cx.relay.clone(),
            id: SubscriptionId::new(OWN_HISTORY),
            filters: vec![history.clone()],
        });
        self.history = Some(Box::new(PaginationState::new(history)));
        self.read = false;
    }

    /// The connection is gone at `now`. If its history had been read
    /// completely, everything up to now was seen; otherwise the catch-up
    /// point stays where the last complete read left it.
    pub(crate) fn lost(&mut self, now: Now) {
        if self.read {
            self.caught_up_to = Some(now.unix);
        }
        self.history = None;
        self.read = false;
    }

    /// A message from the own relay on the open connection: the events of
    /// the self-subscription, the end of a history page, or a CLOSED (the
    /// answer: reconnect).
    pub(crate) fn on_message(
        &mut self,
        cx: &mut Ctx<'_>,
        now: Now,
        message: RelayMessage<'_>,
    ) -> OwnStep {
        match message {
            RelayMessage::Event {
                subscription_id,
                event,
            } => self.on_event(cx, &subscription_id, event.into_owned()),
            RelayMessage::EndOfStoredEvents(id) if id.as_str() == OWN_HISTORY => {
                self.next_page(cx, now);
            }
            RelayMessage::Closed {
                subscription_id,
                message,
            } => {
                warn!(id = %subscription_id, %message, "own relay closed the self-subscription; reconnecting");
                return OwnStep::Reconnect;
            }
            _ => {}
        }
        OwnStep::Done
    }

    /// An event of the self-subscription: counted on its history page, and
    /// for the self-subscriber (not again when a page repeats it: `until`
    /// is inclusive). The own relay accepted it: it is not checked again.
    /// A live echo of what this engine stored lately is not (the store's
    /// answer planned it, [`is_echo`]).
    pub(crate) fn on_event(
        &mut self,
        cx: &mut Ctx<'_>,
        subscription_id: &SubscriptionId,
        event: Event,
    ) {
        match subscription_id.as_str() {
            OWN_HISTORY => {
                if let Some(paging) = &mut self.history {
                    if !paging.on_event(event.id, event.created_at) {
                        return;
                    }
                }
            }
            OWN_LIVE => {
                if is_echo(cx, &event.id) {
                    return cx.events.push(Noted::OwnEcho);
                }
            }
            _ => return cx.events.push(Noted::InputIgnored),
        }
        cx.events.push(SessionEvent::OwnEvent(Box::new(event)));
    }

    /// The end of a history page: the next page, or the history is
    /// complete — the catch-up point moves to now, and
    /// [`SessionEvent::OwnHistoryRead`] plans what it brought now, not
    /// after the batch window (which is for live events).
    fn next_page(&mut self, cx: &mut Ctx<'_>, now: Now) {
        let Some(paging) = &mut self.history else {
            return;
        };
        let id = SubscriptionId::new(OWN_HISTORY);
        let relay = cx.relay.clone();
        match paging.on_eose(None) {
            PageOutcome::NextPage(filter) => cx.out.push(Command::Subscribe {
                relay,
                id,
                filters: vec![filter],
            }),
            PageOutcome::Complete => {
                self.history = None;
                self.read = true;
                cx.out.push(Command::Unsubscribe { relay, id });
                info!("own relay history read");
                self.caught_up_to = Some(now.unix);
                cx.events.push(SessionEvent::OwnHistoryRead);
            }
        }
    }
}

/// Is this live event of the own relay one this engine stored itself
/// lately? The store's answer queued it for planning then (`plan_stored`);
/// an event still waiting for that answer is not an echo yet, and is queued
/// (planning it twice is harmless, missing it is not).
fn is_echo(cx: &Ctx<'_>, id: &EventId) -> bool {
    cx.stores.stored_lately(id)
}
