//! Signed NIP-34 events and an in-memory git backend for the integration tests.
#![allow(dead_code, unreachable_pub, missing_docs, clippy::unwrap_used)]

pub mod memory_git;

use nostr::prelude::*;

/// Runs `purgatory`'s main loop on a task until its shutdown.
pub fn spawn_run(
    purgatory: &grasp_purgatory::Purgatory,
) -> tokio::task::JoinHandle<std::io::Result<()>> {
    let purgatory = purgatory.clone();
    tokio::spawn(async move { purgatory.run().await })
}

/// Polls `check` every 20 ms until it holds; panics naming `what` after `within`.
pub async fn eventually(what: &str, within: std::time::Duration, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + within;
    while !check() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {within:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Signs an event of `kind` with these tags.
pub fn sign(keys: &Keys, kind: u16, tags: Vec<Vec<String>>, at: u64) -> Event {
    let tags: Vec<Tag> = tags.into_iter().map(|t| Tag::parse(t).unwrap()).collect();
    EventBuilder::new(Kind::from(kind), "")
        .tags(tags)
        .custom_created_at(Timestamp::from_secs(at))
        .finalize(keys)
        .unwrap()
}

fn tag(values: &[&str]) -> Vec<String> {
    values.iter().map(|v| (*v).to_owned()).collect()
}

/// A 40-hex object id made of one repeated byte.
pub fn hex(n: u8) -> String {
    format!("{n:02x}").repeat(20)
}

/// An announcement of `identifier` listing these clone URLs.
pub fn announcement(keys: &Keys, identifier: &str, clone_urls: &[&str]) -> Event {
    let mut clone = vec!["clone".to_owned()];
    clone.extend(clone_urls.iter().map(|u| (*u).to_owned()));
    sign(
        keys,
        30617,
        vec![
            tag(&["d", identifier]),
            clone,
            tag(&["relays", "wss://relay.example.com"]),
        ],
        1_700_000_000,
    )
}

/// A state of `identifier` whose refs `refs/heads/b<i>` point at `oids`.
pub fn state(keys: &Keys, identifier: &str, oids: &[&str], at: u64) -> Event {
    let mut tags = vec![tag(&["d", identifier])];
    for (index, oid) in oids.iter().enumerate() {
        tags.push(tag(&[&format!("refs/heads/b{index}"), oid]));
    }
    sign(keys, 30618, tags, at)
}

/// A pull request of `owner`'s `identifier` proposing `tip`.
pub fn pull_request(keys: &Keys, owner: &PublicKey, identifier: &str, tip: &str) -> Event {
    let a = format!("30617:{}:{identifier}", owner.to_hex());
    sign(
        keys,
        1618,
        vec![tag(&["a", &a]), tag(&["c", tip])],
        1_700_000_000,
    )
}

/// A pull request update of `owner`'s `identifier` moving the PR to `tip`.
pub fn pull_request_update(keys: &Keys, owner: &PublicKey, identifier: &str, tip: &str) -> Event {
    let a = format!("30617:{}:{identifier}", owner.to_hex());
    sign(
        keys,
        1619,
        vec![tag(&["a", &a]), tag(&["c", tip])],
        1_700_000_001,
    )
}
