//! Plain NIP-01 over WebSocket, outside the timed spans: counting what a
//! relay holds (`COUNT`), and the bytes of a REQ re-download.

use std::time::Duration;

use futures_util::{SinkExt as _, StreamExt as _};
use tokio_tungstenite::tungstenite::Message;

/// How long one of these requests may take.
const WAIT: Duration = Duration::from_secs(120);

/// A filter of the data set's kinds, as JSON (with `limit` if given).
pub(crate) fn kinds_filter(limit: Option<usize>) -> serde_json::Value {
    let mut filter = serde_json::json!({ "kinds": super::dataset::KINDS });
    if let Some(limit) = limit {
        filter["limit"] = limit.into();
    }
    filter
}

/// Sends `request` to `url` and reads frames until `done` says so; returns
/// the bytes of the request and of every text frame received.
async fn exchange(
    url: &str,
    request: serde_json::Value,
    mut done: impl FnMut(&serde_json::Value) -> bool,
) -> (u64, u64) {
    let (mut socket, _) = tokio_tungstenite::connect_async(url)
        .await
        .unwrap_or_else(|e| panic!("connecting to {url}: {e}"));
    let text = request.to_string();
    let sent = text.len() as u64;
    socket
        .send(Message::text(text))
        .await
        .unwrap_or_else(|e| panic!("sending to {url}: {e}"));
    let mut received = 0u64;
    let read = async {
        while let Some(message) = socket.next().await {
            let message = message.unwrap_or_else(|e| panic!("reading from {url}: {e}"));
            if let Message::Text(text) = message {
                received += text.len() as u64;
                let value: serde_json::Value =
                    serde_json::from_str(text.as_str()).expect("a JSON relay message");
                if done(&value) {
                    return;
                }
            }
        }
        panic!("{url} closed the connection");
    };
    tokio::time::timeout(WAIT, read)
        .await
        .unwrap_or_else(|_| panic!("{url} did not answer in {WAIT:?}"));
    let _ = socket.close(None).await;
    (sent, received)
}

/// Events `url` holds (NIP-45 `COUNT` with an empty filter).
pub(crate) async fn count(url: &str) -> u64 {
    let mut count = None;
    exchange(
        url,
        serde_json::json!(["COUNT", "count", {}]),
        |value| match value[0].as_str() {
            Some("COUNT") => {
                count = value[2]["count"].as_u64();
                true
            }
            Some("CLOSED" | "NOTICE") => panic!("COUNT refused: {value}"),
            _ => false,
        },
    )
    .await;
    count.unwrap_or_else(|| panic!("{url} sent no count"))
}

/// One REQ for every event of the data set's kinds (limit above N), read to
/// EOSE: (events, bytes sent, bytes received), bytes as WebSocket text
/// payload, as the sync counts them.
pub(crate) async fn req_download(url: &str, n: usize) -> (u64, u64, u64) {
    let mut events = 0u64;
    let request = serde_json::json!(["REQ", "all", kinds_filter(Some(n + 1_000))]);
    let (sent, received) = exchange(url, request, |value| match value[0].as_str() {
        Some("EVENT") => {
            events += 1;
            false
        }
        Some("EOSE") => true,
        Some("CLOSED" | "NOTICE") => panic!("REQ refused: {value}"),
        _ => false,
    })
    .await;
    (events, sent, received)
}
