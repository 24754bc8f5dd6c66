//! The own relay as the self-subscriber sees it, as a session of its own
//! ([`OwnSession`]): its connection (the session asks for it with
//! [`Command::Connect`] like for any relay, and is told of it with the same
//! inputs, which the engine routes here by URL), the live subscription and
//! the history read page by page with `until` ([`PaginationState`]), the
//! catch-up point, and the batch window of the events it reports. Its
//! methods are named like [`RelaySession`](super::relay_session::RelaySession)'s
//! for the same inputs; what the engine must do after one (start the batch
//! window, plan a history read now) is the answer, a session event ([`SessionEvent`](super::session_events::SessionEvent)).
//!
//! Without [`Identity::own_relay`](super::Identity::own_relay) (a
//! relay that embeds the library) there is no connection: the embedder
//! hands accepted events to [`SyncEngine::handle_own_events`](super::SyncEngine::handle_own_events).

use crate::health::Retry;
use std::collections::HashMap;

use nostr::prelude::{Event, EventId, Filter, RelayMessage, RelayUrl, SubscriptionId, Timestamp};
use tracing::{debug, info, warn};

use super::config::EngineConfig;
use super::relay_session::{count_refused, Ctx};
use super::session_events::{Noted, SessionEvent};
use super::Command;
use crate::clock::{Instant, Now};
use crate::nip34::RepoRef;
use crate::pagination::{PageOutcome, PaginationState};
use crate::screen::Refused;
use crate::transport::TransportError;
use crate::verified::VerifiedEvent;

/// Subscription id of the live self-subscription (`limit: 0`).
const OWN_LIVE: &str = "grasp-sync-own-live";
/// Subscription id of the self-subscription's history pages.
const OWN_HISTORY: &str = "grasp-sync-own-history";

/// Where the own relay connection is.
#[derive(Debug, Default)]
enum OwnLink {
    /// No own relay connection: the embedder feeds accepted events.
    #[default]
    Unused,
    /// Closed; the next attempt is due then (`HealthConfig::own_relay_backoff`).
    Closed {
        /// When to connect again.
        reconnect_at: Instant,
    },
    /// [`Command::Connect`] sent; given up at `deadline`
    /// (`HealthConfig::connect_timeout`, as for any relay).
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

/// The own relay as the self-subscriber sees it: its connection, history
/// read, catch-up point, the events waiting for the batch window and the
/// announcements applied.
#[derive(Debug, Default)]
pub(super) struct OwnSession {
    /// The own relay's URL ([`Identity::own_relay`](super::Identity::own_relay)).
    url: Option<RelayUrl>,
    /// The connection.
    link: OwnLink,
    /// Accepted events waiting for the batch window.
    queued: Vec<Event>,
    /// Everything the own relay held was read up to this moment (wall
    /// clock): its history was read completely and the live subscription ran
    /// until then. The next self-subscription catches up from here.
    caught_up_to: Option<Timestamp>,
    /// `created_at` and id of the announcement applied per repository, so an
    /// older announcement never replaces a newer one and the same one is
    /// applied once (NIP-01: of two with the same `created_at`, the lower id
    /// stands).
    announced_at: HashMap<RepoRef, (Timestamp, EventId)>,
    /// Lost connections in a row and their backoff
    /// ([`HealthConfig::own_relay_backoff`](crate::health::HealthConfig::own_relay_backoff));
    /// `None` once connected.
    retry: Option<Retry>,
}

impl OwnSession {
    /// The state of an engine with (`url`) or without an own relay
    /// connection; the first attempt is due at `now`.
    pub(super) fn new(url: Option<RelayUrl>, now: Instant) -> Self {
        let link = match url {
            Some(_) => OwnLink::Closed { reconnect_at: now },
            None => OwnLink::Unused,
        };
        OwnSession {
            url,
            link,
            ..OwnSession::default()
        }
    }

    // --- Questions ------------------------------------------------------------

    /// `true` if `relay` is the own relay connection's URL: its inputs are
    /// the self-subscriber's.
    pub(super) fn is_for(&self, relay: &RelayUrl) -> bool {
        self.url.as_ref() == Some(relay)
    }

    /// The own relay connection's URL, if the engine reads one.
    pub(super) fn url(&self) -> Option<&RelayUrl> {
        self.url.as_ref()
    }

    /// When the connection has work for [`OwnSession::handle_timeout`]: the
    /// reconnect or the end of the connect attempt.
    pub(super) fn next_deadline(&self) -> Option<Instant> {
        match self.link {
            OwnLink::Closed { reconnect_at } => Some(reconnect_at),
            OwnLink::Connecting { deadline } => Some(deadline),
            OwnLink::Unused | OwnLink::Open { .. } => None,
        }
    }

    /// `true` once the history was read completely on the current
    /// connection, and always without an own relay connection.
    pub(super) fn history_complete(&self) -> bool {
        self.url.is_none() || self.history_read_on_this_connection()
    }

    /// `true` while the connection is open and its history was read.
    fn history_read_on_this_connection(&self) -> bool {
        matches!(self.link, OwnLink::Open { history: None })
    }

    /// The filter of the self-subscription: kinds 30617, 1617, 1618, 1621
    /// (and 10002, 10317 with Sync+ on), and once the history was read completely, `since` the catch-up point
    /// minus the quick-reconnect window.
    pub(super) fn subscription_filter(&self, config: &EngineConfig) -> Filter {
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

    // --- Connecting ---------------------------------------------------------------

    /// The session's timers: connect when the backoff is over, give up a
    /// connect attempt past its timeout.
    pub(super) fn handle_timeout(&mut self, cx: &mut Ctx<'_>, now: Now) {
        match self.link {
            OwnLink::Closed { reconnect_at } if reconnect_at <= now.instant => {
                self.connect_attempt(cx, now);
            }
            OwnLink::Connecting { deadline } if deadline <= now.instant => {
                cx.out.push(Command::Disconnect {
                    relay: cx.relay.clone(),
                });
                self.lost(cx, now, "connect timed out");
            }
            _ => {}
        }
    }

    /// Asks for the connection, given up after
    /// `HealthConfig::connect_timeout` like any relay's.
    fn connect_attempt(&mut self, cx: &mut Ctx<'_>, now: Now) {
        let relay = cx.relay.clone();
        debug!(%relay, "connecting to the own relay");
        let timeout = cx.config.health.connect_timeout();
        self.link = OwnLink::Connecting {
            deadline: now.instant + timeout,
        };
        cx.out.push(Command::Connect { relay, timeout });
    }

    /// The connection opened: the live subscription and the first history
    /// page.
    pub(super) fn connected(&mut self, cx: &mut Ctx<'_>) {
        if !matches!(self.link, OwnLink::Connecting { .. }) {
            return self.ignored(cx, "connected without an attempt");
        }
        self.retry = None;
        // A relay caps each REQ, and root events would crowd old
        // announcements out of a single one: the history is paged.
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
        self.link = OwnLink::Open {
            history: Some(Box::new(PaginationState::new(history))),
        };
    }

    /// The connection attempt failed.
    pub(super) fn connect_failed(&mut self, cx: &mut Ctx<'_>, now: Now) {
        self.closed(cx, now, "connection failed");
    }

    /// The connection dropped.
    pub(super) fn connection_closed(&mut self, cx: &mut Ctx<'_>, now: Now) {
        self.closed(cx, now, "connection lost");
    }

    /// A message over the driver's size limit ended the connection: counted
    /// in `dropped_oversized`, reconnected after the backoff.
    pub(super) fn message_too_large(&mut self, cx: &mut Ctx<'_>, now: Now, bytes: usize) {
        warn!(relay = %cx.relay, bytes, "own relay sent a message over the size limit");
        cx.events.push(Noted::Oversized);
        self.closed(cx, now, "message over the size limit");
    }

    /// The connection could not take a message: closed, reconnected after
    /// the backoff.
    pub(super) fn send_failed(&mut self, cx: &mut Ctx<'_>, now: Now, error: &TransportError) {
        warn!(relay = %cx.relay, %error, "cannot send to the own relay; reconnecting");
        cx.out.push(Command::Disconnect {
            relay: cx.relay.clone(),
        });
        self.closed(cx, now, "send failed");
    }

    /// The connection could not be opened, dropped, or could not take a
    /// message.
    fn closed(&mut self, cx: &mut Ctx<'_>, now: Now, why: &str) {
        match self.link {
            OwnLink::Connecting { .. } | OwnLink::Open { .. } => self.lost(cx, now, why),
            OwnLink::Unused | OwnLink::Closed { .. } => self.ignored(cx, "closed while closed"),
        }
    }

    /// The connection is gone. If its history had been read completely,
    /// everything up to now was seen; otherwise the catch-up point stays
    /// where the last complete read left it. The next attempt is due after
    /// `HealthConfig::own_relay_backoff`.
    fn lost(&mut self, cx: &mut Ctx<'_>, now: Now, why: &str) {
        warn!(reason = why, "own relay connection lost; retrying");
        if self.history_read_on_this_connection() {
            self.caught_up_to = Some(now.unix);
        }
        let backoff = cx.config.health.own_relay_backoff;
        let delay = Retry::fail_in(&mut self.retry, backoff);
        self.link = OwnLink::Closed {
            reconnect_at: now.instant + delay,
        };
    }

    // --- Messages -------------------------------------------------------------

    /// A message from the own relay: the events of the self-subscription,
    /// the end of a history page, or a CLOSED (start over).
    pub(super) fn on_message(&mut self, cx: &mut Ctx<'_>, now: Now, message: RelayMessage<'_>) {
        if !matches!(self.link, OwnLink::Open { .. }) {
            return self.ignored(cx, "message while not connected");
        }
        match message {
            RelayMessage::Event {
                subscription_id,
                event,
            } => self.on_event(cx, &subscription_id, event.into_owned()),
            RelayMessage::EndOfStoredEvents(id) if id.as_str() == OWN_HISTORY => {
                self.next_page(cx, now)
            }
            RelayMessage::Closed {
                subscription_id,
                message,
            } => {
                warn!(id = %subscription_id, %message, "own relay closed the self-subscription; reconnecting");
                cx.out.push(Command::Disconnect {
                    relay: cx.relay.clone(),
                });
                self.lost(cx, now, "self-subscription closed");
            }
            _ => {}
        }
    }

    /// An `EVENT` from the own relay that the driver verified already (or
    /// found forged).
    pub(super) fn on_checked_event(
        &mut self,
        cx: &mut Ctx<'_>,
        subscription_id: &SubscriptionId,
        checked: Result<VerifiedEvent, Refused>,
    ) {
        if !matches!(self.link, OwnLink::Open { .. }) {
            return self.ignored(cx, "event while not connected");
        }
        match checked {
            Ok(event) => self.on_event(cx, subscription_id, event.into_event()),
            Err(refused) => self.refuse(cx, &refused),
        }
    }

    /// Several checked `EVENT`s, in the order they arrived
    /// ([`OwnSession::on_checked_event`] each).
    pub(super) fn on_checked_events<S, I>(&mut self, cx: &mut Ctx<'_>, events: I)
    where
        S: std::borrow::Borrow<SubscriptionId>,
        I: IntoIterator<Item = (S, Result<VerifiedEvent, Refused>)>,
    {
        for (id, checked) in events {
            self.on_checked_event(cx, id.borrow(), checked);
        }
    }

    /// An event the driver refused before it could be parsed, or found
    /// forged: counted like the engine's own refusals.
    pub(super) fn refuse(&mut self, cx: &mut Ctx<'_>, refused: &Refused) {
        count_refused(cx.events, cx.relay, refused);
    }

    /// An event of the self-subscription: counted on its history page,
    /// queued for the batch (not again when a page repeats it: `until` is
    /// inclusive). The own relay accepted it: it is not checked again.
    fn on_event(&mut self, cx: &mut Ctx<'_>, subscription_id: &SubscriptionId, event: Event) {
        match subscription_id.as_str() {
            OWN_HISTORY => {
                if let OwnLink::Open {
                    history: Some(paging),
                } = &mut self.link
                {
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
            _ => {
                return self.ignored(cx, "event of an unknown subscription");
            }
        }
        if self.queue([event]) {
            cx.events.push(SessionEvent::OwnEventsQueued);
        }
    }

    /// The end of a history page: the next page, or the history is complete.
    fn next_page(&mut self, cx: &mut Ctx<'_>, now: Now) {
        let OwnLink::Open {
            history: Some(paging),
        } = &mut self.link
        else {
            return;
        };
        let id = SubscriptionId::new(OWN_HISTORY);
        let relay = cx.relay.clone();
        match paging.on_eose(None) {
            PageOutcome::NextPage(filter) => {
                cx.out.push(Command::Subscribe {
                    relay,
                    id,
                    filters: vec![filter],
                });
            }
            PageOutcome::Complete => {
                self.link = OwnLink::Open { history: None };
                cx.out.push(Command::Unsubscribe { relay, id });
                self.history_read(cx, now);
            }
        }
    }

    /// The history was read completely on the current connection: the
    /// catch-up point moves to now, and the live subscription keeps it
    /// moving until the connection drops.
    ///
    /// The history read is one batch: what it brought is planned now, not
    /// after the batch window (which is for live events), so a start does
    /// not wait the window before the first event is synced.
    fn history_read(&mut self, cx: &mut Ctx<'_>, now: Now) {
        info!("own relay history read");
        self.caught_up_to = Some(now.unix);
        cx.events.push(SessionEvent::OwnHistoryRead);
    }

    /// Counts and logs an input that does not fit the state.
    fn ignored(&self, cx: &mut Ctx<'_>, what: &str) {
        cx.events.push(Noted::InputIgnored);
        debug!(what, "own relay input ignored in the current state");
    }
}

/// Is this live event of the own relay one this engine stored itself
/// lately? The store's answer queued it for planning then (`plan_stored`);
/// an event still waiting for that answer is not an echo yet, and is queued
/// (planning it twice is harmless, missing it is not).
fn is_echo(cx: &Ctx<'_>, id: &EventId) -> bool {
    cx.stores.stored_lately(id)
}
