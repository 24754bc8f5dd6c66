//! What a running [`Purgatory`](crate::Purgatory) holds and does, as a cheap snapshot on
//! a `tokio::sync::watch` channel: a program that embeds it (or a sidecar's `--once`)
//! waits on [`PurgatoryStatus::nothing_ready`] instead of guessing from quiet time
//! (see [`Purgatory::status`](crate::Purgatory::status) for an example).

use std::collections::BTreeMap;

/// A snapshot of a purgatory. Obtain the receiver with
/// [`Purgatory::status`](crate::Purgatory::status) (before or after `run()`); the run
/// loop refreshes it at most every 100 ms while something changes, and at least every
/// loop interval (1 s by default). [`Purgatory::status_now`](crate::Purgatory::status_now)
/// computes one on demand.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PurgatoryStatus {
    /// Events waiting for their git data, including those being released.
    pub events_held: usize,
    /// Held events handed to the sink whose release is not confirmed yet.
    pub events_releasing: usize,
    /// Events released since the purgatory was built.
    pub events_released: u64,
    /// Events dropped because their git data never arrived, since the purgatory was
    /// built.
    pub events_expired: u64,
    /// Events refused since the purgatory was built because a limit was reached (per
    /// repository, per author, in total) or the journal could not be written
    /// (`purgatory_events_refused_total` by reason). Malformed events are not counted.
    pub events_refused: u64,
    /// Repositories (`30617:<owner>:<identifier>`) in the sync queue (waiting, backing
    /// off or being synced).
    pub identifiers_queued: usize,
    /// Identifiers whose sync is due now or within the immediate delay (a burst of
    /// synced events being debounced) and not running yet. An identifier backing off
    /// after a failed attempt, or waiting out the longer delay of user-submitted events
    /// for a push, is not ready.
    pub identifiers_ready: usize,
    /// Identifiers with held events whose main sync is running.
    pub identifiers_syncing: usize,
    /// Identifiers waiting in (or being served from) the queue of a throttled domain.
    pub identifiers_waiting_for_domain: usize,
    /// Git fetches in flight, over every domain.
    pub fetches_in_flight: u32,
    /// Git fetches in flight per clone-URL domain (only domains with one or more).
    pub fetches_by_domain: BTreeMap<String, u32>,
    /// Git objects fetched into local repositories since the purgatory was built.
    pub oids_fetched: u64,
    /// Nothing can move right now: no identifier is ready, syncing or waiting for a
    /// throttled domain, no fetch is in flight and no event is being released. What is
    /// still held waits for a backoff, a push or its expiry. A sidecar's `--once` exits
    /// when proactive sync is complete and this is `true`.
    pub nothing_ready: bool,
}
