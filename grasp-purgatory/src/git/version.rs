//! Checking the installed git at start: `git --version`, judged by the core
//! ([`git_version_verdict`]): git older than 2.37 ignores the `http.curloptResolve`
//! pin, so purgatory refuses it unless the operator allows it
//! ([`GitFetcherConfig::allow_old_git`](super::GitFetcherConfig::allow_old_git)).

use std::path::Path;
use std::process::Stdio;

use grasp_sync_core::purgatory::{git_version_verdict, GitVersionVerdict};

/// Why the installed git could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GitVersionError {
    /// `git --version` could not be run.
    #[error("running {program} --version failed: {source}")]
    Unrunnable {
        /// The git program.
        program: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// git is too old to pin clone URL hosts, and that is not allowed.
    #[error(
        "{program} is {found:?}: git older than 2.37 ignores http.curloptResolve, so it \
         would resolve clone URL hosts itself and the address purgatory checked would not \
         be the one reached (DNS rebinding); install git 2.37 or later, or set \
         NGIT_PURGATORY_ALLOW_OLD_GIT=1 (GitFetcherConfig::allow_old_git) to run with it \
         anyway"
    )]
    TooOld {
        /// The git program.
        program: String,
        /// What `git --version` printed.
        found: String,
    },
}

/// Runs `program --version` (PATH only in its environment) and applies the core's
/// verdict: `Ok` when git pins hosts, or when it does not and `allow_old_git` is set
/// (then warns loudly); [`GitVersionError::TooOld`] otherwise.
pub fn check_git_version(program: &Path, allow_old_git: bool) -> Result<(), GitVersionError> {
    let name = program.display().to_string();
    let mut command = std::process::Command::new(program);
    command.env_clear();
    if let Some(path) = std::env::var_os("PATH") {
        command.env("PATH", path);
    }
    let output = command
        .arg("--version")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .map_err(|source| GitVersionError::Unrunnable {
            program: name.clone(),
            source,
        })?;
    let printed = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    match git_version_verdict(&printed, allow_old_git) {
        GitVersionVerdict::Pins(version) => {
            tracing::debug!(%version, "git pins clone url hosts");
            Ok(())
        }
        GitVersionVerdict::Warn(_) => {
            tracing::warn!(
                program = %name,
                found = %printed,
                "git older than 2.37 ignores http.curloptResolve: clone url hosts are resolved by git itself, so DNS rebinding can reach local addresses (allowed by NGIT_PURGATORY_ALLOW_OLD_GIT)"
            );
            Ok(())
        }
        GitVersionVerdict::Refuse(_) => Err(GitVersionError::TooOld {
            program: name,
            found: printed,
        }),
    }
}
