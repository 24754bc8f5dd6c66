//! The refs purgatory writes: temporary `refs/purgatory/<oid>` that keep fetched objects
//! from `git gc` until their events are released (or expire, or are replaced: purgatory
//! then deletes the refs no held event needs), and `refs/nostr/<event id>` for pull
//! request tips; and the served refs: every ref read at once ([`LocalRefs`]) and a
//! ref plan applied in one transaction.

use std::collections::BTreeMap;
use std::path::Path;

use grasp_sync_core::nip34::GitOid;
use grasp_sync_core::purgatory::RefChange;

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

/// The refs of a local repository: every ref with the object it points at, and the
/// ref `HEAD` points at (`None` when `HEAD` is detached or points nowhere valid).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LocalRefs {
    /// Every ref, by full name.
    pub refs: BTreeMap<String, GitOid>,
    /// `HEAD`'s target.
    pub head: Option<String>,
}

/// Reads every ref (`git for-each-ref`) and `HEAD`'s target (its file, else `git
/// symbolic-ref`) of the repository at `repo`. Lines git would never print (a name with a space, an object id
/// that is not hex) are skipped.
pub(super) async fn local_refs(runner: &GitRunner, repo: &Path) -> Result<LocalRefs, GitError> {
    let mut command = runner.command(repo);
    command.args(["for-each-ref", "--format=%(objectname) %(refname)"]);
    let output = runner.run(command, "for-each-ref", None).await?;
    let refs = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| {
            let (oid, name) = line.split_once(' ')?;
            Some((name.to_owned(), GitOid::parse(oid).ok()?))
        })
        .collect();
    let head = match head_in_file(repo) {
        Some(head) => head,
        None => head_by_git(runner, repo).await?,
    };
    Ok(LocalRefs { refs, head })
}

/// `HEAD`'s target as the bare repository `repo`'s `HEAD` file states it, without a
/// process: `Some(Some(ref))` for `ref: refs/…`, `Some(None)` when it is detached (an
/// object id); `None` when the file does not say (missing, unreadable, or the
/// placeholder a reftable repository keeps there): ask git.
fn head_in_file(repo: &Path) -> Option<Option<String>> {
    let text = std::fs::read_to_string(repo.join("HEAD")).ok()?;
    head_of_file_text(&text)
}

/// What a `HEAD` file's text says (see [`head_in_file`]).
fn head_of_file_text(text: &str) -> Option<Option<String>> {
    let text = text.trim_end_matches(['\n', '\r']);
    if let Some(target) = text.strip_prefix("ref: ") {
        let plain = target.starts_with("refs/")
            && target != REFTABLE_HEAD_PLACEHOLDER
            && !target.contains(char::is_whitespace);
        return plain.then(|| Some(target.to_owned()));
    }
    GitOid::parse(text).ok().map(|_| None)
}

/// What a repository with the reftable ref backend keeps in its `HEAD` file (the real
/// `HEAD` is in the reftable).
const REFTABLE_HEAD_PLACEHOLDER: &str = "refs/heads/.invalid";

/// `HEAD`'s target by `git symbolic-ref` (`None` when it is detached).
async fn head_by_git(runner: &GitRunner, repo: &Path) -> Result<Option<String>, GitError> {
    let mut command = runner.command(repo);
    command.args(["symbolic-ref", "-q", "HEAD"]);
    match runner.run(command, "symbolic-ref", None).await {
        Ok(output) => Ok(
            Some(String::from_utf8_lossy(&output.stdout).trim().to_owned())
                .filter(|head| head.starts_with("refs/")),
        ),
        // Exit 1: HEAD is detached.
        Err(GitError::Failed { .. }) => Ok(None),
        Err(error) => Err(error),
    }
}

/// Applies `changes` in one `git update-ref --stdin` transaction, each with its old
/// value (`create` when there was none), so that nothing is applied when any ref moved
/// meanwhile (a concurrent push is never overwritten silently); then points `HEAD` at
/// `head` when given.
pub(super) async fn apply_ref_changes(
    runner: &GitRunner,
    repo: &Path,
    changes: &[RefChange],
    head: Option<&str>,
) -> Result<(), GitError> {
    if !changes.is_empty() {
        let input: String = changes.iter().map(transaction_line).collect();
        let mut command = runner.command(repo);
        command.args(["update-ref", "--stdin"]);
        runner.run(command, "update-ref", Some(input)).await?;
    }
    if let Some(head) = head {
        let mut command = runner.command(repo);
        command.args(["symbolic-ref", "HEAD", head]);
        runner.run(command, "symbolic-ref", None).await?;
    }
    Ok(())
}

/// One line of an `update-ref --stdin` transaction, checking the old value.
fn transaction_line(change: &RefChange) -> String {
    let name = &change.name;
    match (&change.old, &change.new) {
        (None, Some(new)) => format!("create {name} {new}\n"),
        (Some(old), Some(new)) => format!("update {name} {new} {old}\n"),
        (Some(old), None) => format!("delete {name} {old}\n"),
        (None, None) => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_file_says_its_target_or_that_it_is_detached_or_nothing() {
        assert_eq!(
            head_of_file_text("ref: refs/heads/main\n"),
            Some(Some("refs/heads/main".to_owned()))
        );
        let detached = format!("{}\n", "a".repeat(40));
        assert_eq!(head_of_file_text(&detached), Some(None));
        // Git is asked: the reftable placeholder, anything odd.
        for text in [
            "ref: refs/heads/.invalid\n",
            "ref: HEAD\n",
            "ref: refs/heads/a b\n",
            "",
            "garbage",
            "ref: ",
        ] {
            assert_eq!(head_of_file_text(text), None, "{text:?}");
        }
    }
}
