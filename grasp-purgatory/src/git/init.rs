//! Making an empty directory a bare repository the way a GRASP server does: `git init
//! --bare`, with purgatory's refs hidden from everyone who fetches or pushes.

use std::path::Path;

use super::error::GitError;
use super::process::GitRunner;
use super::refs::PURGATORY_REF_PREFIX;

/// The configuration keys that hide `refs/purgatory/` from serving: `git upload-pack`
/// (fetch, clone) and `git receive-pack` (push) neither advertise nor accept them, as on
/// an ngit-grasp server. Objects that only purgatory refs keep are not served before
/// their events are released.
pub const HIDE_REFS_KEYS: [&str; 2] = ["uploadpack.hideRefs", "receive.hideRefs"];

/// The value of [`HIDE_REFS_KEYS`]: the purgatory namespace without its trailing `/`.
pub fn hidden_refs_value() -> &'static str {
    PURGATORY_REF_PREFIX.trim_end_matches('/')
}

/// Runs `git init --bare` in the existing (empty) directory `repo` (`HEAD` at
/// `refs/heads/main`), without any template (an empty `--template=`: no sample hooks,
/// no `description`, no `info/exclude`, whatever the machine's git ships), then hides
/// `refs/purgatory` ([`HIDE_REFS_KEYS`]).
pub(super) async fn init_bare(runner: &GitRunner, repo: &Path) -> Result<(), GitError> {
    let mut command = runner.command(repo);
    command.args([
        "-c",
        "init.defaultBranch=main",
        "init",
        "--bare",
        "--template=",
        "--quiet",
        ".",
    ]);
    runner.run(command, "init", None).await?;
    hide_purgatory_refs(repo).await
}

/// Appends [`HIDE_REFS_KEYS`] to the configuration of the repository `init_bare` just
/// made (its `config` file, written by git a moment ago and by nobody else yet): the
/// file write of what two `git config --add` processes would do.
async fn hide_purgatory_refs(repo: &Path) -> Result<(), GitError> {
    use tokio::io::AsyncWriteExt as _;
    let section: String = HIDE_REFS_KEYS
        .iter()
        .map(|key| {
            let (section, name) = key.split_once('.').unwrap_or((key, ""));
            format!("[{section}]\n\t{name} = {}\n", hidden_refs_value())
        })
        .collect();
    let io = |source| GitError::Io {
        operation: "config",
        source,
    };
    let mut config = tokio::fs::OpenOptions::new()
        .append(true)
        .open(repo.join("config"))
        .await
        .map_err(io)?;
    config.write_all(section.as_bytes()).await.map_err(io)?;
    config.flush().await.map_err(io)
}

/// Deletes the objects of `repo` that no ref reaches any more (`git gc --prune=now`):
/// those fetched for events that left purgatory unreleased, once their
/// `refs/purgatory/*` were swept. Packs are rewritten without them and loose ones
/// deleted; the caller holds the repository's fetch lock, and a push in flight is safe
/// (git receives into a quarantine directory until its refs are updated).
pub(super) async fn prune_unreachable(runner: &GitRunner, repo: &Path) -> Result<(), GitError> {
    let mut command = runner.command(repo);
    command.args([
        "-c",
        "gc.autoDetach=false",
        "-c",
        "gc.reflogExpire=now",
        "-c",
        "gc.reflogExpireUnreachable=now",
        "gc",
        "--prune=now",
        "--quiet",
    ]);
    runner.run(command, "gc", None).await?;
    Ok(())
}
