//! The own relay as the self-subscriber sees it: its lifecycle inputs, the
//! catch-up point, and the batch window of the events it reports.

use std::collections::HashMap;

use crate::nip34::RepoRef;

use nostr::prelude::{Event, EventId, Timestamp};

use super::SyncEngine;
use crate::clock::{Instant, Now};

/// The own relay as the self-subscriber sees it.
#[derive(Debug, Default)]
pub(super) struct OwnRelay {
    /// Accepted events waiting for the batch window.
    pub(super) queued: Vec<Event>,
    /// When the current batch window closes.
    pub(super) batch_deadline: Option<Instant>,
    /// Everything the own relay held was read up to this moment (wall
    /// clock): its history was read completely and the live subscription ran
    /// until then. The next self-subscription catches up from here.
    pub(super) caught_up_to: Option<Timestamp>,
    /// The own relay connection is open.
    pub(super) connected: bool,
    /// The current connection's history was read completely.
    pub(super) history_complete: bool,
    /// When the self-subscriber should (re)connect, as the health tracker
    /// decided; `None` while a connection is open or being opened.
    pub(super) reconnect_at: Option<Instant>,
    /// `created_at` and id of the announcement applied per repository, so an
    /// older announcement never replaces a newer one and the same one is
    /// applied once (NIP-01: of two with the same `created_at`, the lower id
    /// stands).
    pub(super) announced_at: HashMap<RepoRef, (Timestamp, EventId)>,
}

impl SyncEngine {
    /// The filter of the self-subscription on the own relay: kinds 30617,
    /// 1617, 1618, 1621, and once the own relay's history was read
    /// completely, `since` the last moment everything was read minus the
    /// quick-reconnect window. Read it (it changes nothing) when the own relay
    /// connection opens, after [`SyncEngine::handle_own_relay_connected`].
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

    /// When the self-subscriber should open the own relay connection: at
    /// the start, then after every loss with the health tracker's backoff.
    /// Open it then and report [`SyncEngine::handle_own_relay_connecting`].
    /// A driver with a self-subscriber wakes for it besides
    /// [`SyncEngine::poll_timeout`] (which leaves it out: a relay that
    /// embeds the library has no own relay connection).
    pub fn own_relay_reconnect_at(&self) -> Option<Instant> {
        self.own.reconnect_at
    }

    /// The self-subscriber started opening the own relay connection.
    pub fn handle_own_relay_connecting(&mut self, now: Now) {
        self.observe(now);
        self.own.reconnect_at = None;
    }

    /// The own relay connection opened; its history is being read.
    pub fn handle_own_relay_connected(&mut self, now: Now) {
        self.observe(now);
        self.own.connected = true;
        self.own.history_complete = false;
        self.own.reconnect_at = None;
        self.health.on_own_relay_connected();
    }

    /// The own relay's history (every page of the self-subscription's
    /// history query) was read completely on the current connection: the
    /// catch-up point moves to now, and the live subscription keeps it
    /// moving until the connection drops.
    ///
    /// The history read is one batch: what it brought is planned now, not
    /// after the batch window (which is for live events), so a start does
    /// not wait the window before the first event is synced.
    pub fn handle_own_history_complete(&mut self, now: Now) {
        self.observe(now);
        if self.own.connected {
            self.own.history_complete = true;
            self.own.caught_up_to = Some(now.unix);
            if self.own.batch_deadline.is_some() {
                self.process_own_batch(now);
                self.maintain(now);
            }
        }
    }

    /// The own relay connection dropped or could not be opened. If its
    /// history had been read completely, everything up to now was seen;
    /// otherwise the catch-up point stays where the last complete read left
    /// it. The next attempt is due after the health tracker's backoff
    /// ([`SyncEngine::own_relay_reconnect_at`]).
    pub fn handle_own_relay_disconnected(&mut self, now: Now) {
        self.observe(now);
        if self.own.connected && self.own.history_complete {
            self.own.caught_up_to = Some(now.unix);
        }
        self.own.connected = false;
        self.own.history_complete = false;
        let delay = self.health.on_own_relay_lost();
        self.own.reconnect_at = Some(now.instant + delay);
    }

    /// Events the own relay accepted (from the self-subscription). They are
    /// processed together when the batch window, started by the first of them,
    /// closes.
    pub fn handle_own_events<I>(&mut self, now: Now, events: I)
    where
        I: IntoIterator<Item = Event>,
    {
        self.observe(now);
        self.queue_own_events(now, events);
    }

    /// Queues accepted events for the self-subscriber batch.
    pub(super) fn queue_own_events<I>(&mut self, now: Now, events: I)
    where
        I: IntoIterator<Item = Event>,
    {
        let before = self.own.queued.len();
        self.own.queued.extend(events);
        if self.own.queued.len() > before && self.own.batch_deadline.is_none() {
            self.own.batch_deadline = Some(now.instant + self.config.batch_window);
        }
    }

    /// `true` once the own relay's history was read completely on its
    /// current connection ([`SyncEngine::handle_own_history_complete`]).
    pub fn own_history_complete(&self) -> bool {
        self.own.connected && self.own.history_complete
    }
}
