//! One relay's session: what we learned about the relay, its open
//! connection, its health and retries, its timers and counters — and the
//! collection of them the engine routes inputs to by URL.

use std::collections::HashSet;

use nostr::prelude::{EventId, Filter, RelayMessage, RelayUrl, SubscriptionId, Timestamp};
use tracing::{debug, info, warn};

use super::bad_events::BadEventVerdict;
use super::config::{EngineConfig, RelayLimits};
use super::live_coverage::LiveList;
use super::outbox::Outbox;
use super::runtime::{ClosedOutcome, EoseOutcome, Job, PageEnded, Purpose, RelayConn, Sub};
use super::session_events::{Dropped, Noted, SessionEvent, SessionEvents};
use super::stats::{LiveMode, RelayActivity};
use super::stores::StoreTracker;
use super::timer_table::{Deadline, Earliest, RelayTimer, TimerTable};
use super::Command;
use crate::classify::{classify, Classified};
use crate::clock::{Instant, Now};
use crate::filters::{announcement_filter, item_filters, FilterMode};
use crate::health::{HealthConfig, HealthState, RelayHealth, Retry};
use crate::model::{
    BatchId, ConnectionStatus, ItemsInFlight, PendingBatch, PendingItems, RelayState, SyncMethod,
};
use crate::planner::RepoSyncIndex;
use crate::relay_text::RelayText;
use crate::screen::Refused;
use crate::transport::TransportError;
use crate::verified::VerifiedEvent;

mod batches;
mod catch_up;
mod learned;
mod lifecycle;
mod link;
mod live;
mod nip77;
mod own_read;
mod refusals;
mod timers;
mod work;

pub(crate) use batches::{Batch, Batches};

pub(crate) use learned::Learned;
use link::Link;
pub(crate) use nip77::NegFailure;
use nip77::Nip77;
use own_read::{OwnRead, OwnStep};

/// Everything about one relay: what we learned about it (kept across
/// connections), its open connection if any, and its counters.
#[derive(Debug, Default)]
pub(crate) struct RelaySession {
    /// What the relay confirmed (the spec's `RelayState`): `Some` while the
    /// engine tracks the relay (registered, not dropped). A session without
    /// it only remembers what was learned.
    state: Option<RelayState>,
    /// Where the connection stands: idle, connecting (until its deadline)
    /// or open (with its connection). The one record of the relay's
    /// connection lifecycle.
    link: Link,
    /// What was learned of the relay: its limits, told and learned.
    learned: Learned,
    /// The relay's batches in flight: what each syncs, how, and its
    /// progress.
    batches: Batches,
    /// What the session waits for: replan, Layer 1 retry, live rebuild,
    /// the next poll of uncovered filters.
    timers: TimerTable<RelayTimer>,
    /// The earliest moment live coverage was missing and not caught up when
    /// the last connection dropped (a gap, a poll span): the next quick
    /// reconnect catches up from there.
    uncaught_since: Option<nostr::prelude::Timestamp>,
    /// Verified events from the relay handed to the store.
    events_received: u64,
    /// Events the relay sent that it had sent lately already (on another
    /// subscription, or a page again): `events_received` over
    /// `events_received - events_received_again` is how often it sent each.
    events_received_again: u64,
    /// Ids the relay sent lately (at most
    /// [`Caps::received_ids_per_relay`]), created with the first.
    received_lately: Option<crate::recent::RecentIds>,
    /// What NIP-77 reconciliation keeps across connections: the events the
    /// relay sent that name an event ([`Nip77`]).
    nip77: Nip77,
    /// Events from the relay the store reported newly stored.
    events_stored: u64,
    /// The last thing that went wrong with the relay (clipped: it may quote the relay).
    last_error: Option<RelayText>,
    /// Connection health: failures and their backoff, rate limiting, the
    /// stability of a connection after failures.
    health: RelayHealth,
    /// Failed historic work in a row (batches closed or timed out, live
    /// subscriptions refused) and its backoff; `None` after a confirmation.
    work_retry: Option<Retry>,
    /// A remote relay we sync from, or the own relay we read ourselves
    /// back from: where the session differs, the role says.
    role: Role,
}

/// What a session is for: where it differs, it asks its role.
#[derive(Debug, Default)]
enum Role {
    /// A relay we sync from: planned work, its events to the store.
    #[default]
    Remote,
    /// The own relay, read back by the self-subscriber: never tracked or
    /// planned; on connect its self-subscription ([`OwnRead`]) opens, its
    /// events go to the self-subscriber; it reconnects after
    /// `HealthConfig::own_relay_backoff`.
    Own(Box<OwnRead>),
}

/// What the engine asks a session, and the session's handlers: what the
/// relay's messages and timeouts, and the work the engine plans for it, do
/// to its subscriptions and batches, and the commands they emit.
///
/// The sections follow a relay's life: what the engine asks; connecting,
/// opening (fresh start or quick reconnect) and losing the connection;
/// sending; the relay's messages, its refusals and what they teach; NIP-77;
/// the live plan, live subscriptions and catching up by `since`; the work
/// the engine plans, its jobs and the room to start them; batches ending or
/// stalling, and retries; the timers and the session's next deadline.
impl RelaySession {
    /// Emits `command` ([`RelaySession::send`]).
    fn emit(&mut self, cx: &mut Ctx<'_>, command: Command) {
        self.send(cx.out, command);
    }

    // --- What the engine asks and tells a session ----------------------------

    /// The own relay's session ([`Role::Own`]): idle, its first connection
    /// due at once.
    pub(crate) fn own() -> Self {
        RelaySession {
            role: Role::Own(Box::default()),
            ..RelaySession::default()
        }
    }

    /// The own relay's self-subscription, if this is its session.
    fn own_read(&self) -> Option<&OwnRead> {
        match &self.role {
            Role::Own(read) => Some(read),
            Role::Remote => None,
        }
    }

    /// `true` for the own relay's session.
    fn is_own(&self) -> bool {
        self.own_read().is_some()
    }

    /// The health timing the session's reconnects follow: the
    /// configuration's, or for the own relay its own backoff
    /// ([`OwnRead::health`]).
    fn health_config(&self, config: &HealthConfig) -> HealthConfig {
        match self.role {
            Role::Own(_) => OwnRead::health(config),
            Role::Remote => config.clone(),
        }
    }

    /// `true` once the own relay's history was read completely on its open
    /// connection (`false` for any other session).
    pub(crate) fn own_history_read(&self) -> bool {
        self.is_connected() && self.own_read().is_some_and(OwnRead::history_read)
    }

    /// The own relay's self-subscription filter ([`OwnRead::subscription_filter`]).
    pub(crate) fn own_subscription_filter(&self, config: &EngineConfig) -> Option<Filter> {
        Some(self.own_read()?.subscription_filter(config))
    }

    /// What the relay confirmed, while the engine tracks the relay.
    pub(crate) fn state(&self) -> Option<&RelayState> {
        self.state.as_ref()
    }

    /// `true` while the engine tracks the relay (registered, not dropped).
    pub(crate) fn is_tracked(&self) -> bool {
        self.state.is_some()
    }

    /// Starts tracking the relay, or marks a tracked one bootstrap if
    /// `is_bootstrap` (registering never unmarks it). `true` when the relay
    /// was not tracked before.
    pub(crate) fn track(&mut self, is_bootstrap: bool) -> bool {
        match &mut self.state {
            Some(state) => {
                state.is_bootstrap |= is_bootstrap;
                false
            }
            None => {
                self.state = Some(RelayState::new(is_bootstrap));
                true
            }
        }
    }

    /// What the relay's batches in flight sync and how, oldest first.
    pub(crate) fn pending_batches(&self) -> impl ExactSizeIterator<Item = &PendingBatch> {
        self.batches.pending()
    }

    /// How many of the relay's batches in flight sync each item: what
    /// planning subtracts.
    pub(crate) fn items_in_flight(&self) -> &ItemsInFlight {
        self.batches.in_flight()
    }

    /// How many batches are in flight on the relay.
    pub(crate) fn batch_count(&self) -> usize {
        self.batches.len()
    }

    /// The relay's connection lifecycle as reported: disconnected,
    /// connecting or connected (derived from its link).
    pub(crate) fn connection_status(&self) -> ConnectionStatus {
        self.link.status()
    }

    /// `true` while the relay's connection is open: the one answer to "is
    /// this relay connected".
    pub(crate) fn is_connected(&self) -> bool {
        self.connection_status() == ConnectionStatus::Connected
    }

    /// `true` while a connection attempt is in flight.
    pub(crate) fn is_connecting(&self) -> bool {
        self.connection_status() == ConnectionStatus::Connecting
    }

    /// `true` while neither connected nor connecting.
    fn is_idle(&self) -> bool {
        self.connection_status() == ConnectionStatus::Disconnected
    }

    /// Connection health: failures and their backoff.
    pub(crate) fn health(&self) -> &RelayHealth {
        &self.health
    }

    /// Remembers `error` as the last thing that went wrong with the relay
    /// (clipped: it may quote the relay).
    pub(crate) fn note_error(&mut self, error: &str) {
        self.last_error = Some(RelayText::new(error));
    }

    /// The last thing that went wrong with the relay.
    pub(crate) fn last_error(&self) -> Option<&RelayText> {
        self.last_error.as_ref()
    }

    /// Takes the relay's NIP-11 limits.
    pub(crate) fn set_limits(&mut self, limits: RelayLimits) {
        self.learned.set_limits(limits);
    }

    /// Counts one event from the relay the store reported newly stored.
    pub(crate) fn event_stored(&mut self) {
        self.events_stored += 1;
    }

    /// Verified events from the relay handed to the store.
    pub(crate) fn events_received(&self) -> u64 {
        self.events_received
    }

    /// Events the relay sent that it had sent lately already.
    pub(crate) fn events_received_again(&self) -> u64 {
        self.events_received_again
    }

    /// Events from the relay the store reported newly stored.
    pub(crate) fn events_stored(&self) -> u64 {
        self.events_stored
    }

    /// `true` when the connection attempt in flight is past its timeout.
    pub(crate) fn connect_timed_out(&self, now: Instant) -> bool {
        self.link
            .connect_deadline()
            .is_some_and(|deadline| deadline <= now)
    }

    /// `true` when the connection is open and the `since` poll of live
    /// filters that do not fit is due.
    fn poll_due(&self, now: Instant) -> bool {
        self.is_connected() && self.timers.is_due(RelayTimer::Poll, now)
    }

    /// What is open and waiting on the connection, if connected: its
    /// subscriptions, live coverage, queued jobs, and the limits they are
    /// held to.
    pub(crate) fn activity(&self, config: &EngineConfig) -> Option<RelayActivity> {
        let conn = self.link.conn()?;
        let live_mode = match conn.live().uncovered_count() {
            0 => LiveMode::Full,
            uncovered_filters => LiveMode::Polling { uncovered_filters },
        };
        Some(RelayActivity {
            open_subscriptions: conn.open_count(),
            live_subscriptions: conn.live().count(),
            queued_jobs: conn.work().len(),
            deferred_live_items: conn.live().deferred_count(),
            subscription_limit: self.learned.subscription_limit(config),
            live_slots: self.learned.live_slots(config),
            frame_budget: self.learned.frame_budget(config),
            live_mode,
        })
    }

    /// `true` while the connection is open and quiet
    /// ([`RelayConn::is_quiet`]: nothing queued, no live coverage waiting,
    /// only live subscriptions open).
    pub(crate) fn is_quiet(&self) -> bool {
        self.link.conn().is_some_and(RelayConn::is_quiet)
    }

    // --- Sending ---------------------------------------------------------------

    /// Emits `command` for this relay, noting first what the connection
    /// tracks of it: when a subscription opened and that it waits for an
    /// answer, and the size of each frame sent (a relay that drops the
    /// connection right after a large one teaches a smaller frame budget).
    pub(crate) fn send(&mut self, out: &mut Outbox, command: Command) {
        let now = out.now();
        if let Some(conn) = self.link.conn_mut() {
            conn.note_sent(now, &command);
        }
        out.push(command);
    }

    // --- Messages -------------------------------------------------------

    /// A message of the own relay's self-subscription (its session only,
    /// [`OwnRead::on_message`]); a CLOSED drops the connection to reconnect
    /// after the backoff.
    pub(crate) fn on_own_message(&mut self, cx: &mut Ctx<'_>, now: Now, message: RelayMessage<'_>) {
        if !self.is_connected() {
            return ignored(cx, "message while not connected");
        }
        let Role::Own(read) = &mut self.role else {
            return ignored(cx, "own relay message for a remote relay");
        };
        if read.on_message(cx, now, message) == OwnStep::Reconnect {
            let relay = cx.relay.clone();
            self.emit(cx, Command::Disconnect { relay });
            self.connection_closed(cx, now);
        }
    }

    /// An `EVENT` of the own relay that the driver verified already (or
    /// found forged, counted): for the self-subscriber
    /// ([`OwnRead::on_event`]).
    pub(crate) fn on_own_checked_event(
        &mut self,
        cx: &mut Ctx<'_>,
        subscription_id: &SubscriptionId,
        checked: Result<VerifiedEvent, Refused>,
    ) {
        if !self.is_connected() {
            return ignored(cx, "event while not connected");
        }
        let Role::Own(read) = &mut self.role else {
            return ignored(cx, "own relay event for a remote relay");
        };
        match checked {
            Ok(event) => read.on_event(cx, subscription_id, event.into_event()),
            Err(refused) => count_refused(cx.events, cx.relay, &refused),
        }
    }

    /// A relay message other than EVENT (those go through
    /// [`RelaySession::admit`]): EOSE, CLOSED, NOTICE, a `rate-limited:`
    /// OK, NEG-MSG, NEG-ERR.
    pub(crate) fn on_message(&mut self, cx: &mut Ctx<'_>, now: Now, message: RelayMessage<'_>) {
        match message {
            RelayMessage::EndOfStoredEvents(id) => {
                self.heard(now.instant, Some(&id));
                self.on_eose(cx, now, &id)
            }
            RelayMessage::Closed {
                subscription_id,
                message,
            } => {
                self.heard(now.instant, Some(&subscription_id));
                self.on_closed(cx, now, &subscription_id, &message)
            }
            RelayMessage::NegMsg {
                subscription_id,
                message,
            } => {
                self.heard(now.instant, Some(&subscription_id));
                self.on_neg_msg(cx, now, &subscription_id, &message)
            }
            RelayMessage::NegErr {
                subscription_id,
                message,
            } => {
                self.heard(now.instant, Some(&subscription_id));
                self.on_neg_err(cx, now, &subscription_id, &message)
            }
            RelayMessage::Notice(message) => {
                self.heard(now.instant, None);
                self.on_notice(cx, now, &message)
            }
            RelayMessage::Ok {
                status: false,
                message,
                ..
            } if classify(&message).rate_limited => {
                self.heard(now.instant, None);
                self.heed_rate_limit(cx, now)
            }
            _ => self.heard(now.instant, None),
        }
    }

    /// Trust: the event `arrived` on subscription `id`, if it matches a
    /// filter of that subscription and its id and signature verify (here,
    /// unless the driver did), with the batch it counts for; `None` (counted
    /// in the stats) otherwise. An event on a live subscription closed by a
    /// consolidation is still admitted if it matches the filters it had.
    pub(crate) fn admit(
        &mut self,
        cx: &mut Ctx<'_>,
        now: Now,
        id: &SubscriptionId,
        arrived: Arrived,
    ) -> Option<(VerifiedEvent, Option<BatchId>)> {
        self.heard(now.instant, Some(id));
        let event = arrived.event();
        if let Some(refused) = cx.config.limits.size_limits().event_too_large(event) {
            self.refuse(cx, now, refused);
            return None;
        }
        // Sent before the relay saw our CLOSE of a consolidated live
        // subscription: still something we asked for.
        let Some(matches) = self.link.conn()?.asked_for(id, event) else {
            let refused = Refused::UnknownSubscription { id: event.id };
            self.refuse(cx, now, refused);
            return None;
        };
        if !matches {
            let refused = Refused::OffFilter { id: event.id };
            self.refuse(cx, now, refused);
            return None;
        }
        let checked = match arrived {
            Arrived::Verified(event) => Ok(event),
            Arrived::Unchecked(event) => VerifiedEvent::verify(event),
        };
        let event = match checked {
            Ok(event) => event,
            Err(forged) => {
                self.refuse(cx, now, Refused::Forged(forged));
                return None;
            }
        };
        let batch = self
            .link
            .conn_mut()?
            .sub_mut(id)
            .and_then(|sub| sub.on_event(&event));
        if let Some(batch) = batch {
            self.batches.progress(batch, now.instant);
        }
        self.note_received(cx, event.id);
        Some((event, batch))
    }

    /// An event of this relay we refused (`refused` says why): counted and
    /// logged at `debug`, and counted for the connection; the one past
    /// [`Caps::max_bad_events`](super::Caps::max_bad_events) cuts the relay
    /// off ([`RelaySession::cut_off`]).
    pub(crate) fn refuse(&mut self, cx: &mut Ctx<'_>, now: Now, refused: Refused) {
        count_refused(cx.events, cx.relay, &refused);
        let Some(conn) = self.link.conn_mut() else {
            return;
        };
        let threshold = cx.config.caps.max_bad_events;
        if conn.record_bad_event(threshold) == BadEventVerdict::CutOff {
            self.cut_off(cx, now);
        }
    }

    /// Cuts the relay off for sending more refused events than
    /// [`Caps::max_bad_events`](super::Caps::max_bad_events) on one
    /// connection: counted and logged once, disconnected, and the health
    /// told of a failure (the interrupted failure run continues, so the
    /// backoff before the next connection grows with each cut).
    fn cut_off(&mut self, cx: &mut Ctx<'_>, now: Now) {
        cx.events.push(Noted::RelayCut);
        let refused = self.link.conn().map_or(0, |conn| conn.bad_event_count());
        warn!(
            relay = %cx.relay,
            refused,
            threshold = cx.config.caps.max_bad_events,
            "relay sent too many forged, unrequested, oversized or malformed messages; disconnecting and backing off"
        );
        self.last_error = Some(format!("cut off after {refused} refused events").into());
        self.lose_connection(cx, now);
    }

    /// A message from the relay over the connection's size limit ended
    /// the connection (the driver cannot read past it), counted and logged.
    /// While a NIP-77 session waits for its answer, the message is that
    /// answer (strfry builds `NEG-MSG`s of up to 500 000 bytes, hex: twice
    /// that on the wire): the relay is fine, its NIP-77 frames are not for
    /// us, so it is synced by REQ from now on, like a relay that refuses
    /// NIP-77, and connected again at once ([`RelaySession::negentropy_over_limit`]).
    /// Any other such message is a failure for the health (the backoff
    /// grows), so a relay that answers the same request with the same
    /// oversized message is asked again ever more rarely, not at once.
    pub(crate) fn message_too_large(&mut self, cx: &mut Ctx<'_>, now: Now, bytes: usize) {
        cx.events.push(Noted::Oversized);
        if self.is_own() {
            warn!(relay = %cx.relay, bytes, "own relay sent a message over the size limit; reconnecting");
            return self.connection_closed(cx, now);
        }
        if self.negentropy_waits_for_answer() {
            return self.negentropy_over_limit(cx, now, bytes);
        }
        warn!(relay = %cx.relay, bytes, "relay sent a message over the size limit; connection lost, backing off");
        self.last_error = Some(format!("sent a message of {bytes} bytes, over the limit").into());
        self.lose_connection(cx, now);
    }

    /// `true` while a NEG-OPEN or NEG-MSG of ours waits for the relay's
    /// answer on the current connection.
    fn negentropy_waits_for_answer(&self) -> bool {
        self.link
            .conn()
            .is_some_and(RelayConn::negentropy_waits_for_answer)
    }

    /// The relay's NIP-77 answer was over our message limit: NIP-77 is
    /// refused for the relay (its status says why and that it is synced by
    /// REQ), the connection, which cannot read past the message, is closed
    /// without counting a failure, and the next connection syncs every
    /// filter by REQ. Never "unreachable": the relay answered.
    fn negentropy_over_limit(&mut self, cx: &mut Ctx<'_>, now: Now, bytes: usize) {
        cx.events.push(Noted::NegentropyOverLimit);
        self.learned.refuse_negentropy();
        warn!(
            relay = %cx.relay,
            bytes,
            "relay's NIP-77 message is over our message limit (NGIT_SYNC_MAX_MESSAGE_BYTES); syncing it by REQ"
        );
        self.last_error = Some(
            format!("NIP-77 message of {bytes} bytes over our message limit: synced by REQ").into(),
        );
        let relay = cx.relay.clone();
        self.emit(cx, Command::Disconnect { relay });
        self.close(now);
        debug!(relay = %cx.relay, "reconnecting to sync by REQ");
    }

    /// Closes the connection for the relay's fault: the health counts a
    /// failure (whether or not the connection was stable), then the usual
    /// bookkeeping of a closed connection.
    fn lose_connection(&mut self, cx: &mut Ctx<'_>, now: Now) {
        let relay = cx.relay.clone();
        self.emit(cx, Command::Disconnect { relay });
        self.close(now);
        self.health.on_connect_failed(now.instant);
        debug!(relay = %cx.relay, failures = self.health.consecutive_failures(), "relay disconnected");
    }

    /// Counts an event the relay sent, and whether it sent it lately
    /// already.
    fn note_received(&mut self, cx: &mut Ctx<'_>, id: EventId) {
        let capacity = cx.config.caps.received_ids_per_relay;
        self.events_received += 1;
        let lately = self
            .received_lately
            .get_or_insert_with(|| crate::recent::RecentIds::new(capacity));
        if lately.contains(&id) {
            self.events_received_again += 1;
            cx.events.push(Noted::ReceivedAgain);
        } else {
            lately.insert(id, ());
        }
    }

    /// What an EOSE means for the subscription it ends ([`Sub::on_eose`]
    /// decides; [`EoseOutcome`]): the next page (or a pause, over the rate
    /// or while the store is behind), a finished job, a fetch asked again
    /// for what it did not bring, a poll continued where a page may have
    /// been cut.
    fn on_eose(&mut self, cx: &mut Ctx<'_>, now: Now, id: &SubscriptionId) {
        let group_limit = self.learned.group_page_limit(cx.config);
        let told = *self.learned.told_limits();
        let fetch_attempts = cx.config.timeouts.fetch_attempts;
        let Some(sub) = self.link.conn_mut().and_then(|conn| conn.sub_mut(id)) else {
            return;
        };
        match sub.on_eose(&told, group_limit, fetch_attempts) {
            EoseOutcome::Page(page) => self.page_ended(cx, now, id, page),
            EoseOutcome::Fetched {
                batch,
                filter,
                missing,
                fruitless,
                retry,
            } => {
                if !missing.is_empty() && !retry {
                    cx.events.push(Noted::FetchMissing(missing.len() as u64));
                    warn!(relay = %cx.relay, missing = missing.len(), "relay did not return ids its negentropy set holds");
                }
                if retry && fruitless > 0 {
                    cx.events.push(Noted::FetchRetry);
                }
                let again = if retry {
                    self.fetch_jobs(cx.config, &filter, &missing, fruitless)
                } else {
                    Vec::new()
                };
                self.end_job(cx, now, id, batch, again);
            }
            EoseOutcome::Polled { batch, follow_up } => self.end_job(cx, now, id, batch, follow_up),
            EoseOutcome::LiveAnswered | EoseOutcome::Ignored => {}
        }
    }

    /// A page of the REQ `id` ended: its crowded seconds counted, and the
    /// next page asked for — paused (the slot freed, resumed later) over
    /// the learned rate or while the store is behind — or the job is done.
    fn page_ended(&mut self, cx: &mut Ctx<'_>, now: Now, id: &SubscriptionId, page: PageEnded) {
        let PageEnded {
            batch,
            next,
            page_len,
            crowded,
        } = page;
        if crowded > 0 {
            cx.events.push(Noted::Crowded(crowded as u64));
            warn!(relay = %cx.relay, "a full page of events shares one second; events beyond the page may be missing");
        }
        self.batches.progress(batch, now.instant);
        let page_limit_ours = self.learned.page_limit(cx.config);
        self.learned.note_page_len(page_len, page_limit_ours);
        match next {
            Some(filter) if cx.store_keeps_up() && self.rate_allows(now.instant, cx.config) => {
                if let Some(conn) = self.link.conn_mut() {
                    conn.watch_next_page(id, now.instant);
                }
                let relay = cx.relay.clone();
                self.emit(
                    cx,
                    Command::Subscribe {
                        relay,
                        id: id.clone(),
                        filters: vec![filter],
                    },
                )
            }
            Some(_) => {
                self.unsubscribe(cx, id);
                self.pause_page(now, id);
            }
            None => self.end_job(cx, now, id, batch, Vec::new()),
        }
    }

    /// What a CLOSED means for the subscription it ends: a refused slot is
    /// retried later ([`RelaySession::learn_from_refusal`] says whether it
    /// was one); otherwise a live subscription waits for its rebuild, a
    /// negentropy session falls back to REQ, a historic job fails its batch.
    fn on_closed(&mut self, cx: &mut Ctx<'_>, now: Now, id: &SubscriptionId, message: &str) {
        let classified = classify(message);
        if !self.link.conn().is_some_and(|conn| conn.is_open(id)) {
            return;
        }
        info!(relay = %cx.relay, %id, message, "subscription closed by relay");
        let slot_refused = self.heed_refusal(cx, now, &classified);
        let Some(sub) = self.link.conn().and_then(|conn| conn.sub(id)) else {
            return;
        };
        match sub.on_closed(slot_refused) {
            ClosedOutcome::RetryLater => self.retry_later(now, id),
            ClosedOutcome::LiveLost => self.live_closed(id, now, cx.config),
            ClosedOutcome::NegentropyRefused => {
                let failure = NegFailure::Refused {
                    reason: message,
                    close: false,
                };
                self.negentropy_failed(cx, now, id, failure);
            }
            ClosedOutcome::BatchFailed(batch) => self.fail_batch(cx, now, batch, message),
        }
    }

    // --- Sync method and live plan -------------------------------------------

    /// How to sync a historic filter on this relay — the whole decision:
    /// NIP-77 reconciliation, unless the relay refused NIP-77 in some form
    /// ([`RelaySession::negentropy_failed`]),
    /// the filter has a `since` (a catch-up fetches what is new; reconciling
    /// would compare the whole history), or a NEG frame for it does not fit
    /// the relay's frame budget; then REQ+EOSE with `until` pagination.
    /// Missing ids a reconciliation found are fetched by REQ
    /// ([`RelaySession::fetch_jobs`]). The batches whose filters all carry
    /// a `since` — a quick reconnect's catch-up, a live gap's, a poll — are
    /// REQ batches without asking: this answers REQ for every such filter.
    pub(crate) fn sync_method(&self, filter: &Filter, config: &EngineConfig) -> SyncMethod {
        let negentropy = self.nip77_usable(config)
            && filter.since.is_none()
            && self
                .learned
                .negentropy_frame_limit(filter, config)
                .is_some();
        if negentropy {
            SyncMethod::Negentropy
        } else {
            SyncMethod::ReqEose
        }
    }

    /// `true` while NIP-77 is switched on ([`EngineConfig::negentropy`])
    /// and the relay has not refused it in any form
    /// ([`RelaySession::negentropy_failed`]): the relay-wide half of
    /// [`RelaySession::sync_method`], asked on its own where no filter is
    /// in question (the method a relay report shows, whether fresh roots
    /// are reconciled against what the relay sent).
    pub(crate) fn nip77_usable(&self, config: &EngineConfig) -> bool {
        config.negentropy && !self.learned.negentropy_refused()
    }

    // --- Planned work -----------------------------------------------------

    /// New items for the connected relay: live subscriptions and a historic
    /// batch. Replies to root events the store took as new just now are new
    /// to the store too: asking it for them costs a scan per session and
    /// finds only what this sync brought. On a NIP-77 relay they are
    /// reconciled against what the relay sent this sync (a status that came
    /// with its repository's reconciliation is not fetched again); elsewhere
    /// a REQ brings them in one go. Once: the next relay planned for the
    /// root, and every later pass, reconcile with the store.
    pub(crate) fn add_filters(&mut self, cx: &mut Ctx<'_>, now: Now, items: PendingItems) {
        if !self.is_connected() || items.is_empty() {
            return;
        }
        self.add_live(cx, now, &items);
        let (fresh, held): (HashSet<EventId>, HashSet<EventId>) = items
            .root_events
            .iter()
            .partition(|id| cx.stores.take_fresh_root(id));
        let sent = self.reconciles_fresh_roots(cx.config);
        if sent {
            cx.events
                .push(Noted::FreshRootsReconciled(fresh.len() as u64));
        } else {
            cx.events.push(Noted::FreshRootsByReq(fresh.len() as u64));
        }
        let reconciled = PendingItems {
            repos: items.repos.clone(),
            root_events: held,
            authors: items.authors.clone(),
        };
        let fresh = PendingItems {
            root_events: fresh,
            ..PendingItems::default()
        };
        let chunk = cx.config.limits.chunk_size;
        let filters = item_filters(&reconciled, chunk, FilterMode::FULL_HISTORY);
        let (reconcile, req): (Vec<_>, Vec<_>) = filters
            .into_iter()
            .partition(|filter| self.sync_method(filter, cx.config) == SyncMethod::Negentropy);
        let mut jobs: Vec<Job> = reconcile.into_iter().map(Job::Negentropy).collect();
        jobs.extend(self.req_jobs(req, cx.config));
        let fresh_filters = item_filters(&fresh, chunk, FilterMode::FULL_HISTORY);
        if sent {
            jobs.extend(fresh_filters.into_iter().map(Job::NegentropySent));
        } else {
            jobs.extend(self.req_jobs(fresh_filters, cx.config));
        }
        let reconciles = jobs
            .iter()
            .any(|job| matches!(job, Job::Negentropy(_) | Job::NegentropySent(_)));
        let method = if reconciles {
            SyncMethod::Negentropy
        } else {
            SyncMethod::ReqEose
        };
        self.start_batch(cx, now, Purpose::Items, items, method, jobs);
    }

    /// Layer 1: the live announcement subscription and its history
    /// (negentropy when the relay allows and there is no `since`). Not on
    /// a relay reached only through Sync+ (`Ctx::discovers`).
    pub(crate) fn start_layer1(&mut self, cx: &mut Ctx<'_>, now: Now, since: Option<Timestamp>) {
        if !cx.discovers {
            return;
        }
        let needs_live = self
            .link
            .conn()
            .is_some_and(|conn| conn.live().count() == 0);
        // Otherwise `pump` rebuilds live coverage, Layer 1 included, once the
        // relay allows.
        if needs_live && self.may_open_live(now.instant, cx.config) {
            let filters = vec![announcement_filter(FilterMode::Live)];
            self.open_live(cx, now, filters, LiveList::Layer1);
        }
        let filter = announcement_filter(FilterMode::Historic { since });
        let method = self.sync_method(&filter, cx.config);
        let job = match method {
            SyncMethod::Negentropy => Job::Negentropy(filter),
            SyncMethod::ReqEose => Job::Req(filter),
        };
        self.start_batch(
            cx,
            now,
            Purpose::Layer1,
            PendingItems::default(),
            method,
            vec![job],
        );
    }

    /// Layer 1 starts at the session's timeout at `at` (its retry timer):
    /// for a relay that now discovers announcements, connected while it
    /// did not (reached only through Sync+).
    pub(crate) fn start_layer1_at(&mut self, at: Instant) {
        self.timers.set(RelayTimer::Layer1Retry, at);
    }

    /// Starts a batch of `jobs` syncing `items` by `method`: its jobs join
    /// the queue (a gap's or a poll's at the front: they are small and close
    /// a hole in live coverage). Returns the batch, if it has work.
    fn start_batch(
        &mut self,
        cx: &mut Ctx<'_>,
        now: Now,
        purpose: Purpose,
        items: PendingItems,
        method: SyncMethod,
        jobs: Vec<Job>,
    ) -> Option<BatchId> {
        if jobs.is_empty() {
            return None;
        }
        let batch = cx.out.batch_id();
        cx.events.push(SessionEvent::BatchOpened(batch));
        self.batches
            .start(batch, purpose, items, method, jobs.len(), now);
        if let Some(conn) = self.link.conn_mut() {
            let ahead = matches!(purpose, Purpose::Gap | Purpose::Poll);
            conn.work_mut().enqueue(batch, jobs, ahead);
        }
        Some(batch)
    }

    // --- Batches ----------------------------------------------------------

    /// Removes the finished subscription slot `id`; when its batch has no
    /// work left, the batch is confirmed. A poll whose last job finished
    /// schedules the next poll (it does not wait for a slow store; it
    /// starts from where the last confirmed poll did).
    fn finish_job(&mut self, cx: &mut Ctx<'_>, now: Now, id: &SubscriptionId) {
        let Some(batch) = self
            .link
            .conn_mut()
            .and_then(|conn| conn.take_sub(id))
            .and_then(|sub| sub.batch())
        else {
            return;
        };
        let Some(info) = self.batches.finish_job(batch, now.instant) else {
            return;
        };
        let done = info.is_done();
        if info.jobs_finished() && info.purpose() == Purpose::Poll && self.is_connected() {
            let next = now.instant + cx.config.timeouts.uncovered_poll_interval;
            self.timers.set_unless_set(RelayTimer::Poll, next);
        }
        if done {
            self.complete_batch(cx, now, batch);
        }
    }

    /// Ends the job of `batch` on subscription `id`: its CLOSE sent, the
    /// jobs that continue it (`follow_up`: what a clamp cut, ids asked
    /// again) queued in its batch, its slot freed ([`RelaySession::finish_job`]).
    fn end_job(
        &mut self,
        cx: &mut Ctx<'_>,
        now: Now,
        id: &SubscriptionId,
        batch: BatchId,
        follow_up: Vec<Job>,
    ) {
        self.unsubscribe(cx, id);
        if !follow_up.is_empty() {
            self.add_jobs(batch, follow_up);
        }
        self.finish_job(cx, now, id);
    }

    /// `true` while jobs of `batch` are queued or running: it may still
    /// bring events.
    pub(crate) fn batch_running(&self, batch: BatchId) -> bool {
        self.batches
            .get(batch)
            .is_some_and(|info| !info.jobs_finished())
    }

    /// Counts events of `batch` handed to the store (`+1`) or answered
    /// (`-1`); a batch whose jobs are done confirms with its last store.
    pub(crate) fn count_store(&mut self, cx: &mut Ctx<'_>, now: Now, batch: BatchId, delta: i32) {
        let Some(info) = self.batches.count_store(batch, delta) else {
            return;
        };
        if info.is_done() {
            self.complete_batch(cx, now, batch);
        }
    }

    /// Confirms `batch` (the one completion rule, [`Batch::is_done`],
    /// held): what it synced is recorded by its purpose — its items
    /// confirmed, Layer 1 synced, the next poll scheduled from its start.
    fn complete_batch(&mut self, cx: &mut Ctx<'_>, now: Now, batch: BatchId) {
        let Some(info) = self.batches.end(batch) else {
            return;
        };
        debug!(relay = %cx.relay, %batch, purpose = ?info.purpose(), "batch confirmed");
        cx.events.push(SessionEvent::BatchConfirmed {
            batch,
            history: matches!(info.purpose(), Purpose::Layer1 | Purpose::Items),
        });
        self.work_confirmed();
        let Some(state) = self.state.as_mut() else {
            return;
        };
        match info.purpose() {
            Purpose::Items => state.confirm(info.items(), cx.repos.ids()),
            Purpose::Layer1 => state.announcements_synced = true,
            Purpose::CatchUp | Purpose::Gap => {}
            Purpose::Poll => {
                if let Some(conn) = self.link.conn_mut() {
                    conn.live_mut().polled_from(info.started_unix());
                    let next = now.instant + cx.config.timeouts.uncovered_poll_interval;
                    self.timers.set(RelayTimer::Poll, next);
                }
            }
        }
    }

    /// Fails `batch` for `reason`: it and its queued jobs are dropped, its
    /// subscriptions closed, the failure is counted for the retry delay, and
    /// what retries it is timed by its purpose — its items are planned
    /// again, Layer 1 retried, a catch-up's items synced fully again (the
    /// gap was not caught up), a gap's live coverage rebuilt from the same
    /// moment, a poll repeated (`poll_from` stays: the next poll covers this
    /// one's span).
    pub(crate) fn fail_batch(&mut self, cx: &mut Ctx<'_>, now: Now, batch: BatchId, reason: &str) {
        let Some(info) = self.batches.end(batch) else {
            return;
        };
        warn!(relay = %cx.relay, %batch, reason, "batch failed; its items will be planned again");
        cx.events.push(SessionEvent::BatchFailed(batch));
        self.last_error = Some(format!("batch failed: {reason}").into());
        let mut closing = Vec::new();
        if let Some(conn) = self.link.conn_mut() {
            closing = conn.drop_batch(batch);
        }
        let retry_at = now.instant + self.work_failed(&cx.config.health);
        match info.purpose() {
            Purpose::Items => self.timers.set(RelayTimer::Replan, retry_at),
            Purpose::Layer1 => self.timers.set(RelayTimer::Layer1Retry, retry_at),
            Purpose::CatchUp => {
                if let Some(state) = self.state.as_mut() {
                    state.repos.clear();
                    state.root_events.clear();
                }
                self.timers.set(RelayTimer::Replan, retry_at);
            }
            Purpose::Gap => {
                if let (Some(conn), Some(from)) = (self.link.conn_mut(), info.covers_from()) {
                    conn.live_mut().missing_since(from);
                }
                self.timers.set(RelayTimer::RebuildLive, retry_at);
            }
            Purpose::Poll => {
                if self.is_connected() {
                    self.timers.set(RelayTimer::Poll, retry_at);
                }
            }
        }
        for (id, sub) in closing {
            self.send_close(cx, id, &sub);
        }
    }

    /// Tells the relay the slot `id` is no longer wanted.
    fn send_close(&mut self, cx: &mut Ctx<'_>, id: SubscriptionId, sub: &Sub) {
        if let Some(command) = sub.close_command(cx.relay.clone(), id) {
            self.emit(cx, command);
        }
    }

    /// Sends a CLOSE of `id`.
    fn unsubscribe(&mut self, cx: &mut Ctx<'_>, id: &SubscriptionId) {
        let relay = cx.relay.clone();
        self.emit(
            cx,
            Command::Unsubscribe {
                relay,
                id: id.clone(),
            },
        );
    }
}

/// What a refusal taught ([`RelaySession::learn_from_refusal`]).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Lesson {
    /// The subscription limit was lowered to this.
    pub(crate) subscription_limit: Option<usize>,
    /// The rate-limit cooldown started or was extended.
    pub(crate) cooldown: bool,
    /// A `rate-limited:` refusal (the rate is halved the first time in its
    /// episode).
    pub(crate) rate_refused: bool,
}

impl Lesson {
    /// `true` when the refused subscription should simply be retried later.
    pub(crate) fn retry(&self) -> bool {
        self.cooldown
    }
}

/// What a session's handlers are given besides the session: its relay's
/// URL, the configuration, and the parts of the engine that span relays
/// and that one relay's work reads or adds to — the outbox, the counters,
/// the store tracker (an event is stored once, whichever relay sent it) and
/// the repository index.
pub(crate) struct Ctx<'a> {
    /// The session's relay.
    pub(crate) relay: &'a RelayUrl,
    /// The engine's configuration.
    pub(crate) config: &'a EngineConfig,
    /// Where commands go.
    pub(crate) out: &'a mut Outbox,
    /// What the session tells the engine happened ([`SessionEvent`]).
    pub(crate) events: &'a mut SessionEvents,
    /// Every event between `Command::Store` and the store's answer.
    pub(crate) stores: &'a mut StoreTracker,
    /// The repositories we sync (a confirmation counts only theirs).
    pub(crate) repos: &'a RepoSyncIndex,
    /// `true` if announcements are discovered on this relay (Layer 1): a
    /// bootstrap relay or one an announcement lists, not one reached only
    /// through Sync+ (`SyncEngine::discovers`).
    pub(crate) discovers: bool,
}

impl Ctx<'_> {
    /// `false` while the store falls behind: new historic jobs and next
    /// pages wait (backpressure).
    pub(crate) fn store_keeps_up(&self) -> bool {
        self.stores.keeps_up(self.config)
    }
}

/// An EVENT as it reaches the session: verified by the driver, or not yet.
#[derive(Debug)]
pub(crate) enum Arrived {
    /// From a plain `RelayMessage`: verified here if it matches.
    Unchecked(nostr::prelude::Event),
    /// Verified by the driver.
    Verified(VerifiedEvent),
}

impl Arrived {
    fn event(&self) -> &nostr::prelude::Event {
        match self {
            Arrived::Unchecked(event) => event,
            Arrived::Verified(event) => event,
        }
    }
}

/// Counts and logs what a refusal taught.
fn note_lesson(cx: &mut Ctx<'_>, lesson: Lesson) {
    let relay = cx.relay;
    if let Some(limit) = lesson.subscription_limit {
        cx.events.push(Noted::SubscriptionRefused);
        warn!(%relay, limit, "relay refused a subscription; lowering its subscription limit");
    }
    if lesson.cooldown {
        cx.events.push(Noted::RateLimited);
        info!(%relay, cooldown = ?cx.config.health.rate_limit_cooldown, "relay rate limited");
    }
    if lesson.rate_refused {
        warn!(%relay, "rate-limited by relay; pausing new subscriptions for the cooldown");
    }
}

/// Notes an input that does not fit the session's state (counted by the
/// engine) and logs it at `debug`.
fn ignored(cx: &mut Ctx<'_>, what: &str) {
    cx.events.push(Noted::InputIgnored);
    debug!(relay = %cx.relay, what, "input ignored in the current state");
}

/// Counts an event from `relay` refused before it could be stored, and
/// logs it at `debug` (a relay sending many is logged once, when it is cut
/// off: [`RelaySession::refuse`]).
pub(crate) fn count_refused(events: &mut SessionEvents, relay: &RelayUrl, refused: &Refused) {
    events.push(Noted::Dropped(Dropped::of(refused)));
    debug!(%relay, %refused, "dropped event");
}

#[cfg(test)]
mod tests;
