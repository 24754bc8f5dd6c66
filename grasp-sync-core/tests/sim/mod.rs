//! A deterministic simulation of the sync engine against simulated relays on
//! a virtual clock that jumps to the next deadline.
#![allow(dead_code, unreachable_pub)]

pub mod events;
pub mod relay;

use std::collections::{BTreeMap, BTreeSet, HashSet, VecDeque};
use std::time::Duration;

use futures::executor::block_on;
use grasp_sync_core::clock::{Instant, Now};
use grasp_sync_core::engine::{Command, EngineConfig, SyncEngine};
use grasp_sync_core::store::{EventStore, IngestOutcome, MemoryEventStore, StoreError};
use grasp_sync_core::transport::TransportError;
use grasp_sync_core::url_policy::RelayUrlPolicy;
use grasp_sync_core::verified::VerifiedEvent;
use nostr::prelude::*;

use relay::{SimRelay, SimRelayConfig};

/// Unix time at the simulation's origin.
pub const UNIX_ORIGIN: u64 = 1_750_000_000;
/// One-way latency of every message.
pub const LATENCY: Duration = Duration::from_millis(20);
/// Events the own relay returns per filter of a REQ, whatever its `limit`
/// asks (a silent clamp, as relays do): the engine pages its history.
pub const OWN_PAGE: usize = 25;

/// What reaches the engine from a relay, the own relay or the store.
#[derive(Debug)]
enum Delivery {
    Connected,
    ConnectFailed,
    Disconnected,
    Message(Box<RelayMessage<'static>>),
    /// The store's answer to a `Command::Store`.
    StoreOutcome(EventId, Result<IngestOutcome, StoreError>),
    /// A write the own relay takes only now (see `OwnRelay::slow_kinds`).
    Ingest(Box<Event>),
}

/// The own relay: accepts what the engine stores (announcements only if they
/// list the own relay, like a GRASP relay) and answers the engine's
/// self-subscription over its connection like a relay: REQs with the
/// stored events matching (newest first, at most [`OWN_PAGE`] per filter)
/// and an EOSE, and what it stores later live to every open subscription
/// whose filter matches. The engine connects, pages and reconnects.
pub struct OwnRelay {
    pub url: RelayUrl,
    pub store: MemoryEventStore,
    pub rejected: Vec<Event>,
    /// The self-subscription's connection is open.
    pub connected: bool,
    /// The open subscriptions of the connection.
    pub subs: BTreeMap<SubscriptionId, Vec<Filter>>,
    /// A history REQ whose page is cut (more events match than fit) drops
    /// the connection right after the page's events, before its EOSE.
    pub drop_during_history: bool,
    /// The number of history pages answered (EOSE sent) after which the
    /// connection drops once, right after that page's EOSE: a drop in the
    /// middle of the engine's paging.
    pub drop_after_pages: Option<usize>,
    /// History pages answered on every connection so far.
    pub pages_answered: usize,
    /// Every history REQ received: its filters, in order.
    pub history_reqs: Vec<Vec<Filter>>,
    /// Writes fail (the store backend is down).
    pub store_failing: bool,
    /// Writes are never answered (and not stored).
    pub store_stalled: bool,
    /// Writes are refused `rate-limited: slow down`.
    pub write_rate_limited: bool,
    /// Store answers take a varying extra delay (they overtake each other
    /// and relay messages).
    pub reorder_outcomes: bool,
    /// Listing local items for negentropy fails.
    pub items_failing: bool,
    /// The self-subscription reports no live events (only history on
    /// reconnect): the embedded-relay case where nothing echoes what the
    /// engine stored.
    pub silent_live: bool,
    /// A plain relay next to a sidecar: stores every announcement.
    pub accepts_everything: bool,
    /// A GRASP host's policy: a state, pull request or update whose
    /// repository it has no announcement of is refused for good
    /// (`invalid: no announcement exists`), an event answering a root
    /// event it does not have too.
    pub needs_dependencies: bool,
    /// Writes of these kinds are taken (stored and answered) only this
    /// long after the engine asked: a slow store for some events.
    pub slow_kinds: std::collections::HashMap<u16, Duration>,
    /// Writes of these events are answered so, and not stored (a store
    /// that holds them in a purgatory of its own, or refuses them).
    pub answers: std::collections::HashMap<EventId, IngestOutcome>,
    /// Times the self-subscription connection dropped.
    pub drops: usize,
    /// Histories read to the end (the engine's
    /// [`SyncEngine::own_history_complete`] turned `true`).
    pub histories_completed: usize,
}

impl OwnRelay {
    /// Answers a REQ: the stored events matching each filter, newest first
    /// (the lower id first within a second), at most [`OWN_PAGE`] per
    /// filter (none for `limit: 0`), deduplicated; and whether some filter
    /// had more than fit.
    fn answer(&self, filters: &[Filter]) -> (Vec<Event>, bool) {
        let mut events: Vec<Event> = self.store.events();
        events.sort_by_key(|event| (std::cmp::Reverse(event.created_at), event.id));
        let mut page: Vec<Event> = Vec::new();
        let mut cut = false;
        for filter in filters {
            let limit = filter.limit.unwrap_or(usize::MAX).min(OWN_PAGE);
            let matching: Vec<&Event> = events
                .iter()
                .filter(|event| filter.match_event(event, MatchEventOptions::new()))
                .collect();
            cut |= matching.len() > limit;
            for event in matching.into_iter().take(limit) {
                if !page.iter().any(|kept| kept.id == event.id) {
                    page.push(event.clone());
                }
            }
        }
        (page, cut)
    }

    /// The GRASP rule: an announcement must list this relay (unless it is
    /// a plain relay that accepts everything).
    /// With [`OwnRelay::needs_dependencies`]: why the store refuses
    /// `event` (what it needs is not stored), or `None`.
    pub fn lacks_dependency(&self, event: &Event) -> Option<&'static str> {
        if !self.needs_dependencies {
            return None;
        }
        let has = |filter: Filter| {
            !block_on(self.store.negentropy_items(&filter))
                .expect("memory store")
                .is_empty()
        };
        let announced = |identifier: &str| {
            has(Filter::new()
                .kind(Kind::Custom(30617))
                .identifier(identifier))
        };
        let kind = event.kind.as_u16();
        let identifiers: Vec<String> = match kind {
            30618 => event
                .tags
                .identifier()
                .into_iter()
                .map(|d| d.to_string())
                .collect(),
            1617 | 1618 | 1619 | 1621 => event
                .tags
                .iter()
                .filter_map(|tag| match tag.as_slice() {
                    [name, coordinate, ..] if name == "a" => coordinate
                        .strip_prefix("30617:")
                        .and_then(|rest| rest.split_once(':'))
                        .map(|(_, identifier)| identifier.to_owned()),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        };
        if identifiers.iter().any(|identifier| !announced(identifier)) {
            return Some("invalid: no announcement exists");
        }
        let roots: Vec<EventId> = event
            .tags
            .iter()
            .filter_map(|tag| match tag.as_slice() {
                [name, id, ..] if name == "E" || name == "e" => EventId::from_hex(id).ok(),
                _ => None,
            })
            .collect();
        if !roots.is_empty() && !has(Filter::new().ids(roots)) {
            return Some("invalid: the event it answers is unknown");
        }
        None
    }

    pub fn accepts(&self, event: &Event) -> bool {
        if event.kind != Kind::Custom(30617) || self.accepts_everything {
            return true;
        }
        event.tags.iter().any(|tag| {
            let values = tag.as_slice();
            values.first().is_some_and(|name| name == "relays")
                && values[1..]
                    .iter()
                    .any(|value| RelayUrl::parse(value).is_ok_and(|url| url == self.url))
        })
    }
}

/// The simulated world.
pub struct World {
    pub now: Instant,
    pub engine: SyncEngine,
    pub relays: BTreeMap<RelayUrl, SimRelay>,
    pub own: OwnRelay,
    /// Relays whose replies are lost (a stalled relay).
    pub blackholed: HashSet<RelayUrl>,
    /// Relays that answer live subscriptions but never historic requests.
    pub stalled_historic: HashSet<RelayUrl>,
    /// Relays whose every EVENT arrives twice.
    pub duplicating: HashSet<RelayUrl>,
    /// Relays that send one message at a time, each this long after the one
    /// before, whatever subscription it is for (a slow relay, or one on a
    /// loaded machine): replies to one REQ wait behind those to the others.
    pub paced: std::collections::HashMap<RelayUrl, Duration>,
    /// When each paced relay's last queued reply goes out.
    paced_until: std::collections::HashMap<RelayUrl, Instant>,
    /// When set, every connected relay answers a ping this often: the
    /// engine is fed [`SyncEngine::handle_relay_alive`], as the tokio
    /// driver does on each WebSocket pong.
    pub ping_every: Option<Duration>,
    /// When the next ping is answered.
    next_ping: Option<Instant>,
    /// When set, deliveries due together reach the engine together, as the
    /// tokio driver hands them: a run of one relay's `EVENT`s (verified
    /// first) in one `handle_checked_events`, a run of store answers in
    /// one `handle_store_outcomes`.
    pub batched: bool,
    /// The most `EVENT`s one batch held ([`World::batched`]).
    pub largest_batch: usize,
    /// When set, a message from a remote relay longer than this (its JSON)
    /// is not read: the engine is told `handle_message_too_large` and the
    /// connection is lost, as the tokio driver does past its WebSocket
    /// message limit.
    pub client_max_message: Option<usize>,
    /// Messages over [`World::client_max_message`], by relay message verb.
    pub messages_too_large: Vec<String>,
    inbox: VecDeque<(Instant, u64, RelayUrl, Delivery)>,
    sequence: u64,
    pub steps: u64,
    /// Every command the engine emitted, with the time.
    pub command_log: Vec<(Instant, Command)>,
    /// Every relay message other than EVENT the engine received, with the
    /// time.
    pub received_log: Vec<(Instant, RelayUrl, RelayMessage<'static>)>,
    /// Connections the engine opened ([`Command::Connect`]) and has not
    /// closed: sending on any other fails, like on a real connection.
    open: BTreeSet<RelayUrl>,
}

/// The verb of a relay message (`EVENT`, `NEG-MSG`, …).
fn verb(message: &RelayMessage<'_>) -> String {
    let json = message.as_json();
    json.trim_start_matches("[\"")
        .split('"')
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// The own relay's URL in every simulation.
pub fn own_url() -> RelayUrl {
    RelayUrl::parse("ws://own.sim").expect("url")
}

/// A remote relay URL.
pub fn relay_url(name: &str) -> RelayUrl {
    RelayUrl::parse(&format!("ws://{name}.sim")).expect("url")
}

/// The engine configuration the simulations use: local-looking `.sim`
/// hosts allowed, the own relay as our service relay and read over its
/// connection.
pub fn config() -> EngineConfig {
    EngineConfig::default()
        .with_relay_policy(RelayUrlPolicy::new().allow_local_addresses(true))
        .with_service_relays(vec![own_url()])
        .with_own_relay(own_url())
}

impl World {
    /// How many times the engine handed the event `id` to the store.
    #[allow(dead_code)] // not every suite that includes the simulation asks
    pub fn stores_of(&self, id: &nostr::prelude::EventId) -> usize {
        self.command_log
            .iter()
            .filter(
                |(_, command)| matches!(command, Command::Store { event, .. } if event.id == *id),
            )
            .count()
    }

    /// A world with the given relays and the events the own relay holds at
    /// the start (they reach the engine through the self-subscriber: the
    /// engine connects to the own relay, whatever `config` says).
    pub fn new(config: EngineConfig, relays: Vec<SimRelay>, own_events: Vec<Event>) -> World {
        let mut config = config;
        config.identity.own_relay = Some(own_url());
        let now = Instant::ZERO;
        let engine = SyncEngine::new(config, Now::new(now, Timestamp::from_secs(UNIX_ORIGIN)))
            .expect("a valid configuration");
        let mut world = World {
            now,
            engine,
            relays: relays
                .into_iter()
                .map(|relay| (relay.url().clone(), relay))
                .collect(),
            own: OwnRelay {
                url: own_url(),
                store: MemoryEventStore::new(),
                rejected: Vec::new(),
                connected: false,
                subs: BTreeMap::new(),
                drop_during_history: false,
                drop_after_pages: None,
                pages_answered: 0,
                history_reqs: Vec::new(),
                store_failing: false,
                store_stalled: false,
                write_rate_limited: false,
                reorder_outcomes: false,
                items_failing: false,
                silent_live: false,
                accepts_everything: false,
                needs_dependencies: false,
                slow_kinds: Default::default(),
                answers: Default::default(),
                drops: 0,
                histories_completed: 0,
            },
            blackholed: HashSet::new(),
            stalled_historic: HashSet::new(),
            duplicating: HashSet::new(),
            paced: Default::default(),
            paced_until: Default::default(),
            ping_every: None,
            next_ping: None,
            batched: false,
            largest_batch: 0,
            client_max_message: None,
            messages_too_large: Vec::new(),
            inbox: VecDeque::new(),
            sequence: 0,
            steps: 0,
            command_log: Vec::new(),
            received_log: Vec::new(),
            open: BTreeSet::new(),
        };
        let at = world.clock();
        for event in own_events {
            let _ = block_on(world.own.store.ingest(&event));
        }
        world.engine.handle_timeout(at);
        world
    }

    /// Drops the self-subscription's connection now.
    pub fn drop_own(&mut self) {
        if !self.own.connected {
            return;
        }
        let own = self.own.url.clone();
        self.close_own();
        self.push(&own, Delivery::Disconnected);
    }

    /// The own relay's side of its connection closes: its subscriptions
    /// end, nothing more of it reaches the engine (store answers do).
    fn close_own(&mut self) {
        let own = self.own.url.clone();
        self.own.connected = false;
        self.own.subs.clear();
        self.inbox.retain(|(_, _, to, delivery)| {
            to != &own || matches!(delivery, Delivery::StoreOutcome(..) | Delivery::Ingest(..))
        });
    }

    /// The engine's view of now.
    pub fn clock(&self) -> Now {
        Now::new(self.now, self.unix())
    }

    /// Wall-clock seconds now.
    pub fn unix(&self) -> Timestamp {
        Timestamp::from_secs(UNIX_ORIGIN + self.now.since_origin().as_secs())
    }

    /// Runs until `done` holds (checked between steps) or `max_steps`
    /// steps; returns whether `done` held.
    pub fn run_until(&mut self, max_steps: u64, mut done: impl FnMut(&World) -> bool) -> bool {
        for _ in 0..max_steps {
            // Commands the engine already emitted are part of "now".
            self.execute_commands();
            if done(self) {
                return true;
            }
            if !self.step() {
                return done(self);
            }
        }
        done(self)
    }

    /// Runs until the engine reports historic sync confirmed everywhere.
    pub fn run_until_idle(&mut self, max_steps: u64) -> bool {
        self.run_until(max_steps, |world| {
            world.is_quiet() && world.engine.is_idle()
        })
    }

    /// Runs for `duration` of virtual time.
    pub fn run_for(&mut self, duration: Duration, max_steps: u64) {
        let end = self.now + duration;
        self.run_until(max_steps, |world| {
            world.now >= end && world.next_time().is_none_or(|at| at > end)
        });
        if self.now < end {
            self.now = end;
            let at = self.clock();
            self.engine.handle_timeout(at);
        }
    }

    /// No command or delivery waits.
    pub fn is_quiet(&self) -> bool {
        self.inbox.is_empty()
    }

    fn next_time(&self) -> Option<Instant> {
        let inbox = self.inbox.iter().map(|(at, ..)| *at).min();
        [inbox, self.wake_at(), self.ping_at()]
            .into_iter()
            .flatten()
            .min()
    }

    /// When the next ping is answered, if relays are pinged.
    fn ping_at(&self) -> Option<Instant> {
        let every = self.ping_every?;
        Some(self.next_ping.unwrap_or(self.now + every))
    }

    /// Answers the ping due now, if it is earlier than anything else:
    /// every connected relay's pong reaches the engine.
    fn answer_ping(&mut self) -> bool {
        let (Some(every), Some(at)) = (self.ping_every, self.ping_at()) else {
            return false;
        };
        let inbox = self.inbox.iter().map(|(at, ..)| *at).min();
        let other = [inbox, self.wake_at()].into_iter().flatten().min();
        if other.is_some_and(|other| other <= at) {
            self.next_ping = Some(at);
            return false;
        }
        self.now = self.now.max(at);
        self.next_ping = Some(self.now + every);
        let now = self.clock();
        let connected: Vec<RelayUrl> = self
            .relays
            .iter()
            .filter(|(_, relay)| relay.is_connected())
            .map(|(url, _)| url.clone())
            .collect();
        for relay in connected {
            self.engine.handle_relay_alive(now, &relay);
        }
        true
    }

    /// The engine's next deadline (the own relay's reconnect included).
    fn wake_at(&self) -> Option<Instant> {
        self.engine.poll_timeout()
    }

    /// One step: execute commands, deliver the next message, or jump the
    /// clock to the next deadline. Returns `false` when nothing is left.
    pub fn step(&mut self) -> bool {
        self.steps += 1;
        if self.execute_commands() {
            return true;
        }
        if self.answer_ping() {
            return true;
        }
        if let Some(position) = self.next_delivery() {
            let (at, _, relay, delivery) = self.inbox.remove(position).expect("position exists");
            self.now = self.now.max(at);
            if self.batched && Self::batches(&delivery) {
                let mut batch = vec![delivery];
                while let Some(next) = self.next_in_batch(&relay, &batch[0]) {
                    batch.push(next);
                }
                self.deliver_batch(relay, batch);
            } else {
                self.deliver(relay, delivery);
            }
            return true;
        }
        match self.wake_at() {
            Some(at) => {
                self.now = self.now.max(at);
                let now = self.clock();
                self.engine.handle_timeout(now);
                true
            }
            None => false,
        }
    }

    /// The earliest delivery that is due before the engine's next deadline.
    fn next_delivery(&self) -> Option<usize> {
        let (position, (at, ..)) = self
            .inbox
            .iter()
            .enumerate()
            .min_by_key(|(_, (at, sequence, ..))| (*at, *sequence))?;
        let deadline = self.wake_at();
        (deadline.is_none_or(|deadline| *at <= deadline.max(self.now))).then_some(position)
    }

    /// Whether `delivery` starts a batch ([`World::batched`]).
    fn batches(delivery: &Delivery) -> bool {
        match delivery {
            Delivery::StoreOutcome(..) => true,
            Delivery::Message(message) => matches!(**message, RelayMessage::Event { .. }),
            _ => false,
        }
    }

    /// The next delivery, if it is due now and joins the batch `first`
    /// started: another store answer, or another `EVENT` of `relay`.
    fn next_in_batch(&mut self, relay: &RelayUrl, first: &Delivery) -> Option<Delivery> {
        let position = self.next_delivery()?;
        let (at, _, to, next) = &self.inbox[position];
        let joins = match (first, next) {
            (Delivery::StoreOutcome(..), Delivery::StoreOutcome(..)) => true,
            (Delivery::Message(_), Delivery::Message(message)) => {
                to == relay && matches!(**message, RelayMessage::Event { .. })
            }
            _ => false,
        };
        if !joins || *at > self.now {
            return None;
        }
        self.inbox.remove(position).map(|(_, _, _, next)| next)
    }

    /// Deliveries due together, in one engine call (see [`World::batched`]).
    fn deliver_batch(&mut self, relay: RelayUrl, batch: Vec<Delivery>) {
        let now = self.clock();
        let read_before = self.engine.own_history_complete();
        let mut events = Vec::new();
        let mut outcomes = Vec::new();
        for delivery in batch {
            match delivery {
                Delivery::StoreOutcome(id, outcome) => outcomes.push((id, outcome)),
                Delivery::Message(message) => {
                    if let RelayMessage::Event {
                        subscription_id,
                        event,
                    } = *message
                    {
                        let checked = VerifiedEvent::verify(event.into_owned());
                        events.push((subscription_id.into_owned(), checked));
                    }
                }
                _ => unreachable!("only store answers and EVENTs are batched"),
            }
        }
        if !outcomes.is_empty() {
            self.engine.handle_store_outcomes(now, outcomes);
        }
        if !events.is_empty() {
            self.largest_batch = self.largest_batch.max(events.len());
            self.engine.handle_checked_events(now, &relay, events);
        }
        if !read_before && self.engine.own_history_complete() {
            self.own.histories_completed += 1;
        }
    }

    fn deliver(&mut self, relay: RelayUrl, delivery: Delivery) {
        let now = self.clock();
        let read_before = self.engine.own_history_complete();
        if relay == self.own.url && matches!(delivery, Delivery::Disconnected) {
            self.own.drops += 1;
        }
        match delivery {
            Delivery::Connected => self.engine.handle_connected(now, &relay),
            Delivery::ConnectFailed => self.engine.handle_connect_failed(now, &relay),
            Delivery::Disconnected => self.engine.handle_disconnected(now, &relay),
            Delivery::Message(message) if self.too_large(&relay, &message).is_some() => {
                let bytes = message.as_json().len();
                self.messages_too_large.push(verb(&message));
                if let Some(sim) = self.relays.get_mut(&relay) {
                    sim.disconnect();
                }
                self.inbox.retain(|(_, _, to, _)| to != &relay);
                self.engine.handle_message_too_large(now, &relay, bytes);
            }
            Delivery::Message(message) => {
                if !matches!(*message, RelayMessage::Event { .. }) {
                    self.received_log
                        .push((self.now, relay.clone(), (*message).clone()));
                }
                self.engine.handle_relay_message(now, &relay, *message)
            }
            Delivery::StoreOutcome(id, outcome) => {
                self.engine.handle_store_outcome(now, &id, outcome)
            }
            Delivery::Ingest(event) => self.ingest(*event),
        }
        if !read_before && self.engine.own_history_complete() {
            self.own.histories_completed += 1;
        }
    }

    fn push(&mut self, relay: &RelayUrl, delivery: Delivery) {
        self.push_after(relay, LATENCY, delivery);
    }

    fn push_after(&mut self, relay: &RelayUrl, delay: Duration, delivery: Delivery) {
        self.sequence += 1;
        self.inbox
            .push_back((self.now + delay, self.sequence, relay.clone(), delivery));
    }

    /// Executes every waiting command on the simulated relays, the own
    /// relay and its store; returns whether there was any.
    fn execute_commands(&mut self) -> bool {
        let mut any = false;
        while let Some(command) = self.engine.poll_command() {
            any = true;
            self.command_log.push((self.now, command.clone()));
            let relay = command.relay().clone();
            if let Err(error) = self.execute(command) {
                let now = self.clock();
                self.engine.handle_send_failed(now, &relay, &error);
            }
        }
        any
    }

    /// Carries out one command, as a driver does.
    fn execute(&mut self, command: Command) -> Result<(), TransportError> {
        match command {
            Command::Connect { relay, .. } => {
                self.open.insert(relay.clone());
                self.connect_relay(&relay);
            }
            Command::Disconnect { relay } | Command::Forget { relay } => {
                self.open.remove(&relay);
                self.disconnect_relay(&relay);
            }
            Command::Store { event, .. } => self.store(event.into_event()),
            Command::QueryLocalItems { relay, id, filter } => {
                self.query_local_items(&relay, &id, &filter)
            }
            command => {
                let relay = command.relay().clone();
                if !self.open.contains(&relay) {
                    return Err(TransportError::NotConnected(relay));
                }
                if let Some(message) = command.client_message() {
                    self.send(&relay, message);
                }
            }
        }
        Ok(())
    }

    fn connect_relay(&mut self, relay: &RelayUrl) {
        if relay == &self.own.url {
            self.close_own();
            self.own.connected = true;
            return self.push(relay, Delivery::Connected);
        }
        let now = self.now;
        let connected = self
            .relays
            .get_mut(relay)
            .is_some_and(|sim| sim.connect(now));
        let delivery = if connected {
            Delivery::Connected
        } else {
            Delivery::ConnectFailed
        };
        self.push(relay, delivery);
    }

    /// The length of `message` from `relay` if it is over
    /// [`World::client_max_message`] (the own relay's are read whatever
    /// their size).
    fn too_large(&self, relay: &RelayUrl, message: &RelayMessage<'_>) -> Option<usize> {
        let max = self.client_max_message?;
        if relay == &self.own.url {
            return None;
        }
        let len = message.as_json().len();
        (len > max).then_some(len)
    }

    fn disconnect_relay(&mut self, relay: &RelayUrl) {
        if relay == &self.own.url {
            return self.close_own();
        }
        if let Some(sim) = self.relays.get_mut(relay) {
            sim.disconnect();
        }
        self.inbox.retain(|(_, _, to, _)| to != relay);
    }

    fn query_local_items(&mut self, relay: &RelayUrl, id: &SubscriptionId, filter: &Filter) {
        let at = self.clock();
        if self.own.items_failing {
            self.engine
                .handle_local_items_failed(at, relay, id, "store backend down");
            return;
        }
        let items = block_on(self.own.store.negentropy_items(filter)).expect("memory store");
        self.engine.handle_local_items(at, relay, id, items);
    }

    /// Stores into the own relay and answers with the outcome; accepted
    /// announcements and root events come back through the self-subscriber
    /// while it is connected (else its next history read brings them).
    fn store(&mut self, event: Event) {
        if self.own.store_stalled {
            return;
        }
        if let Some(delay) = self.own.slow_kinds.get(&event.kind.as_u16()).copied() {
            let own = self.own.url.clone();
            self.push_after(&own, delay, Delivery::Ingest(Box::new(event)));
            return;
        }
        self.ingest(event);
    }

    /// The own relay takes a write now and answers.
    fn ingest(&mut self, event: Event) {
        let id = event.id;
        let outcome = if self.own.store_failing {
            Err(StoreError::unavailable("store backend down"))
        } else if self.own.write_rate_limited {
            Ok(IngestOutcome::refused_for_now("rate-limited: slow down"))
        } else if let Some(answer) = self.own.answers.get(&id) {
            Ok(answer.clone())
        } else if let Some(reason) = self.own.lacks_dependency(&event) {
            self.own.rejected.push(event.clone());
            Ok(IngestOutcome::refused_for_good(reason))
        } else if !self.own.accepts(&event) {
            self.own.rejected.push(event.clone());
            Ok(IngestOutcome::refused_for_good(
                "blocked: announcement does not list this relay",
            ))
        } else {
            block_on(self.own.store.ingest(&event))
        };
        let stored = outcome == Ok(IngestOutcome::Stored);
        let own = self.own.url.clone();
        let delay = if self.own.reorder_outcomes {
            // Deterministic jitter: answers overtake each other.
            LATENCY + Duration::from_millis((self.sequence.wrapping_mul(7919)) % 300)
        } else {
            LATENCY
        };
        self.push_after(&own, delay, Delivery::StoreOutcome(id, outcome));
        if stored && self.own.connected && !self.own.silent_live {
            let live: Vec<SubscriptionId> = self
                .own
                .subs
                .iter()
                .filter(|(_, filters)| {
                    filters
                        .iter()
                        .any(|filter| filter.match_event(&event, MatchEventOptions::new()))
                })
                .map(|(id, _)| id.clone())
                .collect();
            for id in live {
                let message = RelayMessage::event(id, event.clone());
                self.push(&own, Delivery::Message(Box::new(message)));
            }
        }
    }

    /// The own relay takes a message on its connection.
    fn own_receive(&mut self, message: ClientMessage<'_>) {
        if !self.own.connected {
            return;
        }
        let own = self.own.url.clone();
        match message {
            ClientMessage::Req {
                subscription_id,
                filters,
            } => {
                let id = subscription_id.into_owned();
                let filters: Vec<Filter> = filters
                    .into_iter()
                    .map(std::borrow::Cow::into_owned)
                    .collect();
                let history = filters.iter().any(|filter| filter.limit != Some(0));
                let (page, cut) = self.own.answer(&filters);
                self.own.subs.insert(id.clone(), filters.clone());
                for event in page {
                    let message = RelayMessage::event(id.clone(), event);
                    self.push(&own, Delivery::Message(Box::new(message)));
                }
                if history {
                    self.own.history_reqs.push(filters);
                    if self.own.drop_during_history && cut {
                        self.close_own_later();
                        return;
                    }
                }
                let eose = RelayMessage::eose(id);
                self.push(&own, Delivery::Message(Box::new(eose)));
                if history {
                    self.own.pages_answered += 1;
                    if self
                        .own
                        .drop_after_pages
                        .is_some_and(|pages| self.own.pages_answered >= pages)
                    {
                        self.own.drop_after_pages = None;
                        self.close_own_later();
                    }
                }
            }
            ClientMessage::Close(id) => {
                self.own.subs.remove(id.as_ref());
            }
            _ => {}
        }
    }

    /// The own relay drops the connection after what it sent so far: the
    /// engine hears of it after those messages.
    fn close_own_later(&mut self) {
        let own = self.own.url.clone();
        self.own.connected = false;
        self.own.subs.clear();
        self.push(&own, Delivery::Disconnected);
    }

    fn send(&mut self, relay: &RelayUrl, message: ClientMessage<'_>) {
        if relay == &self.own.url {
            return self.own_receive(message);
        }
        let now = self.now;
        let Some(sim) = self.relays.get_mut(relay) else {
            return;
        };
        if !sim.is_connected() {
            return;
        }
        let output = sim.handle(now, &message);
        if self.blackholed.contains(relay)
            || (self.stalled_historic.contains(relay) && is_historic(&message))
        {
            return;
        }
        let duplicating = self.duplicating.contains(relay);
        let pace = self.paced.get(relay).copied();
        for reply in output.replies {
            if duplicating && matches!(reply, RelayMessage::Event { .. }) {
                self.push(relay, Delivery::Message(Box::new(reply.clone())));
            }
            match pace {
                Some(pace) => {
                    let earliest = self.now + LATENCY;
                    let at = self
                        .paced_until
                        .get(relay)
                        .map_or(earliest, |until| (*until).max(earliest))
                        + pace;
                    self.paced_until.insert(relay.clone(), at);
                    let delay = at.saturating_duration_since(self.now);
                    self.push_after(relay, delay, Delivery::Message(Box::new(reply)));
                }
                None => self.push(relay, Delivery::Message(Box::new(reply))),
            }
        }
        if output.disconnect {
            self.push(relay, Delivery::Disconnected);
        }
    }

    /// Takes a relay down: the connection drops now.
    pub fn take_down(&mut self, relay: &RelayUrl) {
        if let Some(sim) = self.relays.get_mut(relay) {
            sim.set_down(true);
        }
        self.inbox.retain(|(_, _, to, _)| to != relay);
        self.push(relay, Delivery::Disconnected);
    }

    /// Brings a relay back up (the engine reconnects per its backoff).
    pub fn bring_up(&mut self, relay: &RelayUrl) {
        if let Some(sim) = self.relays.get_mut(relay) {
            sim.set_down(false);
        }
    }

    /// Publishes to a relay (live delivery to the engine's open REQs).
    pub fn publish(&mut self, relay: &RelayUrl, event: Event) {
        let Some(sim) = self.relays.get_mut(relay) else {
            return;
        };
        let deliveries = if sim.is_connected() {
            sim.publish(event)
        } else {
            sim.add_event(event);
            Vec::new()
        };
        for message in deliveries {
            self.push(relay, Delivery::Message(Box::new(message)));
        }
    }

    /// A description of the engine's state, for failure messages.
    pub fn dump(&self) -> String {
        let mut out = format!(
            "now {} steps {} stats {:?}\n",
            self.now,
            self.steps,
            self.engine.stats()
        );
        let reports = self.engine.relay_reports();
        for (relay, state) in self.engine.relay_states() {
            let connection = reports
                .iter()
                .find(|report| &report.relay == relay)
                .map(|report| report.connection);
            out += &format!(
                "  {relay}: {:?} health {:?} confirmed {}+{} l1 {} activity {:?} pending batches {}\n",
                connection,
                self.engine.health_state(relay, self.now),
                state.repos.len(),
                state.root_events.len(),
                state.announcements_synced,
                self.engine.relay_activity(relay),
                self.engine.pending_batches(relay).len(),
            );
        }
        out += &format!(
            "  poll_timeout {:?} inbox {}\n",
            self.engine.poll_timeout(),
            self.inbox.len()
        );
        out
    }

    /// Ids in the own store.
    pub fn stored(&self) -> BTreeSet<EventId> {
        self.own.store.ids().into_iter().collect()
    }

    /// Every subscription-limit violation seen by a relay configured with a
    /// limit: `(relay, most open, its limit)`.
    /// Panics unless the own relay holds exactly what `own_events` and the
    /// relays make expected ([`World::expected`]), with the world's dump.
    pub fn assert_exact(&self, own_events: &[Event]) {
        let expected = self.expected(own_events, &[]);
        let stored = self.stored();
        let missing = expected.difference(&stored).count();
        let extra = stored.difference(&expected).count();
        assert!(
            missing == 0 && extra == 0,
            "missing {missing}, extra {extra}\n{}",
            self.dump()
        );
    }

    pub fn max_open(&self, relay: &RelayUrl) -> usize {
        self.relays[relay].max_open_subscriptions_seen()
    }

    /// The ids the own store should hold: the fixed point of what the
    /// engine subscribes to on reachable relays, filtered by the own relay's
    /// acceptance rule.
    pub fn expected(&self, own_events: &[Event], bootstrap: &[RelayUrl]) -> BTreeSet<EventId> {
        expected_store(self, own_events, bootstrap)
    }
}

/// A REQ for stored events (no `limit: 0`) or a negentropy message.
fn is_historic(message: &ClientMessage<'_>) -> bool {
    match message {
        ClientMessage::Req { filters, .. } => filters.iter().any(|filter| filter.limit != Some(0)),
        ClientMessage::NegOpen { .. } | ClientMessage::NegMsg { .. } => true,
        _ => false,
    }
}

/// Reference model of what full sync must end with.
fn expected_store(
    world: &World,
    own_events: &[Event],
    bootstrap: &[RelayUrl],
) -> BTreeSet<EventId> {
    let reachable: BTreeMap<&RelayUrl, Vec<Event>> = world
        .relays
        .iter()
        .filter(|(_, sim)| !sim.is_down())
        .map(|(url, sim)| (url, sim.events()))
        .collect();
    let mut store: BTreeMap<EventId, Event> = own_events
        .iter()
        .filter(|event| world.own.accepts(event))
        .map(|event| (event.id, event.clone()))
        .collect();
    loop {
        let before = store.len();
        let announcements: Vec<Event> = latest_announcements(store.values());
        let mut connected: BTreeSet<RelayUrl> = bootstrap.iter().cloned().collect();
        let mut repo_relays: Vec<(String, Vec<RelayUrl>)> = Vec::new();
        for announcement in &announcements {
            let repo = format!(
                "30617:{}:{}",
                announcement.pubkey.to_hex(),
                announcement.tags.identifier().unwrap_or_default()
            );
            let relays = listed_relays(announcement)
                .into_iter()
                .filter(|relay| relay != &world.own.url)
                .collect::<Vec<_>>();
            connected.extend(relays.iter().cloned());
            repo_relays.push((repo, relays));
        }
        let roots: Vec<(EventId, String)> = store
            .values()
            .filter(|event| [1617, 1618, 1621].contains(&event.kind.as_u16()))
            .flat_map(|event| {
                tag_values(event, "a")
                    .into_iter()
                    .map(move |repo| (event.id, repo))
            })
            .collect();
        if world.engine.config().sync_plus.enabled {
            add_sync_plus(
                world,
                &reachable,
                &announcements,
                &roots,
                &mut store,
                &mut repo_relays,
            );
        }
        for relay in &connected {
            let Some(events) = reachable.get(relay) else {
                continue;
            };
            for event in events {
                if [30617, 30618].contains(&event.kind.as_u16()) && world.own.accepts(event) {
                    store.insert(event.id, event.clone());
                }
            }
        }
        for (repo, relays) in &repo_relays {
            let repo_roots: Vec<String> = roots
                .iter()
                .filter(|(_, r)| r == repo)
                .map(|(id, _)| id.to_hex())
                .collect();
            for relay in relays {
                let Some(events) = reachable.get(relay) else {
                    continue;
                };
                for event in events {
                    let tags_repo = ["a", "A", "q"]
                        .iter()
                        .any(|letter| tag_values(event, letter).contains(repo));
                    let tags_root = ["e", "E", "q"].iter().any(|letter| {
                        tag_values(event, letter)
                            .iter()
                            .any(|value| repo_roots.contains(value))
                    });
                    if (tags_repo || tags_root) && world.own.accepts(event) {
                        store.insert(event.id, event.clone());
                    }
                }
            }
        }
        if store.len() == before {
            let kept = latest_addressable(store.values());
            return kept;
        }
    }
}

/// GRASP-03 Sync+ in the reference model (within its caps): each
/// repository's participants (owner, maintainers, authors of conversation
/// events in the store) have their relay lists read from the repository's
/// relays, and the write relays of the newest lists join the repository's
/// relays for Layers 2 and 3.
fn add_sync_plus(
    world: &World,
    reachable: &BTreeMap<&RelayUrl, Vec<Event>>,
    announcements: &[Event],
    roots: &[(EventId, String)],
    store: &mut BTreeMap<EventId, Event>,
    repo_relays: &mut [(String, Vec<RelayUrl>)],
) {
    const CONVERSATION: [u16; 9] = [1617, 1618, 1619, 1621, 1111, 1630, 1631, 1632, 1633];
    for (repo, relays) in repo_relays.iter_mut() {
        let repo_roots: Vec<String> = roots
            .iter()
            .filter(|(_, r)| r == repo)
            .map(|(id, _)| id.to_hex())
            .collect();
        let mut participants: BTreeSet<String> = BTreeSet::new();
        participants.extend(repo.split(':').nth(1).map(str::to_owned));
        for announcement in announcements {
            let coordinate = format!(
                "30617:{}:{}",
                announcement.pubkey.to_hex(),
                announcement.tags.identifier().unwrap_or_default()
            );
            if &coordinate == repo {
                participants.extend(
                    announcement
                        .tags
                        .iter()
                        .filter(|tag| {
                            tag.as_slice()
                                .first()
                                .is_some_and(|name| name == "maintainers")
                        })
                        .flat_map(|tag| tag.as_slice()[1..].to_vec()),
                );
            }
        }
        for event in store.values() {
            if !CONVERSATION.contains(&event.kind.as_u16()) {
                continue;
            }
            let tags_repo = ["a", "A"]
                .iter()
                .any(|letter| tag_values(event, letter).contains(repo));
            let tags_root = ["e", "E"].iter().any(|letter| {
                tag_values(event, letter)
                    .iter()
                    .any(|value| repo_roots.contains(value))
            }) || repo_roots.contains(&event.id.to_hex());
            if tags_repo || tags_root {
                participants.insert(event.pubkey.to_hex());
            }
        }
        for relay in relays.iter() {
            for event in reachable.get(relay).into_iter().flatten() {
                if [10002, 10317].contains(&event.kind.as_u16())
                    && participants.contains(&event.pubkey.to_hex())
                {
                    store.insert(event.id, event.clone());
                }
            }
        }
        let mut newest: BTreeMap<(String, u16), &Event> = BTreeMap::new();
        for event in store.values() {
            let kind = event.kind.as_u16();
            if [10002, 10317].contains(&kind) && participants.contains(&event.pubkey.to_hex()) {
                let key = (event.pubkey.to_hex(), kind);
                if newest
                    .get(&key)
                    .is_none_or(|kept| event.created_at > kept.created_at)
                {
                    newest.insert(key, event);
                }
            }
        }
        let mut outbox: Vec<RelayUrl> = Vec::new();
        for event in newest.values() {
            let letter = if event.kind.as_u16() == 10002 {
                "r"
            } else {
                "g"
            };
            for tag in event.tags.iter() {
                let values = tag.as_slice();
                if values.first().is_some_and(|name| name == letter)
                    && values.get(2).is_none_or(|marker| marker != "read")
                {
                    if let Some(relay) = values.get(1).and_then(|value| RelayUrl::parse(value).ok())
                    {
                        if relay != world.own.url
                            && !relays.contains(&relay)
                            && !outbox.contains(&relay)
                        {
                            outbox.push(relay);
                        }
                    }
                }
            }
        }
        relays.extend(outbox);
    }
}

fn listed_relays(announcement: &Event) -> Vec<RelayUrl> {
    announcement
        .tags
        .iter()
        .filter(|tag| tag.as_slice().first().is_some_and(|name| name == "relays"))
        .flat_map(|tag| {
            tag.as_slice()[1..]
                .iter()
                .filter_map(|value| RelayUrl::parse(value).ok())
                .collect::<Vec<_>>()
        })
        .collect()
}

fn tag_values(event: &Event, letter: &str) -> Vec<String> {
    event
        .tags
        .iter()
        .filter(|tag| tag.as_slice().first().is_some_and(|name| name == letter))
        .filter_map(|tag| tag.as_slice().get(1).cloned())
        .collect()
}

fn latest_announcements<'a>(events: impl Iterator<Item = &'a Event>) -> Vec<Event> {
    let mut latest: BTreeMap<(PublicKey, String), Event> = BTreeMap::new();
    for event in events.filter(|event| event.kind == Kind::Custom(30617)) {
        let key = (event.pubkey, event.tags.identifier().unwrap_or_default());
        let newer = latest
            .get(&key)
            .is_none_or(|kept| event.created_at > kept.created_at);
        if newer {
            latest.insert(key, event.clone());
        }
    }
    latest.into_values().collect()
}

/// Keeps only the newest version of addressable events, as stores do.
fn latest_addressable<'a>(events: impl Iterator<Item = &'a Event>) -> BTreeSet<EventId> {
    let mut kept: BTreeMap<(Kind, PublicKey, String), &Event> = BTreeMap::new();
    let mut ids = BTreeSet::new();
    for event in events {
        if event.kind.is_addressable() {
            let key = (
                event.kind,
                event.pubkey,
                event.tags.identifier().unwrap_or_default(),
            );
            let newer = kept.get(&key).is_none_or(|old| {
                (event.created_at, std::cmp::Reverse(event.id))
                    > (old.created_at, std::cmp::Reverse(old.id))
            });
            if newer {
                kept.insert(key, event);
            }
        } else {
            ids.insert(event.id);
        }
    }
    ids.extend(kept.values().map(|event| event.id));
    ids
}

/// A relay with default behaviour (NIP-77 on).
pub fn sim_relay(name: &str, events: Vec<Event>) -> SimRelay {
    sim_relay_with(name, events, SimRelayConfig::default())
}

/// A relay with the given configuration.
pub fn sim_relay_with(name: &str, events: Vec<Event>, config: SimRelayConfig) -> SimRelay {
    let mut relay = SimRelay::new(relay_url(name), config);
    for event in events {
        relay.add_event(event);
    }
    relay
}
