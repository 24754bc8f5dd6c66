//! The own relay as the self-subscriber sees it: its connection (the
//! engine asks for it with [`Command::Connect`] like for any relay, and is
//! told of it with the same inputs, routed here by URL), the live
//! subscription and the history read page by page with `until`
//! ([`PaginationState`]), the catch-up point, and the batch window of the
//! events it reports.
//!
//! Without [`EngineConfig::own_relay`](super::EngineConfig::own_relay) (a
//! relay that embeds the library) there is no connection: the embedder
//! hands accepted events to [`SyncEngine::handle_own_events`].

use crate::health::Retry;
use std::collections::HashMap;
use std::time::Duration;

use nostr::prelude::{Event, EventId, RelayMessage, RelayUrl, SubscriptionId, Timestamp};
use tracing::{debug, info, warn};

use super::timer_table::EngineTimer;
use super::{Command, SyncEngine};
use crate::clock::{Instant, Now};
use crate::nip34::RepoRef;
use crate::pagination::{PageOutcome, PaginationState};
use crate::verified::{Forged, VerifiedEvent};

/// Subscription id of the live self-subscription (`limit: 0`).
const OWN_LIVE: &str = "grasp-sync-own-live";
/// Subscription id of the self-subscription's history pages.
const OWN_HISTORY: &str = "grasp-sync-own-history";
/// How long opening the own relay connection may take.
const OWN_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

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
    /// The own relay's URL ([`EngineConfig::own_relay`](super::EngineConfig::own_relay)).
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
    fn history_complete(&self) -> bool {
        matches!(self.link, OwnLink::Open { history: None })
    }
}

impl SyncEngine {
    /// The filter of the self-subscription on the own relay: kinds 30617,
    /// 1617, 1618, 1621, and once the own relay's history was read
    /// completely, `since` the last moment everything was read minus the
    /// quick-reconnect window. The engine subscribes with it when the own
    /// relay connection opens; reading it changes nothing.
    pub fn own_subscription_filter(&self) -> nostr::prelude::Filter {
        let since = self.own.caught_up_to.map(|at| {
            Timestamp::from_secs(
                at.as_secs()
                    .saturating_sub(self.config.quick_reconnect_window.as_secs()),
            )
        });
        let filter = crate::filters::own_relay_filter();
        match since {
            Some(since) => filter.since(since),
            None => filter,
        }
    }

    /// Events the own relay accepted, for an embedder that has no own relay
    /// connection (or besides it). They are processed together when the
    /// batch window, started by the first of them, closes.
    pub fn handle_own_events<I>(&mut self, now: Now, events: I)
    where
        I: IntoIterator<Item = Event>,
    {
        self.observe(now);
        self.queue_own_events(now, events);
    }

    /// `true` once the own relay's history was read completely on its
    /// current connection (every page of the self-subscription's history
    /// query, up to an EOSE that brought nothing more).
    pub fn own_history_complete(&self) -> bool {
        self.own.history_complete()
    }

    /// Queues accepted events for the self-subscriber batch.
    pub(super) fn queue_own_events<I>(&mut self, now: Now, events: I)
    where
        I: IntoIterator<Item = Event>,
    {
        let before = self.own.queued.len();
        self.own.queued.extend(events);
        if self.own.queued.len() > before {
            let closes = now.instant + self.config.batch_window;
            self.timers.set_unless_set(EngineTimer::OwnBatch, closes);
        }
    }

    /// The own relay's timers: connect when the backoff is over, give up a
    /// connect attempt past its timeout.
    pub(super) fn run_own_relay(&mut self, now: Now) {
        let Some(relay) = self.own.url.clone() else {
            return;
        };
        match self.own.link {
            OwnLink::Closed { reconnect_at } if reconnect_at <= now.instant => {
                debug!(%relay, "connecting to the own relay");
                self.own.link = OwnLink::Connecting {
                    deadline: now.instant + OWN_CONNECT_TIMEOUT,
                };
                self.emit(Command::Connect {
                    relay,
                    timeout: OWN_CONNECT_TIMEOUT,
                });
            }
            OwnLink::Connecting { deadline } if deadline <= now.instant => {
                self.emit(Command::Disconnect { relay });
                self.own_lost(now, "connect timed out");
            }
            _ => {}
        }
    }

    /// The own relay connection opened: the live subscription and the
    /// first history page.
    pub(super) fn own_connected(&mut self) {
        if !matches!(self.own.link, OwnLink::Connecting { .. }) {
            return self.own_ignored("connected without an attempt");
        }
        let Some(relay) = self.own.url.clone() else {
            return;
        };
        self.own.retry = None;
        // A relay caps each REQ, and root events would crowd old
        // announcements out of a single one: the history is paged.
        let filter = self.own_subscription_filter();
        let live = filter.clone().limit(0);
        let history = filter.limit(self.config.page_limit);
        self.emit(Command::Subscribe {
            relay: relay.clone(),
            id: SubscriptionId::new(OWN_LIVE),
            filters: vec![live],
        });
        self.emit(Command::Subscribe {
            relay,
            id: SubscriptionId::new(OWN_HISTORY),
            filters: vec![history.clone()],
        });
        self.own.link = OwnLink::Open {
            history: Some(Box::new(PaginationState::new(history))),
        };
    }

    /// The own relay connection could not be opened, dropped, or could not
    /// take a message.
    pub(super) fn own_closed(&mut self, now: Now, why: &str) {
        match self.own.link {
            OwnLink::Connecting { .. } | OwnLink::Open { .. } => self.own_lost(now, why),
            OwnLink::Unused | OwnLink::Closed { .. } => self.own_ignored("closed while closed"),
        }
    }

    /// The connection is gone. If its history had been read completely,
    /// everything up to now was seen; otherwise the catch-up point stays
    /// where the last complete read left it. The next attempt is due after
    /// `HealthConfig::own_relay_backoff`.
    fn own_lost(&mut self, now: Now, why: &str) {
        warn!(reason = why, "own relay connection lost; retrying");
        if self.own.history_complete() {
            self.own.caught_up_to = Some(now.unix);
        }
        let backoff = self.config.health.own_relay_backoff;
        let delay = Retry::fail_in(&mut self.own.retry, backoff);
        self.own.link = OwnLink::Closed {
            reconnect_at: now.instant + delay,
        };
    }

    /// A message from the own relay: the events of the self-subscription,
    /// the end of a history page, or a CLOSED (start over).
    pub(super) fn on_own_message(&mut self, now: Now, message: RelayMessage<'_>) {
        if !matches!(self.own.link, OwnLink::Open { .. }) {
            return self.own_ignored("message while not connected");
        }
        match message {
            RelayMessage::Event {
                subscription_id,
                event,
            } => self.on_own_event(now, &subscription_id, event.into_owned()),
            RelayMessage::EndOfStoredEvents(id) if id.as_str() == OWN_HISTORY => {
                self.next_own_page(now)
            }
            RelayMessage::Closed {
                subscription_id,
                message,
            } => {
                warn!(id = %subscription_id, %message, "own relay closed the self-subscription; reconnecting");
                if let Some(relay) = self.own.url.clone() {
                    self.emit(Command::Disconnect { relay });
                }
                self.own_lost(now, "self-subscription closed");
            }
            _ => {}
        }
    }

    /// An `EVENT` from the own relay that the driver verified already (or
    /// found forged).
    pub(super) fn on_own_checked_event(
        &mut self,
        now: Now,
        subscription_id: &SubscriptionId,
        checked: Result<VerifiedEvent, Forged>,
    ) {
        if !matches!(self.own.link, OwnLink::Open { .. }) {
            return self.own_ignored("event while not connected");
        }
        match checked {
            Ok(event) => self.on_own_event(now, subscription_id, *event.into_event()),
            Err(forged) => {
                if let Some(relay) = self.own.url.clone() {
                    self.forged(&relay, &forged);
                }
            }
        }
    }

    /// An event of the self-subscription: counted on its history page,
    /// queued for the batch (not again when a page repeats it: `until` is
    /// inclusive). The own relay accepted it: it is not checked again.
    fn on_own_event(&mut self, now: Now, subscription_id: &SubscriptionId, event: Event) {
        match subscription_id.as_str() {
            OWN_HISTORY => {
                if let OwnLink::Open {
                    history: Some(paging),
                } = &mut self.own.link
                {
                    if !paging.on_event(event.id, event.created_at) {
                        return;
                    }
                }
            }
            OWN_LIVE => {}
            _ => return self.own_ignored("event of an unknown subscription"),
        }
        self.queue_own_events(now, [event]);
    }

    /// The end of a history page: the next page, or the history is complete.
    fn next_own_page(&mut self, now: Now) {
        let Some(relay) = self.own.url.clone() else {
            return;
        };
        let OwnLink::Open {
            history: Some(paging),
        } = &mut self.own.link
        else {
            return;
        };
        let id = SubscriptionId::new(OWN_HISTORY);
        match paging.on_eose(None) {
            PageOutcome::NextPage(filter) => self.emit(Command::Subscribe {
                relay,
                id,
                filters: vec![filter],
            }),
            PageOutcome::Complete => {
                self.own.link = OwnLink::Open { history: None };
                self.emit(Command::Unsubscribe { relay, id });
                self.own_history_read(now);
            }
        }
    }

    /// The own relay's history was read completely on the current
    /// connection: the catch-up point moves to now, and the live
    /// subscription keeps it moving until the connection drops.
    ///
    /// The history read is one batch: what it brought is planned now, not
    /// after the batch window (which is for live events), so a start does
    /// not wait the window before the first event is synced.
    fn own_history_read(&mut self, now: Now) {
        info!("own relay history read");
        self.own.caught_up_to = Some(now.unix);
        if self.timers.is_set(EngineTimer::OwnBatch) {
            self.process_own_batch(now);
            self.maintain(now);
        }
    }

    /// Counts and logs an own relay input that does not fit the state.
    fn own_ignored(&mut self, what: &str) {
        self.stats.inputs_ignored += 1;
        debug!(what, "own relay input ignored in the current state");
    }
}
