//! `/` (a status page for a person, [`crate::page`]), `/metrics` (Prometheus text)
//! and `/status` (JSON of the sync's status, with purgatory's under `purgatory`) over
//! HTTP/1.1.

use std::convert::Infallible;
use std::net::SocketAddr;

use grasp_purgatory::PurgatoryStatus;
use grasp_sync_tokio::SyncStatus;
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use prometheus::{Encoder, TextEncoder};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tracing::{info, warn};

use crate::page;
use crate::status_json::{purgatory_json, status_json};

/// The statuses `/status` reports.
#[derive(Clone)]
pub struct Statuses {
    /// Proactive sync's.
    pub sync: watch::Receiver<SyncStatus>,
    /// Purgatory's, with `--git-root`.
    pub purgatory: Option<watch::Receiver<PurgatoryStatus>>,
}

impl Statuses {
    /// The `/status` document: the sync's status, purgatory's under `purgatory`.
    fn json(&self) -> serde_json::Value {
        let mut json = status_json(&self.sync.borrow());
        if let Some(purgatory) = &self.purgatory {
            json["purgatory"] = purgatory_json(&purgatory.borrow());
        }
        json
    }
}

/// Serves until `shutdown` flips; returns the bound address at once.
pub async fn serve(
    addr: SocketAddr,
    registry: prometheus::Registry,
    status: Statuses,
    mut shutdown: watch::Receiver<bool>,
) -> Result<SocketAddr, std::io::Error> {
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    info!(%bound, "serving the status page on /, /metrics and /status");
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                _ = shutdown.changed() => return,
            };
            let Ok((stream, _)) = accepted else {
                continue;
            };
            let registry = registry.clone();
            let status = status.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request| {
                    let answer = answer(&request, &registry, &status);
                    async move { Ok::<_, Infallible>(answer) }
                });
                let io = hyper_util::rt::TokioIo::new(stream);
                if let Err(error) = hyper::server::conn::http1::Builder::new()
                    .serve_connection(io, service)
                    .await
                {
                    warn!(%error, "metrics connection failed");
                }
            });
        }
    });
    Ok(bound)
}

fn answer(
    request: &Request<Incoming>,
    registry: &prometheus::Registry,
    status: &Statuses,
) -> Response<Full<Bytes>> {
    match request.uri().path() {
        "/metrics" => {
            let mut text = Vec::new();
            let encoder = TextEncoder::new();
            match encoder.encode(&registry.gather(), &mut text) {
                Ok(()) => reply(StatusCode::OK, encoder.format_type(), text),
                Err(error) => reply(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "text/plain",
                    error.to_string().into_bytes(),
                ),
            }
        }
        "/status" => {
            let body = status.json().to_string().into_bytes();
            reply(StatusCode::OK, "application/json", body)
        }
        "/" => {
            let body = page::render(&status.json()).into_bytes();
            let mut response = reply(StatusCode::OK, "text/html; charset=utf-8", body);
            let headers = response.headers_mut();
            headers.insert(
                hyper::header::CONTENT_SECURITY_POLICY,
                hyper::header::HeaderValue::from_static(page::CONTENT_SECURITY_POLICY),
            );
            headers.insert(
                hyper::header::X_CONTENT_TYPE_OPTIONS,
                hyper::header::HeaderValue::from_static("nosniff"),
            );
            headers.insert(
                hyper::header::CACHE_CONTROL,
                hyper::header::HeaderValue::from_static("no-store"),
            );
            response
        }
        _ => reply(StatusCode::NOT_FOUND, "text/plain", b"not found\n".to_vec()),
    }
}

fn reply(status: StatusCode, content_type: &str, body: Vec<u8>) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    if let Ok(value) = hyper::header::HeaderValue::from_str(content_type) {
        response
            .headers_mut()
            .insert(hyper::header::CONTENT_TYPE, value);
    }
    response
}
