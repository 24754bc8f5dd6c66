//! Fetching exact objects from a clone URL with the `git` command line, safely.
//!
//! Clone URLs and object ids come from strangers' events. Before a process is spawned:
//! the URL must pass the [`CloneUrlPolicy`] (https only by default; no `file:`, `ext::`,
//! `ssh`, credentials, option-like hosts, local or private addresses), a host name must
//! not resolve to a forbidden address, and object ids are [`GitOid`]s (hex, checked when
//! the event was read). The command itself:
//!
//! - takes the URL and refspecs after `--`, so nothing can be read as an option;
//! - allows only the protocols the policy allows (`protocol.allow=never` plus explicit
//!   `protocol.<name>.allow=always`), never follows redirects, uses protocol v2 (which
//!   fetches any object by id), and reads no system or global configuration;
//! - never prompts (`GIT_TERMINAL_PROMPT=0`, empty environment apart from `PATH` and
//!   proxy settings);
//! - runs in its own process group and is killed, group and all, when the per-fetch
//!   timeout passes; HTTP transfers also give up when they stall for that long.
//!
//! Fetched objects are written under `refs/purgatory/<oid>` so that a `git gc` cannot
//! prune them before the events that need them are released. When all requested ids
//! cannot be fetched at once (a server that lacks one refuses the whole request), each id
//! is fetched on its own, so a partial success keeps what it got.
//!
//! Where each part lives: `policy` decides whether a URL may be fetched from (policy
//! and resolved addresses); `process` spawns git with a clean environment, a timeout
//! and a process-group kill; `fetch` holds [`GitFetcher`] and its fetch strategy (all
//! ids at once, then one by one); `connectivity` decides which objects count as present
//! (existing with their whole history); `refs` names and writes refs; `backend` is the
//! [`GitBackend`] trait purgatory runs git through; `error` is [`GitError`].
//!
//! [`CloneUrlPolicy`]: grasp_sync_core::url_policy::CloneUrlPolicy
//! [`GitOid`]: grasp_sync_core::nip34::GitOid

mod backend;
mod connectivity;
mod error;
mod fetch;
mod policy;
mod process;
mod refs;
#[cfg(test)]
mod tests;

pub use backend::GitBackend;
pub use error::GitError;
pub use fetch::{
    FetchReport, GitFetcher, GitFetcherConfig, MAX_OIDS_PER_FETCH, MAX_SINGLE_FETCHES,
};
pub use refs::{NOSTR_REF_PREFIX, PURGATORY_REF_PREFIX};
