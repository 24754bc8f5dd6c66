//! Fetch starvation by address block (issue 45, item 6): 100 attacker repositories (4
//! keys × 25 identifiers), each listing 32 clone URLs on 32 addresses of one /24, every
//! one a server that accepts TCP and never answers. Keyed per address, those were 32
//! throttles × 5 fetches in flight: more than the 16 fetch processes purgatory runs at
//! once, so an honest repository's fetch waited behind hanging ones for a whole fetch
//! timeout. Keyed per /24 (per /48 for IPv6, tested in the core's `throttle_key`), they
//! are one throttle of 5, and the honest repository on another block is fetched at once.
//!
//! The same with host names: 32 names of 32 registrable domains (`git.evil<n>.test`),
//! each resolving to one of those addresses. Keyed by name they were 32 throttles; a
//! name is now throttled by the address block it resolves to as well.
//!
//! Real git over http against real sockets on 127.0.0.2–127.0.0.33 (Linux routes all of
//! 127.0.0.0/8 to the loopback interface); the honest server listens on 127.0.1.1. Names
//! resolve through the test's resolver (`.test` never resolves through DNS).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod events;
use grasp_sync_test_harness::git as support;

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use grasp_purgatory::{
    ChannelSink, MemoryAnnouncements, Origin, Purgatory, PurgatoryOutput, StaticResolver,
};
use grasp_sync_core::url_policy::CloneUrlPolicy;
use grasp_sync_test_support::nip34::{pull_request, Announcement};
use nostr::prelude::*;
use prometheus::Registry;
use support::{counter, GitHttpServer, HangingServer, SourceRepo, TempDir};

/// Attacker keys, each announcing [`IDENTIFIERS_PER_KEY`] repositories.
const ATTACKER_KEYS: usize = 4;
const IDENTIFIERS_PER_KEY: usize = 25;
const ATTACKER_REPOSITORIES: usize = ATTACKER_KEYS * IDENTIFIERS_PER_KEY;
/// Clone URLs per attacker repository, each on an address of its own in 127.0.0.0/24.
const URLS_PER_REPOSITORY: u8 = 32;
/// How long one git command may run: far longer than the honest fetch may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(120);
/// The honest repository's event is released within this (the hanging fetches hold
/// their slots four times as long).
const HONEST_WITHIN: Duration = Duration::from_secs(30);
/// The honest server's address: another /24 than the attackers'.
const HONEST_ADDRESS: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 1, 1));

/// How the attacker's clone URLs name the hanging servers.
#[derive(Clone, Copy, Debug)]
enum Naming {
    /// `http://127.0.0.<n>:<port>/…`.
    Addresses,
    /// `http://git.evil<n>.test:<port>/…`, each name resolving to `127.0.0.<n>`.
    Names,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundred_repositories_of_hanging_urls_in_one_slash_24_leave_room_for_an_honest_fetch() {
    honest_fetch_beside_hanging_ones(Naming::Addresses).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hanging_names_of_32_domains_in_one_slash_24_leave_room_for_an_honest_fetch() {
    honest_fetch_beside_hanging_ones(Naming::Names).await;
}

/// The exploit of the module doc with the attacker's URLs named by `naming`; panics
/// unless the honest event is released within [`HONEST_WITHIN`] and the hanging
/// servers saw at most one throttle's worth (5) of connections.
async fn honest_fetch_beside_hanging_ones(naming: Naming) {
    let dir = TempDir::new("purgatory-fetch-fairness");
    let mut hanging = Vec::new();
    let mut resolver = StaticResolver::new().with("honest.test", [HONEST_ADDRESS]);
    for last in 0..URLS_PER_REPOSITORY {
        let address = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2 + last));
        resolver = resolver.with(&format!("git.evil{last}.test"), [address]);
        hanging.push(HangingServer::start_on(address).await);
    }
    let url_of = |n: usize, server: &HangingServer, path: &str| match naming {
        Naming::Addresses => server.http_url(path),
        Naming::Names => format!("http://git.evil{n}.test:{}/{path}", server.addr().port()),
    };
    let accepted =
        |hanging: &[HangingServer]| hanging.iter().map(HangingServer::accepted).sum::<usize>();
    let source = SourceRepo::create(dir.join("served/honest.git"));
    let tip = source.commit("honest work");
    let honest_server = GitHttpServer::start(dir.join("served"), HONEST_ADDRESS).await;

    let policy = CloneUrlPolicy::new()
        .allow_http(true)
        .allow_local_addresses(true);
    let announcements = Arc::new(MemoryAnnouncements::new());
    let attackers: Vec<Keys> = (0..ATTACKER_KEYS).map(|_| Keys::generate()).collect();
    let mut attacker_repositories = Vec::new();
    for attacker in &attackers {
        for n in 0..IDENTIFIERS_PER_KEY {
            let identifier = format!("r{n}");
            let urls: Vec<String> = hanging
                .iter()
                .enumerate()
                .map(|(n, server)| url_of(n, server, &format!("{identifier}.git")))
                .collect();
            announcements
                .add(
                    Announcement::new(&identifier)
                        .clone_urls(&urls)
                        .sign(attacker),
                )
                .unwrap();
            attacker_repositories.push((attacker.public_key(), identifier));
        }
    }
    let owner = Keys::generate();
    let honest_url = match naming {
        Naming::Addresses => honest_server.url("honest.git"),
        Naming::Names => format!(
            "http://honest.test:{}/honest.git",
            honest_server.addr().port()
        ),
    };
    announcements
        .add(
            Announcement::new("honest")
                .clone_urls(&[honest_url.as_str()])
                .sign(&owner),
        )
        .unwrap();
    let registry = Registry::new();
    let (sink, mut output) = ChannelSink::new();
    let purgatory = Purgatory::builder()
        .announcements(announcements)
        .repos_root(dir.join("repos"))
        .resolver(Arc::new(resolver))
        .clone_policy(policy)
        .fetch_timeout(FETCH_TIMEOUT)
        .registry(registry.clone())
        .sink(Arc::new(sink))
        .build()
        .unwrap();
    let run = events::spawn_run(&purgatory);

    // Every attacker repository waits for an object no server will send.
    for (n, (attacker, identifier)) in attacker_repositories.iter().enumerate() {
        let missing = format!("{n:040x}");
        let pr = pull_request(&Keys::generate(), attacker, identifier, &missing);
        purgatory.add_pr(pr, Origin::Synced).unwrap();
    }
    let started = Instant::now();
    while accepted(&hanging) < 5 && started.elapsed() < Duration::from_secs(60) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        accepted(&hanging) >= 5,
        "the attackers' fetches reached the hanging servers"
    );
    events::eventually(
        "every attacker repository had its first attempt or a fetch",
        Duration::from_secs(60),
        || {
            let attempts = counter(
                &registry,
                "purgatory_sync_attempts_total",
                "result",
                "retry",
            );
            // Those that got no slot end their first attempt waiting in a queue.
            attempts + 5.0 >= ATTACKER_REPOSITORIES as f64 || accepted(&hanging) >= 16
        },
    )
    .await;

    // Now the honest repository: its fetch must not wait for the hanging ones.
    let started = Instant::now();
    let pr = pull_request(&Keys::generate(), &owner.public_key(), "honest", &tip);
    purgatory.add_pr(pr.clone(), Origin::Synced).unwrap();
    let released = tokio::time::timeout(HONEST_WITHIN, async {
        loop {
            match output.recv().await {
                Some(PurgatoryOutput::Released(held)) if held.event.id == pr.id => return,
                Some(_) => {}
                None => panic!("the purgatory stopped"),
            }
        }
    })
    .await;
    let took = started.elapsed();
    assert!(
        released.is_ok(),
        "the honest event was not released within {HONEST_WITHIN:?} (hanging connections: {})",
        accepted(&hanging)
    );
    eprintln!("the honest event was released {took:?} after it arrived");
    assert!(
        accepted(&hanging) <= 5,
        "the 32 addresses of one /24 share one throttle of 5: {} connections",
        accepted(&hanging)
    );
    purgatory.shutdown();
    run.await.unwrap().unwrap();
}
