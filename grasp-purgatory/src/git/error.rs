//! Why a fetch, or a query or update of a local repository, failed.

use std::net::IpAddr;
use std::time::Duration;

use grasp_sync_core::url_policy::UrlPolicyError;

/// Why a fetch (or a local git query) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GitError {
    /// The clone URL was refused by the policy; no process was spawned.
    #[error("clone url {url:?} refused: {source}")]
    Policy {
        /// The URL as given.
        url: String,
        /// Which rule refused it.
        #[source]
        source: UrlPolicyError,
    },
    /// The URL's host resolves to a forbidden address (one of them is enough); no process
    /// was spawned.
    #[error("clone url {url} resolves to forbidden address {address}")]
    ForbiddenAddress {
        /// The URL.
        url: String,
        /// The first forbidden address found.
        address: IpAddr,
    },
    /// The URL's host could not be resolved; no process was spawned.
    #[error("cannot resolve the host of {url}: {source}")]
    Resolve {
        /// The URL.
        url: String,
        /// The resolver's error.
        #[source]
        source: std::io::Error,
    },
    /// Nothing was asked for.
    #[error("no object ids to fetch")]
    NothingToFetch,
    /// git could not be started or talked to.
    #[error("running git ({operation}) failed")]
    Io {
        /// What was being done.
        operation: &'static str,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// git ran longer than the timeout and was killed.
    #[error("git {operation} timed out after {after:?}")]
    Timeout {
        /// What was being done.
        operation: &'static str,
        /// The timeout.
        after: Duration,
    },
    /// The server sent a pack larger than the limit; git was stopped at the limit and
    /// the partial pack was removed.
    #[error("the server sent a pack larger than {limit} bytes")]
    PackTooLarge {
        /// The limit, in bytes.
        limit: u64,
    },
    /// git exited with an error.
    #[error("git {operation} failed ({status}): {stderr}")]
    Failed {
        /// What was being done.
        operation: &'static str,
        /// The exit status.
        status: String,
        /// The last lines git wrote to stderr.
        stderr: String,
    },
}

impl GitError {
    /// For a refused clone URL (no process was spawned), the `reason` label of
    /// `purgatory_clone_url_refusals_total`: `policy`, `forbidden_address` or
    /// `unresolvable`. `None` for every other error.
    pub fn refusal_reason(&self) -> Option<&'static str> {
        match self {
            GitError::Policy { .. } => Some("policy"),
            GitError::ForbiddenAddress { .. } => Some("forbidden_address"),
            GitError::Resolve { .. } => Some("unresolvable"),
            _ => None,
        }
    }
}
