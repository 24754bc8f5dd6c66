//! The purgatory service: holds events, runs the sync queue's main loop, serves the
//! domain queues, expires events, and shuts down cleanly (saving the purgatory when
//! asked to).
//!
//! - [`api`]: the [`Purgatory`] handle and what embedders call on it.
//! - [`builder`]: [`PurgatoryBuilder`], [`PurgatoryBuildError`].
//! - [`run_loop`]: [`Purgatory::run`], starting and finishing identifier syncs.
//! - [`domain_queues`]: serving the throttle manager's steps.
//! - [`expiry`]: dropping and reporting events that waited too long.
//! - [`persistence`]: saving at shutdown, restoring at build.
//! - [`status`]: computing and publishing the [`PurgatoryStatus`](crate::PurgatoryStatus).

mod api;
mod builder;
mod domain_queues;
mod expiry;
mod persistence;
mod run_loop;
mod status;

pub use api::Purgatory;
pub use builder::{PurgatoryBuildError, PurgatoryBuilder};
