//! Which objects count as present in a local repository: they exist and everything
//! they reach is there too, so no event is released over broken history.

use std::collections::{BTreeSet, HashSet};
use std::path::Path;

use grasp_sync_core::nip34::GitOid;

use super::error::GitError;
use super::process::GitRunner;

/// Object ids checked for connectivity in one `rev-list`.
const CONNECTIVITY_CHUNK: usize = 100;

/// When a chunk is not connected, at most this many of its ids are checked alone.
const MAX_SINGLE_CHECKS: usize = 32;

/// Which of `oids` are present in the repository at `repo` with their whole history:
/// the object exists (`git cat-file --batch-check`) and everything it reaches is there
/// too (`git rev-list --objects`, stopping at existing refs).
///
/// An object a ref already points at is connected by that same rule (its walk stops at
/// once), so only the others are walked: a repository serving 100 000 pull request
/// tips costs one `cat-file` and one `for-each-ref` per reconciliation, not a
/// `rev-list` of all its refs per 100 tips.
pub(super) async fn existing(
    runner: &GitRunner,
    repo: &Path,
    oids: &[GitOid],
) -> Result<BTreeSet<GitOid>, GitError> {
    existing_given_refs(runner, repo, oids, None).await
}

/// [`existing`], with the objects the repository's refs point at already read
/// (`at_refs`, by a caller that listed the refs anyway: one `for-each-ref` less);
/// `None` reads them when needed.
pub(super) async fn existing_given_refs(
    runner: &GitRunner,
    repo: &Path,
    oids: &[GitOid],
    at_refs: Option<&HashSet<GitOid>>,
) -> Result<BTreeSet<GitOid>, GitError> {
    let exist = objects_exist(runner, repo, oids).await?;
    if exist.is_empty() {
        return Ok(exist);
    }
    let read;
    let at_refs = match at_refs {
        Some(at_refs) => at_refs,
        None => {
            read = ref_targets(runner, repo).await?;
            &read
        }
    };
    let (mut connected, to_walk): (BTreeSet<GitOid>, BTreeSet<GitOid>) =
        exist.into_iter().partition(|oid| at_refs.contains(oid));
    let to_walk: Vec<GitOid> = to_walk.into_iter().collect();
    for chunk in to_walk.chunks(CONNECTIVITY_CHUNK) {
        if is_connected(runner, repo, chunk).await? {
            connected.extend(chunk.iter().cloned());
            continue;
        }
        for oid in chunk.iter().take(MAX_SINGLE_CHECKS) {
            if is_connected(runner, repo, std::slice::from_ref(oid)).await? {
                connected.insert(oid.clone());
            }
        }
    }
    Ok(connected)
}

/// Which of `oids` exist as objects, connected or not.
async fn objects_exist(
    runner: &GitRunner,
    repo: &Path,
    oids: &[GitOid],
) -> Result<BTreeSet<GitOid>, GitError> {
    if oids.is_empty() {
        return Ok(BTreeSet::new());
    }
    let input: String = oids.iter().map(|oid| format!("{oid}\n")).collect();
    let mut command = runner.command(repo);
    command.args(["cat-file", "--batch-check"]);
    let output = runner.run(command, "cat-file", Some(input)).await?;
    Ok(present_in_batch_check(&output.stdout, oids))
}

/// The objects the refs of the repository point at (`git for-each-ref`).
async fn ref_targets(runner: &GitRunner, repo: &Path) -> Result<HashSet<GitOid>, GitError> {
    let mut command = runner.command(repo);
    command.args(["for-each-ref", "--format=%(objectname)"]);
    let output = runner.run(command, "for-each-ref", None).await?;
    let text = String::from_utf8_lossy(&output.stdout);
    Ok(text
        .lines()
        .filter_map(|line| GitOid::parse(line.trim()).ok())
        .collect())
}

/// Whether everything reachable from `oids` is in the repository.
async fn is_connected(runner: &GitRunner, repo: &Path, oids: &[GitOid]) -> Result<bool, GitError> {
    let mut command = runner.command(repo);
    command.args(["rev-list", "--objects", "--quiet"]);
    command.args(oids.iter().map(GitOid::as_str));
    command.args(["--not", "--all"]);
    match runner.run(command, "rev-list", None).await {
        Ok(_) => Ok(true),
        Err(GitError::Failed { .. }) => Ok(false),
        Err(error) => Err(error),
    }
}

/// The ids `git cat-file --batch-check` reported as existing (`<oid> <type> <size>`),
/// among those `asked` (one set look-up per line: linear in the lines).
pub(super) fn present_in_batch_check(stdout: &[u8], asked: &[GitOid]) -> BTreeSet<GitOid> {
    let asked: HashSet<&GitOid> = asked.iter().collect();
    let text = String::from_utf8_lossy(stdout);
    text.lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let oid = GitOid::parse(words.next()?).ok()?;
            let kind = words.next()?;
            (kind != "missing" && asked.contains(&oid)).then_some(oid)
        })
        .collect()
}
