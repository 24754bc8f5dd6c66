//! Where released and expired events go.

use async_trait::async_trait;
use grasp_sync_core::store::{EventStore, IngestOutcome, Refusal};
use tokio::sync::mpsc;

use crate::held::HeldEvent;

/// Why a released event could not be handed over: it stays in purgatory and is offered
/// again after the next fetch or check, unless the sink refused it for good.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReleaseError {
    /// The receiving side is gone.
    #[error("the release sink is closed")]
    Closed,
    /// The receiving store failed or refused the event for now: it stays held and is
    /// offered again.
    #[error("the release sink failed: {0}")]
    Failed(String),
    /// The receiving store refused the event for good (its limits or its policy will
    /// never take it: [`Refusal::ForGood`], e.g. a relay's `OK false "invalid: event too
    /// large"`): purgatory drops it (journaled as `refused`, counted in
    /// `purgatory_events_refused_by_store_total`, named in
    /// [`PurgatoryStatus::last_store_refusal`](crate::PurgatoryStatus::last_store_refusal))
    /// instead of offering it again for ever.
    #[error("the release sink refused the event for good: {0}")]
    Refused(String),
}

/// Receives events whose git data is present, and events that expired.
///
/// `release` is awaited before purgatory drops the temporary refs that keep the fetched
/// objects: a git server applying a state's refs should do so before returning.
#[async_trait]
pub trait ReleaseSink: Send + Sync {
    /// The event's objects are all present (a PR's tip is under `refs/nostr/<id>`).
    async fn release(&self, held: &HeldEvent) -> Result<(), ReleaseError>;

    /// The event waited longer than the expiry time and was dropped from purgatory.
    async fn expired(&self, held: &HeldEvent) {
        tracing::warn!(
            id = %held.event.id,
            repo = %held.repo,
            "purgatory event expired before its git data arrived"
        );
    }
}

/// What a [`ChannelSink`] sends.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PurgatoryOutput {
    /// An event whose data is present.
    Released(HeldEvent),
    /// An event that expired.
    Expired(HeldEvent),
}

/// A sink that sends every released and expired event down a channel.
#[derive(Clone, Debug)]
pub struct ChannelSink {
    sender: mpsc::UnboundedSender<PurgatoryOutput>,
}

impl ChannelSink {
    /// A sink and the receiving end of its channel.
    pub fn new() -> (Self, mpsc::UnboundedReceiver<PurgatoryOutput>) {
        let (sender, receiver) = mpsc::unbounded_channel();
        (ChannelSink { sender }, receiver)
    }
}

#[async_trait]
impl ReleaseSink for ChannelSink {
    async fn release(&self, held: &HeldEvent) -> Result<(), ReleaseError> {
        self.sender
            .send(PurgatoryOutput::Released(held.clone()))
            .map_err(|_| ReleaseError::Closed)
    }

    async fn expired(&self, held: &HeldEvent) {
        tracing::warn!(id = %held.event.id, repo = %held.repo, "purgatory event expired");
        if self
            .sender
            .send(PurgatoryOutput::Expired(held.clone()))
            .is_err()
        {
            tracing::warn!(id = %held.event.id, "expired event not reported: the channel is closed");
        }
    }
}

/// A sink that stores released events in an [`EventStore`] (for example the relay's
/// database) and logs expired ones. The store's refusal for good
/// ([`Refusal::ForGood`]) is [`ReleaseError::Refused`]: the event is dropped; any other
/// refusal or failure is [`ReleaseError::Failed`]: it is offered again.
#[derive(Debug)]
pub struct StoreSink<S> {
    store: S,
}

impl<S> StoreSink<S> {
    /// Releases into `store`.
    pub fn new(store: S) -> Self {
        StoreSink { store }
    }
}

#[async_trait]
impl<S: EventStore> ReleaseSink for StoreSink<S> {
    async fn release(&self, held: &HeldEvent) -> Result<(), ReleaseError> {
        match self.store.ingest(&held.event).await {
            Ok(IngestOutcome::Rejected {
                reason,
                refusal: Refusal::ForGood,
            }) => Err(ReleaseError::Refused(reason)),
            Ok(IngestOutcome::Rejected { reason, .. }) => Err(ReleaseError::Failed(reason)),
            Ok(_) => Ok(()),
            Err(error) => Err(ReleaseError::Failed(error.to_string())),
        }
    }
}
