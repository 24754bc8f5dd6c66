//! A store that is the own relay itself, reached over WebSocket: ingesting an
//! event publishes it and reports the relay's `OK` (stored, duplicate or
//! rejected with its reason); listing items for negentropy reads the relay's
//! events matching the filter page by page (`until` pagination: strfry and
//! nostr-relay-builder clamp every REQ to 500 results without a word).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures_util::{SinkExt, StreamExt};
use grasp_sync_core::pagination::{PageOutcome, PaginationState};
use grasp_sync_core::store::{EventStore, IngestOutcome, StoreError};
use nostr::prelude::{
    ClientMessage, Event, EventId, Filter, RelayMessage, RelayUrl, SubscriptionId, Timestamp,
};
use tokio::sync::{mpsc, oneshot};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

type Socket = WebSocketStream<MaybeTlsStream<tokio::net::TcpStream>>;

/// Publishes verified events to a relay (normally the own relay) and lists
/// what it holds. One connection, opened on first use (inside the runtime
/// that uses the store) and reopened after a failure; its task ends when
/// the last clone of the store is dropped.
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
    requests: mpsc::Sender<Request>,
    /// The connection task's side, until the first request spawns it.
    pending: Arc<Mutex<Option<Pending>>>,
}

/// What the connection task needs, kept until the first request.
#[derive(Debug)]
struct Pending {
    relay: RelayUrl,
    timeout: Duration,
    receiver: mpsc::Receiver<Request>,
}

#[derive(Debug)]
enum Request {
    Ingest(
        Box<Event>,
        oneshot::Sender<Result<IngestOutcome, StoreError>>,
    ),
    Events(Filter, oneshot::Sender<Result<Vec<Event>, StoreError>>),
}

impl RelayStore {
    /// A store writing to `relay`; `timeout` bounds every request. The
    /// connection opens on first use and reopens after a failure.
    /// Nothing runs until the first request, so the store can be built
    /// outside a tokio runtime.
    pub fn new(relay: RelayUrl, timeout: Duration) -> Self {
        let (requests, receiver) = mpsc::channel(1024);
        let pending = Pending {
            relay,
            timeout,
            receiver,
        };
        RelayStore {
            requests,
            pending: Arc::new(Mutex::new(Some(pending))),
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
            receiver,
        }) = pending
        {
            tokio::spawn(serve(relay, timeout, receiver));
        }
    }

    /// Every event the relay holds matching `filter`, read page by page
    /// past the relay's result limit (for example the announcements of one
    /// repository, to find its clone URLs).
    pub async fn events(&self, filter: &Filter) -> Result<Vec<Event>, StoreError> {
        self.ask(|reply| Request::Events(filter.clone(), reply))
            .await
    }

    async fn ask<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<T, StoreError>>) -> Request,
    ) -> Result<T, StoreError> {
        self.start();
        let (reply, answer) = oneshot::channel();
        self.requests
            .send(make(reply))
            .await
            .map_err(|_| StoreError::Stopped)?;
        answer.await.map_err(|_| StoreError::Stopped)?
    }
}

#[async_trait]
impl EventStore for RelayStore {
    async fn ingest(&self, event: &Event) -> Result<IngestOutcome, StoreError> {
        self.ask(|reply| Request::Ingest(Box::new(event.clone()), reply))
            .await
    }

    async fn contains(&self, id: &EventId) -> Result<bool, StoreError> {
        let items = self.negentropy_items(&Filter::new().id(*id)).await?;
        Ok(!items.is_empty())
    }

    async fn negentropy_items(
        &self,
        filter: &Filter,
    ) -> Result<Vec<(EventId, Timestamp)>, StoreError> {
        let events = self.events(filter).await?;
        Ok(events
            .into_iter()
            .map(|event| (event.id, event.created_at))
            .collect())
    }
}

/// The store's task: one connection, one request at a time.
async fn serve(relay: RelayUrl, timeout: Duration, mut requests: mpsc::Receiver<Request>) {
    let mut socket: Option<Socket> = None;
    let mut next_id = 0u64;
    while let Some(request) = requests.recv().await {
        if socket.is_none() {
            // Nagle off: one request waits for its answer before the next.
            let connecting =
                tokio_tungstenite::connect_async_with_config(relay.as_str(), None, true);
            socket = tokio::time::timeout(timeout, connecting)
                .await
                .ok()
                .and_then(Result::ok)
                .map(|(ws, _)| ws);
        }
        let Some(ws) = socket.as_mut() else {
            fail(request, "cannot connect to the store relay");
            continue;
        };
        next_id += 1;
        let ok = match request {
            Request::Ingest(event, reply) => {
                let result = tokio::time::timeout(timeout, publish(ws, &event)).await;
                let (result, ok) = flatten(result, timeout);
                let _ = reply.send(result);
                ok
            }
            Request::Events(filter, reply) => {
                let id = SubscriptionId::new(format!("store-{next_id}"));
                // The timeout bounds every page, not the whole listing.
                let (result, ok) = match list(ws, id, filter, timeout).await {
                    Ok(items) => (Ok(items), true),
                    Err(error) => (Err(error), false),
                };
                let _ = reply.send(result);
                ok
            }
        };
        if !ok {
            socket = None;
        }
    }
}

fn flatten<T>(
    result: Result<Result<T, StoreError>, tokio::time::error::Elapsed>,
    timeout: Duration,
) -> (Result<T, StoreError>, bool) {
    match result {
        Ok(Ok(value)) => (Ok(value), true),
        Ok(Err(error)) => (Err(error), false),
        Err(_) => (Err(StoreError::TimedOut(timeout)), false),
    }
}

fn fail(request: Request, reason: &str) {
    let error = StoreError::unavailable(reason);
    match request {
        Request::Ingest(_, reply) => {
            let _ = reply.send(Err(error));
        }
        Request::Events(_, reply) => {
            let _ = reply.send(Err(error));
        }
    }
}

async fn send(ws: &mut Socket, message: ClientMessage<'_>) -> Result<(), StoreError> {
    ws.send(Message::Text(message.as_json().into()))
        .await
        .map_err(StoreError::unavailable)
}

async fn next_message(ws: &mut Socket) -> Result<RelayMessage<'static>, StoreError> {
    loop {
        match ws.next().await {
            Some(Ok(Message::Text(text))) => {
                if let Ok(message) = RelayMessage::from_json(text.as_str()) {
                    return Ok(message);
                }
            }
            Some(Ok(Message::Close(_))) | None => {
                return Err(StoreError::unavailable("store relay closed the connection"))
            }
            Some(Ok(_)) => {}
            Some(Err(error)) => return Err(StoreError::unavailable(error)),
        }
    }
}

async fn publish(ws: &mut Socket, event: &Event) -> Result<IngestOutcome, StoreError> {
    send(ws, ClientMessage::Event(std::borrow::Cow::Borrowed(event))).await?;
    loop {
        if let RelayMessage::Ok {
            event_id,
            status,
            message,
        } = next_message(ws).await?
        {
            if event_id != event.id {
                continue;
            }
            return Ok(match (status, message.starts_with("duplicate:")) {
                (true, false) => IngestOutcome::Stored,
                (_, true) => IngestOutcome::Duplicate,
                (false, false) => IngestOutcome::Rejected {
                    reason: message.into_owned(),
                },
            });
        }
    }
}

/// Events asked for per page of a listing.
const LIST_PAGE: usize = 500;

/// Every event the relay holds for `filter`, read page by page with
/// lossless `until` pagination until a page brings nothing new.
async fn list(
    ws: &mut Socket,
    id: SubscriptionId,
    mut filter: Filter,
    timeout: Duration,
) -> Result<Vec<Event>, StoreError> {
    if filter.limit.is_none() {
        filter.limit = Some(LIST_PAGE);
    }
    let mut paging = PaginationState::new(filter.clone());
    let mut items = Vec::new();
    let mut page = filter;
    loop {
        send(ws, ClientMessage::req(id.clone(), vec![page])).await?;
        loop {
            let message = tokio::time::timeout(timeout, next_message(ws))
                .await
                .map_err(|_| StoreError::TimedOut(timeout))??;
            match message {
                RelayMessage::Event {
                    subscription_id,
                    event,
                } if *subscription_id == id => {
                    // Events at the boundary second come again on the next
                    // page: keep each once.
                    let is_new = paging.on_event(event.id, event.created_at);
                    if is_new {
                        items.push(event.into_owned());
                    }
                }
                RelayMessage::EndOfStoredEvents(sub) if *sub == id => break,
                RelayMessage::Closed {
                    subscription_id,
                    message,
                } if *subscription_id == id => {
                    return Err(StoreError::unavailable(format!(
                        "store relay closed the query: {message}"
                    )));
                }
                _ => {}
            }
        }
        match paging.on_eose(None) {
            PageOutcome::NextPage(next) => page = next,
            PageOutcome::Complete => break,
        }
    }
    send(ws, ClientMessage::close(id)).await?;
    Ok(items)
}
