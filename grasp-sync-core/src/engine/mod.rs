//! The GRASP-02 sync engine: what to subscribe on which relay and when, as a
//! deterministic state machine.
//!
//! [`SyncEngine`] holds what spans relays — the repository index and its
//! relay targets, the store tracker, the own relay, the caps — and one
//! session per relay holding everything about that relay: what it
//! confirmed (the spec's `RelayState`) and its batches in flight, what was
//! learned, its health and retries, its connection, its timers. It does no
//! I/O and reads no clock: its driver feeds it inputs (`handle_*`, each with
//! the [`Now`](crate::clock::Now) at which it happened) and executes the [`Command`]s it emits.
//!
//! # Driving contract
//!
//! 1. Create the engine; call [`SyncEngine::handle_timeout`] once to start.
//! 2. After **every** `handle_*` call, drain [`SyncEngine::poll_command`]
//!    until it returns `None` and execute each command
//!    ([`SyncEngine::execute_commands`] does both): [`Command::Connect`] /
//!    [`Command::Disconnect`] / [`Command::Forget`] open and close the
//!    relay's connection, the other relay commands send
//!    [`Command::client_message`] on it, [`Command::QueryLocalItems`] is
//!    answered with [`SyncEngine::handle_local_items`], [`Command::Store`]
//!    goes to the store, whose answer comes back with
//!    [`SyncEngine::handle_store_outcome`] (several at once:
//!    [`SyncEngine::handle_store_outcomes`]; a batch input costs the engine
//!    one look at what to do next, not one per item). A connection that
//!    cannot take a message is reported with
//!    [`SyncEngine::handle_send_failed`].
//! 3. Wake up at [`SyncEngine::poll_timeout`] and call
//!    [`SyncEngine::handle_timeout`]. Waking early or twice is harmless.
//! 4. Feed what happens on every connection — the own relay's
//!    ([`Identity::own_relay`]) included, the engine tells it apart by
//!    its URL: connection outcomes ([`SyncEngine::handle_connected`],
//!    [`SyncEngine::handle_connect_failed`],
//!    [`SyncEngine::handle_disconnected`]), every relay message
//!    ([`SyncEngine::handle_relay_message`]; `EVENT`s the driver verified
//!    with [`SyncEngine::handle_checked_event`], or a run of them from one
//!    relay with [`SyncEngine::handle_checked_events`]), each WebSocket pong
//!    ([`SyncEngine::handle_relay_alive`]: a relay is alive while it sends
//!    anything, pongs included; ping at least every
//!    [`EngineConfig::liveness_probe_interval`]) and NIP-11 limits
//!    ([`SyncEngine::handle_relay_limits`]). A relay that embeds the library
//!    has no own relay connection: it hands accepted events to
//!    [`SyncEngine::handle_own_events`].
//!
//! ```no_run
//! use grasp_sync_core::engine::{Command, EngineConfig, SyncEngine};
//! use grasp_sync_core::{Clock, SystemClock};
//!
//! let clock = SystemClock::new();
//! let mut engine =
//!     SyncEngine::new(EngineConfig::default(), clock.read()).expect("a valid configuration");
//! engine.handle_timeout(clock.read());
//! loop {
//!     engine.execute_commands(clock.read(), |command| {
//!         match command {
//!             Command::Store { event, .. } => { /* store.ingest(&event) */ }
//!             other => { /* connect, or send other.client_message() */ let _ = other; }
//!         }
//!         Ok(())
//!     });
//!     // wait for the next relay message, own-relay event or the deadline
//!     // engine.poll_timeout(), then feed it:
//!     engine.handle_timeout(clock.read());
//! }
//! ```
//!
//! # What it guarantees
//! - An event reaches [`Command::Store`] only if its id and signature verify
//!   and it matches a filter of the subscription it arrived on; otherwise it is
//!   counted in [`EngineStats`] and dropped.
//! - A relay is never sent more concurrent subscriptions (REQs plus NIP-77
//!   sessions) than the smallest limit known for it: the configured default,
//!   its NIP-11 `max_subscriptions`, or the count at which it refused one.
//! - Items of a batch that fails (CLOSED, timeout, disconnect) are planned
//!   again; nothing is silently dropped.

// The engine (`sync_engine`) holds what spans relays and routes each input
// to the session of its relay (`relay_session`), which holds everything
// about that relay. Each question has one function that holds its decision;
// ARCHITECTURE.md's "Where each decision is made" table names them.
mod admission;
mod bad_events;
mod command;
mod config;
mod deadlines;
mod frames;
mod held;
mod live_coverage;
mod liveness;
mod log_tally;
mod ours;
mod outbox;
mod own_relay;
mod relay_session;
mod relay_slots;
mod relays;
mod report;
mod runtime;
mod sent_replies;
mod session;
mod session_events;
mod stats;
mod store_order;
mod stores;
mod sync_engine;
mod sync_plus;
mod timer_table;

pub use crate::classify::{classify, Classified, Prefix};
pub use command::Command;
pub use config::{
    Caps, ConfigError, EngineConfig, Identity, Limits, RelayLimits, SyncPlusConfig, Timeouts,
    DEFAULT_FRAME_BUDGET, DEFAULT_MAX_EVENT_BYTES, DEFAULT_MAX_EVENT_TAGS, MIN_FRAME_BUDGET,
    MIN_NEGENTROPY_FRAME, PEER_NEG_MSG_BYTES,
};
pub use frames::{event_frame, req_frame_len};
pub use ours::{MAX_CANDIDATES, MAX_CANDIDATE_BYTES};
pub use report::{RelayPhase, RelayReport, SyncReasons};
pub use session::SessionError;
pub use stats::{EngineStats, HeldBytes, LiveMode, RelayActivity, SyncPlusCounts};
pub use stores::{StoreVerdict, MAX_REFUSED_TAGS};
pub use sync_engine::SyncEngine;
