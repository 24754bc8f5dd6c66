//! The TLS configuration every `wss://` connection of ours uses (relay
//! connections, NIP-11 documents, the store's connections to the own relay).

use std::sync::Arc;

/// The TLS configuration for `wss://`: rustls with ring and the webpki roots
/// (tokio-tungstenite enables no crypto provider by itself).
pub(crate) fn tls_config() -> Result<Arc<rustls::ClientConfig>, rustls::Error> {
    let roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}
