//! A WebSocket tap in front of a relay: forwards frames both ways and records every
//! text frame, so a test can see what a client asked for and what it was sent.
#![allow(unreachable_pub)]

use std::sync::{Arc, Mutex};

use futures_util::{SinkExt as _, StreamExt as _};
use nostr::prelude::RelayUrl;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::Message;

/// Which way a frame went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Way {
    /// From the client to the relay.
    ToRelay,
    /// From the relay to the client.
    ToClient,
}

/// The tap: `url()` is where clients connect; frames go on to the upstream relay.
pub struct Tap {
    url: RelayUrl,
    frames: Arc<Mutex<Vec<(Way, String)>>>,
    task: JoinHandle<()>,
}

impl Tap {
    /// A tap in front of `upstream`, on a free loopback port.
    pub async fn start(upstream: RelayUrl) -> Tap {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binding the tap");
        let addr = listener.local_addr().expect("the tap's address");
        let frames = Arc::new(Mutex::new(Vec::new()));
        let task = tokio::spawn({
            let frames = frames.clone();
            async move {
                while let Ok((stream, _)) = listener.accept().await {
                    tokio::spawn(pass(stream, upstream.clone(), frames.clone()));
                }
            }
        });
        Tap {
            url: RelayUrl::parse(&format!("ws://{addr}")).expect("the tap's URL"),
            frames,
            task,
        }
    }

    /// Where clients connect.
    pub fn url(&self) -> &RelayUrl {
        &self.url
    }

    /// The text frames that went `way`, in order.
    pub fn frames(&self, way: Way) -> Vec<String> {
        self.frames
            .lock()
            .expect("the tap's frames")
            .iter()
            .filter(|(w, _)| *w == way)
            .map(|(_, text)| text.clone())
            .collect()
    }

    /// The frames sent to the relay whose message type is `verb` (`REQ`, `NEG-OPEN`).
    pub fn requests(&self, verb: &str) -> Vec<String> {
        let prefix = format!("[\"{verb}\"");
        self.frames(Way::ToRelay)
            .into_iter()
            .filter(|frame| frame.starts_with(&prefix))
            .collect()
    }

    /// How many `EVENT` frames sent to the client carried the event `id` (hex).
    pub fn events_sent_with_id(&self, id: &str) -> usize {
        let needle = format!("\"id\":\"{id}\"");
        self.frames(Way::ToClient)
            .iter()
            .filter(|frame| frame.starts_with("[\"EVENT\"") && frame.contains(&needle))
            .count()
    }
}

impl Drop for Tap {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One client connection through the tap.
async fn pass(stream: TcpStream, upstream: RelayUrl, frames: Arc<Mutex<Vec<(Way, String)>>>) {
    let Ok(client) = tokio_tungstenite::accept_async(stream).await else {
        return;
    };
    let Ok((relay, _)) = tokio_tungstenite::connect_async(upstream.as_str()).await else {
        return;
    };
    let (mut to_client, mut from_client) = client.split();
    let (mut to_relay, mut from_relay) = relay.split();
    let record = |way: Way, message: &Message| {
        if let Message::Text(text) = message {
            frames
                .lock()
                .expect("the tap's frames")
                .push((way, text.to_string()));
        }
    };
    loop {
        tokio::select! {
            message = from_client.next() => {
                let Some(Ok(message)) = message else { break };
                record(Way::ToRelay, &message);
                if to_relay.send(message).await.is_err() {
                    break;
                }
            }
            message = from_relay.next() => {
                let Some(Ok(message)) = message else { break };
                record(Way::ToClient, &message);
                if to_client.send(message).await.is_err() {
                    break;
                }
            }
        }
    }
    let _ = to_client.send(Message::Close(None)).await;
}
