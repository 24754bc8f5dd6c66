//! What the serving tests share: the in-memory "relay" released events reach (read back
//! as the store, as the sidecar's own relay is), states to publish, and the refs a
//! local repository serves.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use grasp_purgatory::{
    GitFetcher, GitFetcherConfig, HeldEvent, MemoryAnnouncements, Purgatory, PurgatoryBuilder,
    ReleaseError, ReleaseSink,
};
use grasp_sync_core::url_policy::CloneUrlPolicy;
use grasp_sync_test_support::nip34::{sign, tag};
use grasp_sync_tokio::TokioClock;
use nostr::prelude::{Event, Keys, Tag};

use super::cli::git;

/// The created_at of the first test event.
pub const T0: u64 = 1_700_000_000;

/// The clone-URL policy of tests whose git servers are on loopback over plain HTTP.
pub fn loopback_policy() -> CloneUrlPolicy {
    CloneUrlPolicy::new()
        .allow_http(true)
        .allow_local_addresses(true)
}

/// The relay the released events reach, read back as the store.
pub struct RelaySink(pub Arc<MemoryAnnouncements>);

#[async_trait]
impl ReleaseSink for RelaySink {
    async fn release(&self, held: &HeldEvent) -> Result<(), ReleaseError> {
        self.0.add_event(held.event.clone());
        Ok(())
    }
}

/// A state of `identifier` by `keys` at `T0 + at`: `refs` (name, commit), `HEAD` at
/// `refs/heads/main`.
pub fn state(keys: &Keys, identifier: &str, refs: &[(&str, &str)], at: u64) -> Event {
    let mut tags = vec![
        Tag::identifier(identifier),
        tag(&["HEAD", "ref: refs/heads/main"]),
    ];
    tags.extend(refs.iter().map(|(name, oid)| tag(&[name, oid])));
    sign(keys, 30618, "", tags, T0 + at)
}

/// Every branch and tag (and `refs/nostr/*`) the repository serves, as `ls-remote`
/// lists them, and `HEAD`'s target.
pub fn served(repo: &Path) -> (Vec<(String, String)>, String) {
    let listing = git(repo, &["for-each-ref", "--format=%(refname) %(objectname)"]);
    let refs = listing
        .lines()
        .filter(|line| !line.starts_with("refs/purgatory/"))
        .filter_map(|line| line.split_once(' '))
        .map(|(name, oid)| (name.to_owned(), oid.to_owned()))
        .collect();
    (refs, git(repo, &["symbolic-ref", "HEAD"]))
}

/// A purgatory over `relay` (its announcements, and where released events go), with its
/// git root `root`, reconciling every `interval` seconds, running `git_program`.
pub fn serving_builder_with_git(
    relay: &Arc<MemoryAnnouncements>,
    root: &Path,
    interval: u64,
    git_program: PathBuf,
) -> PurgatoryBuilder {
    Purgatory::builder()
        .clock(Arc::new(TokioClock::new()))
        .announcements(Arc::clone(relay) as _)
        .repos_root(root)
        .git_program(git_program.clone())
        .git_backend(Arc::new(GitFetcher::new(GitFetcherConfig {
            fetch_timeout: Duration::from_secs(20),
            policy: loopback_policy(),
            git_program,
            ..GitFetcherConfig::default()
        })))
        .clone_policy(loopback_policy())
        .immediate_delay(Duration::from_millis(10))
        .reconcile_interval(Duration::from_secs(interval))
        .sink(Arc::new(RelaySink(Arc::clone(relay))))
}

/// [`serving_builder_with_git`] running the `git` on `PATH`.
pub fn serving_builder(
    relay: &Arc<MemoryAnnouncements>,
    root: &Path,
    interval: u64,
) -> PurgatoryBuilder {
    serving_builder_with_git(relay, root, interval, PathBuf::from("git"))
}
