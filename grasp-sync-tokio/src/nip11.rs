//! NIP-11: the relay information document's `limitation`, fetched once per
//! connect with a short timeout ([`fetch_limits`]), and the own relay's
//! limits on the events it takes, fetched by the store that publishes to it
//! ([`fetch_store_limits`]). A relay without one still works.

use std::sync::Arc;
use std::time::Duration;

use grasp_sync_core::engine::RelayLimits;
use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use nostr::prelude::RelayUrl;
use nostr::types::url::Url;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::resolve::AddressCheck;

/// Largest document accepted.
const MAX_DOCUMENT: usize = 256 * 1024;

/// Why the document could not be had.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Nip11Error {
    /// The request could not be built or sent.
    #[error("request failed: {0}")]
    Request(String),
    /// No answer within the timeout.
    #[error("timed out")]
    Timeout,
    /// The relay answered with an error status.
    #[error("status {0}")]
    Status(u16),
    /// The body is not a relay information document.
    #[error("not a relay information document: {0}")]
    Document(String),
}

/// Fetches the relay's limits (`Accept: application/nostr+json`) over a
/// connection to one of the relay's checked addresses
/// ([`AddressCheck::connect`]): the host is not resolved again.
pub(crate) async fn fetch_limits(
    relay: &RelayUrl,
    address: &AddressCheck,
    tls: Arc<rustls::ClientConfig>,
    timeout: Duration,
) -> Result<RelayLimits, Nip11Error> {
    tokio::time::timeout(timeout, fetch_document(relay, address, tls, timeout))
        .await
        .map_err(|_| Nip11Error::Timeout)?
        .and_then(|text| limits_of(&text))
}

/// What a store relay (the own relay, [`RelayStore`](crate::RelayStore))
/// says in its NIP-11 `limitation` about the events it takes: an event
/// over one of these is refused before it is sent. strfry drops the
/// connection without a word on a frame over its `max_message_length`, and
/// every event in flight on it would fail and be sent again, for ever.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct StoreLimits {
    /// `max_message_length`: the longest WebSocket message (an `EVENT`
    /// frame) the relay takes, in bytes.
    pub(crate) max_message_length: Option<usize>,
    /// `max_event_tags`: the most tags an event may have.
    pub(crate) max_event_tags: Option<usize>,
    /// `max_content_length`: the most characters an event's content may
    /// have.
    pub(crate) max_content_length: Option<usize>,
}

/// Fetches a store relay's limits ([`StoreLimits`]) within `timeout`. The
/// store relay is the operator's own: its host is resolved by the system
/// and not checked against the relay policy (like every configured relay,
/// [`Identity::is_configured_relay`](grasp_sync_core::engine::Identity::is_configured_relay)).
pub(crate) async fn fetch_store_limits(
    relay: &RelayUrl,
    timeout: Duration,
) -> Result<StoreLimits, Nip11Error> {
    let fetch = async {
        let url: &Url = relay.into();
        let host = url
            .host_str()
            .ok_or_else(|| Nip11Error::Request("no host".into()))?;
        let port = url
            .port_or_known_default()
            .ok_or_else(|| Nip11Error::Request("no port".into()))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let stream = TcpStream::connect((host, port))
            .await
            .map_err(|error| Nip11Error::Request(error.to_string()))?;
        // Nagle off, as on every connection of ours.
        stream
            .set_nodelay(true)
            .map_err(|error| Nip11Error::Request(error.to_string()))?;
        let tls =
            crate::tls::tls_config().map_err(|error| Nip11Error::Request(error.to_string()))?;
        fetch_document_over(relay, stream, tls).await
    };
    tokio::time::timeout(timeout, fetch)
        .await
        .map_err(|_| Nip11Error::Timeout)?
        .and_then(|text| store_limits_of(&text))
}

/// The information document's text, over a connection to one of the
/// relay's checked addresses.
async fn fetch_document(
    relay: &RelayUrl,
    address: &AddressCheck,
    tls: Arc<rustls::ClientConfig>,
    timeout: Duration,
) -> Result<String, Nip11Error> {
    let stream = address
        .connect(relay, timeout)
        .await
        .map_err(|error| Nip11Error::Request(error.to_string()))?;
    fetch_document_over(relay, stream, tls).await
}

/// The information document's text, asked over `stream` (a TCP connection
/// to the relay's host).
async fn fetch_document_over(
    relay: &RelayUrl,
    stream: TcpStream,
    tls: Arc<rustls::ClientConfig>,
) -> Result<String, Nip11Error> {
    let request_error = |error: &dyn std::fmt::Display| Nip11Error::Request(error.to_string());
    let url: &Url = relay.into();
    let host = url.host_str().ok_or_else(|| request_error(&"no host"))?;
    let path = match url.query() {
        Some(query) => format!("{}?{query}", url.path()),
        None => url.path().to_owned(),
    };
    let authority = match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_owned(),
    };
    let request = hyper::Request::get(path)
        .header(hyper::header::HOST, authority)
        .header(hyper::header::ACCEPT, "application/nostr+json")
        .body(Empty::<Bytes>::new())
        .map_err(|error| request_error(&error))?;
    let response = if url.scheme() == "wss" {
        let name = ServerName::try_from(host.trim_start_matches('[').trim_end_matches(']'))
            .map_err(|error| request_error(&error))?
            .to_owned();
        let tls_stream = TlsConnector::from(tls)
            .connect(name, stream)
            .await
            .map_err(|error| request_error(&error))?;
        send(tls_stream, request).await?
    } else {
        send(stream, request).await?
    };
    if !response.status().is_success() {
        return Err(Nip11Error::Status(response.status().as_u16()));
    }
    let body = Limited::new(response.into_body(), MAX_DOCUMENT)
        .collect()
        .await
        .map_err(|error| Nip11Error::Request(error.to_string()))?
        .to_bytes();
    String::from_utf8(body.to_vec()).map_err(|error| Nip11Error::Document(error.to_string()))
}

/// One HTTP/1.1 request over `io`.
async fn send<T>(
    io: T,
    request: hyper::Request<Empty<Bytes>>,
) -> Result<hyper::Response<hyper::body::Incoming>, Nip11Error>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|error| Nip11Error::Request(error.to_string()))?;
    // The connection task ends with the response body (or the timeout that
    // drops this future and the sender with it).
    tokio::spawn(async move {
        let _ = connection.await;
    });
    sender
        .send_request(request)
        .await
        .map_err(|error| Nip11Error::Request(error.to_string()))
}

/// The part of a relay information document the engine uses, read from the
/// raw JSON: a document some other field of which a strict parser refuses
/// (strfry may send an empty `pubkey`) still gives its limits, and
/// `max_filters`, which nostr's document type lacks, is read too.
pub(crate) fn limits_of(text: &str) -> Result<RelayLimits, Nip11Error> {
    let Some(limitation) = limitation_of(text)? else {
        return Ok(RelayLimits::default());
    };
    let positive = |name: &str| positive(&limitation, name);
    Ok(RelayLimits {
        max_subscriptions: positive("max_subscriptions"),
        max_limit: positive("max_limit"),
        default_limit: positive("default_limit"),
        max_filters: positive("max_filters"),
        max_message_length: positive("max_message_length"),
    })
}

/// A store relay's [`StoreLimits`], read from the raw JSON like
/// [`limits_of`].
pub(crate) fn store_limits_of(text: &str) -> Result<StoreLimits, Nip11Error> {
    let Some(limitation) = limitation_of(text)? else {
        return Ok(StoreLimits::default());
    };
    let positive = |name: &str| positive(&limitation, name);
    Ok(StoreLimits {
        max_message_length: positive("max_message_length"),
        max_event_tags: positive("max_event_tags"),
        max_content_length: positive("max_content_length"),
    })
}

/// The document's `limitation` object (`None` when it has none), or why
/// the text is no relay information document.
fn limitation_of(text: &str) -> Result<Option<serde_json::Value>, Nip11Error> {
    let document: serde_json::Value =
        serde_json::from_str(text).map_err(|error| Nip11Error::Document(error.to_string()))?;
    let serde_json::Value::Object(mut document) = document else {
        return Err(Nip11Error::Document("not a JSON object".into()));
    };
    Ok(document.remove("limitation"))
}

/// The limitation's field `name` if it is a positive whole number:
/// anything else is no limit.
fn positive(limitation: &serde_json::Value, name: &str) -> Option<usize> {
    limitation
        .get(name)
        .and_then(serde_json::Value::as_u64)
        .and_then(|value| usize::try_from(value).ok())
        .filter(|value| *value > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_come_from_the_limitation_and_ignore_nonsense() {
        let limits = limits_of(
            r#"{"name":"x","limitation":{"max_subscriptions":32,"max_limit":500,"default_limit":-1,"max_filters":"many"}}"#,
        )
        .unwrap();
        assert_eq!(limits.max_subscriptions, Some(32));
        assert_eq!(limits.max_limit, Some(500));
        assert_eq!(limits.default_limit, None);
        assert_eq!(limits.max_filters, None);
        assert_eq!(
            limits_of(r#"{"name":"x"}"#).unwrap(),
            RelayLimits::default()
        );
        assert!(limits_of("[1,2]").is_err());
        assert!(limits_of("not json").is_err());
    }

    #[test]
    fn strfry_documents_give_their_limits_even_with_an_empty_pubkey() {
        let strfry = r#"{"name":"strfry","pubkey":"","contact":"","limitation":{"max_message_length":131072,"max_filters":200,"max_subscriptions":200,"max_limit":500}}"#;
        let limits = limits_of(strfry).unwrap();
        assert_eq!(limits.max_message_length, Some(131_072));
        assert_eq!(limits.max_filters, Some(200));
        assert_eq!(limits.max_subscriptions, Some(200));
        assert_eq!(limits.max_limit, Some(500));
    }

    #[test]
    fn a_store_relay_s_limits_are_its_message_length_tags_and_content() {
        let strfry = r#"{"name":"strfry default","limitation":{"max_limit":500,"max_message_length":131072,"max_subscriptions":200}}"#;
        assert_eq!(
            store_limits_of(strfry).unwrap(),
            StoreLimits {
                max_message_length: Some(131_072),
                ..StoreLimits::default()
            }
        );
        let all = r#"{"limitation":{"max_message_length":65536,"max_event_tags":100,"max_content_length":8196}}"#;
        assert_eq!(
            store_limits_of(all).unwrap(),
            StoreLimits {
                max_message_length: Some(65_536),
                max_event_tags: Some(100),
                max_content_length: Some(8_196),
            }
        );
        let nonsense = r#"{"limitation":{"max_message_length":0,"max_event_tags":-1,"max_content_length":"big"}}"#;
        assert_eq!(store_limits_of(nonsense).unwrap(), StoreLimits::default());
        assert_eq!(
            store_limits_of(r#"{"name":"nostr-rs-relay"}"#).unwrap(),
            StoreLimits::default()
        );
        assert!(store_limits_of("[]").is_err());
    }
}
