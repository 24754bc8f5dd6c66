//! A store that is the own relay itself, reached over WebSocket: ingesting an
//! event publishes it and reports the relay's `OK` (stored, duplicate or
//! rejected with its reason); listing items for negentropy reads the relay's
//! events matching the filter page by page (`until` pagination: strfry and
//! nostr-relay-builder clamp every REQ to 500 results without a word).
//!
//! Publishing runs on two to [`INGEST_CONNECTIONS`] connections (`ingest`:
//! many events in flight on each, their `OK`s matched by id, in any order;
//! `pace`: how many connections are in use), listing on one more (`query`:
//! one filter at a time). An event over a limit the relay states in its
//! NIP-11 document (`limits`) is refused for good without being sent.

mod ingest;
mod limits;
mod pace;
mod query;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use grasp_sync_core::engine::{classify, event_frame};
use grasp_sync_core::store::{EventStore, IngestOutcome, StoreError};
use nostr::prelude::{Event, EventId, Filter, RelayUrl, Timestamp};
use tokio::sync::{mpsc, oneshot};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};
use tracing::debug;

use crate::nip11::StoreLimits;

type Socket = WebSocketStream<MaybeTlsStream<tokio::net::TcpStream>>;

/// Publishes verified events to a relay (normally the own relay) and lists
/// what it holds. Publishing is pipelined over up to [`INGEST_CONNECTIONS`]
/// connections (a relay handles one connection's `EVENT`s one after the
/// other; several connections let it work on several at once), each with up
/// to [`INGEST_WINDOW`] events waiting for their `OK` and written in
/// batches. It starts on two connections and adds one while the relay is
/// what the events wait for and the last one added made it answer faster;
/// a `rate-limited:` answer or a refused connection takes one back and
/// stops the growth for a minute. An event goes to the connection its id
/// picks. Listing runs on one more connection. All open on first use
/// (inside the runtime that uses the store) and reopen after a failure;
/// their tasks end when the last clone of the store is dropped.
///
/// Before the first event is published, the store asks the relay for its
/// NIP-11 document (at most 5 s, again every 10 minutes): an event whose
/// `EVENT` frame is over its `limitation.max_message_length` (or with more
/// tags than `max_event_tags`, more content than `max_content_length`) is
/// answered [`IngestOutcome::refused_for_good`] with an `invalid:` reason
/// naming its size and the limit, and is never sent. (strfry, at 128 KiB,
/// drops the connection without a word on a larger frame, and every event
/// in flight on it would fail with it and be sent again, for ever.) A
/// relay's own `OK false "invalid: …"` is refused for good too.
///
/// ```no_run
/// use std::sync::Arc;
/// use std::time::Duration;
/// use grasp_sync_tokio::core::store::EventStore;
/// use grasp_sync_tokio::nostr::prelude::{Filter, Kind, RelayUrl};
/// use grasp_sync_tokio::RelayStore;
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let own = RelayUrl::parse("ws://127.0.0.1:7777")?;
/// let store = RelayStore::new(own, Duration::from_secs(10));
/// // What negentropy compares with: every announcement the relay holds,
/// // read page by page past the relay's result limit.
/// let items = store
///     .negentropy_items(&Filter::new().kind(Kind::Custom(30617)))
///     .await?;
/// println!("{} announcements", items.len());
/// // Hand it to the manager: `.store(Arc::new(store))`.
/// let _shared: Arc<dyn EventStore> = Arc::new(store);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct RelayStore {
    ingests: Vec<mpsc::Sender<ingest::Ingest>>,
    /// How many of `ingests` are in use, and why.
    pace: Arc<pace::Pace>,
    queries: mpsc::Sender<query::Query>,
    /// The connection tasks' side, until the first request spawns them.
    pending: Arc<Mutex<Option<Pending>>>,
    /// What the relay states it takes (NIP-11).
    limits: Arc<limits::OwnLimits>,
}

/// Events published and not yet answered, at most, on each ingest
/// connection (the window starts at 64, halves on `rate-limited:` and grows
/// by one per event stored, up to this).
pub const INGEST_WINDOW: usize = 512;

/// Connections events are published on, at the most (the store starts on
/// two and adds one while it makes the relay take events faster; see
/// [`RelayStore::with_ingest_connections`] for a relay that allows fewer).
pub const INGEST_CONNECTIONS: usize = 8;

/// What the connection tasks need, kept until the first request.
#[derive(Debug)]
struct Pending {
    relay: RelayUrl,
    timeout: Duration,
    ingests: Vec<mpsc::Receiver<ingest::Ingest>>,
    queries: mpsc::Receiver<query::Query>,
}

type Reply<T> = oneshot::Sender<Result<T, StoreError>>;

impl RelayStore {
    /// A store writing to `relay`; `timeout` bounds every request. The
    /// connection opens on first use and reopens after a failure.
    /// Nothing runs until the first request, so the store can be built
    /// outside a tokio runtime.
    pub fn new(relay: RelayUrl, timeout: Duration) -> Self {
        Self::with_ingest_connections(relay, timeout, INGEST_CONNECTIONS)
    }

    /// [`RelayStore::new`] publishing on `most` connections at the most
    /// (at least one; it starts on two, or `most` if fewer): for a relay
    /// that limits connections per client.
    pub fn with_ingest_connections(relay: RelayUrl, timeout: Duration, most: usize) -> Self {
        let most = most.max(1);
        let (ingests, ingests_rx): (Vec<_>, Vec<_>) =
            (0..most).map(|_| mpsc::channel(INGEST_WINDOW)).unzip();
        let (queries, queries_rx) = mpsc::channel(64);
        let limits = Arc::new(limits::OwnLimits::new(relay.clone(), timeout));
        let pending = Pending {
            relay,
            timeout,
            ingests: ingests_rx,
            queries: queries_rx,
        };
        RelayStore {
            ingests,
            pace: Arc::new(pace::Pace::new(most)),
            queries,
            pending: Arc::new(Mutex::new(Some(pending))),
            limits,
        }
    }

    /// Starts the connection task on first use (we are inside the
    /// runtime that awaits the store).
    fn start(&self) {
        let pending = self
            .pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(Pending {
            relay,
            timeout,
            ingests,
            queries,
        }) = pending
        {
            for ingests in ingests {
                tokio::spawn(ingest::serve(relay.clone(), timeout, ingests));
            }
            tokio::spawn(query::serve(relay, timeout, queries));
        }
    }

    /// Every event the relay holds matching `filter`, read page by page
    /// past the relay's result limit (for example the announcements of one
    /// repository, to find its clone URLs).
    pub async fn events(&self, filter: &Filter) -> Result<Vec<Event>, StoreError> {
        self.list(|reply| query::Query::Events(filter.clone(), reply))
            .await
    }

    /// Hands the listing `query` makes to the query connection and waits
    /// for its answer.
    async fn list<T>(&self, query: impl FnOnce(Reply<T>) -> query::Query) -> Result<T, StoreError> {
        self.start();
        let (reply, answer) = oneshot::channel();
        self.queries
            .send(query(reply))
            .await
            .map_err(|_| StoreError::Stopped)?;
        answer.await.map_err(|_| StoreError::Stopped)?
    }

    /// Hands `event`'s `EVENT` frame to the connection its id picks (the
    /// same event goes to the same connection: asked twice while in
    /// flight, it is sent once); its answer comes on the receiver. An
    /// event over the relay's `limits` is answered at once, refused for
    /// good, and not sent.
    async fn hand_over(
        &self,
        event: &Event,
        limits: &StoreLimits,
    ) -> Result<oneshot::Receiver<Result<IngestOutcome, StoreError>>, StoreError> {
        let (reply, answer) = oneshot::channel();
        // Serialized here, on the caller's task: the connection task only
        // writes.
        let frame = event_frame(event);
        if let Some(reason) = limits::over_limits(limits, event, frame.len()) {
            debug!(id = %event.id, kind = event.kind.as_u16(), reason, "not sent to the store relay");
            let _ = reply.send(Ok(IngestOutcome::refused_for_good(reason)));
            return Ok(answer);
        }
        let connection = self.pace.lane(event.id.as_bytes()[0]);
        self.ingests[connection]
            .send(ingest::Ingest {
                id: event.id,
                frame,
                reply,
            })
            .await
            .map_err(|_| StoreError::Stopped)?;
        Ok(answer)
    }

    /// Waits for the answer of an event handed over and tells the pace
    /// what it says.
    async fn await_answer(
        &self,
        answer: oneshot::Receiver<Result<IngestOutcome, StoreError>>,
    ) -> Result<IngestOutcome, StoreError> {
        let outcome = answer.await.map_err(|_| StoreError::Stopped)?;
        match &outcome {
            Ok(IngestOutcome::Stored | IngestOutcome::Duplicate | IngestOutcome::Held) => {
                self.pace.on_taken()
            }
            Ok(IngestOutcome::Rejected { reason, .. }) if classify(reason).rate_limited => {
                self.pace.on_pushed_back()
            }
            Err(_) => self.pace.on_pushed_back(),
            _ => {}
        }
        outcome
    }
}

#[async_trait]
impl EventStore for RelayStore {
    async fn ingest(&self, event: &Event) -> Result<IngestOutcome, StoreError> {
        self.start();
        let limits = self.limits.current().await;
        let _waiting = self.pace.on_ingest(tokio::time::Instant::now());
        let answer = self.hand_over(event, &limits).await?;
        self.await_answer(answer).await
    }

    /// Every event is handed to its connection before the first answer is
    /// awaited: one task for the batch, the events pipelined as one by one.
    async fn ingest_many(&self, events: &[&Event]) -> Vec<Result<IngestOutcome, StoreError>> {
        self.start();
        let limits = self.limits.current().await;
        let now = tokio::time::Instant::now();
        let mut handed = Vec::with_capacity(events.len());
        for event in events {
            let waiting = self.pace.on_ingest(now);
            handed.push((self.hand_over(event, &limits).await, waiting));
        }
        let mut outcomes = Vec::with_capacity(events.len());
        for (answer, _waiting) in handed {
            outcomes.push(match answer {
                Ok(answer) => self.await_answer(answer).await,
                Err(error) => Err(error),
            });
        }
        outcomes
    }

    async fn contains(&self, id: &EventId) -> Result<bool, StoreError> {
        let items = self.negentropy_items(&Filter::new().id(*id)).await?;
        Ok(!items.is_empty())
    }

    /// An event over the relay's NIP-11 limits is refused for good, as
    /// [`EventStore::ingest`] would refuse it (without sending it).
    async fn known_refusal(&self, event: &Event) -> Option<IngestOutcome> {
        let limits = self.limits.current().await;
        limits::over_limits(&limits, event, event_frame(event).len())
            .map(IngestOutcome::refused_for_good)
    }

    async fn negentropy_items(
        &self,
        filter: &Filter,
    ) -> Result<Vec<(EventId, Timestamp)>, StoreError> {
        self.list(|reply| query::Query::Items(filter.clone(), reply))
            .await
    }
}
