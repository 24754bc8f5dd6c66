//! The purgatory service: holds events (within its limits, journaled), runs the sync
//! queue's main loop, serves the domain queues, expires events, sweeps stale refs, and
//! shuts down cleanly.
//!
//! - [`api`]: the [`Purgatory`] handle and what embedders call on it.
//! - [`builder`]: [`PurgatoryBuilder`], [`PurgatoryBuildError`].
//! - [`run_loop`]: [`Purgatory::run`], starting and finishing identifier syncs.
//! - [`domain_queues`]: serving the throttle manager's steps.
//! - [`expiry`]: dropping and reporting events that waited too long.
//! - [`pause`]: fetches held back while a historic sync brings a repository's events.
//! - [`persistence`]: the journal: replayed at build, compacted and synced by the loop.
//! - [`reconcile`]: the served repositories' reconciliations (listing, schedule,
//!   outcomes; the work itself is [`crate::serve`]).
//! - [`status`]: computing and publishing the [`PurgatoryStatus`](crate::PurgatoryStatus).

mod api;
mod builder;
mod domain_queues;
mod expiry;
mod pause;
mod persistence;
mod reconcile;
mod run_loop;
mod status;

pub use api::{Purgatory, ScheduleIdentifierError};
pub use builder::{PurgatoryBuildError, PurgatoryBuilder};
