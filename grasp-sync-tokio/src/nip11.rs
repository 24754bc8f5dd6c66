//! NIP-11: the relay information document's `limitation`, fetched once per
//! connect with a short timeout. A relay without one still works.

use std::sync::Arc;
use std::time::Duration;

use grasp_sync_core::engine::RelayLimits;
use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use nostr::prelude::RelayUrl;
use nostr::types::url::Url;
use rustls::pki_types::ServerName;
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

/// The information document's text.
async fn fetch_document(
    relay: &RelayUrl,
    address: &AddressCheck,
    tls: Arc<rustls::ClientConfig>,
    timeout: Duration,
) -> Result<String, Nip11Error> {
    let request_error = |error: &dyn std::fmt::Display| Nip11Error::Request(error.to_string());
    let url: &Url = relay.into();
    let host = url.host_str().ok_or_else(|| request_error(&"no host"))?;
    let stream = address
        .connect(relay, timeout)
        .await
        .map_err(|error| request_error(&error))?;
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
    let document: serde_json::Value =
        serde_json::from_str(text).map_err(|error| Nip11Error::Document(error.to_string()))?;
    if !document.is_object() {
        return Err(Nip11Error::Document("not a JSON object".into()));
    }
    let Some(limitation) = document.get("limitation") else {
        return Ok(RelayLimits::default());
    };
    // Only positive whole numbers count; anything else is no limit.
    let positive = |name: &str| {
        limitation
            .get(name)
            .and_then(serde_json::Value::as_u64)
            .and_then(|value| usize::try_from(value).ok())
            .filter(|value| *value > 0)
    };
    Ok(RelayLimits {
        max_subscriptions: positive("max_subscriptions"),
        max_limit: positive("max_limit"),
        default_limit: positive("default_limit"),
        max_filters: positive("max_filters"),
        max_message_length: positive("max_message_length"),
    })
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
}
