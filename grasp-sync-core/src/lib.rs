//! # grasp-sync-core
//!
//! The pure core of grasp-sync: every decision of GRASP-02 proactive sync and
//! of purgatory git-data sync, as plain functions and state machines.
//!
//! **What this crate does not do:** no I/O, no sockets, no tokio, and it never
//! reads a clock. Time comes in as an argument (`now`), read once per input by
//! whoever drives the core from a [`clock::Clock`]; effects go out as the sync
//! engine's [`engine::Command`]s (data its driver executes) and through the
//! traits [`store::EventStore`] and [`purgatory::SyncContext`]. An in-memory
//! implementation ships beside each trait, so every state can be reached in a
//! unit test without sleeping.
//!
//! ## The public surface
//! What an embedder builds against, in one place:
//! - **The engine** ([`engine`]): [`engine::SyncEngine`] and its driving
//!   contract, the [`engine::Command`]s it emits, its configuration
//!   ([`engine::EngineConfig`] in groups: [`engine::Identity`],
//!   [`engine::Limits`], [`engine::Timeouts`], [`engine::Caps`], with
//!   [`health::HealthConfig`]; [`engine::ConfigError`]), NIP-11
//!   [`engine::RelayLimits`], and what it reports
//!   ([`engine::EngineStats`], [`engine::RelayReport`],
//!   [`engine::RelayActivity`], [`model::RelayState`],
//!   [`model::PendingBatch`], [`health::HealthState`],
//!   [`health::HealthCounts`], [`planner::RepoSyncIndex`]).
//! - **Time** ([`clock`]): [`Clock`], [`SystemClock`], [`ManualClock`],
//!   [`Instant`], [`Now`].
//! - **The traits and their in-memory implementations**:
//!   [`store::EventStore`] with [`store::MemoryEventStore`];
//!   [`purgatory::SyncContext`] with [`purgatory::MemorySyncContext`];
//!   [`resolve::Resolver`] with [`resolve::StaticResolver`].
//! - **Trust**: [`verified::VerifiedEvent`] (the only thing
//!   [`engine::Command::Store`] carries), [`verified::Forged`],
//!   [`verified::SeenSignatures`], [`verified::AuthorKeys`] and
//!   [`verified::AuthorKey`]; the URL policies
//!   [`url_policy::RelayUrlPolicy`] and [`url_policy::CloneUrlPolicy`].
//! - **The NIP-34 types they exchange** ([`nip34`]): [`RepoRef`],
//!   [`nip34::RepoAnnouncement`], [`nip34::RepoState`], [`nip34::GitOid`],
//!   their parsers and kinds.
//! - **Purgatory's decisions** ([`purgatory`]), for `grasp-purgatory` and
//!   other drivers of git-data sync: the sync queue, the per-domain
//!   throttle, clone-URL selection, accounting, a held event's fate.
//! - **Which metric families a host exports** ([`metric_families`]):
//!   [`metric_families::MetricFamilies`], the per-family settings (rename,
//!   leave out) both adapters' builders take.
//! - **"Is the job done?"** ([`job`]): [`job::job_done`] over what sync and
//!   purgatory report, for every program that waits for the whole job.
//!
//! The rest is crate-private. [`filters`], [`pagination`] and the spec's
//! indexes in [`model`] and [`planner`] are public because the spec names
//! them and the adapters, benches and property tests use them; they follow
//! the spec and may change with it.
//!
//! ## Map
//! - [`nip34`] — parse repository announcements, states, patches, PRs, issues.
//! - [`url_policy`] — which relay and clone URLs from strangers may be used.
//! - [`model`] — the spec's data model: confirmed and pending indexes.
//! - [`planner`] — the repository index, `derive_relay_targets` and
//!   `compute_actions`, the only place that decides new subscriptions.
//! - [`filters`] and [`pagination`] — Layer 1/2/3 filters and lossless
//!   `until` paging.
//! - [`health`] — relay health and every retry delay (connects, failed work,
//!   the store, the own relay).
//! - [`engine`] — the sync engine: a deterministic state machine driven by
//!   `handle_*` inputs, its [`engine::Command`]s executed by the driver.
//! - [`purgatory`] — sync queue, domain throttle and clone-URL selection.
//! - [`verified`] — the type only a checked event has, and the shared
//!   cache of signatures verified lately.
//! - [`clock`], [`backoff`], [`transport`], [`store`] — time, the shared
//!   backoff formula, why a connection could not take a message, the store.
//!
//! `ARCHITECTURE.md` at the repository root names the function behind each
//! decision.
//!
//! ## Driving the engine
//!
//! The contract is stated in the [`engine`] module ("Driving contract");
//! a first step of it:
//!
//! ```
//! use grasp_sync_core::engine::{Command, EngineConfig, SyncEngine};
//! use grasp_sync_core::{Instant, Now};
//! use nostr::prelude::{RelayUrl, Timestamp};
//!
//! let relay = RelayUrl::parse("wss://relay.example.com").unwrap();
//! let now = Now::new(Instant::ZERO, Timestamp::from_secs(1_750_000_000));
//! let mut config = EngineConfig::default();
//! config.identity.bootstrap_relays = vec![relay.clone()];
//! let mut engine = SyncEngine::new(config, now).expect("a valid configuration");
//! engine.handle_timeout(now);
//! // A driver executes each command: opens connections, sends
//! // `command.client_message()`, stores, answers store queries.
//! let mut connects = Vec::new();
//! engine.execute_commands(now, |command| {
//!     match command {
//!         Command::Connect { relay, .. } => connects.push(relay),
//!         other => assert_eq!(other.client_message(), None),
//!     }
//!     Ok(())
//! });
//! // The bootstrap relay is connected first.
//! assert_eq!(connects, [relay.clone()]);
//! engine.handle_connected(now, &relay);
//! let mut sent = Vec::new();
//! engine.execute_commands(now, |command| {
//!     sent.extend(command.client_message().map(|message| message.as_json()));
//!     Ok(())
//! });
//! assert!(sent.iter().any(|json| json.starts_with(r#"["REQ""#)));
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod classify;
pub mod clock;
pub mod crossing;
pub mod engine;
pub mod filters;
pub mod health;
pub use health::backoff;
pub mod job;
pub mod metric_families;
pub mod model;
pub mod nip34;
pub mod pagination;
pub mod planner;
pub mod purgatory;
mod recent;
pub mod relay_text;
pub mod resolve;
pub mod screen;
pub mod store;
pub mod transport;
pub mod url_policy;
pub mod verified;

pub use clock::{Clock, Instant, ManualClock, Now, SystemClock};
pub use nip34::RepoRef;
