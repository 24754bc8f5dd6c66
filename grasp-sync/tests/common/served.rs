//! What a repository under the sidecar's git root serves, read the way a git client reads
//! it (`git ls-remote --symref`), and what a repository state (30618) says it must serve.
//! The test file including this names the purgatory's git support `git_support`.
#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use nostr::prelude::Event;

use crate::git_support::tokio_git_command;

/// What a repository serves to git clients: where `HEAD` points and the refs under
/// `refs/heads/`, `refs/tags/` and `refs/nostr/`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Served {
    /// The ref `HEAD` names (`refs/heads/main`), if it is a symref to a served ref.
    pub head: Option<String>,
    /// Ref name → object id.
    pub refs: BTreeMap<String, String>,
}

impl Served {
    /// What a repository whose newest authorized state is `state` serves, before PRs:
    /// its `refs/heads/*` and `refs/tags/*` tags and its `HEAD` (`ref: <name>`).
    pub fn of_state(state: &Event) -> Served {
        let mut served = Served::default();
        for tag in state.tags.iter() {
            let (name, Some(value)) = (tag.kind(), tag.content()) else {
                continue;
            };
            if name == "HEAD" {
                served.head = value.strip_prefix("ref: ").map(str::to_owned);
            } else if name.starts_with("refs/heads/") || name.starts_with("refs/tags/") {
                served.refs.insert(name.to_owned(), value.to_owned());
            }
        }
        served
    }

    /// Whether any served ref points at `oid`.
    pub fn names_commit(&self, oid: &str) -> bool {
        self.refs.values().any(|value| value == oid)
    }
}

/// What `git ls-remote --symref <url>` shows (run in `cwd`), `None` when git cannot list
/// the repository (not served, or missing) within 30 s.
pub async fn served_at(url: &str, cwd: &Path) -> Option<Served> {
    let listing = tokio_git_command(cwd)
        .args(["ls-remote", "--symref", url])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .output();
    let output = tokio::time::timeout(Duration::from_secs(30), listing)
        .await
        .ok()?
        .ok()?;
    if !output.status.success() {
        return None;
    }
    let mut served = Served::default();
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let Some((value, name)) = line.split_once('\t') else {
            continue;
        };
        if name == "HEAD" {
            if let Some(target) = value.strip_prefix("ref: ") {
                served.head = Some(target.to_owned());
            }
            continue;
        }
        let listed = ["refs/heads/", "refs/tags/", "refs/nostr/"]
            .iter()
            .any(|prefix| name.starts_with(prefix));
        if listed && !name.ends_with("^{}") {
            served.refs.insert(name.to_owned(), value.to_owned());
        }
    }
    Some(served)
}
