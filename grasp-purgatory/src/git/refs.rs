//! The refs purgatory writes: temporary `refs/purgatory/<oid>` that keep fetched objects
//! from `git gc` until their events are released (or expire, or are replaced: purgatory
//! then deletes the refs no held event needs), and `refs/nostr/<event id>` for pull
//! request tips.

use std::path::Path;

use grasp_sync_core::nip34::GitOid;

use super::error::GitError;
use super::process::GitRunner;

/// The ref namespace fetched objects are kept under until their events are released.
pub const PURGATORY_REF_PREFIX: &str = "refs/purgatory/";

/// The ref namespace pull request tips are written under (GRASP-02).
pub const NOSTR_REF_PREFIX: &str = "refs/nostr/";

/// The refspec fetching `oid` into its purgatory ref.
pub(super) fn purgatory_refspec(oid: &GitOid) -> String {
    format!("{oid}:{PURGATORY_REF_PREFIX}{oid}")
}

/// Sets refs in the repository at `repo` (`git update-ref --stdin`): `Some(oid)` points
/// the ref at the object, `None` deletes it.
pub(super) async fn update_refs(
    runner: &GitRunner,
    repo: &Path,
    updates: &[(String, Option<GitOid>)],
) -> Result<(), GitError> {
    if updates.is_empty() {
        return Ok(());
    }
    let input: String = updates
        .iter()
        .map(|(name, oid)| match oid {
            Some(oid) => format!("update {name} {oid}\n"),
            None => format!("delete {name}\n"),
        })
        .collect();
    let mut command = runner.command(repo);
    command.args(["update-ref", "--stdin"]);
    runner
        .run(command, "update-ref", Some(input))
        .await
        .map(drop)
}

/// The names of every ref under [`PURGATORY_REF_PREFIX`] in the repository at `repo`.
pub(super) async fn purgatory_refs(
    runner: &GitRunner,
    repo: &Path,
) -> Result<Vec<String>, GitError> {
    let mut command = runner.command(repo);
    command.args(["for-each-ref", "--format=%(refname)", PURGATORY_REF_PREFIX]);
    let output = runner.run(command, "for-each-ref", None).await?;
    Ok(String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter(|name| name.starts_with(PURGATORY_REF_PREFIX))
        .map(str::to_owned)
        .collect())
}
