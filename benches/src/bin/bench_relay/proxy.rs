//! A WebSocket proxy in front of a `LocalRelay` that refuses NIP-77: every
//! `NEG-OPEN` is answered `["NEG-ERR", <id>, "blocked: negentropy disabled"]`,
//! everything else is forwarded both ways. The relay gets its end of an
//! in-memory pipe through `LocalRelay::take_connection` (no second socket).

use std::net::SocketAddr;

use futures_util::{FutureExt as _, SinkExt as _, StreamExt as _};
use nostr_relay_builder::LocalRelay;
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

/// The pipe between the proxy and the relay session.
const PIPE_CAPACITY: usize = 1 << 20;
/// Relay messages forwarded before one flush towards the client.
const BATCH: usize = 256;

fn ws_config() -> WebSocketConfig {
    WebSocketConfig::default()
        .max_message_size(Some(64 << 20))
        .max_frame_size(Some(64 << 20))
}

/// Accepts connections until the process ends.
pub(crate) async fn serve(listener: TcpListener, relay: LocalRelay) {
    loop {
        match listener.accept().await {
            Ok((stream, addr)) => {
                let _ = stream.set_nodelay(true);
                tokio::spawn(connection(stream, addr, relay.clone()));
            }
            Err(error) => eprintln!("bench_relay: accept failed: {error}"),
        }
    }
}

/// The subscription id of a `NEG-OPEN` frame, if `text` is one.
fn neg_open_id(text: &str) -> Option<String> {
    let rest = text.trim_start().strip_prefix('[')?.trim_start();
    let rest = rest.strip_prefix("\"NEG-OPEN\"")?.trim_start();
    let rest = rest.strip_prefix(',')?.trim_start();
    let rest = rest.strip_prefix('"')?;
    let end = rest.find('"')?;
    Some(rest[..end].to_owned())
}

async fn connection(stream: TcpStream, addr: SocketAddr, relay: LocalRelay) {
    let Ok(mut client) =
        tokio_tungstenite::accept_async_with_config(stream, Some(ws_config())).await
    else {
        return;
    };
    let (relay_io, proxy_io) = tokio::io::duplex(PIPE_CAPACITY);
    let mut upstream =
        WebSocketStream::from_raw_socket(proxy_io, Role::Client, Some(ws_config())).await;
    let session = async move {
        let _ = relay.take_connection(relay_io, addr).await;
    };
    let pump = async move {
        loop {
            tokio::select! {
                msg = client.next() => {
                    let Some(Ok(msg)) = msg else { break };
                    let refused = match &msg {
                        Message::Text(text) => neg_open_id(text.as_str()),
                        _ => None,
                    };
                    let sent = match refused {
                        Some(id) => {
                            let reply = format!(
                                "[\"NEG-ERR\",\"{id}\",\"blocked: negentropy disabled\"]"
                            );
                            client.send(Message::text(reply)).await
                        }
                        None if matches!(msg, Message::Close(_)) => {
                            let _ = upstream.send(msg).await;
                            break;
                        }
                        None => upstream.send(msg).await,
                    };
                    if sent.is_err() {
                        break;
                    }
                }
                msg = upstream.next() => {
                    let Some(Ok(first)) = msg else { break };
                    // Forward what is ready in one flush.
                    let mut next = Some(first);
                    let mut forwarded = 0;
                    let mut failed = false;
                    while let Some(msg) = next.take() {
                        if client.feed(msg).await.is_err() {
                            failed = true;
                            break;
                        }
                        forwarded += 1;
                        if forwarded < BATCH {
                            if let Some(Some(Ok(msg))) = upstream.next().now_or_never() {
                                next = Some(msg);
                            }
                        }
                    }
                    if failed || client.flush().await.is_err() {
                        break;
                    }
                }
            }
        }
        // Dropping `upstream` ends the relay session (EOF on the pipe).
    };
    tokio::join!(session, pump);
}

#[cfg(test)]
mod tests {
    use super::neg_open_id;

    #[test]
    fn finds_the_id_of_a_neg_open_only() {
        assert_eq!(
            neg_open_id(r#"["NEG-OPEN","neg-1",{"kinds":[1]},"61"]"#).as_deref(),
            Some("neg-1")
        );
        assert_eq!(neg_open_id(r#"[ "NEG-OPEN" , "x" ]"#).as_deref(), Some("x"));
        assert_eq!(neg_open_id(r#"["REQ","neg-1",{}]"#), None);
        assert_eq!(neg_open_id(r#"["NEG-MSG","a","00"]"#), None);
    }
}
