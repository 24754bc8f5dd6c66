//! Plain HTTP on 127.0.0.1 for the sidecar tests: a free port for `--metrics-addr`,
//! and a bounded `GET` of `/status` or `/metrics`.
#![allow(dead_code, unreachable_pub)]

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A port of 127.0.0.1 nobody listens on (the test support's).
pub use grasp_sync_test_support::net::free_port;

/// `GET path` on 127.0.0.1:`port` (at most 5 s): the body of a `200` answer, or `None`
/// if nothing is served there (yet).
pub async fn get(port: u16, path: &str) -> Option<String> {
    get_with_head(port, path).await.map(|(_, body)| body)
}

/// [`get`], with the response head (status line and headers) too.
pub async fn get_with_head(port: u16, path: &str) -> Option<(String, String)> {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut response = String::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_string(&mut response))
        .await
        .ok()?
        .ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200")
        .then(|| (head.to_owned(), body.to_owned()))
}
