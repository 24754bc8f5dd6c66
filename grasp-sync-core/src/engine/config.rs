//! Every constant of the proactive-sync spec, as configurable defaults.

use std::time::Duration;

use nostr::prelude::RelayUrl;

use crate::filters::DEFAULT_CHUNK_SIZE;
use crate::health::HealthConfig;
use crate::url_policy::RelayUrlPolicy;

/// Configuration of a [`SyncEngine`](super::SyncEngine), in groups: who we
/// are ([`Identity`]), what one relay is asked at a time ([`Limits`]), how
/// long things take ([`Timeouts`]), what strangers can make us hold
/// ([`Caps`]), relay health ([`HealthConfig`]). [`SyncEngine::new`](super::SyncEngine::new)
/// refuses an invalid combination ([`EngineConfig::validate`]).
///
/// ```
/// use grasp_sync_core::engine::EngineConfig;
/// use nostr::prelude::RelayUrl;
///
/// let relay = RelayUrl::parse("wss://relay.example.com").unwrap();
/// let mut config = EngineConfig::default().with_bootstrap_relays(vec![relay]);
/// config.limits.page_limit = 200;
/// assert_eq!(config.validate(), Ok(()));
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct EngineConfig {
    /// Our service, the relays to start from, the own relay, the relay
    /// policy.
    pub identity: Identity,
    /// What one relay is asked at a time.
    pub limits: Limits,
    /// How long work may take and how often it is tried.
    pub timeouts: Timeouts,
    /// What strangers can make us hold.
    pub caps: Caps,
    /// Relay health: backoff, dead relays, rate-limit cooldown, stability.
    /// The connect timeout is its base backoff (spec).
    pub health: HealthConfig,
    /// GRASP-03 "Sync+": the conversation from its participants' own
    /// relays, and how far strangers can stretch it.
    pub sync_plus: SyncPlusConfig,
    /// Whether relays that do NIP-77 are reconciled with negentropy
    /// (`NEG-OPEN`); when off, every relay is synced by REQ. On by default.
    pub negentropy: bool,
    /// Seed of the randomness that spreads the daily re-sync over 23–25 h.
    pub seed: u64,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            identity: Identity::default(),
            limits: Limits::default(),
            timeouts: Timeouts::default(),
            caps: Caps::default(),
            health: HealthConfig::default(),
            sync_plus: SyncPlusConfig::default(),
            negentropy: true,
            seed: 0x6772_6173_702d_3032,
        }
    }
}

/// Who we are and whom we sync with: our service, the relays to start from, the own relay, and which relay URLs from announcements may be used.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Identity {
    /// Our service's relay URLs. When not empty, only announcements that
    /// list one of them become ours (for a sidecar next to a relay that
    /// accepts everything); when empty, every announcement the own relay
    /// accepted is ours.
    pub service_relays: Vec<RelayUrl>,
    /// Relays connected from the start and never dropped.
    pub bootstrap_relays: Vec<RelayUrl>,
    /// The own relay, when the engine reads it over a connection (the
    /// self-subscriber): the engine asks for the connection
    /// ([`Command::Connect`](super::Command::Connect), reconnecting after the
    /// [`HealthConfig::own_relay_backoff`](crate::health::HealthConfig::own_relay_backoff);
    /// an attempt is given up after the base of
    /// [`HealthConfig::backoff`](crate::health::HealthConfig::backoff), like
    /// any relay's), subscribes live and pages
    /// through the history (pages of [`Limits::page_limit`]), and takes
    /// the connection's inputs like any relay's, routed by this URL. It is
    /// never synced from (not as a bootstrap relay, nor when an announcement
    /// lists it). `None` (the default) for a relay that embeds the library
    /// and hands accepted events to
    /// [`SyncEngine::handle_own_events`](super::SyncEngine::handle_own_events).
    pub own_relay: Option<RelayUrl>,
    /// Which relay URLs from announcements may be connected to.
    pub relay_policy: RelayUrlPolicy,
}

impl Default for Identity {
    fn default() -> Self {
        Identity {
            service_relays: Vec::new(),
            bootstrap_relays: Vec::new(),
            own_relay: None,
            relay_policy: RelayUrlPolicy::new(),
        }
    }
}

impl Identity {
    /// `true` if the operator configured `relay` (a bootstrap relay or the
    /// own relay): the addresses it resolves to are used without the relay
    /// policy's check ([`RelayUrlPolicy::check_resolved_address`]), since
    /// the operator chose it (a relay on this host or a private network is
    /// theirs to use); a relay from an announcement is checked. The one
    /// answer to "is this a configured relay we trust", asked by the tokio
    /// adapter's address check.
    pub fn is_configured_relay(&self, relay: &RelayUrl) -> bool {
        self.bootstrap_relays.contains(relay) || self.own_relay.as_ref() == Some(relay)
    }
}

/// How much one relay is asked at a time: filters, subscriptions, pages, frames.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Limits {
    /// Values per Layer 2/3 filter (spec: 100).
    pub chunk_size: usize,
    /// Filters per live REQ.
    pub max_filters_per_req: usize,
    /// Concurrent subscriptions per relay when the relay did not tell us its
    /// own limit (NIP-11 `max_subscriptions`) and has not refused one yet.
    /// nostr-rs-relay allows 32.
    pub max_subscriptions: usize,
    /// Subscription slots kept for historic work on every relay (at most
    /// half of its limit, at least one): live subscriptions never take them,
    /// so historic sync always progresses.
    pub historic_slots: usize,
    /// `limit` of each page of a REQ+EOSE historic sync (lowered to the
    /// relay's NIP-11 `max_limit`). NIP-01 promises newest-first order only
    /// when a limit is given, and `until` paging relies on it.
    pub page_limit: usize,
    /// Missing ids asked for per `REQ {ids}` after a negentropy round.
    pub fetch_chunk: usize,
    /// Largest frame (bytes of one `REQ`, `NEG-OPEN`, `NEG-MSG`) sent to a
    /// relay that did not announce NIP-11 `max_message_length` (64 KiB).
    /// A relay that drops the connection right after a large frame gets a
    /// smaller learned budget (never below [`MIN_FRAME_BUDGET`]).
    pub default_frame_budget: usize,
    /// Negentropy frame size limit in bytes (0 = none, else at least 4096);
    /// messages are hex, so twice this on the wire.
    pub negentropy_frame_size_limit: u64,
    /// Live Layer 2+3 filters added since the last consolidation before the
    /// relay's live subscriptions are rebuilt from confirmed state (spec: 70).
    pub consolidation_threshold: usize,
    /// Largest event accepted from a relay, in bytes of its JSON
    /// ([`DEFAULT_MAX_EVENT_BYTES`]: above what the GRASP relays people sync
    /// from store, e.g. nostr-rs-relay's 256 KiB default, so a state with
    /// thousands of refs comes through): a larger one is refused, counted in
    /// [`EngineStats::dropped_oversized`](super::EngineStats::dropped_oversized)
    /// and counts toward [`Caps::max_bad_events`]. A driver refuses an
    /// `EVENT` frame longer than this (plus its envelope) before parsing it
    /// (`NGIT_SYNC_MAX_EVENT_BYTES`).
    pub max_event_size: usize,
    /// Most tags accepted on an event from a relay
    /// ([`DEFAULT_MAX_EVENT_TAGS`]: a NIP-34 state carries a tag per ref,
    /// and repositories with thousands of tags exist); more is refused like
    /// an event over
    /// [`Limits::max_event_size`] (`NGIT_SYNC_MAX_EVENT_TAGS`).
    pub max_event_tags: usize,
}

impl Limits {
    /// The size limits of one event from a relay.
    pub fn size_limits(&self) -> crate::screen::SizeLimits {
        crate::screen::SizeLimits {
            max_event_size: self.max_event_size,
            max_event_tags: self.max_event_tags,
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            chunk_size: DEFAULT_CHUNK_SIZE,
            max_filters_per_req: 100,
            max_subscriptions: 20,
            historic_slots: 4,
            page_limit: 500,
            fetch_chunk: 500,
            default_frame_budget: DEFAULT_FRAME_BUDGET,
            negentropy_frame_size_limit: 30_000,
            consolidation_threshold: 70,
            max_event_size: DEFAULT_MAX_EVENT_BYTES,
            max_event_tags: DEFAULT_MAX_EVENT_TAGS,
        }
    }
}

/// How long work may take, how often it recurs, and how often it is tried before it counts as failed.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Timeouts {
    /// Self-subscriber batch window; starts at the first event, not reset
    /// (spec: 5 s, `NGIT_SYNC_BATCH_WINDOW_MS`).
    pub batch_window: Duration,
    /// A reconnect within this time of the disconnect is a quick reconnect
    /// (keeps confirmed state, catches up with `since`); `since` reaches this
    /// far before the last moment we were connected (spec: 15 min).
    pub quick_reconnect_window: Duration,
    /// Shortest time to the daily full re-sync (spec: 23 h).
    pub daily_min: Duration,
    /// Longest time to the daily full re-sync (spec: 25 h).
    pub daily_max: Duration,
    /// A batch with subscriptions running and no message for them for this
    /// long fails and its items are planned again — once its relay has also
    /// sent nothing for any of our historic subscriptions for this long (a
    /// relay busy answering our other REQs, or a loaded machine, is slow,
    /// not failing); see [`Timeouts::batch_stall_limit`].
    pub batch_timeout: Duration,
    /// A batch with subscriptions running and no message for them for this
    /// long fails even while its relay keeps answering our other historic
    /// subscriptions (a REQ it dropped silently is resumed first, see
    /// [`Timeouts::req_resume_attempts`]).
    /// Never shorter than [`Timeouts::batch_timeout`]. Default: 5 min.
    pub batch_stall_limit: Duration,
    /// A historic REQ that brought nothing for the batch timeout while its
    /// relay answered other things (or only pings) is taken for dropped
    /// (nostr-rs-relay aborts a slow client's query without EOSE or
    /// CLOSED) and asked again from where it was; after this many such
    /// resumes without a word from the relay for the batch since, the batch
    /// fails. Default: 3.
    pub req_resume_attempts: u32,
    /// A NEG-OPEN unanswered for this long counts as a refusal of NIP-77.
    pub negentropy_timeout: Duration,
    /// How often relays with nothing left to sync are dropped (spec: 60 s).
    pub disconnect_check_interval: Duration,
    /// How often a relay whose subscription and frame limits cannot hold
    /// live coverage of every item is polled (`since` catch-up, paginated)
    /// for the items that did not fit.
    pub uncovered_poll_interval: Duration,
    /// A store that answered nothing for this long while events wait is
    /// taken for stalled: the waiting events are offered again.
    pub store_timeout: Duration,
    /// Answers with a reason we cannot classify (no NIP-01 prefix,
    /// `auth-required:`) before the event counts as refused for good.
    pub store_attempts: u32,
    /// Times a fetch of missing ids that brought nothing new is tried before
    /// the ids are reported missing.
    pub fetch_attempts: u32,
    /// Failed connects in a row after which a relay counts as unreachable:
    /// it is still retried, but historic sync does not wait for it
    /// ([`SyncEngine::historic_sync_complete`](super::SyncEngine::historic_sync_complete)).
    pub unreachable_after: u32,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            batch_window: Duration::from_secs(5),
            quick_reconnect_window: Duration::from_secs(15 * 60),
            daily_min: Duration::from_secs(23 * 3600),
            daily_max: Duration::from_secs(25 * 3600),
            batch_timeout: Duration::from_secs(60),
            batch_stall_limit: Duration::from_secs(5 * 60),
            req_resume_attempts: 3,
            negentropy_timeout: Duration::from_secs(10),
            disconnect_check_interval: Duration::from_secs(60),
            uncovered_poll_interval: Duration::from_secs(5 * 60),
            store_timeout: Duration::from_secs(60),
            store_attempts: 5,
            fetch_attempts: 3,
            unreachable_after: 3,
        }
    }
}

/// What strangers (announcements, relays, a store that falls behind) can make us hold: the memory and tracking caps.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Caps {
    /// Events handed to the store and not confirmed before no new historic
    /// job starts (backpressure on a slow store; bounds memory).
    pub max_unconfirmed_stores: usize,
    /// Bytes of those events (their size as JSON) before no new historic
    /// job starts: large events reach the memory bound long before the
    /// count does. Default: 64 MiB.
    pub max_unconfirmed_store_bytes: usize,
    /// Events the store refused for good (`blocked:`, `invalid:`, `pow:`,
    /// `restricted:` …) remembered so re-syncs do not download them again;
    /// as many again of the events the store holds outside what it serves
    /// ([`IngestOutcome::Held`](crate::store::IngestOutcome::Held)), each a
    /// record without content.
    pub refused_memory: usize,
    /// Relay messages one negentropy session answers before it is cut off
    /// (a relay could otherwise keep it going forever). A cut session is
    /// counted, the relay's NIP-77 is no longer trusted and the filter is
    /// synced by REQ+EOSE. 1 000 rounds reconcile far more than a million
    /// ids at the default frame size.
    pub max_negentropy_rounds: u32,
    /// Missing ids one negentropy session collects before it is cut off
    /// (32 bytes each: 100 000 ids ≈ 3.2 MB); the filter is then synced by
    /// paginated REQ+EOSE instead, whose memory the store backpressure
    /// bounds.
    pub max_negentropy_need: usize,
    /// Relays taken from one announcement, in its order, after the relay
    /// policy (the rest are counted in
    /// [`EngineStats::relays_over_cap`](super::EngineStats::relays_over_cap)
    /// and not synced). Real announcements list a handful.
    pub max_relays_per_announcement: usize,
    /// Relays tracked in total, bootstrap relays included. A relay an
    /// announcement lists beyond it is counted and not synced until a
    /// tracked relay is dropped or yields its slot
    /// ([`Caps::relay_trial_period`]; checked every
    /// [`Timeouts::disconnect_check_interval`]). Default: 1 000
    /// (`NGIT_SYNC_MAX_RELAYS`).
    pub max_relays: usize,
    /// Relays the announcements of one author (a repository's owner key)
    /// may bring in, of [`Caps::max_relays`]: a relay is charged to the
    /// author whose announcement first listed it, and one key publishing
    /// many announcements full of relays cannot take every slot. A relay
    /// over it waits (counted in
    /// [`EngineStats::relays_over_cap`](super::EngineStats::relays_over_cap))
    /// until the author's relays free a slot. Default: 50
    /// (`NGIT_SYNC_MAX_RELAYS_PER_AUTHOR`).
    pub max_relays_per_author: usize,
    /// Relays of one network may hold, of [`Caps::max_relays`]: a network
    /// is a host name's registrable domain (`*.evil.example` is one), an
    /// IPv4 literal's /24 or an IPv6 literal's /48. One server answering
    /// under every name of a domain cannot take every slot, however many
    /// keys list it. A relay over it waits (counted in
    /// [`EngineStats::relays_over_cap`](super::EngineStats::relays_over_cap))
    /// until a relay of its network frees a slot. Default: 100
    /// (`NGIT_SYNC_MAX_RELAYS_PER_DOMAIN`).
    pub max_relays_per_network: usize,
    /// How long a relay taken from an announcement may hold its slot
    /// without earning it (see [`Caps::relay_earn_window`]) while another
    /// relay waits for a slot: after it, the relay yields its slot (counted
    /// in [`EngineStats::relays_evicted`](super::EngineStats::relays_evicted))
    /// and waits as long again before it may take one back. Checked every
    /// [`Timeouts::disconnect_check_interval`], so a relay waiting only for
    /// a free slot is admitted within this plus two checks of the listing
    /// while some slot is not earned. Default: 10 min
    /// (`NGIT_SYNC_RELAY_TRIAL_SECS`).
    pub relay_trial_period: Duration,
    /// How long a relay keeps its slot after delivering an event of ours
    /// that no other relay delivered first (a unique delivery: the store
    /// took it as new, stored or held, from this relay's copy). Answering
    /// EOSE, or serving what other relays served already, earns nothing: a
    /// relay that has not earned its slot within this window yields it to
    /// one waiting once its trial period is over. Default: 24 h
    /// (`NGIT_SYNC_RELAY_EARN_WINDOW_SECS`).
    pub relay_earn_window: Duration,
    /// Repositories tracked that no announcement of ours names (root events
    /// may arrive before their announcement). Root events of further such
    /// repositories are counted in
    /// [`EngineStats::root_events_over_cap`](super::EngineStats::root_events_over_cap)
    /// and not indexed; the own relay's next full read (a restart) sees them
    /// again.
    pub max_unannounced_repos: usize,
    /// Event ids remembered per relay to count the events it sent again
    /// ([`EngineStats::events_received_again`](super::EngineStats::events_received_again);
    /// ≈ 60 B each). 0 counts none. Default: 20 000.
    pub received_ids_per_relay: usize,
    /// Events remembered per relay that name another event (`e`, `E`, `q`:
    /// replies, comments, statuses) and were handed to the store this sync,
    /// one entry per named event (≈ 48 B each, plus ≈ 80 B per named
    /// event). On a NIP-77 relay, the replies of a root event the store just
    /// took as new are reconciled against these instead of a store query,
    /// and only those still missing are fetched; an entry forgotten is
    /// fetched again, nothing else. 0 remembers none: such replies are then
    /// fetched by REQ. Default: 20 000.
    pub sent_replies_per_relay: usize,
    /// Events one connection may send that we refuse unread or unstored
    /// (a bad id or signature, outside the subscription's filters, on a
    /// subscription not open, over the size limits) before the relay is
    /// cut off: disconnected, counted once in
    /// [`EngineStats::relays_cut_for_bad_events`](super::EngineStats::relays_cut_for_bad_events),
    /// and reconnected only after its backoff, which grows with each cut.
    /// 0: never cut. Default: 1 000 (`NGIT_SYNC_MAX_BAD_EVENTS`).
    pub max_bad_events: u64,
}

impl Default for Caps {
    fn default() -> Self {
        Caps {
            max_unconfirmed_stores: 50_000,
            max_unconfirmed_store_bytes: 64 * 1024 * 1024,
            refused_memory: 10_000,
            max_negentropy_rounds: 1_000,
            max_negentropy_need: 100_000,
            max_relays_per_announcement: 20,
            max_relays: 1_000,
            max_relays_per_author: 50,
            max_relays_per_network: 100,
            relay_trial_period: Duration::from_secs(10 * 60),
            relay_earn_window: Duration::from_secs(24 * 60 * 60),
            max_unannounced_repos: 10_000,
            received_ids_per_relay: 20_000,
            sent_replies_per_relay: 20_000,
            max_bad_events: 1_000,
        }
    }
}

/// GRASP-03 "Sync+": a repository's conversation (its Layer 2 and 3
/// filters, never Layer 1) is also synced from its participants' own write
/// relays (NIP-65 kind 10002 `r` tags not marked `read`, kind 10317 `g`
/// tags). Participants are the owner, the maintainers and the authors of
/// events admitted to the repository's conversation; their relay lists are
/// read from the repository's relays and from [`SyncPlusConfig::index_relays`].
///
/// Every bound is per pass: each [`SyncPlusConfig::pass_interval`] the
/// selection moves on (rotates) through the participants and relays over
/// the caps, so all are reached over successive passes.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SyncPlusConfig {
    /// Sync+ on or off. Off: no relay list is read and no outbox relay is
    /// synced from. Default: on, like the reference GRASP server
    /// (`NGIT_SYNC_PLUS_ENABLED`).
    pub enabled: bool,
    /// Relays asked for participants' relay lists besides each
    /// repository's own relays (only kinds 10002 and 10317 are read from
    /// them). Default: none (`NGIT_USER_INDEX_RELAYS`, comma-separated).
    pub index_relays: Vec<RelayUrl>,
    /// Participants of one repository whose relay lists are read and whose
    /// outbox relays are synced from, per pass. Default: 32
    /// (`NGIT_SYNC_PLUS_PARTICIPANTS_PER_PASS`).
    pub participants_per_pass: usize,
    /// Outbox relays one repository is synced from, per pass. Default: 24
    /// (`NGIT_SYNC_PLUS_RELAYS_PER_PASS`).
    pub relays_per_pass: usize,
    /// Outbox relays Sync+ syncs from in total, over every repository
    /// (one chosen by several repositories counts once; one an
    /// announcement lists is not an outbox relay of that repository).
    /// Shared: each pass every repository with outbox relays first takes
    /// up to this over their number (at least one), in an order that starts
    /// where the cap ran out the pass before, so each is reached within
    /// `⌈those repositories / max_relays⌉` passes. Default: 200
    /// (`NGIT_SYNC_PLUS_MAX_RELAYS`).
    pub max_relays: usize,
    /// Participants remembered per repository, ranked by what they brought
    /// (the owner and maintainers, then contributors by events admitted,
    /// then arrival). At the cap a newcomer takes the place of the
    /// lowest-ranked participant who brought no more; one who brought less
    /// than all is counted and left out. Default: 1 000.
    pub max_participants_per_repo: usize,
    /// Write relays read from one relay list, in its order (the rest are
    /// counted and left out). Default: 32.
    pub max_relays_per_list: usize,
    /// How often the selection moves on to the participants and relays
    /// over the caps. Default: 10 min (`NGIT_SYNC_PLUS_PASS_SECS`).
    pub pass_interval: Duration,
}

impl Default for SyncPlusConfig {
    fn default() -> Self {
        SyncPlusConfig {
            enabled: true,
            index_relays: Vec::new(),
            participants_per_pass: 32,
            relays_per_pass: 24,
            max_relays: 200,
            max_participants_per_repo: 1_000,
            max_relays_per_list: 32,
            pass_interval: Duration::from_secs(10 * 60),
        }
    }
}

impl EngineConfig {
    /// This configuration with NIP-77 switched on or off
    /// ([`EngineConfig::negentropy`]): off, no `NEG-OPEN` is ever sent and
    /// every filter is synced by REQ.
    pub fn with_negentropy(mut self, enabled: bool) -> Self {
        self.negentropy = enabled;
        self
    }

    /// This configuration with Sync+ switched on or off
    /// ([`SyncPlusConfig::enabled`]).
    pub fn with_sync_plus(mut self, enabled: bool) -> Self {
        self.sync_plus.enabled = enabled;
        self
    }

    /// This configuration with `relays` as the index relays Sync+ reads
    /// participants' relay lists from ([`SyncPlusConfig::index_relays`]).
    pub fn with_index_relays(mut self, relays: Vec<RelayUrl>) -> Self {
        self.sync_plus.index_relays = relays;
        self
    }

    /// This configuration with `relays` as the bootstrap relays
    /// ([`Identity::bootstrap_relays`]).
    pub fn with_bootstrap_relays(mut self, relays: Vec<RelayUrl>) -> Self {
        self.identity.bootstrap_relays = relays;
        self
    }

    /// This configuration with `relays` as our service's relay URLs
    /// ([`Identity::service_relays`]).
    pub fn with_service_relays(mut self, relays: Vec<RelayUrl>) -> Self {
        self.identity.service_relays = relays;
        self
    }

    /// This configuration reading the own relay at `relay` over a
    /// connection ([`Identity::own_relay`]).
    pub fn with_own_relay(mut self, relay: RelayUrl) -> Self {
        self.identity.own_relay = Some(relay);
        self
    }

    /// This configuration with `policy` deciding which relay URLs from
    /// announcements may be used ([`Identity::relay_policy`]).
    pub fn with_relay_policy(mut self, policy: RelayUrlPolicy) -> Self {
        self.identity.relay_policy = policy;
        self
    }

    /// The window over which a learned rate counts openings: the
    /// rate-limit cooldown.
    pub(crate) fn rate_window(&self) -> Duration {
        self.health.rate_limit_cooldown
    }

    /// How often a driver that can probe a relay's liveness without a
    /// message (a WebSocket ping) should do it: a third of
    /// [`Timeouts::batch_timeout`] (at least 100 ms), so a relay that
    /// answers is heard at least twice within every batch timeout and never
    /// counts as silent between two probes
    /// ([`SyncEngine::handle_relay_alive`](super::SyncEngine::handle_relay_alive)).
    pub fn liveness_probe_interval(&self) -> Duration {
        (self.timeouts.batch_timeout / 3).max(Duration::from_millis(100))
    }

    /// Checks the combinations the fields' documentation promises, so an
    /// invalid configuration is an error when the driver starts, not a
    /// surprise later. (The engine itself clamps what it must: it never
    /// panics on a configuration.)
    pub fn validate(&self) -> Result<(), ConfigError> {
        let nonzero = [
            ("chunk_size", self.limits.chunk_size),
            ("max_filters_per_req", self.limits.max_filters_per_req),
            ("max_subscriptions", self.limits.max_subscriptions),
            ("fetch_chunk", self.limits.fetch_chunk),
            ("page_limit", self.limits.page_limit),
            ("historic_slots", self.limits.historic_slots),
            ("max_relays", self.caps.max_relays),
            ("max_relays_per_author", self.caps.max_relays_per_author),
            ("max_relays_per_network", self.caps.max_relays_per_network),
            (
                "max_unconfirmed_store_bytes",
                self.caps.max_unconfirmed_store_bytes,
            ),
            (
                "max_relays_per_announcement",
                self.caps.max_relays_per_announcement,
            ),
            (
                "sync_plus.participants_per_pass",
                self.sync_plus.participants_per_pass,
            ),
            ("sync_plus.relays_per_pass", self.sync_plus.relays_per_pass),
            ("sync_plus.max_relays", self.sync_plus.max_relays),
            (
                "sync_plus.max_participants_per_repo",
                self.sync_plus.max_participants_per_repo,
            ),
            (
                "sync_plus.max_relays_per_list",
                self.sync_plus.max_relays_per_list,
            ),
        ];
        if let Some((field, _)) = nonzero.iter().find(|(_, value)| *value == 0) {
            return Err(ConfigError::Zero(field));
        }
        let frame = self.limits.negentropy_frame_size_limit;
        if frame != 0 && frame < MIN_NEGENTROPY_FRAME {
            return Err(ConfigError::NegentropyFrameTooSmall(frame));
        }
        if self.limits.default_frame_budget < MIN_FRAME_BUDGET {
            return Err(ConfigError::FrameBudgetTooSmall(
                self.limits.default_frame_budget,
            ));
        }
        if self.timeouts.daily_min > self.timeouts.daily_max {
            return Err(ConfigError::DailyRange);
        }
        if self.timeouts.batch_timeout.is_zero() {
            return Err(ConfigError::ZeroBatchTimeout);
        }
        if self.sync_plus.pass_interval.is_zero() {
            return Err(ConfigError::ZeroSyncPlusPass);
        }
        Ok(())
    }
}

/// The smallest negentropy frame size limit other than 0 (none).
pub const MIN_NEGENTROPY_FRAME: u64 = 4096;

/// A configuration [`EngineConfig::validate`] refuses.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A count that must be at least one is zero.
    #[error("{0} must be at least 1")]
    Zero(&'static str),
    /// `negentropy_frame_size_limit` is neither 0 nor at least 4096.
    #[error("negentropy_frame_size_limit {0} must be 0 (none) or at least 4096")]
    NegentropyFrameTooSmall(u64),
    /// `default_frame_budget` is below [`MIN_FRAME_BUDGET`].
    #[error("default_frame_budget {0} must be at least 8192")]
    FrameBudgetTooSmall(usize),
    /// `daily_min` is after `daily_max`.
    #[error("daily_min must not exceed daily_max")]
    DailyRange,
    /// `batch_timeout` is zero.
    #[error("batch_timeout must not be zero")]
    ZeroBatchTimeout,
    /// `sync_plus.pass_interval` is zero.
    #[error("sync_plus.pass_interval must be longer than zero")]
    ZeroSyncPlusPass,
}

/// The largest event accepted from a relay by default, in bytes of its JSON
/// (1 MiB). What peers store: strfry 64 KiB (`events.maxEventSize`),
/// nostr-rs-relay 256 KiB (`max_event_bytes`), khatru 500 kB (its message
/// limit), nostr-relay-builder (and the reference GRASP server on it) no
/// limit of its own below its 64 MiB message limit. A NIP-34 state takes
/// 64 to 130 bytes a ref: a state of 2 000 refs is 130 to 265 kB, and this
/// holds one of about 10 000 short refs.
pub const DEFAULT_MAX_EVENT_BYTES: usize = 1024 * 1024;
/// The most tags accepted on an event from a relay by default: a state with
/// [`DEFAULT_MAX_EVENT_BYTES`] of ref tags has about 10 000.
pub const DEFAULT_MAX_EVENT_TAGS: usize = 10_000;
/// The largest NIP-77 `NEG-MSG` a peer sends, in bytes on the wire: the
/// negentropy frame size limit the relay answers with, hex (twice that), in
/// its envelope. strfry answers with a limit of 500 000 bytes
/// (`RelayNegentropy.cpp`: about 1 MB on the wire, sent in normal use to a
/// client missing some 15 000 events); khatru, where NIP-77 is switched on,
/// with 1 MiB (about 2.1 MB); nostr-relay-builder with 60 000 (120 kB).
pub const PEER_NEG_MSG_BYTES: usize = 2 * 1024 * 1024 + 256;

/// Frame budget for a relay that announced none (64 KiB).
pub const DEFAULT_FRAME_BUDGET: usize = 64 * 1024;
/// The smallest frame budget ever learned (8 KiB): a drop after a smaller
/// frame is not blamed on its size.
pub const MIN_FRAME_BUDGET: usize = 8 * 1024;

/// Limits a relay told us about (NIP-11 `limitation`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RelayLimits {
    /// Most concurrent subscriptions per connection.
    pub max_subscriptions: Option<usize>,
    /// Most events returned per filter, whatever `limit` asks.
    pub max_limit: Option<usize>,
    /// Events returned per filter without a `limit`.
    pub default_limit: Option<usize>,
    /// Most filters per REQ.
    pub max_filters: Option<usize>,
    /// Largest message the relay accepts, in bytes.
    pub max_message_length: Option<usize>,
}

impl RelayLimits {
    /// The most events a page of `filter` can hold, as far as the relay
    /// told us: `max_limit` when the filter asks a `limit`, else
    /// `default_limit`.
    pub(crate) fn page_limit_of(&self, filter: &nostr::prelude::Filter) -> Option<usize> {
        match filter.limit {
            Some(_) => self.max_limit,
            None => self.default_limit,
        }
    }
}

/// A small deterministic generator (splitmix64) for the daily jitter.
#[derive(Clone, Debug)]
pub(crate) struct Jitter(u64);

impl Jitter {
    pub(crate) fn new(seed: u64) -> Self {
        Jitter(seed)
    }

    /// A duration uniformly between `min` and `max`.
    pub(crate) fn between(
        &mut self,
        min: std::time::Duration,
        max: std::time::Duration,
    ) -> std::time::Duration {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        let span = max.saturating_sub(min).as_millis() as u64;
        let offset = if span == 0 { 0 } else { z % span };
        min.saturating_add(std::time::Duration::from_millis(offset))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_valid_and_each_broken_invariant_is_named() {
        assert_eq!(EngineConfig::default().validate(), Ok(()));
        let broken = |change: fn(&mut EngineConfig)| {
            let mut config = EngineConfig::default();
            change(&mut config);
            config.validate()
        };
        assert_eq!(
            broken(|c| c.limits.page_limit = 0),
            Err(ConfigError::Zero("page_limit"))
        );
        assert_eq!(
            broken(|c| c.caps.max_relays_per_author = 0),
            Err(ConfigError::Zero("max_relays_per_author"))
        );
        assert_eq!(
            broken(|c| c.limits.negentropy_frame_size_limit = 100),
            Err(ConfigError::NegentropyFrameTooSmall(100))
        );
        assert_eq!(broken(|c| c.limits.negentropy_frame_size_limit = 0), Ok(()));
        assert_eq!(
            broken(|c| c.limits.default_frame_budget = 1000),
            Err(ConfigError::FrameBudgetTooSmall(1000))
        );
        assert_eq!(
            broken(|c| c.timeouts.daily_min = c.timeouts.daily_max + Duration::from_secs(1)),
            Err(ConfigError::DailyRange)
        );
        assert_eq!(
            broken(|c| c.timeouts.batch_timeout = Duration::ZERO),
            Err(ConfigError::ZeroBatchTimeout)
        );
    }

    #[test]
    fn the_bootstrap_and_own_relays_are_the_configured_ones() {
        let url = |text| RelayUrl::parse(text).expect("a relay url");
        let identity = EngineConfig::default()
            .with_bootstrap_relays(vec![url("wss://bootstrap.example.com")])
            .with_own_relay(url("ws://127.0.0.1:7777"))
            .identity;
        assert!(identity.is_configured_relay(&url("wss://bootstrap.example.com")));
        assert!(identity.is_configured_relay(&url("ws://127.0.0.1:7777")));
        assert!(!identity.is_configured_relay(&url("wss://stranger.example.com")));
    }
}
