//! Listing what the store relay holds: one filter at a time, page by page.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use grasp_sync_core::pagination::{PageOutcome, PaginationState};
use grasp_sync_core::store::StoreError;
use nostr::prelude::{
    ClientMessage, Event, EventId, Filter, RelayMessage, RelayUrl, SubscriptionId, Timestamp,
};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;

use super::{Reply, Socket};

/// A listing asked of the store: every event matching the filter, whole
/// or only its id and time (what negentropy compares).
#[derive(Debug)]
pub(super) enum Query {
    /// The events themselves.
    Events(Filter, Reply<Vec<Event>>),
    /// Each event's id and `created_at`, read without building the event.
    Items(Filter, Reply<Vec<(EventId, Timestamp)>>),
}

/// The query connection's task: one listing at a time.
pub(super) async fn serve(relay: RelayUrl, timeout: Duration, mut queries: mpsc::Receiver<Query>) {
    let mut socket: Option<Socket> = None;
    let mut next_id = 0u64;
    while let Some(query) = queries.recv().await {
        if socket.is_none() {
            socket = connect(&relay, timeout, LISTING_READ_BUFFER).await;
        }
        next_id += 1;
        let id = SubscriptionId::new(format!("store-{next_id}"));
        let failed = match query {
            Query::Events(filter, reply) => answer(&mut socket, id, filter, timeout, reply).await,
            Query::Items(filter, reply) => answer(&mut socket, id, filter, timeout, reply).await,
        };
        if failed {
            socket = None;
        }
    }
}

/// Lists `filter` on the connection (if there is one) into `reply`;
/// whether the listing failed (the connection is then dropped).
async fn answer<T: Listed>(
    socket: &mut Option<Socket>,
    id: SubscriptionId,
    filter: Filter,
    timeout: Duration,
    reply: Reply<Vec<T>>,
) -> bool {
    let Some(ws) = socket.as_mut() else {
        let _ = reply.send(Err(StoreError::unavailable(
            "cannot connect to the store relay",
        )));
        return false;
    };
    // The timeout bounds every page, not the whole listing.
    let result = list(ws, id, filter, timeout).await;
    let failed = result.is_err();
    let _ = reply.send(result);
    failed
}

/// What a listing keeps of each event, and how it reads a message of the
/// listing's subscription.
trait Listed: Sized {
    /// `text` read as a message for the listing `id`.
    fn read(text: &str, id: &SubscriptionId) -> Answer<Self>;
}

/// One message, as a listing reads it.
enum Answer<T> {
    /// An event of the listing: its id and time (for the paging) and what
    /// is kept of it.
    Event(EventId, Timestamp, T),
    /// The end of the page.
    End,
    /// The relay closed the listing, with its reason.
    Closed(String),
    /// Anything else (another subscription's, a notice, unreadable).
    Other,
}

impl<T> Answer<T> {
    /// What a relay message means for the listing `id`; `keep` is what is
    /// kept of one of its events.
    fn of(message: RelayMessage<'_>, id: &SubscriptionId, keep: impl FnOnce(Event) -> T) -> Self {
        match message {
            RelayMessage::Event {
                subscription_id,
                event,
            } if *subscription_id == *id => {
                let event = event.into_owned();
                Answer::Event(event.id, event.created_at, keep(event))
            }
            RelayMessage::EndOfStoredEvents(sub) if *sub == *id => Answer::End,
            RelayMessage::Closed {
                subscription_id,
                message,
            } if *subscription_id == *id => Answer::Closed(message.into_owned()),
            _ => Answer::Other,
        }
    }
}

impl Listed for Event {
    fn read(text: &str, id: &SubscriptionId) -> Answer<Self> {
        match RelayMessage::from_json(text) {
            Ok(message) => Answer::of(message, id, |event| event),
            Err(_) => Answer::Other,
        }
    }
}

/// An `EVENT` message read for the event's id and time only: the other
/// fields are skipped, nothing is allocated.
#[derive(serde::Deserialize)]
struct Stamped<'a>(&'a str, &'a str, Stamp<'a>);

/// The two fields of an event a listing of items needs.
#[derive(serde::Deserialize)]
struct Stamp<'a> {
    id: &'a str,
    created_at: u64,
}

impl Listed for (EventId, Timestamp) {
    fn read(text: &str, id: &SubscriptionId) -> Answer<Self> {
        if let Ok(Stamped(kind, sub, stamp)) = serde_json::from_str::<Stamped<'_>>(text) {
            if kind == "EVENT" && sub == id.as_str() {
                if let Ok(event_id) = EventId::from_hex(stamp.id) {
                    let created_at = Timestamp::from_secs(stamp.created_at);
                    return Answer::Event(event_id, created_at, (event_id, created_at));
                }
            }
        }
        // Not an event of ours in the short form (an EOSE, a CLOSED, escapes
        // in a string): read it whole.
        match RelayMessage::from_json(text) {
            Ok(message) => Answer::of(message, id, |event| (event.id, event.created_at)),
            Err(_) => Answer::Other,
        }
    }
}

/// The read buffer of the listing connection: pages of whole events, read
/// in large pieces (tungstenite's default).
const LISTING_READ_BUFFER: usize = 128 * 1024;

/// A connection to the store relay (Nagle off), or `None` within `timeout`.
/// `read_buffer` is how much one read of the socket may take: tungstenite
/// zeroes that much of its buffer before every read, so a connection that
/// only reads short answers wants it small.
pub(super) async fn connect(
    relay: &RelayUrl,
    timeout: Duration,
    read_buffer: usize,
) -> Option<Socket> {
    let config = WebSocketConfig::default().read_buffer_size(read_buffer);
    let connecting =
        tokio_tungstenite::connect_async_with_config(relay.as_str(), Some(config), true);
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

/// The next message of the listing `id`, read as `T` keeps it.
async fn next_answer<T: Listed>(
    ws: &mut Socket,
    id: &SubscriptionId,
) -> Result<Answer<T>, StoreError> {
    loop {
        match ws.next().await {
            Some(Ok(Message::Text(text))) => match T::read(text.as_str(), id) {
                Answer::Other => {}
                answer => return Ok(answer),
            },
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
async fn list<T: Listed>(
    ws: &mut Socket,
    id: SubscriptionId,
    mut filter: Filter,
    timeout: Duration,
) -> Result<Vec<T>, StoreError> {
    if filter.limit.is_none() {
        filter.limit = Some(LIST_PAGE);
    }
    let mut paging = PaginationState::new(filter.clone());
    let mut items = Vec::new();
    let mut page = filter;
    loop {
        send(ws, ClientMessage::req(id.clone(), vec![page])).await?;
        loop {
            let answer = tokio::time::timeout(timeout, next_answer::<T>(ws, &id))
                .await
                .map_err(|_| StoreError::TimedOut(timeout))??;
            match answer {
                Answer::Event(event_id, created_at, item) => {
                    // Events at the boundary second come again on the next
                    // page: keep each once.
                    if paging.on_event(event_id, created_at) {
                        items.push(item);
                    }
                }
                Answer::End => break,
                Answer::Closed(message) => {
                    return Err(StoreError::unavailable(format!(
                        "store relay closed the query: {message}"
                    )));
                }
                Answer::Other => {}
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

#[cfg(test)]
mod tests {
    use super::*;
    use grasp_sync_test_support::nip34::sign;
    use nostr::prelude::Keys;

    fn item(text: &str, id: &SubscriptionId) -> Option<(EventId, Timestamp)> {
        match <(EventId, Timestamp)>::read(text, id) {
            Answer::Event(event_id, created_at, kept) => {
                assert_eq!(kept, (event_id, created_at));
                Some(kept)
            }
            _ => None,
        }
    }

    #[test]
    fn an_item_is_read_from_an_event_of_the_listing_without_the_rest() {
        let event = sign(
            &Keys::generate(),
            1617,
            "a \"patch\"\n",
            vec![],
            1_700_000_000,
        );
        let id = SubscriptionId::new("store-1");
        let text = RelayMessage::event(id.clone(), event.clone()).as_json();
        assert_eq!(item(&text, &id), Some((event.id, event.created_at)));
        // Another subscription's event is not the listing's.
        assert_eq!(item(&text, &SubscriptionId::new("store-2")), None);
        // A subscription id with an escape is read the long way, the same.
        let escaped = SubscriptionId::new("st\"ore");
        let text = RelayMessage::event(escaped.clone(), event.clone()).as_json();
        assert_eq!(item(&text, &escaped), Some((event.id, event.created_at)));
        // As does the whole event.
        match Event::read(&text, &escaped) {
            Answer::Event(event_id, _, whole) => {
                assert_eq!(event_id, event.id);
                assert_eq!(whole, event);
            }
            _ => panic!("the event is the listing's"),
        }
    }

    #[test]
    fn the_end_a_refusal_and_junk_are_told_apart() {
        let id = SubscriptionId::new("store-1");
        let eose = RelayMessage::eose(id.clone()).as_json();
        assert!(matches!(
            <(EventId, Timestamp)>::read(&eose, &id),
            Answer::End
        ));
        let closed = RelayMessage::closed(id.clone(), "error: too slow").as_json();
        match <(EventId, Timestamp)>::read(&closed, &id) {
            Answer::Closed(reason) => assert_eq!(reason, "error: too slow"),
            _ => panic!("a CLOSED ends the listing"),
        }
        for junk in [
            "",
            "[]",
            "[\"EVENT\",\"store-1\",{\"id\":\"zz\",\"created_at\":1}]",
            "[\"EVENT\",\"store-1\",{\"id\":7}]",
            "{\"EVENT\":1}",
            "[\"NOTICE\",\"hello\"]",
        ] {
            assert!(
                matches!(<(EventId, Timestamp)>::read(junk, &id), Answer::Other),
                "{junk}"
            );
        }
    }
}
