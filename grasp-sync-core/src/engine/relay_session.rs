//! One relay's session: what we learned about the relay, its open
//! connection, its timers and counters — and the collection of them the
//! engine routes inputs to by URL.

use std::collections::HashMap;

use nostr::prelude::RelayUrl;

use super::config::{EngineConfig, RelayLimits};
use super::runtime::RelayConn;
use super::timer_table::{RelayTimer, TimerTable};
use crate::clock::Instant;

/// Everything about one relay: what we learned about it (kept across
/// connections), its open connection if any, and its counters.
#[derive(Debug, Default)]
pub(crate) struct RelaySession {
    /// The open connection: `Some` from `handle_connected` until the
    /// connection closes. The one answer to "is this relay connected".
    pub(crate) conn: Option<RelayConn>,
    /// NIP-11 limits.
    pub(crate) limits: RelayLimits,
    /// The subscription count at which the relay refused one more.
    pub(crate) learned_sub_limit: Option<usize>,
    /// Subscriptions the relay lets us open per rate window, learned from a
    /// rate-limit refusal.
    pub(crate) learned_rate: Option<usize>,
    /// When the learned rate last changed (a refusal halved it, or it was
    /// raised again).
    pub(crate) learned_rate_at: Option<Instant>,
    /// The relay refused NIP-77 in some form.
    pub(crate) negentropy_refused: bool,
    /// What the session waits for: connect timeout, replan, Layer 1
    /// retry, live rebuild, the next poll of uncovered filters.
    pub(crate) timers: TimerTable<RelayTimer>,
    /// A frame budget smaller than the relay announced, learned when it
    /// dropped the connection right after a large frame.
    pub(crate) learned_frame_budget: Option<usize>,
    /// The earliest moment live coverage was missing and not caught up when
    /// the last connection dropped (a gap, a poll span): the next quick
    /// reconnect catches up from there.
    pub(crate) uncaught_since: Option<nostr::prelude::Timestamp>,
    /// The most events one single-filter page of the relay brought: its
    /// per-filter page size is at least this.
    pub(crate) page_floor: usize,
    /// Verified events from the relay handed to the store.
    pub(crate) events_received: u64,
    /// Events the relay sent that it had sent lately already (on another
    /// subscription, or a page again): `events_received` over
    /// `events_received - events_received_again` is how often it sent each.
    pub(crate) events_received_again: u64,
    /// Ids the relay sent lately (at most
    /// [`EngineConfig::received_ids_per_relay`]), created with the first.
    pub(crate) received_lately: Option<crate::recent::RecentIds>,
    /// Events the relay sent that name an event (`e`, `E`, `q`) and were
    /// handed to the store (at most
    /// [`EngineConfig::sent_replies_per_relay`]), created with the first.
    pub(crate) sent_replies: Option<super::sent_replies::SentReplies>,
    /// Events from the relay the store reported newly stored.
    pub(crate) events_stored: u64,
    /// The last thing that went wrong with the relay.
    pub(crate) last_error: Option<String>,
}

impl RelaySession {
    /// The smallest subscription limit we know of.
    pub(crate) fn subscription_limit(&self, config: &EngineConfig) -> usize {
        [
            Some(config.max_subscriptions),
            self.limits.max_subscriptions,
            self.learned_sub_limit,
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(config.max_subscriptions)
        .max(1)
    }

    /// Filters per REQ we may send.
    pub(crate) fn filters_per_req(&self, config: &EngineConfig) -> usize {
        // (NIP-11 `max_filters` and the configured cap.)
        self.limits
            .max_filters
            .map_or(config.max_filters_per_req, |max| {
                max.min(config.max_filters_per_req)
            })
            .max(1)
    }

    /// The earliest of the session's timers.
    pub(crate) fn next_timer(&self) -> Option<Instant> {
        self.timers.earliest()
    }
}

/// Every relay's session, by URL.
#[derive(Debug, Default)]
pub(crate) struct Relays(HashMap<RelayUrl, RelaySession>);

impl Relays {
    /// The session of `relay`, if the engine knows it.
    pub(crate) fn get(&self, relay: &RelayUrl) -> Option<&RelaySession> {
        self.0.get(relay)
    }

    /// [`Relays::get`], to change.
    pub(crate) fn get_mut(&mut self, relay: &RelayUrl) -> Option<&mut RelaySession> {
        self.0.get_mut(relay)
    }

    /// The session of `relay`, created empty on first use.
    pub(crate) fn entry(&mut self, relay: RelayUrl) -> &mut RelaySession {
        self.0.entry(relay).or_default()
    }

    /// Forgets `relay` and everything about it.
    pub(crate) fn remove(&mut self, relay: &RelayUrl) -> Option<RelaySession> {
        self.0.remove(relay)
    }

    /// Every session, with its relay.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&RelayUrl, &RelaySession)> {
        self.0.iter()
    }

    /// Every relay the engine knows.
    pub(crate) fn urls(&self) -> impl Iterator<Item = &RelayUrl> {
        self.0.keys()
    }

    /// `relay`'s open connection.
    pub(crate) fn conn(&self, relay: &RelayUrl) -> Option<&RelayConn> {
        self.0.get(relay)?.conn.as_ref()
    }

    /// [`Relays::conn`], to change.
    pub(crate) fn conn_mut(&mut self, relay: &RelayUrl) -> Option<&mut RelayConn> {
        self.0.get_mut(relay)?.conn.as_mut()
    }

    /// `true` while `relay`'s connection is open.
    pub(crate) fn is_connected(&self, relay: &RelayUrl) -> bool {
        self.conn(relay).is_some()
    }

    /// Every open connection, with its relay.
    pub(crate) fn connections(&self) -> impl Iterator<Item = (&RelayUrl, &RelayConn)> {
        self.0
            .iter()
            .filter_map(|(relay, session)| Some((relay, session.conn.as_ref()?)))
    }

    /// Every relay with an open connection.
    pub(crate) fn connected(&self) -> impl Iterator<Item = &RelayUrl> {
        self.connections().map(|(relay, _)| relay)
    }

    /// Opens `relay`'s connection state (its session is created if needed).
    pub(crate) fn open_connection(&mut self, relay: &RelayUrl, conn: RelayConn) {
        let session = self.entry(relay.clone());
        session.timers.clear(RelayTimer::Poll);
        session.conn = Some(conn);
    }

    /// The session of `relay` while its connection is open.
    pub(crate) fn connected_mut(&mut self, relay: &RelayUrl) -> Option<&mut RelaySession> {
        self.0
            .get_mut(relay)
            .filter(|session| session.conn.is_some())
    }

    /// Closes `relay`'s connection state and the timers that belong to the
    /// connection; what was learned stays.
    pub(crate) fn close_connection(&mut self, relay: &RelayUrl) -> Option<RelayConn> {
        let session = self.0.get_mut(relay)?;
        session.timers.clear(RelayTimer::Poll);
        session.conn.take()
    }
}
