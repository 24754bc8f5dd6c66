//! NIP-11: the relay information document's `limitation`, fetched once per
//! connect with a short timeout. A relay without one still works.

use std::sync::Arc;
use std::time::Duration;

use grasp_sync_core::engine::RelayLimits;
use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Bytes;
use nostr::prelude::RelayUrl;

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

/// The HTTP(S) URL of a relay's information document.
fn http_url(relay: &RelayUrl) -> String {
    let url = relay.as_str();
    if let Some(rest) = url.strip_prefix("wss://") {
        format!("https://{rest}")
    } else if let Some(rest) = url.strip_prefix("ws://") {
        format!("http://{rest}")
    } else {
        url.to_owned()
    }
}

/// Fetches the relay's limits (`Accept: application/nostr+json`).
pub(crate) async fn fetch_limits(
    relay: &RelayUrl,
    tls: Arc<rustls::ClientConfig>,
    timeout: Duration,
) -> Result<RelayLimits, Nip11Error> {
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config((*tls).clone())
        .https_or_http()
        .enable_http1()
        .build();
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build::<_, Empty<Bytes>>(connector);
    let request = hyper::Request::get(http_url(relay))
        .header("Accept", "application/nostr+json")
        .body(Empty::<Bytes>::new())
        .map_err(|error| Nip11Error::Request(error.to_string()))?;
    let response = tokio::time::timeout(timeout, client.request(request))
        .await
        .map_err(|_| Nip11Error::Timeout)?
        .map_err(|error| Nip11Error::Request(error.to_string()))?;
    if !response.status().is_success() {
        return Err(Nip11Error::Status(response.status().as_u16()));
    }
    let body = tokio::time::timeout(
        timeout,
        Limited::new(response.into_body(), MAX_DOCUMENT).collect(),
    )
    .await
    .map_err(|_| Nip11Error::Timeout)?
    .map_err(|error| Nip11Error::Request(error.to_string()))?
    .to_bytes();
    let text =
        std::str::from_utf8(&body).map_err(|error| Nip11Error::Document(error.to_string()))?;
    limits_of(text)
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
    fn relay_urls_map_to_http_urls() {
        let wss = RelayUrl::parse("wss://relay.example.com/path").unwrap();
        assert_eq!(http_url(&wss), "https://relay.example.com/path");
        let ws = RelayUrl::parse("ws://127.0.0.1:7777").unwrap();
        assert_eq!(http_url(&ws), "http://127.0.0.1:7777");
    }

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
