//! Builders shared by the purgatory tests.
//!
//! The only place the tests build [`RepoAnnouncement`]s, so the only place
//! that depends on how a [`RepoRef`] is made.

use nostr::key::PublicKey;

use super::RepositoryData;
use crate::nip34::{GitOid, RepoAnnouncement, RepoRef};

/// The x coordinate of the secp256k1 generator: a valid public key.
const MAINTAINER: &str = "79be667ef9dcbbac55a06295ce870b07029bfcdb2dce28d959f2815b16f81798";

/// The repository `30617:<MAINTAINER>:<identifier>`.
pub(crate) fn repo_named(identifier: &str) -> RepoRef {
    let pubkey = PublicKey::from_hex(MAINTAINER).expect("constant key is valid");
    RepoRef::new(pubkey, identifier).expect("valid identifier")
}

/// The repository the tests' announcements announce: `30617:<MAINTAINER>:repo`.
pub(crate) fn repo() -> RepoRef {
    repo_named("repo")
}

/// An announcement of [`repo`] listing `clone_urls`.
pub(crate) fn announcement(clone_urls: &[&str]) -> RepoAnnouncement {
    let pubkey = PublicKey::from_hex(MAINTAINER).expect("constant key is valid");
    RepoAnnouncement {
        repo: repo(),
        relays: Vec::new(),
        clone_urls: clone_urls.iter().map(|url| (*url).to_owned()).collect(),
        maintainers: vec![pubkey],
        skipped: Vec::new(),
    }
}

/// Repository data with one announcement per entry of `announcements`.
pub(crate) fn repository(announcements: &[&[&str]]) -> RepositoryData {
    RepositoryData {
        announcements: announcements
            .iter()
            .map(|urls| announcement(urls))
            .collect(),
        event_sources: Vec::new(),
    }
}

/// The object id made of 20 repetitions of the byte `n` in hex.
pub(crate) fn oid(n: u8) -> GitOid {
    GitOid::parse(&grasp_sync_test_support::ids::oid(n)).expect("40 hex digits")
}
