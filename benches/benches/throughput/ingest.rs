//! The own relay's ingest ceiling: pre-signed events, serialized before the
//! clock starts, published over several WebSocket connections with many
//! `EVENT`s in flight on each, every `OK` counted (issue "As fast as the own
//! relay can take events", item 1). Also the nostr-rs-relay process, the
//! second own relay the throughput benchmark measures against.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{SinkExt as _, StreamExt as _};
use nostr::prelude::Event;
use tokio::sync::Semaphore;
use tokio_tungstenite::tungstenite::Message;

/// How long a relay may leave the oldest `EVENT` of a connection unanswered.
const ANSWER_WAIT: Duration = Duration::from_secs(60);
/// How long a relay process may take to accept its first connection.
const LISTEN_WAIT: Duration = Duration::from_secs(60);

/// The `EVENT` frames of `events`, serialized once, before any clock runs.
pub(crate) fn event_frames(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .map(|event| format!("[\"EVENT\",{}]", event.as_json()))
        .collect()
}

/// What one blast measured.
#[derive(Clone, Debug, Default)]
pub(crate) struct Blast {
    /// Seconds from the first `EVENT` sent until the last `OK` came.
    pub(crate) secs: f64,
    /// `OK true` answers (stored).
    pub(crate) stored: u64,
    /// `duplicate:` answers.
    pub(crate) duplicates: u64,
    /// `rate-limited:` answers (the event was not stored).
    pub(crate) rate_limited: u64,
    /// Other refusals, with the first reason seen.
    pub(crate) refused: u64,
    /// The first refusal's text.
    pub(crate) first_refusal: Option<String>,
}

impl Blast {
    fn add(&mut self, other: &Blast) {
        self.stored += other.stored;
        self.duplicates += other.duplicates;
        self.rate_limited += other.rate_limited;
        self.refused += other.refused;
        if self.first_refusal.is_none() {
            self.first_refusal.clone_from(&other.first_refusal);
        }
    }

    /// Every answer counted.
    pub(crate) fn answered(&self) -> u64 {
        self.stored + self.duplicates + self.rate_limited + self.refused
    }
}

/// Waits until `url` accepts a WebSocket connection (the relay process
/// has just been started); panics after [`LISTEN_WAIT`].
pub(crate) async fn wait_listening(url: &str) {
    let deadline = Instant::now() + LISTEN_WAIT;
    loop {
        match tokio_tungstenite::connect_async(url).await {
            Ok((mut socket, _)) => {
                let _ = socket.close(None).await;
                return;
            }
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            Err(e) => panic!("{url} is not listening after {LISTEN_WAIT:?}: {e}"),
        }
    }
}

/// Publishes `frames` to `url` over `connections` connections (frame `i` on
/// connection `i % connections`, split before the clock starts), each with up to `in_flight` `EVENT`s
/// waiting for their `OK`, until every frame is answered. The connections
/// are open before the clock starts. Panics if the relay closes a
/// connection or leaves an answer out for [`ANSWER_WAIT`].
pub(crate) async fn blast(
    url: &str,
    frames: &[String],
    connections: usize,
    in_flight: usize,
) -> Blast {
    let connections = connections.max(1);
    let mut lanes: Vec<Vec<String>> = vec![Vec::new(); connections];
    for (i, frame) in frames.iter().enumerate() {
        lanes[i % connections].push(frame.clone());
    }
    let mut sockets = Vec::with_capacity(connections);
    for _ in 0..connections {
        let (socket, _) = tokio_tungstenite::connect_async(url)
            .await
            .unwrap_or_else(|e| panic!("connecting to {url}: {e}"));
        sockets.push(socket);
    }
    let started = Instant::now();
    let tasks: Vec<_> = sockets
        .into_iter()
        .zip(lanes)
        .map(|(socket, lane)| {
            let url = url.to_owned();
            tokio::spawn(async move { publish_lane(&url, socket, lane, in_flight).await })
        })
        .collect();
    let mut total = Blast::default();
    for task in tasks {
        total.add(&task.await.expect("a publishing connection"));
    }
    total.secs = started.elapsed().as_secs_f64();
    total
}

/// One connection of [`blast`]: sends its frames with up to `in_flight`
/// unanswered, and counts the answers.
async fn publish_lane<S>(
    url: &str,
    socket: tokio_tungstenite::WebSocketStream<S>,
    frames: Vec<String>,
    in_flight: usize,
) -> Blast
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let want = frames.len();
    let (mut sink, mut stream) = socket.split();
    let permits = Arc::new(Semaphore::new(in_flight.max(1)));
    let sender = {
        let permits = permits.clone();
        let url = url.to_owned();
        tokio::spawn(async move {
            for frame in frames {
                let permit = match permits.try_acquire() {
                    Ok(permit) => permit,
                    Err(_) => {
                        // Nothing more may go out: push what is buffered.
                        sink.flush()
                            .await
                            .unwrap_or_else(|e| panic!("sending to {url}: {e}"));
                        permits.acquire().await.expect("the semaphore stays open")
                    }
                };
                permit.forget();
                sink.feed(Message::text(frame))
                    .await
                    .unwrap_or_else(|e| panic!("sending to {url}: {e}"));
            }
            sink.flush()
                .await
                .unwrap_or_else(|e| panic!("sending to {url}: {e}"));
            sink
        })
    };
    let mut counted = Blast::default();
    while (counted.answered() as usize) < want {
        let frame = tokio::time::timeout(ANSWER_WAIT, stream.next())
            .await
            .unwrap_or_else(|_| panic!("{url} answered nothing for {ANSWER_WAIT:?}"))
            .unwrap_or_else(|| panic!("{url} closed the connection"))
            .unwrap_or_else(|e| panic!("reading from {url}: {e}"));
        let Message::Text(text) = frame else {
            continue;
        };
        let value: serde_json::Value = serde_json::from_str(text.as_str())
            .unwrap_or_else(|e| panic!("{url} sent invalid JSON ({e}): {text}"));
        if value[0] != "OK" {
            continue;
        }
        count_answer(
            &mut counted,
            value[2] == true,
            value[3].as_str().unwrap_or(""),
        );
        permits.add_permits(1);
    }
    let mut sink = sender.await.expect("the sending half");
    let _ = sink.close().await;
    counted
}

/// Counts one `OK`: stored, duplicate, rate-limited or refused.
fn count_answer(counted: &mut Blast, accepted: bool, message: &str) {
    // strfry decorates refusals with `ERROR: `.
    let reason = message.strip_prefix("ERROR: ").unwrap_or(message);
    if reason.starts_with("duplicate:") {
        counted.duplicates += 1;
    } else if accepted {
        counted.stored += 1;
    } else if reason.starts_with("rate-limited:") {
        counted.rate_limited += 1;
    } else {
        counted.refused += 1;
        if counted.first_refusal.is_none() {
            counted.first_refusal = Some(message.to_owned());
        }
    }
}
