//! A deterministic, in-memory, synchronous simulated Nostr relay.
//!
//! The simulation harness hands it client messages ([`ClientMessage`]) together
//! with the virtual time `now`, and gets back the relay's replies in order
//! ([`SimOutput`]). There are no threads, no sockets and no clock reads.
//!
//! The relay serves NIP-01 (`EVENT`, `REQ`, `CLOSE`) and NIP-77 (`NEG-OPEN`,
//! `NEG-MSG`, `NEG-CLOSE`) over one simulated connection, and can be told to
//! misbehave the way real relays do when a client hits their limits: silent
//! `limit` clamps (strfry), subscription limits answered with `CLOSED`
//! (nostr-relay-builder) or a bare `NOTICE` (strfry), rate limits, refused or
//! ignored negentropy, dropped connections, forged and off-filter events.

use std::borrow::Cow;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::Duration;

use negentropy::{Negentropy, NegentropyStorageVector};
use nostr::prelude::*;

use grasp_sync_core::clock::Instant;
use grasp_sync_test_support::relay::NegVerb;
pub use grasp_sync_test_support::relay::{
    Nip77Refusal, COULD_NOT_PARSE, NEG_DISABLED, NEG_NOT_SUPPORTED,
};

/// `CLOSED` (REQ) or `NEG-ERR` (NEG-OPEN) text for the subscription limit.
pub const TOO_MANY_REQS: &str = "rate-limited: too many REQs";
/// strfry's `NOTICE` text for the subscription limit ([`SubLimitRefusal::Notice`]).
pub const TOO_MANY_REQS_NOTICE: &str = "ERROR: too many concurrent REQs";
/// `CLOSED` (REQ) or `NEG-ERR` (NEG-OPEN) text for the rate limit.
pub const SLOW_DOWN: &str = "rate-limited: slow down";
/// `NEG-ERR` text for a negentropy message that is not valid hex or not valid negentropy.
pub const BAD_MESSAGE: &str = "error: bad message";
/// `NEG-ERR` text for a `NEG-MSG` whose session is not open.
pub const UNKNOWN_SESSION: &str = "closed: unknown session";
/// `NEG-ERR` text when a negentropy filter matches more than
/// [`SimRelayConfig::neg_max_records`] events (strfry's wording).
pub const TOO_MANY_RESULTS: &str = "blocked: too many query results";
/// `NOTICE` text for client messages the relay does not serve (`AUTH`, `COUNT`).
pub const UNSUPPORTED: &str = "unsupported";
/// `OK` text for an `EVENT` whose signature or id does not verify.
pub const BAD_SIGNATURE: &str = "invalid: bad signature";
/// `OK` text for an `EVENT` the relay already stores.
pub const DUPLICATE: &str = "duplicate: already have this event";
/// `OK` text for a replaceable/addressable `EVENT` older than the stored version.
pub const HAVE_NEWER: &str = "duplicate: have a newer event";

/// How the relay refuses a `REQ`/`NEG-OPEN` beyond [`SimRelayConfig::max_subscriptions`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SubLimitRefusal {
    /// `["CLOSED", id, "rate-limited: too many REQs"]` like nostr-relay-builder
    /// (`NEG-ERR` with the same text for `NEG-OPEN`).
    Closed,
    /// `["NOTICE", "ERROR: too many concurrent REQs"]` like strfry, and nothing
    /// else for that request (no `CLOSED`, no `EOSE`).
    Notice,
}

/// Behaviour knobs of a [`SimRelay`]; may be changed between messages through
/// [`SimRelay::config_mut`].
#[derive(Clone, Debug)]
pub struct SimRelayConfig {
    /// NIP-77 support or the way it is refused. Default: served.
    pub nip77: Nip77Refusal,
    /// Silent clamp of every filter's `limit` (strfry-style). Default: none.
    pub max_limit: Option<usize>,
    /// Results per filter when the filter has no `limit`. Default: 500.
    pub default_limit: usize,
    /// Maximum concurrently open subscriptions (`REQ`s and negentropy
    /// sessions together). Default: none.
    pub max_subscriptions: Option<usize>,
    /// How a request beyond `max_subscriptions` is refused. Default: `CLOSED`.
    pub sub_limit_refusal: SubLimitRefusal,
    /// At most N `REQ`/`NEG-OPEN` per sliding window of the given length,
    /// beyond that `CLOSED`/`NEG-ERR` "rate-limited: slow down". Default: none.
    pub rate_limit: Option<(usize, Duration)>,
    /// After this many client messages handled since connect, the connection
    /// drops (after the replies to that message). Default: never.
    pub disconnect_after: Option<usize>,
    /// If set, every `REQ` is answered `["CLOSED", id, <this text>]`. Default: none.
    pub close_every_req: Option<String>,
    /// Events with broken signatures sent on every `REQ` response (before
    /// `EOSE`) regardless of the filters.
    pub forged: Vec<Event>,
    /// Valid events sent on every `REQ` response (before `EOSE`) regardless of
    /// the filters.
    pub off_filter: Vec<Event>,
    /// Negentropy frame size limit of the relay side (0 or at least 4096).
    /// Default: 60 000.
    pub frame_size_limit: u64,
    /// If set, a `NEG-OPEN` whose filter matches more stored events than this
    /// is answered `NEG-ERR "blocked: too many query results"` (strfry's
    /// `maxSyncEvents`). Default: none.
    pub neg_max_records: Option<usize>,
    /// A client frame longer than this many bytes drops the connection at
    /// once, without a reply (strfry at 131 072 bytes). Default: none.
    pub max_message_length: Option<usize>,
    /// Ids the relay's negentropy set holds but its REQs never return (an
    /// index out of step). Default: none.
    pub withheld: HashSet<EventId>,
    /// A `REQ` whose every filter has `limit: 0` gets no `EOSE`, ever (a
    /// `REQ` with `since` gets its own at once): nostr-rs-relay 0.8.12.
    /// Default: off.
    pub no_eose_for_limit_zero: bool,
    /// The first `REQ` that matches more than this many stored events sends
    /// that many and then nothing, no `EOSE`, no `CLOSED`, ever (the
    /// subscription stays open for live events): nostr-rs-relay 0.8.12
    /// aborting a query for a slow client or a WAL checkpoint. Once; then
    /// the knob clears itself. Default: none.
    pub drop_req_mid_stream: Option<usize>,
}

impl Default for SimRelayConfig {
    fn default() -> Self {
        SimRelayConfig {
            nip77: Nip77Refusal::Served,
            max_limit: None,
            default_limit: 500,
            max_subscriptions: None,
            sub_limit_refusal: SubLimitRefusal::Closed,
            rate_limit: None,
            disconnect_after: None,
            close_every_req: None,
            forged: Vec::new(),
            off_filter: Vec::new(),
            frame_size_limit: 60_000,
            neg_max_records: None,
            max_message_length: None,
            withheld: HashSet::new(),
            no_eose_for_limit_zero: false,
            drop_req_mid_stream: None,
        }
    }
}

/// What the relay did with one client message.
#[derive(Debug, Default)]
pub struct SimOutput {
    /// The relay's replies, in the order it sent them.
    pub replies: Vec<RelayMessage<'static>>,
    /// The relay dropped the connection after sending `replies`.
    pub disconnect: bool,
}

/// Counters of what the relay received and sent, over its whole life
/// (they survive reconnects).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SimStats {
    /// `REQ` messages received (accepted or refused).
    pub reqs_received: usize,
    /// `EVENT` messages sent, stored, forged, off-filter and live alike.
    pub events_sent: usize,
    /// `NEG-OPEN` messages received (served, refused or ignored).
    pub neg_opens: usize,
    /// `NEG-MSG` messages received (served, refused or ignored).
    pub neg_msgs_received: usize,
    /// `CLOSE` messages received.
    pub closes_received: usize,
    /// `NEG-CLOSE` messages received.
    pub neg_closes_received: usize,
    /// `EVENT` messages received from the client.
    pub events_received: usize,
    /// Requests refused because of [`SimRelayConfig::max_subscriptions`].
    pub refused_for_limit: usize,
    /// Requests refused because of [`SimRelayConfig::rate_limit`].
    pub rate_limited: usize,
    /// Successful [`SimRelay::connect`] calls.
    pub connects: usize,
    /// Frames over [`SimRelayConfig::max_message_length`] (each dropped the
    /// connection).
    pub frames_too_large: usize,
    /// The largest client frame received, in bytes.
    pub largest_frame: usize,
    /// `REQ`s dropped mid-stream ([`SimRelayConfig::drop_req_mid_stream`]).
    pub reqs_dropped: usize,
}

/// Position of a stored event: newest first, ties by id ascending.
type OrderKey = (Reverse<Timestamp>, [u8; 32]);

/// Identity of a replaceable/addressable slot: kind, author, `d` value.
type SlotKey = (Kind, PublicKey, String);

fn order_key(event: &Event) -> OrderKey {
    (Reverse(event.created_at), event.id.to_bytes())
}

fn slot_key(event: &Event) -> Option<SlotKey> {
    if event.kind.is_replaceable() {
        return Some((event.kind, event.pubkey, String::new()));
    }
    if event.kind.is_addressable() {
        let identifier = event.tags.identifier().unwrap_or_default();
        return Some((event.kind, event.pubkey, identifier));
    }
    None
}

/// What the store did with an incoming event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stored {
    /// Newly stored (possibly replacing an older version).
    New,
    /// Ephemeral kind: not stored, but delivered live.
    Ephemeral,
    /// Same id already stored.
    Duplicate,
    /// Replaceable/addressable and an equal-or-newer version is stored.
    Superseded,
}

impl Stored {
    fn goes_live(self) -> bool {
        matches!(self, Stored::New | Stored::Ephemeral)
    }
}

/// The relay's database: events ordered newest first.
#[derive(Debug, Default)]
struct EventStore {
    by_order: BTreeMap<OrderKey, Event>,
    ids: HashSet<EventId>,
    slots: HashMap<SlotKey, OrderKey>,
}

impl EventStore {
    fn insert(&mut self, event: Event) -> Stored {
        if event.kind.is_ephemeral() {
            return Stored::Ephemeral;
        }
        if self.ids.contains(&event.id) {
            return Stored::Duplicate;
        }
        let key = order_key(&event);
        if let Some(slot) = slot_key(&event) {
            if !self.take_slot(slot, key) {
                return Stored::Superseded;
            }
        }
        self.ids.insert(event.id);
        self.by_order.insert(key, event);
        Stored::New
    }

    /// Claims a replaceable slot for `key`, evicting the older holder; false
    /// if the holder is newer (or equally new with a lower id).
    fn take_slot(&mut self, slot: SlotKey, key: OrderKey) -> bool {
        if let Some(&holder) = self.slots.get(&slot) {
            if holder <= key {
                return false;
            }
            self.evict(&holder);
        }
        self.slots.insert(slot, key);
        true
    }

    fn evict(&mut self, key: &OrderKey) {
        if let Some(old) = self.by_order.remove(key) {
            self.ids.remove(&old.id);
        }
    }

    fn matching<'s>(
        &'s self,
        filter: &'s Filter,
    ) -> impl Iterator<Item = (&'s OrderKey, &'s Event)> {
        self.by_order
            .iter()
            .filter(move |(_, event)| filter.match_event(event, MatchEventOptions::new()))
    }

    fn get(&self, key: &OrderKey) -> Option<&Event> {
        self.by_order.get(key)
    }

    fn all(&self) -> Vec<Event> {
        self.by_order.values().cloned().collect()
    }
}

/// Why a request was not admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Refusal {
    SubLimit,
    RateLimit,
}

/// The kind of request being admitted, to pick the refusal's reply form.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RequestKind {
    Req,
    NegOpen,
}

type Session = Negentropy<'static, NegentropyStorageVector>;

/// A simulated relay with one (re)connectable client connection.
#[derive(Debug)]
pub struct SimRelay {
    url: RelayUrl,
    config: SimRelayConfig,
    store: EventStore,
    down: bool,
    connected: bool,
    connected_at: Option<Instant>,
    messages_handled: usize,
    request_times: Vec<Instant>,
    reqs: BTreeMap<SubscriptionId, Vec<Filter>>,
    sessions: BTreeMap<SubscriptionId, Session>,
    max_open_seen: usize,
    stats: SimStats,
}

impl SimRelay {
    /// A relay at `url`, up, not connected, with no events.
    pub fn new(url: RelayUrl, config: SimRelayConfig) -> Self {
        SimRelay {
            url,
            config,
            store: EventStore::default(),
            down: false,
            connected: false,
            connected_at: None,
            messages_handled: 0,
            request_times: Vec::new(),
            reqs: BTreeMap::new(),
            sessions: BTreeMap::new(),
            max_open_seen: 0,
            stats: SimStats::default(),
        }
    }

    /// The relay's URL.
    pub fn url(&self) -> &RelayUrl {
        &self.url
    }

    /// The relay's behaviour knobs.
    pub fn config(&self) -> &SimRelayConfig {
        &self.config
    }

    /// The relay's behaviour knobs, to change between messages.
    pub fn config_mut(&mut self) -> &mut SimRelayConfig {
        &mut self.config
    }

    /// Stores `event` without live delivery. Replaceable and addressable
    /// events keep only the newest version (ties: lowest id); ephemeral
    /// events are not stored. No signature check.
    pub fn add_event(&mut self, event: Event) {
        self.store.insert(event);
    }

    /// Stores `event` (as [`SimRelay::add_event`]) and returns the `EVENT`
    /// messages the connection receives for its open subscriptions whose
    /// filters match. Nothing is delivered for a duplicate or an outdated
    /// replaceable version. No signature check.
    pub fn publish(&mut self, event: Event) -> Vec<RelayMessage<'static>> {
        let outcome = self.store.insert(event.clone());
        if !outcome.goes_live() {
            return Vec::new();
        }
        self.deliver_live(&event)
    }

    /// The stored events, newest first (ties by id ascending).
    pub fn events(&self) -> Vec<Event> {
        self.store.all()
    }

    /// Takes the relay down (dropping the connection) or brings it back up.
    pub fn set_down(&mut self, down: bool) {
        self.down = down;
        if down {
            self.disconnect();
        }
    }

    /// Whether the relay is down (refuses connections).
    pub fn is_down(&self) -> bool {
        self.down
    }

    /// Opens a fresh connection: no subscriptions, message counter and rate
    /// window reset. False (and nothing changes) if the relay is down.
    pub fn connect(&mut self, now: Instant) -> bool {
        if self.down {
            return false;
        }
        self.disconnect();
        self.connected = true;
        self.connected_at = Some(now);
        self.messages_handled = 0;
        self.request_times.clear();
        self.stats.connects = self.stats.connects.saturating_add(1);
        true
    }

    /// Closes the connection (from either side): forgets all subscriptions
    /// and negentropy sessions.
    pub fn disconnect(&mut self) {
        self.connected = false;
        self.reqs.clear();
        self.sessions.clear();
    }

    /// Whether a connection is open.
    pub fn is_connected(&self) -> bool {
        self.connected
    }

    /// When the current connection was opened, if one is open.
    pub fn connected_at(&self) -> Option<Instant> {
        self.connected_at.filter(|_| self.connected)
    }

    /// Handles one client message at `now`. Empty output when not connected.
    pub fn handle(&mut self, now: Instant, message: &ClientMessage<'_>) -> SimOutput {
        if !self.connected {
            return SimOutput::default();
        }
        let len = message.as_json().len();
        self.stats.largest_frame = self.stats.largest_frame.max(len);
        if self.config.max_message_length.is_some_and(|max| len > max) {
            self.stats.frames_too_large += 1;
            self.disconnect();
            return SimOutput {
                replies: Vec::new(),
                disconnect: true,
            };
        }
        self.messages_handled = self.messages_handled.saturating_add(1);
        let replies = self.dispatch(now, message);
        let disconnect = self.reached_disconnect_point();
        if disconnect {
            self.disconnect();
        }
        SimOutput {
            replies,
            disconnect,
        }
    }

    /// Open `REQ` subscriptions plus open negentropy sessions.
    pub fn open_subscriptions(&self) -> usize {
        self.reqs.len().saturating_add(self.sessions.len())
    }

    /// The highest [`SimRelay::open_subscriptions`] ever reached.
    pub fn max_open_subscriptions_seen(&self) -> usize {
        self.max_open_seen
    }

    /// Counters of received and sent messages.
    pub fn stats(&self) -> &SimStats {
        &self.stats
    }

    fn reached_disconnect_point(&self) -> bool {
        self.config
            .disconnect_after
            .is_some_and(|after| self.messages_handled >= after)
    }

    fn dispatch(
        &mut self,
        now: Instant,
        message: &ClientMessage<'_>,
    ) -> Vec<RelayMessage<'static>> {
        match message {
            ClientMessage::Event(event) => self.on_event(event.as_ref().clone()),
            ClientMessage::Req {
                subscription_id,
                filters,
            } => {
                let filters = filters.iter().map(|f| f.as_ref().clone()).collect();
                self.on_req(now, subscription_id.as_ref().clone(), filters)
            }
            ClientMessage::Close(subscription_id) => self.on_close(subscription_id),
            ClientMessage::NegOpen {
                subscription_id,
                filter,
                initial_message,
            } => self.on_neg_open(
                now,
                subscription_id.as_ref().clone(),
                filter,
                initial_message,
            ),
            ClientMessage::NegMsg {
                subscription_id,
                message,
            } => self.on_neg_msg(subscription_id.as_ref().clone(), message),
            ClientMessage::NegClose { subscription_id } => self.on_neg_close(subscription_id),
            ClientMessage::Count { .. } | ClientMessage::Auth(_) => {
                vec![RelayMessage::notice(UNSUPPORTED)]
            }
        }
    }

    // ---- EVENT ----

    fn on_event(&mut self, event: Event) -> Vec<RelayMessage<'static>> {
        self.stats.events_received = self.stats.events_received.saturating_add(1);
        if event.verify().is_err() {
            return vec![RelayMessage::ok(event.id, false, BAD_SIGNATURE)];
        }
        let outcome = self.store.insert(event.clone());
        let mut replies = vec![ok_for(event.id, outcome)];
        if outcome.goes_live() {
            replies.extend(self.deliver_live(&event));
        }
        replies
    }

    fn deliver_live(&mut self, event: &Event) -> Vec<RelayMessage<'static>> {
        let receivers: Vec<SubscriptionId> = self
            .reqs
            .iter()
            .filter(|(_, filters)| any_filter_matches(filters, event))
            .map(|(id, _)| id.clone())
            .collect();
        receivers
            .into_iter()
            .map(|id| self.event_message(id, event.clone()))
            .collect()
    }

    fn event_message(&mut self, id: SubscriptionId, event: Event) -> RelayMessage<'static> {
        self.stats.events_sent = self.stats.events_sent.saturating_add(1);
        RelayMessage::event(id, event)
    }

    // ---- REQ / CLOSE ----

    fn on_req(
        &mut self,
        now: Instant,
        id: SubscriptionId,
        filters: Vec<Filter>,
    ) -> Vec<RelayMessage<'static>> {
        self.stats.reqs_received = self.stats.reqs_received.saturating_add(1);
        // A REQ with an open id replaces it: the old one ends here whatever
        // becomes of the new one, and does not count against the limit.
        self.reqs.remove(&id);
        if let Err(refusal) = self.admit(now) {
            return self.refuse(RequestKind::Req, id, refusal);
        }
        if let Some(text) = self.config.close_every_req.clone() {
            return vec![RelayMessage::closed(id, text)];
        }
        let mut replies = self.stored_results(&id, &filters);
        if let Some(sent) = self
            .config
            .drop_req_mid_stream
            .filter(|sent| replies.len() > *sent)
        {
            self.config.drop_req_mid_stream = None;
            self.stats.events_sent -= replies.len() - sent;
            replies.truncate(sent);
            self.stats.reqs_dropped += 1;
            self.reqs.insert(id, filters);
            self.note_open_count();
            return replies;
        }
        replies.extend(self.injected_events(&id));
        let live_only = filters.iter().all(|filter| filter.limit == Some(0));
        if !(live_only && self.config.no_eose_for_limit_zero) {
            replies.push(RelayMessage::eose(id.clone()));
        }
        self.reqs.insert(id, filters);
        self.note_open_count();
        replies
    }

    fn on_close(&mut self, id: &SubscriptionId) -> Vec<RelayMessage<'static>> {
        self.stats.closes_received = self.stats.closes_received.saturating_add(1);
        self.reqs.remove(id);
        Vec::new()
    }

    /// The limit a filter's results are cut to.
    fn effective_limit(&self, filter: &Filter) -> usize {
        let asked = filter.limit.unwrap_or(self.config.default_limit);
        asked.min(self.config.max_limit.unwrap_or(usize::MAX))
    }

    fn stored_results(
        &mut self,
        id: &SubscriptionId,
        filters: &[Filter],
    ) -> Vec<RelayMessage<'static>> {
        let mut selected: BTreeSet<OrderKey> = BTreeSet::new();
        for filter in filters {
            let limit = self.effective_limit(filter);
            selected.extend(self.store.matching(filter).take(limit).map(|(key, _)| *key));
        }
        let events: Vec<Event> = selected
            .iter()
            .filter_map(|key| self.store.get(key).cloned())
            .filter(|event| !self.config.withheld.contains(&event.id))
            .collect();
        events
            .into_iter()
            .map(|event| self.event_message(id.clone(), event))
            .collect()
    }

    fn injected_events(&mut self, id: &SubscriptionId) -> Vec<RelayMessage<'static>> {
        let injected: Vec<Event> = self
            .config
            .forged
            .iter()
            .chain(self.config.off_filter.iter())
            .cloned()
            .collect();
        injected
            .into_iter()
            .map(|event| self.event_message(id.clone(), event))
            .collect()
    }

    // ---- admission (subscription and rate limits) ----

    /// Checks the subscription limit, then the rate limit, for a request that
    /// would open one more subscription.
    fn admit(&mut self, now: Instant) -> Result<(), Refusal> {
        if self.over_sub_limit() {
            self.stats.refused_for_limit = self.stats.refused_for_limit.saturating_add(1);
            return Err(Refusal::SubLimit);
        }
        if !self.take_rate_slot(now) {
            self.stats.rate_limited = self.stats.rate_limited.saturating_add(1);
            return Err(Refusal::RateLimit);
        }
        Ok(())
    }

    fn over_sub_limit(&self) -> bool {
        self.config
            .max_subscriptions
            .is_some_and(|max| self.open_subscriptions().saturating_add(1) > max)
    }

    /// Records a request at `now` if the sliding window has room.
    fn take_rate_slot(&mut self, now: Instant) -> bool {
        let Some((max, window)) = self.config.rate_limit else {
            return true;
        };
        self.request_times
            .retain(|&at| now.saturating_duration_since(at) < window);
        if self.request_times.len() >= max {
            return false;
        }
        self.request_times.push(now);
        true
    }

    fn refuse(
        &self,
        kind: RequestKind,
        id: SubscriptionId,
        refusal: Refusal,
    ) -> Vec<RelayMessage<'static>> {
        let text = match refusal {
            Refusal::SubLimit if self.config.sub_limit_refusal == SubLimitRefusal::Notice => {
                return vec![RelayMessage::notice(TOO_MANY_REQS_NOTICE)];
            }
            Refusal::SubLimit => TOO_MANY_REQS,
            Refusal::RateLimit => SLOW_DOWN,
        };
        match kind {
            RequestKind::Req => vec![RelayMessage::closed(id, text)],
            RequestKind::NegOpen => vec![neg_err(id, text)],
        }
    }

    fn note_open_count(&mut self) {
        self.max_open_seen = self.max_open_seen.max(self.open_subscriptions());
    }

    // ---- NIP-77 ----

    /// The reply of a relay that does not serve NIP-77, if this one does not.
    fn nip77_refusal(
        &self,
        verb: NegVerb,
        id: &SubscriptionId,
    ) -> Option<Vec<RelayMessage<'static>>> {
        self.config.nip77.answer(verb, id)
    }

    fn on_neg_open(
        &mut self,
        now: Instant,
        id: SubscriptionId,
        filter: &Filter,
        initial_message: &str,
    ) -> Vec<RelayMessage<'static>> {
        self.stats.neg_opens = self.stats.neg_opens.saturating_add(1);
        if let Some(refusal) = self.nip77_refusal(NegVerb::Open, &id) {
            return refusal;
        }
        // A NEG-OPEN with an open id replaces that session.
        self.sessions.remove(&id);
        if let Err(refusal) = self.admit(now) {
            return self.refuse(RequestKind::NegOpen, id, refusal);
        }
        match self.open_session(filter, initial_message) {
            Ok((session, reply)) => {
                self.sessions.insert(id.clone(), session);
                self.note_open_count();
                vec![neg_msg(id, &reply)]
            }
            Err(text) => vec![neg_err(id, text)],
        }
    }

    /// Builds the relay side of a session and answers the initial message.
    fn open_session(
        &self,
        filter: &Filter,
        initial_message: &str,
    ) -> Result<(Session, Vec<u8>), String> {
        let query = hex::decode(initial_message.as_bytes()).map_err(|_| BAD_MESSAGE)?;
        let storage = self.negentropy_storage(filter)?;
        let mut session = Negentropy::owned(storage, self.config.frame_size_limit)
            .map_err(|e| format!("error: {e}"))?;
        let reply = session.reconcile(&query).map_err(|_| BAD_MESSAGE)?;
        Ok((session, reply))
    }

    fn negentropy_storage(&self, filter: &Filter) -> Result<NegentropyStorageVector, String> {
        let matching: Vec<&Event> = self.store.matching(filter).map(|(_, e)| e).collect();
        if self
            .config
            .neg_max_records
            .is_some_and(|max| matching.len() > max)
        {
            return Err(TOO_MANY_RESULTS.to_owned());
        }
        let mut storage = NegentropyStorageVector::with_capacity(matching.len());
        for event in matching {
            let id = negentropy::Id::from_byte_array(event.id.to_bytes());
            storage
                .insert(event.created_at.as_secs(), id)
                .map_err(|e| format!("error: {e}"))?;
        }
        storage.seal().map_err(|e| format!("error: {e}"))?;
        Ok(storage)
    }

    fn on_neg_msg(&mut self, id: SubscriptionId, message: &str) -> Vec<RelayMessage<'static>> {
        self.stats.neg_msgs_received = self.stats.neg_msgs_received.saturating_add(1);
        if let Some(refusal) = self.nip77_refusal(NegVerb::Msg, &id) {
            return refusal;
        }
        let Some(session) = self.sessions.get_mut(&id) else {
            return vec![neg_err(id, UNKNOWN_SESSION)];
        };
        let reply = hex::decode(message.as_bytes())
            .ok()
            .and_then(|query| session.reconcile(&query).ok());
        match reply {
            Some(reply) => vec![neg_msg(id, &reply)],
            None => {
                // NEG-ERR ends the session (NIP-77).
                self.sessions.remove(&id);
                vec![neg_err(id, BAD_MESSAGE)]
            }
        }
    }

    fn on_neg_close(&mut self, id: &SubscriptionId) -> Vec<RelayMessage<'static>> {
        self.stats.neg_closes_received = self.stats.neg_closes_received.saturating_add(1);
        self.nip77_refusal(NegVerb::Close, id).unwrap_or_else(|| {
            self.sessions.remove(id);
            Vec::new()
        })
    }
}

fn any_filter_matches(filters: &[Filter], event: &Event) -> bool {
    filters
        .iter()
        .any(|filter| filter.match_event(event, MatchEventOptions::new()))
}

fn ok_for(id: EventId, outcome: Stored) -> RelayMessage<'static> {
    match outcome {
        Stored::New | Stored::Ephemeral => RelayMessage::ok(id, true, ""),
        Stored::Duplicate => RelayMessage::ok(id, true, DUPLICATE),
        Stored::Superseded => RelayMessage::ok(id, true, HAVE_NEWER),
    }
}

fn neg_msg(id: SubscriptionId, payload: &[u8]) -> RelayMessage<'static> {
    RelayMessage::NegMsg {
        subscription_id: Cow::Owned(id),
        message: Cow::Owned(hex::encode(payload)),
    }
}

fn neg_err(id: SubscriptionId, text: impl Into<String>) -> RelayMessage<'static> {
    RelayMessage::NegErr {
        subscription_id: Cow::Owned(id),
        message: Cow::Owned(text.into()),
    }
}

#[cfg(test)]
mod tests {
    use grasp_sync_test_support::ids;
    use grasp_sync_test_support::nip34::{sign, Announcement};

    use super::*;

    const KIND: Kind = Kind::Custom(1621);
    const OTHER_KIND: Kind = Kind::Custom(1617);

    fn url() -> RelayUrl {
        RelayUrl::parse("wss://sim.example.com").unwrap()
    }

    fn sid(name: &str) -> SubscriptionId {
        SubscriptionId::new(name)
    }

    /// `count` events of KIND, created at 1000, 1001, ...
    fn events_at(keys: &Keys, count: u64) -> Vec<Event> {
        (0..count)
            .map(|i| sign(keys, KIND.as_u16(), "x", Vec::new(), 1000 + i))
            .collect()
    }

    fn relay_with(config: SimRelayConfig, events: &[Event]) -> SimRelay {
        let mut relay = SimRelay::new(url(), config);
        for event in events {
            relay.add_event(event.clone());
        }
        assert!(relay.connect(Instant::ZERO));
        relay
    }

    fn req(relay: &mut SimRelay, id: &str, filters: Vec<Filter>) -> SimOutput {
        relay.handle(Instant::ZERO, &ClientMessage::req(sid(id), filters))
    }

    fn event_ids(replies: &[RelayMessage<'static>]) -> Vec<EventId> {
        replies
            .iter()
            .filter_map(|reply| match reply {
                RelayMessage::Event { event, .. } => Some(event.id),
                _ => None,
            })
            .collect()
    }

    fn ids_of(events: &[Event]) -> Vec<EventId> {
        events.iter().map(|e| e.id).collect()
    }

    fn newest_first(events: &[Event]) -> Vec<Event> {
        let mut sorted = events.to_vec();
        sorted.sort_by_key(order_key);
        sorted
    }

    fn closed(id: &str, text: &str) -> RelayMessage<'static> {
        RelayMessage::closed(sid(id), text)
    }

    fn neg_open_msg(id: &str, filter: Filter, hex: &str) -> ClientMessage<'static> {
        ClientMessage::NegOpen {
            subscription_id: Cow::Owned(sid(id)),
            filter: Cow::Owned(filter),
            initial_message: Cow::Owned(hex.to_owned()),
        }
    }

    fn neg_msg_msg(id: &str, hex: &str) -> ClientMessage<'static> {
        ClientMessage::NegMsg {
            subscription_id: Cow::Owned(sid(id)),
            message: Cow::Owned(hex.to_owned()),
        }
    }

    fn neg_close_msg(id: &str) -> ClientMessage<'static> {
        ClientMessage::NegClose {
            subscription_id: Cow::Owned(sid(id)),
        }
    }

    /// A valid initial negentropy message over an empty set.
    fn empty_initiation() -> String {
        let mut storage = NegentropyStorageVector::new();
        storage.seal().unwrap();
        let mut client = Negentropy::owned(storage, 0).unwrap();
        hex::encode(client.initiate().unwrap())
    }

    #[test]
    fn limit_is_clamped_silently_to_max_limit_newest_first() {
        let keys = Keys::generate();
        let events = events_at(&keys, 520);
        let config = SimRelayConfig {
            max_limit: Some(500),
            ..Default::default()
        };
        let mut relay = relay_with(config, &events);
        let out = req(&mut relay, "s", vec![Filter::new().kind(KIND).limit(1000)]);
        let expected: Vec<EventId> = ids_of(&newest_first(&events)[..500]);
        assert_eq!(event_ids(&out.replies), expected);
        assert_eq!(out.replies.last(), Some(&RelayMessage::eose(sid("s"))));
        assert_eq!(out.replies.len(), 501);
        assert_eq!(relay.stats().events_sent, 500);
    }

    #[test]
    fn ties_on_created_at_are_ordered_by_id_ascending() {
        let keys = Keys::generate();
        let events: Vec<Event> = (0..6)
            .map(|i| {
                sign(
                    &keys,
                    KIND.as_u16(),
                    "x",
                    vec![Tag::identifier(format!("{i}"))],
                    5000,
                )
            })
            .collect();
        let mut relay = relay_with(SimRelayConfig::default(), &events);
        let out = req(&mut relay, "s", vec![Filter::new().kind(KIND)]);
        let mut expected = ids_of(&events);
        expected.sort_by_key(|id| id.to_bytes());
        assert_eq!(event_ids(&out.replies), expected);
    }

    #[test]
    fn default_limit_applies_to_filters_without_limit() {
        let keys = Keys::generate();
        let events = events_at(&keys, 8);
        let config = SimRelayConfig {
            default_limit: 5,
            ..Default::default()
        };
        let mut relay = relay_with(config, &events);
        let out = req(&mut relay, "s", vec![Filter::new().kind(KIND)]);
        assert_eq!(event_ids(&out.replies), ids_of(&newest_first(&events)[..5]));
    }

    #[test]
    fn limit_zero_returns_only_eose() {
        let keys = Keys::generate();
        let events = events_at(&keys, 3);
        let mut relay = relay_with(SimRelayConfig::default(), &events);
        let out = req(&mut relay, "s", vec![Filter::new().kind(KIND).limit(0)]);
        assert_eq!(out.replies, vec![RelayMessage::eose(sid("s"))]);
        assert_eq!(relay.open_subscriptions(), 1);
    }

    #[test]
    fn since_and_until_are_inclusive() {
        let keys = Keys::generate();
        let events = events_at(&keys, 10); // 1000..=1009
        let mut relay = relay_with(SimRelayConfig::default(), &events);
        let filter = Filter::new()
            .kind(KIND)
            .since(Timestamp::from_secs(1003))
            .until(Timestamp::from_secs(1006));
        let out = req(&mut relay, "s", vec![filter]);
        let expected: Vec<EventId> = ids_of(&newest_first(&events[3..=6]));
        assert_eq!(event_ids(&out.replies), expected);
    }

    #[test]
    fn tag_filters_select_by_a_and_e_tags() {
        let keys = Keys::generate();
        let root = sign(&keys, OTHER_KIND.as_u16(), "x", Vec::new(), 900);
        let address = ids::coordinate(&keys.public_key(), "repo");
        let a_tagged = sign(
            &keys,
            KIND.as_u16(),
            "x",
            vec![Tag::parse(["a", address.as_str()]).unwrap()],
            1000,
        );
        let e_tagged = sign(&keys, KIND.as_u16(), "x", vec![Tag::event(root.id)], 1001);
        let untagged = sign(&keys, KIND.as_u16(), "x", Vec::new(), 1002);
        let all = [root.clone(), a_tagged.clone(), e_tagged.clone(), untagged];
        let mut relay = relay_with(SimRelayConfig::default(), &all);
        let by_a =
            Filter::new().custom_tag(SingleLetterTag::from_char('a').unwrap(), address.as_str());
        let out = req(&mut relay, "a", vec![by_a]);
        assert_eq!(event_ids(&out.replies), vec![a_tagged.id]);
        let out = req(&mut relay, "e", vec![Filter::new().event(root.id)]);
        assert_eq!(event_ids(&out.replies), vec![e_tagged.id]);
    }

    #[test]
    fn union_across_filters_has_no_duplicates() {
        let keys = Keys::generate();
        let events = events_at(&keys, 6);
        let mut relay = relay_with(SimRelayConfig::default(), &events);
        let by_id = Filter::new().ids([events[0].id, events[5].id]);
        let newest_two = Filter::new().kind(KIND).limit(2);
        let out = req(&mut relay, "s", vec![by_id, newest_two]);
        let expected = vec![events[5].id, events[4].id, events[0].id];
        assert_eq!(event_ids(&out.replies), expected);
    }

    #[test]
    fn req_with_open_id_replaces_the_subscription() {
        let keys = Keys::generate();
        let mut relay = relay_with(SimRelayConfig::default(), &[]);
        req(&mut relay, "s", vec![Filter::new().kind(KIND)]);
        req(&mut relay, "s", vec![Filter::new().kind(OTHER_KIND)]);
        assert_eq!(relay.open_subscriptions(), 1);
        assert_eq!(relay.max_open_subscriptions_seen(), 1);
        assert!(relay
            .publish(sign(&keys, KIND.as_u16(), "x", Vec::new(), 1000))
            .is_empty());
        let other = sign(&keys, OTHER_KIND.as_u16(), "x", Vec::new(), 1000);
        assert_eq!(
            relay.publish(other.clone()),
            vec![RelayMessage::event(sid("s"), other)]
        );
    }

    #[test]
    fn publish_delivers_live_after_eose_ignoring_limit_but_honouring_since() {
        let keys = Keys::generate();
        let mut relay = relay_with(SimRelayConfig::default(), &[]);
        let filter = Filter::new()
            .kind(KIND)
            .since(Timestamp::from_secs(2000))
            .limit(0);
        let out = req(&mut relay, "live", vec![filter]);
        assert_eq!(out.replies, vec![RelayMessage::eose(sid("live"))]);
        let fresh = sign(&keys, KIND.as_u16(), "x", Vec::new(), 2001);
        assert_eq!(
            relay.publish(fresh.clone()),
            vec![RelayMessage::event(sid("live"), fresh.clone())]
        );
        assert!(relay
            .publish(sign(&keys, KIND.as_u16(), "x", Vec::new(), 1999))
            .is_empty());
        assert!(relay
            .publish(sign(&keys, OTHER_KIND.as_u16(), "x", Vec::new(), 2002))
            .is_empty());
        assert!(
            relay.publish(fresh).is_empty(),
            "duplicates are not re-delivered"
        );
        relay.handle(Instant::ZERO, &ClientMessage::close(sid("live")));
        assert!(relay
            .publish(sign(&keys, KIND.as_u16(), "x", Vec::new(), 2003))
            .is_empty());
        assert_eq!(relay.events().len(), 4);
        assert_eq!(relay.stats().closes_received, 1);
    }

    #[test]
    fn client_event_is_stored_acknowledged_and_delivered_live() {
        let keys = Keys::generate();
        let mut relay = relay_with(SimRelayConfig::default(), &[]);
        req(&mut relay, "s", vec![Filter::new().kind(KIND)]);
        let event = sign(&keys, KIND.as_u16(), "x", Vec::new(), 1000);
        let out = relay.handle(Instant::ZERO, &ClientMessage::event(event.clone()));
        assert_eq!(
            out.replies,
            vec![
                RelayMessage::ok(event.id, true, ""),
                RelayMessage::event(sid("s"), event.clone())
            ]
        );
        let again = relay.handle(Instant::ZERO, &ClientMessage::event(event.clone()));
        assert_eq!(
            again.replies,
            vec![RelayMessage::ok(event.id, true, DUPLICATE)]
        );
        assert_eq!(relay.events(), vec![event]);
    }

    #[test]
    fn client_event_with_bad_signature_is_rejected() {
        let keys = Keys::generate();
        let mut relay = relay_with(SimRelayConfig::default(), &[]);
        let mut forged = sign(&keys, KIND.as_u16(), "x", Vec::new(), 1000);
        forged.content = "tampered".to_owned();
        let out = relay.handle(Instant::ZERO, &ClientMessage::event(forged.clone()));
        assert_eq!(
            out.replies,
            vec![RelayMessage::ok(forged.id, false, BAD_SIGNATURE)]
        );
        assert!(relay.events().is_empty());
    }

    #[test]
    fn replaceable_and_addressable_keep_the_newest_version() {
        let keys = Keys::generate();
        let mut relay = relay_with(SimRelayConfig::default(), &[]);
        let repo = |at: u64, d: &str| Announcement::new(d).at(at).sign(&keys);
        let (old, new, other_repo) = (repo(1000, "a"), repo(1001, "a"), repo(900, "b"));
        relay.add_event(new.clone());
        relay.add_event(old.clone());
        relay.add_event(other_repo.clone());
        assert_eq!(ids_of(&relay.events()), vec![new.id, other_repo.id]);
        let newer = repo(1002, "a");
        relay.add_event(newer.clone());
        assert_eq!(ids_of(&relay.events()), vec![newer.id, other_repo.id]);

        let profile = |content: &str| {
            EventBuilder::new(Kind::Metadata, content)
                .custom_created_at(Timestamp::from_secs(500))
                .finalize(&keys)
                .unwrap()
        };
        let (p1, p2) = (profile("one"), profile("two"));
        let lowest = if p1.id.to_bytes() < p2.id.to_bytes() {
            &p1
        } else {
            &p2
        };
        relay.add_event(p1.clone());
        relay.add_event(p2.clone());
        let profiles: Vec<Event> = relay
            .events()
            .into_iter()
            .filter(|e| e.kind == Kind::Metadata)
            .collect();
        assert_eq!(profiles, vec![lowest.clone()]);
    }

    #[test]
    fn sub_limit_refused_with_closed() {
        let config = SimRelayConfig {
            max_subscriptions: Some(2),
            ..Default::default()
        };
        let mut relay = relay_with(config, &[]);
        req(&mut relay, "a", vec![Filter::new()]);
        relay.handle(
            Instant::ZERO,
            &neg_open_msg("n", Filter::new(), &empty_initiation()),
        );
        assert_eq!(relay.open_subscriptions(), 2);
        let out = req(&mut relay, "c", vec![Filter::new()]);
        assert_eq!(out.replies, vec![closed("c", TOO_MANY_REQS)]);
        let out = relay.handle(
            Instant::ZERO,
            &neg_open_msg("m", Filter::new(), &empty_initiation()),
        );
        assert_eq!(out.replies, vec![neg_err(sid("m"), TOO_MANY_REQS)]);
        // Replacing an open subscription does not count twice.
        let out = req(&mut relay, "a", vec![Filter::new()]);
        assert_eq!(out.replies, vec![RelayMessage::eose(sid("a"))]);
        assert_eq!(relay.open_subscriptions(), 2);
        assert_eq!(relay.max_open_subscriptions_seen(), 2);
        assert_eq!(relay.stats().refused_for_limit, 2);
    }

    #[test]
    fn sub_limit_refused_with_bare_notice() {
        let config = SimRelayConfig {
            max_subscriptions: Some(1),
            sub_limit_refusal: SubLimitRefusal::Notice,
            ..Default::default()
        };
        let mut relay = relay_with(config, &[]);
        req(&mut relay, "a", vec![Filter::new()]);
        let out = req(&mut relay, "b", vec![Filter::new()]);
        assert_eq!(
            out.replies,
            vec![RelayMessage::notice(TOO_MANY_REQS_NOTICE)]
        );
        assert_eq!(relay.open_subscriptions(), 1);
        relay.handle(Instant::ZERO, &ClientMessage::close(sid("a")));
        assert_eq!(relay.open_subscriptions(), 0);
        req(&mut relay, "b", vec![Filter::new()]);
        assert_eq!(relay.max_open_subscriptions_seen(), 1);
    }

    #[test]
    fn max_open_subscriptions_seen_counts_the_peak() {
        let mut relay = relay_with(SimRelayConfig::default(), &[]);
        for name in ["a", "b", "c"] {
            req(&mut relay, name, vec![Filter::new()]);
        }
        for name in ["a", "b", "c"] {
            relay.handle(Instant::ZERO, &ClientMessage::close(sid(name)));
        }
        assert_eq!(relay.open_subscriptions(), 0);
        assert_eq!(relay.max_open_subscriptions_seen(), 3);
    }

    #[test]
    fn rate_limit_closes_with_slow_down_over_a_sliding_window() {
        let config = SimRelayConfig {
            rate_limit: Some((2, Duration::from_secs(10))),
            ..Default::default()
        };
        let mut relay = relay_with(config, &[]);
        let at = |s: u64| Instant::from_secs(s);
        let open = |relay: &mut SimRelay, t: u64, id: &str| {
            relay
                .handle(at(t), &ClientMessage::req(sid(id), vec![Filter::new()]))
                .replies
        };
        assert_eq!(open(&mut relay, 0, "a"), vec![RelayMessage::eose(sid("a"))]);
        assert_eq!(open(&mut relay, 4, "b"), vec![RelayMessage::eose(sid("b"))]);
        assert_eq!(open(&mut relay, 9, "c"), vec![closed("c", SLOW_DOWN)]);
        assert_eq!(
            open(&mut relay, 10, "d"),
            vec![RelayMessage::eose(sid("d"))]
        );
        let neg = relay.handle(
            at(11),
            &neg_open_msg("n", Filter::new(), &empty_initiation()),
        );
        assert_eq!(neg.replies, vec![neg_err(sid("n"), SLOW_DOWN)]);
        assert_eq!(relay.stats().rate_limited, 2);
    }

    #[test]
    fn close_every_req_answers_closed_with_its_text() {
        let keys = Keys::generate();
        let config = SimRelayConfig {
            close_every_req: Some("blocked: no".to_owned()),
            ..Default::default()
        };
        let mut relay = relay_with(config, &events_at(&keys, 2));
        let out = req(&mut relay, "s", vec![Filter::new()]);
        assert_eq!(out.replies, vec![closed("s", "blocked: no")]);
        assert_eq!(relay.open_subscriptions(), 0);
    }

    #[test]
    fn forged_and_off_filter_events_come_before_eose() {
        let keys = Keys::generate();
        let stored = sign(&keys, KIND.as_u16(), "x", Vec::new(), 1000);
        let mut forged = sign(&keys, KIND.as_u16(), "x", Vec::new(), 1001);
        forged.sig = stored.sig;
        let off = sign(&keys, OTHER_KIND.as_u16(), "x", Vec::new(), 1002);
        let config = SimRelayConfig {
            forged: vec![forged.clone()],
            off_filter: vec![off.clone()],
            ..Default::default()
        };
        let mut relay = relay_with(config, std::slice::from_ref(&stored));
        let out = req(&mut relay, "s", vec![Filter::new().kind(KIND)]);
        assert_eq!(event_ids(&out.replies), vec![stored.id, forged.id, off.id]);
        assert_eq!(out.replies.last(), Some(&RelayMessage::eose(sid("s"))));
        assert!(forged.verify().is_err());
    }

    #[test]
    fn disconnect_after_drops_the_connection_after_replying() {
        let config = SimRelayConfig {
            disconnect_after: Some(2),
            ..Default::default()
        };
        let mut relay = relay_with(config, &[]);
        assert!(!req(&mut relay, "a", vec![Filter::new()]).disconnect);
        let out = req(&mut relay, "b", vec![Filter::new()]);
        assert!(out.disconnect);
        assert_eq!(out.replies, vec![RelayMessage::eose(sid("b"))]);
        assert!(!relay.is_connected());
        assert_eq!(relay.open_subscriptions(), 0);
        let ignored = req(&mut relay, "c", vec![Filter::new()]);
        assert!(ignored.replies.is_empty() && !ignored.disconnect);
        assert!(relay.connect(Instant::from_secs(1)));
        assert!(!req(&mut relay, "c", vec![Filter::new()]).disconnect);
    }

    #[test]
    fn down_relay_refuses_connections() {
        let mut relay = relay_with(SimRelayConfig::default(), &[]);
        req(&mut relay, "a", vec![Filter::new()]);
        relay.set_down(true);
        assert!(relay.is_down());
        assert!(!relay.is_connected());
        assert_eq!(relay.open_subscriptions(), 0);
        assert!(!relay.connect(Instant::ZERO));
        assert!(req(&mut relay, "b", vec![Filter::new()]).replies.is_empty());
        relay.set_down(false);
        assert!(relay.connect(Instant::from_secs(3)));
        assert_eq!(relay.connected_at(), Some(Instant::from_secs(3)));
        assert_eq!(relay.stats().connects, 2);
    }

    #[test]
    fn disconnect_forgets_subscriptions_and_sessions() {
        let keys = Keys::generate();
        let mut relay = relay_with(SimRelayConfig::default(), &[]);
        req(&mut relay, "a", vec![Filter::new()]);
        relay.handle(
            Instant::ZERO,
            &neg_open_msg("n", Filter::new(), &empty_initiation()),
        );
        assert_eq!(relay.open_subscriptions(), 2);
        relay.disconnect();
        assert_eq!(relay.open_subscriptions(), 0);
        assert!(relay
            .publish(sign(&keys, KIND.as_u16(), "x", Vec::new(), 1))
            .is_empty());
    }

    #[test]
    fn count_and_auth_are_unsupported() {
        let keys = Keys::generate();
        let mut relay = relay_with(SimRelayConfig::default(), &[]);
        let count = ClientMessage::count(sid("c"), Filter::new());
        let auth = ClientMessage::auth(sign(&keys, 22242, "x", Vec::new(), 1));
        for message in [count, auth] {
            let out = relay.handle(Instant::ZERO, &message);
            assert_eq!(out.replies, vec![RelayMessage::notice(UNSUPPORTED)]);
        }
    }

    /// Runs a full client-side reconciliation against `relay`; returns the
    /// (have, need) ids and the number of NEG-MSG round trips.
    fn reconcile(
        relay: &mut SimRelay,
        local: &[Event],
        frame: u64,
    ) -> (BTreeSet<EventId>, BTreeSet<EventId>, usize) {
        let mut storage = NegentropyStorageVector::new();
        for event in local {
            let id = negentropy::Id::from_byte_array(event.id.to_bytes());
            storage.insert(event.created_at.as_secs(), id).unwrap();
        }
        storage.seal().unwrap();
        let mut client = Negentropy::owned(storage, frame).unwrap();
        let first = hex::encode(client.initiate().unwrap());
        let mut out = relay.handle(
            Instant::ZERO,
            &neg_open_msg("neg", Filter::new().kind(KIND), &first),
        );
        let (mut have, mut need) = (Vec::new(), Vec::new());
        let mut rounds = 0;
        loop {
            let reply = match out.replies.as_slice() {
                [RelayMessage::NegMsg { message, .. }] => hex::decode(message.as_bytes()).unwrap(),
                other => panic!("unexpected replies {other:?}"),
            };
            match client
                .reconcile_with_ids(&reply, &mut have, &mut need)
                .unwrap()
            {
                Some(next) => {
                    rounds += 1;
                    out = relay.handle(Instant::ZERO, &neg_msg_msg("neg", &hex::encode(&next)));
                }
                None => break,
            }
        }
        let to_ids = |ids: Vec<negentropy::Id>| {
            ids.into_iter()
                .map(|id| EventId::from_byte_array(*id))
                .collect()
        };
        (to_ids(have), to_ids(need), rounds)
    }

    #[test]
    fn nip77_round_trip_finds_exactly_the_differences() {
        let keys = Keys::generate();
        let events = events_at(&keys, 260);
        let config = SimRelayConfig {
            frame_size_limit: 4096,
            ..Default::default()
        };
        let relay_only = &events[..100];
        let shared = &events[100..220];
        let client_only = &events[220..];
        let on_relay: Vec<Event> = relay_only.iter().chain(shared).cloned().collect();
        let mut relay = relay_with(config, &on_relay);
        let local: Vec<Event> = shared.iter().chain(client_only).cloned().collect();
        let (have, need, rounds) = reconcile(&mut relay, &local, 4096);
        assert_eq!(need, relay_only.iter().map(|e| e.id).collect());
        assert_eq!(have, client_only.iter().map(|e| e.id).collect());
        assert!(rounds >= 1, "a small frame limit forces several rounds");
        assert_eq!(relay.open_subscriptions(), 1);
        assert_eq!(relay.stats().neg_opens, 1);
        assert_eq!(relay.stats().neg_msgs_received, rounds);
        let out = relay.handle(Instant::ZERO, &neg_close_msg("neg"));
        assert!(out.replies.is_empty());
        assert_eq!(relay.open_subscriptions(), 0);
        assert_eq!(relay.max_open_subscriptions_seen(), 1);
    }

    #[test]
    fn nip77_refusal_modes_reply_in_their_form() {
        let cases = [
            (Nip77Refusal::NegErr, vec![neg_err(sid("n"), NEG_DISABLED)]),
            (
                Nip77Refusal::Notice,
                vec![RelayMessage::notice(COULD_NOT_PARSE)],
            ),
            (Nip77Refusal::Closed, vec![closed("n", NEG_NOT_SUPPORTED)]),
            (Nip77Refusal::Silence, Vec::new()),
        ];
        for (mode, expected) in cases {
            let config = SimRelayConfig {
                nip77: mode,
                ..Default::default()
            };
            let mut relay = relay_with(config, &[]);
            let open = relay.handle(
                Instant::ZERO,
                &neg_open_msg("n", Filter::new(), &empty_initiation()),
            );
            assert_eq!(open.replies, expected, "{mode:?} NEG-OPEN");
            let msg = relay.handle(Instant::ZERO, &neg_msg_msg("n", "61"));
            assert_eq!(msg.replies, expected, "{mode:?} NEG-MSG");
            assert_eq!(relay.open_subscriptions(), 0);
            assert_eq!(relay.max_open_subscriptions_seen(), 0);
        }
    }

    #[test]
    fn negentropy_errors_use_neg_err() {
        let mut relay = relay_with(SimRelayConfig::default(), &[]);
        let out = relay.handle(Instant::ZERO, &neg_msg_msg("x", "61"));
        assert_eq!(out.replies, vec![neg_err(sid("x"), UNKNOWN_SESSION)]);
        let out = relay.handle(Instant::ZERO, &neg_open_msg("x", Filter::new(), "zz"));
        assert_eq!(out.replies, vec![neg_err(sid("x"), BAD_MESSAGE)]);
        assert_eq!(relay.open_subscriptions(), 0);
        relay.handle(
            Instant::ZERO,
            &neg_open_msg("x", Filter::new(), &empty_initiation()),
        );
        assert_eq!(relay.open_subscriptions(), 1);
        let out = relay.handle(Instant::ZERO, &neg_msg_msg("x", "6"));
        assert_eq!(out.replies, vec![neg_err(sid("x"), BAD_MESSAGE)]);
        assert_eq!(relay.open_subscriptions(), 0, "NEG-ERR ends the session");
    }

    #[test]
    fn neg_max_records_blocks_large_sets() {
        let keys = Keys::generate();
        let config = SimRelayConfig {
            neg_max_records: Some(2),
            ..Default::default()
        };
        let mut relay = relay_with(config, &events_at(&keys, 3));
        let out = relay.handle(
            Instant::ZERO,
            &neg_open_msg("n", Filter::new(), &empty_initiation()),
        );
        assert_eq!(out.replies, vec![neg_err(sid("n"), TOO_MANY_RESULTS)]);
    }
}

#[cfg(test)]
mod proptests {
    use std::sync::OnceLock;

    use proptest::prelude::*;

    use super::*;

    /// 40 signed events shared by all cases (signing is the slow part).
    fn pool() -> &'static [Event] {
        static POOL: OnceLock<Vec<Event>> = OnceLock::new();
        POOL.get_or_init(|| {
            let keys = Keys::generate();
            (0..40u64)
                .map(|i| {
                    EventBuilder::new(Kind::Custom(1621), format!("{i}"))
                        .custom_created_at(Timestamp::from_secs(1000 + i / 3))
                        .finalize(&keys)
                        .unwrap()
                })
                .collect()
        })
    }

    fn subset(mask: u64) -> Vec<Event> {
        pool()
            .iter()
            .enumerate()
            .filter(|(i, _)| mask & (1 << i) != 0)
            .map(|(_, e)| e.clone())
            .collect()
    }

    fn connected(config: SimRelayConfig, events: &[Event]) -> SimRelay {
        let mut relay = SimRelay::new(RelayUrl::parse("wss://p.example.com").unwrap(), config);
        for event in events {
            relay.add_event(event.clone());
        }
        relay.connect(Instant::ZERO);
        relay
    }

    #[derive(Clone, Debug)]
    enum Op {
        Req(u8),
        Close(u8),
        NegOpen(u8),
        NegClose(u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u8..6).prop_map(Op::Req),
            (0u8..6).prop_map(Op::Close),
            (0u8..6).prop_map(Op::NegOpen),
            (0u8..6).prop_map(Op::NegClose),
        ]
    }

    fn to_message(op: &Op, initiation: &str) -> ClientMessage<'static> {
        let id = |n: &u8| SubscriptionId::new(format!("s{n}"));
        match op {
            Op::Req(n) => ClientMessage::req(id(n), vec![Filter::new().limit(1)]),
            Op::Close(n) => ClientMessage::close(id(n)),
            Op::NegOpen(n) => ClientMessage::NegOpen {
                subscription_id: Cow::Owned(id(n)),
                filter: Cow::Owned(Filter::new()),
                initial_message: Cow::Owned(initiation.to_owned()),
            },
            Op::NegClose(n) => ClientMessage::NegClose {
                subscription_id: Cow::Owned(id(n)),
            },
        }
    }

    fn initiation() -> String {
        let mut storage = NegentropyStorageVector::new();
        storage.seal().unwrap();
        hex::encode(Negentropy::owned(storage, 0).unwrap().initiate().unwrap())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn arbitrary_negentropy_messages_never_panic(
            mask in any::<u64>(),
            body in proptest::collection::vec(any::<u8>(), 0..200),
            prefixed in any::<bool>(),
            text in "[0-9a-fA-Fxz]{0,12}",
        ) {
            let mut relay = connected(SimRelayConfig::default(), &subset(mask));
            let mut bytes = if prefixed { vec![0x61] } else { Vec::new() };
            bytes.extend(body);
            let hex = hex::encode(&bytes);
            let open = ClientMessage::NegOpen {
                subscription_id: Cow::Owned(SubscriptionId::new("n")),
                filter: Cow::Owned(Filter::new()),
                initial_message: Cow::Owned(hex.clone()),
            };
            let out = relay.handle(Instant::ZERO, &open);
            prop_assert_eq!(out.replies.len(), 1);
            relay.handle(Instant::ZERO, &ClientMessage::NegOpen {
                subscription_id: Cow::Owned(SubscriptionId::new("m")),
                filter: Cow::Owned(Filter::new()),
                initial_message: Cow::Owned(initiation()),
            });
            for message in [hex, text] {
                let msg = ClientMessage::NegMsg {
                    subscription_id: Cow::Owned(SubscriptionId::new("m")),
                    message: Cow::Owned(message),
                };
                prop_assert_eq!(relay.handle(Instant::ZERO, &msg).replies.len(), 1);
            }
        }

        #[test]
        fn open_subscriptions_never_exceed_the_limit(
            max in 0usize..4,
            ops in proptest::collection::vec(op(), 0..40),
        ) {
            let config = SimRelayConfig { max_subscriptions: Some(max), ..Default::default() };
            let mut relay = connected(config, &[]);
            let initiation = initiation();
            for op in &ops {
                relay.handle(Instant::ZERO, &to_message(op, &initiation));
                prop_assert!(relay.open_subscriptions() <= max);
            }
            prop_assert!(relay.max_open_subscriptions_seen() <= max);
            prop_assert!(relay.max_open_subscriptions_seen() >= relay.open_subscriptions());
        }

        #[test]
        fn rate_limit_admits_at_most_n_per_window(
            n in 1usize..4,
            gaps in proptest::collection::vec(0u64..4, 1..30),
        ) {
            let window = Duration::from_secs(5);
            let config = SimRelayConfig { rate_limit: Some((n, window)), ..Default::default() };
            let mut relay = connected(config, &[]);
            let mut now = Instant::ZERO;
            let mut admitted: Vec<Instant> = Vec::new();
            for (i, gap) in gaps.iter().enumerate() {
                now += Duration::from_secs(*gap);
                let message = ClientMessage::req(SubscriptionId::new(format!("{i}")), vec![Filter::new()]);
                let out = relay.handle(now, &message);
                if out.replies == vec![RelayMessage::eose(SubscriptionId::new(format!("{i}")))] {
                    admitted.push(now);
                }
                let recent = admitted.iter().filter(|at| now.saturating_duration_since(**at) < window).count();
                prop_assert!(recent <= n);
            }
            prop_assert_eq!(relay.stats().rate_limited, gaps.len() - admitted.len());
        }

        #[test]
        fn req_results_are_newest_first_and_bounded(
            mask in any::<u64>(),
            limit in proptest::option::of(0usize..50),
            max_limit in proptest::option::of(0usize..50),
            default_limit in 0usize..50,
        ) {
            let stored = subset(mask);
            let config = SimRelayConfig { max_limit, default_limit, ..Default::default() };
            let mut relay = connected(config, &stored);
            let mut filter = Filter::new().kind(Kind::Custom(1621));
            filter.limit = limit;
            let out = relay.handle(Instant::ZERO, &ClientMessage::req(SubscriptionId::new("s"), vec![filter]));
            let got: Vec<&Event> = out.replies.iter().filter_map(|r| match r {
                RelayMessage::Event { event, .. } => Some(event.as_ref()),
                _ => None,
            }).collect();
            let bound = limit.unwrap_or(default_limit).min(max_limit.unwrap_or(usize::MAX));
            let mut expected = stored.clone();
            expected.sort_by_key(order_key);
            expected.truncate(bound);
            let expected: Vec<&Event> = expected.iter().collect();
            prop_assert_eq!(got, expected);
        }
    }
}
