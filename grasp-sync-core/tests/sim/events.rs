//! Signed NIP-34 events for the simulations: the workspace's builders
//! (`grasp-sync-test-support`), and the core's [`RepoRef`] of a repository.

pub use grasp_sync_test_support::nip34::*;

use grasp_sync_core::RepoRef;
use nostr::prelude::Keys;

/// The ref of the repository `identifier` announced by `keys`.
pub fn repo_ref(keys: &Keys, identifier: &str) -> RepoRef {
    RepoRef::new(keys.public_key(), identifier).expect("valid repo ref")
}
