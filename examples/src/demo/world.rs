//! Everything the demo runs on loopback: the own relay (nostr-relay-builder
//! over LMDB on disk, with the bridge), two remote relays (one serving
//! NIP-77, one refusing it and clamping every REQ to 50 events), and a
//! smart-HTTP git server hosting the repositories.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use grasp_sync_relay_builder::{r44, Bridge};
use nostr::prelude::{Event, EventId, RelayUrl};
use nostr_lmdb::NostrLMDB;

use crate::git_support::{GitHttpServer, TempDir};
use crate::relay_support::{try_connect_client, Nip77Refusal, TestRelay, TestRelayConfig};

/// Loopback only.
const LOCALHOST: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
/// The per-REQ limit of the remote relay without NIP-77.
pub(crate) const CLAMPED_LIMIT: usize = 50;
/// LMDB's map size: plenty for the demo, far below the 32 GiB default.
const LMDB_MAP_SIZE: usize = 1 << 30;
/// How long the own relay may take to listen.
const LISTEN_WAIT: Duration = Duration::from_secs(10);

/// The own relay: a relay-builder relay over an on-disk database, with the
/// bridge to the sync.
pub(crate) struct OwnRelay {
    /// The relay (clones share it).
    pub(crate) relay: r44::LocalRelay,
    /// Its database (LMDB).
    pub(crate) database: Arc<dyn r44::NostrDatabase>,
    /// The bridge between it and the sync.
    pub(crate) bridge: Bridge,
    /// `ws://127.0.0.1:<port>`.
    pub(crate) url: RelayUrl,
}

impl OwnRelay {
    /// Opens LMDB in `dir` and starts the relay on a free port.
    async fn start(dir: &Path) -> Result<OwnRelay, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        let lmdb = NostrLMDB::builder(dir)
            .map_size(LMDB_MAP_SIZE)
            .build()
            .map_err(|e| format!("opening LMDB in {}: {e}", dir.display()))?;
        let database: Arc<dyn r44::NostrDatabase> = Arc::new(lmdb);
        let bridge = Bridge::new(database.clone());
        let relay = r44::LocalRelay::new(
            r44::RelayBuilder::default()
                .addr(LOCALHOST)
                .database(bridge.database()),
        );
        relay
            .run()
            .await
            .map_err(|e| format!("starting the own relay: {e}"))?;
        let url = RelayUrl::parse(relay.url().await.as_str())
            .map_err(|e| format!("the own relay's URL: {e}"))?;
        // `run` binds in its task: wait until the relay answers.
        let deadline = tokio::time::Instant::now() + LISTEN_WAIT;
        loop {
            match try_connect_client(&url).await {
                Ok(client) => {
                    client.close().await;
                    break;
                }
                Err(error) if tokio::time::Instant::now() >= deadline => {
                    return Err(format!("the own relay {url} never listened: {error}"));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
        Ok(OwnRelay {
            relay,
            database,
            bridge,
            url,
        })
    }

    /// Ids of every event in the own relay's database.
    pub(crate) async fn event_ids(&self) -> Result<BTreeSet<EventId>, String> {
        let events = self
            .database
            .query(r44::Filter::new())
            .await
            .map_err(|e| format!("reading the own relay's database: {e}"))?;
        events
            .into_iter()
            .map(|event| {
                EventId::from_hex(&event.id.to_hex())
                    .map_err(|e| format!("an event id of the own relay: {e}"))
            })
            .collect()
    }
}

/// One remote relay and its description.
pub(crate) struct Remote {
    /// The relay.
    pub(crate) relay: TestRelay,
    /// A short name for the progress lines and the table.
    pub(crate) name: &'static str,
    /// What it does.
    pub(crate) description: String,
}

/// The demo's servers and directories; dropping it stops everything and
/// removes the directory.
pub(crate) struct World {
    /// The own relay.
    pub(crate) own: OwnRelay,
    /// The remote relays: NIP-77, then REQ only.
    pub(crate) remotes: [Remote; 2],
    /// The git server.
    pub(crate) git: GitHttpServer,
    /// Where the served source repositories are.
    pub(crate) served: PathBuf,
    /// Purgatory's git root.
    pub(crate) git_root: PathBuf,
    /// The directory of it all (removed on drop, so it goes last).
    pub(crate) dir: TempDir,
}

impl World {
    /// Starts every server.
    pub(crate) async fn start() -> Result<World, String> {
        let dir = TempDir::new("grasp-sync-demo");
        let served = dir.join("served");
        let git_root = dir.join("git-root");
        for path in [&served, &git_root] {
            std::fs::create_dir_all(path)
                .map_err(|e| format!("creating {}: {e}", path.display()))?;
        }
        let own = OwnRelay::start(&dir.join("own-relay-lmdb")).await?;
        let nip77 = TestRelay::start(TestRelayConfig::default()).await;
        let clamped = TestRelay::start(TestRelayConfig {
            nip77: Nip77Refusal::Notice,
            default_filter_limit: Some(CLAMPED_LIMIT),
            max_filter_limit: Some(CLAMPED_LIMIT),
            ..TestRelayConfig::default()
        })
        .await;
        let git = GitHttpServer::start(&served, LOCALHOST).await;
        Ok(World {
            own,
            remotes: [
                Remote {
                    relay: nip77,
                    name: "remote-a",
                    description: "serves NIP-77".to_owned(),
                },
                Remote {
                    relay: clamped,
                    name: "remote-b",
                    description: format!("refuses NIP-77, {CLAMPED_LIMIT} events per REQ"),
                },
            ],
            git,
            served,
            git_root,
            dir,
        })
    }

    /// Stores `events` on remote `index` (directly in its database).
    pub(crate) async fn fill_remote(&self, index: usize, events: &[Event]) {
        self.remotes[index].relay.add_events(events).await;
    }

    /// The remote relays' URLs.
    pub(crate) fn remote_urls(&self) -> [RelayUrl; 2] {
        [self.remotes[0].relay.url(), self.remotes[1].relay.url()]
    }

    /// A short name for `url`.
    pub(crate) fn name_of(&self, url: &RelayUrl) -> String {
        self.remotes
            .iter()
            .find(|remote| &remote.relay.url() == url)
            .map(|remote| remote.name.to_owned())
            .unwrap_or_else(|| url.to_string())
    }

    /// Stops the own relay.
    pub(crate) fn shutdown(&self) {
        self.own.relay.shutdown();
    }

    /// The demo's directory.
    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }
}
