//! [`NostrRsRelay`]: the real nostr-rs-relay 0.8.12 as a process on 127.0.0.1.
//!
//! It is the widely deployed REQ-only relay whose behaviour our tests name: no NIP-77
//! (`NEG-OPEN` → `NOTICE "could not parse command"`), no EOSE for a `limit: 0` REQ, 32
//! subscriptions per connection, a query aborted without EOSE when the client reads too
//! slowly for 2 s (`../shared/ECOSYSTEM.md`). `$NOSTR_RS_RELAY` names it; without that
//! variable the first test that needs it runs `.ci/install-nostr-rs-relay`, which builds it
//! once into a cache outside the checkout (needing only cargo) and prints its path, so
//! the README's test command does its own set-up. A binary that cannot be had fails the
//! test: a test that names nostr-rs-relay's behaviour never passes without it.
//!
//! The relay runs with its defaults except the listening address, the database directory
//! and the `reject_future_seconds` of its sample configuration. Test data is loaded over
//! WebSocket ([`Client::publish_all`](super::Client::publish_all)): its bulk loader leaves
//! the tag index empty.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use grasp_sync_test_support::ids::unique;
use nostr::prelude::RelayUrl;
use tokio::process::{Child, Command};

use super::client::try_connect_client;

/// The version the tests were written against.
pub const NOSTR_RS_RELAY_VERSION: &str = "0.8.12";

/// How long a started relay may take to accept its first WebSocket connection.
const STARTUP: Duration = Duration::from_secs(30);

/// A running nostr-rs-relay process; killed on drop, its directory removed.
#[derive(Debug)]
pub struct NostrRsRelay {
    child: Child,
    url: RelayUrl,
    port: u16,
    dir: PathBuf,
}

/// The nostr-rs-relay binary: `$NOSTR_RS_RELAY`, else the one
/// `.ci/install-nostr-rs-relay` installs (built on first use, cached; one process
/// installs while the others wait on its lock). Panics with the script's output when
/// it cannot be had.
pub fn nostr_rs_relay_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("NOSTR_RS_RELAY") {
        return PathBuf::from(path);
    }
    static INSTALLED: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    INSTALLED.get_or_init(install).clone()
}

/// Runs the install script of the workspace (every crate including this support sits one
/// level below the workspace root) and returns the path it prints.
fn install() -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.ci/install-nostr-rs-relay");
    eprintln!(
        "nostr-rs-relay {NOSTR_RS_RELAY_VERSION}: installing or reusing the cached build \
         ({}; the first build takes minutes)",
        script.display()
    );
    let output = std::process::Command::new("bash")
        .arg(&script)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|error| panic!("running {}: {error}", script.display()));
    let printed = String::from_utf8_lossy(&output.stdout);
    let path = PathBuf::from(printed.lines().last().unwrap_or_default().trim());
    assert!(
        output.status.success() && path.is_file(),
        "{} failed ({}): {printed}",
        script.display(),
        output.status
    );
    path
}

impl NostrRsRelay {
    /// Starts a relay with an empty database on a free port of 127.0.0.1 and waits
    /// (bounded) until it accepts a WebSocket connection.
    pub async fn start() -> NostrRsRelay {
        NostrRsRelay::start_with_config("").await
    }

    /// [`NostrRsRelay::start`] with `extra` appended to its configuration: TOML sections
    /// other than `[info]`, `[database]`, `[network]` and `[options]`, e.g.
    /// `"[limits]\nmax_event_bytes = 65536\n"` (an event over it is answered
    /// `NOTICE "event exceeded max size"`, no `OK`).
    pub async fn start_with_config(extra: &str) -> NostrRsRelay {
        let binary = nostr_rs_relay_binary();
        let dir = std::env::temp_dir().join(format!(
            "nostr-rs-relay-{}-{}",
            std::process::id(),
            unique()
        ));
        std::fs::create_dir_all(&dir).expect("relay directory");
        let port = grasp_sync_test_support::net::free_port();
        let config = dir.join("config.toml");
        let toml = format!("{}\n{extra}", config_toml(port, &dir));
        std::fs::write(&config, toml).expect("relay config");
        let log = std::fs::File::create(dir.join("relay.log")).expect("relay log");
        let child = Command::new(&binary)
            .arg("--config")
            .arg(&config)
            .arg("--db")
            .arg(&dir)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", binary.display()));
        let url = RelayUrl::parse(&format!("ws://127.0.0.1:{port}")).expect("relay url");
        let mut relay = NostrRsRelay {
            child,
            url,
            port,
            dir,
        };
        relay.wait_until_ready().await;
        relay
    }

    /// `ws://127.0.0.1:<port>`.
    pub fn url(&self) -> RelayUrl {
        self.url.clone()
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// What the relay logged so far (its stderr), for failure messages.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("relay.log")).unwrap_or_default()
    }

    async fn wait_until_ready(&mut self) {
        let deadline = tokio::time::Instant::now() + STARTUP;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("nostr-rs-relay exited at start ({status}): {}", self.log());
            }
            if let Ok(client) = try_connect_client(&self.url).await {
                client.close().await;
                return;
            }
            if tokio::time::Instant::now() >= deadline {
                panic!(
                    "nostr-rs-relay did not accept a connection within {STARTUP:?}: {}",
                    self.log()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for NostrRsRelay {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The relay's configuration: its defaults, on 127.0.0.1:`port`, data in `dir`.
fn config_toml(port: u16, dir: &Path) -> String {
    format!(
        "[info]\nrelay_url = \"ws://127.0.0.1:{port}/\"\nname = \"grasp-sync test relay\"\n\n\
         [database]\ndata_directory = \"{}\"\n\n\
         [network]\naddress = \"127.0.0.1\"\nport = {port}\n\n\
         [options]\nreject_future_seconds = 1800\n",
        dir.display()
    )
}
