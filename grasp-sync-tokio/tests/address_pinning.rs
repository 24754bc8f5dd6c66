//! Relay connects resolve the host once through the caller's resolver and
//! connect only to an address the relay policy allows: a public-looking
//! name that resolves to 127.0.0.1 is never connected (nor its NIP-11
//! fetched) unless local addresses are allowed. The twin with local
//! addresses allowed connects through the same name and syncs, so the
//! refusal is the policy's, not a broken resolver.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use grasp_sync_test_harness::relays as support;

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use grasp_sync_core::url_policy::RelayUrlPolicy;
use grasp_sync_test_support::ids::coordinate;
use grasp_sync_test_support::nip34::root;
use grasp_sync_tokio::{RelayStore, StaticResolver, SyncManager};
use nostr::prelude::*;
use support::{announcement, loopback_engine_config, TestRelay, TestRelayConfig};

const WAIT: Duration = Duration::from_secs(60);
const NAME: &str = "relay.example.com";

struct Setup {
    own: TestRelay,
    remote: TestRelay,
    issue: Event,
    named: RelayUrl,
}

async fn setup() -> Setup {
    let own = TestRelay::start(TestRelayConfig::default()).await;
    let remote = TestRelay::start(TestRelayConfig::default()).await;
    let port = remote
        .url()
        .as_str()
        .rsplit(':')
        .next()
        .unwrap()
        .trim_end_matches('/')
        .to_owned();
    let named = RelayUrl::parse(&format!("ws://{NAME}:{port}")).unwrap();
    let maintainer = Keys::generate();
    let base = Timestamp::now().as_secs() - 1_000;
    let alpha = announcement(&maintainer, "alpha", &[&own.url(), &named], base);
    let repo = coordinate(&maintainer.public_key(), "alpha");
    let issue = root(&maintainer, 1621, &repo, "issue", base + 1);
    own.add_event(&alpha).await;
    remote.add_events(&[alpha, issue.clone()]).await;
    Setup {
        own,
        remote,
        issue,
        named,
    }
}

fn manager(setup: &Setup, allow_local: bool) -> SyncManager {
    let mut config = loopback_engine_config();
    // The own relay is the operator's (trusted, never checked); the policy
    // is what applies to relays from announcements.
    config.identity.relay_policy = RelayUrlPolicy::new().allow_local_addresses(allow_local);
    SyncManager::builder()
        .own_relay(setup.own.url())
        .engine_config(config)
        .resolver(StaticResolver::new().with(NAME, [IpAddr::from([127, 0, 0, 1])]))
        .store(Arc::new(RelayStore::new(
            setup.own.url(),
            Duration::from_secs(10),
        )))
        .build()
        .unwrap()
}

fn refused(registry: &prometheus::Registry) -> u64 {
    support::counter_value(registry, "grasp_sync_refused_total", "resolved_address") as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_resolving_to_loopback_is_never_connected_nor_asked_for_nip11() {
    let setup = setup().await;
    let manager = manager(&setup, false);
    let registry = manager.registry().clone();
    let mut status = manager.status();
    let shutdown = manager.shutdown_handle();
    let run = tokio::spawn(manager.run());
    // The state to wait on: the relay counts as unreachable after its
    // refused connects (the engine's `unreachable_after`), and refusals
    // are counted.
    let named = setup.named.clone();
    tokio::time::timeout(WAIT, async {
        status
            .wait_for(|status| {
                status
                    .relays
                    .iter()
                    .any(|relay| relay.report.relay == named && relay.report.unreachable)
            })
            .await
            .map(|_| ())
    })
    .await
    .expect("the refused relay is reported unreachable")
    .expect("manager running");
    let refusals = refused(&registry);
    shutdown.shutdown();
    tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .unwrap()
        .unwrap();

    assert!(refusals >= 1, "refusals are counted");
    assert_eq!(setup.remote.connections_seen(), 0, "never connected");
    assert_eq!(
        setup.remote.nip11_requests_seen(),
        0,
        "NIP-11 never fetched"
    );
    assert!(!setup.own.event_ids().await.contains(&setup.issue.id));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_local_addresses_allowed_the_same_name_connects_through_the_resolver() {
    let setup = setup().await;
    let manager = manager(&setup, true);
    let registry = manager.registry().clone();
    let mut status = manager.status();
    let shutdown = manager.shutdown_handle();
    let run = tokio::spawn(manager.run());
    tokio::time::timeout(WAIT, async {
        status
            .wait_for(|status| status.historic_sync_complete && status.relays_connected >= 1)
            .await
            .map(|_| ())
    })
    .await
    .expect("historic sync completes")
    .expect("manager running");
    shutdown.shutdown();
    tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .unwrap()
        .unwrap();

    assert!(setup.own.event_ids().await.contains(&setup.issue.id));
    assert!(setup.remote.connections_seen() >= 1);
    assert_eq!(refused(&registry), 0);
}
