//! Listing what the store relay holds: one filter at a time, page by page.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use grasp_sync_core::pagination::{PageOutcome, PaginationState};
use grasp_sync_core::store::StoreError;
use nostr::prelude::{ClientMessage, Event, Filter, RelayMessage, RelayUrl, SubscriptionId};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

use super::{Reply, Socket};

/// A listing asked of the store: every event matching the filter.
#[derive(Debug)]
pub(super) struct Query(pub(super) Filter, pub(super) Reply<Vec<Event>>);

/// The query connection's task: one listing at a time.
pub(super) async fn serve(relay: RelayUrl, timeout: Duration, mut queries: mpsc::Receiver<Query>) {
    let mut socket: Option<Socket> = None;
    let mut next_id = 0u64;
    while let Some(Query(filter, reply)) = queries.recv().await {
        if socket.is_none() {
            socket = connect(&relay, timeout).await;
        }
        let Some(ws) = socket.as_mut() else {
            let _ = reply.send(Err(StoreError::unavailable(
                "cannot connect to the store relay",
            )));
            continue;
        };
        next_id += 1;
        let id = SubscriptionId::new(format!("store-{next_id}"));
        // The timeout bounds every page, not the whole listing.
        let result = list(ws, id, filter, timeout).await;
        if result.is_err() {
            socket = None;
        }
        let _ = reply.send(result);
    }
}

/// A connection to the store relay (Nagle off), or `None` within `timeout`.
pub(super) async fn connect(relay: &RelayUrl, timeout: Duration) -> Option<Socket> {
    let connecting = tokio_tungstenite::connect_async_with_config(relay.as_str(), None, true);
    tokio::time::timeout(timeout, connecting)
        .await
        .ok()
        .and_then(Result::ok)
        .map(|(ws, _)| ws)
}

pub(super) async fn send(ws: &mut Socket, message: ClientMessage<'_>) -> Result<(), StoreError> {
    ws.send(Message::Text(message.as_json().into()))
        .await
        .map_err(StoreError::unavailable)
}

pub(super) async fn next_message(ws: &mut Socket) -> Result<RelayMessage<'static>, StoreError> {
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
