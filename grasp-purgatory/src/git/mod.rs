//! Fetching exact objects from a clone URL with the `git` command line, safely.
//!
//! Clone URLs and object ids come from strangers' events. Before a process is spawned:
//! the URL must pass the [`CloneUrlPolicy`] (https only by default; no `file:`, `ext::`,
//! `ssh`, credentials, option-like hosts, local or private addresses), its host name is
//! resolved once through the caller's [`Resolver`] and every address must be allowed
//! (unless the policy allows local addresses), and object ids are [`GitOid`]s (hex,
//! checked when the event was read). The command itself:
//!
//! - connects to the checked address only (`http.curloptResolve` for http(s), the
//!   address in the URL for `git://`): git never resolves the name again, so DNS
//!   rebinding reaches nothing. git older than 2.37 ignores that setting, so
//!   [`check_git_version`] refuses it at start unless the operator allows it; proxy
//!   variables (which would connect to the name) are cleared unless kept;
//! - takes the URL and refspecs after `--`, so nothing can be read as an option;
//! - allows only the protocols the policy allows (`protocol.allow=never` plus explicit
//!   `protocol.<name>.allow=always`), never follows redirects, uses protocol v2 (which
//!   fetches any object by id), and reads no system or global configuration;
//! - checks every object it receives (`fetch.fsckObjects`, `transfer.fsckObjects`) and
//!   keeps them in one pack whose size is limited by the kernel (`prlimit --fsize`,
//!   [`GitFetcherConfig::max_pack_bytes`], 512 MiB);
//! - gets a data memory limit (`prlimit --data`, [`GitFetcherConfig::max_memory_bytes`],
//!   2 GiB);
//! - never prompts (`GIT_TERMINAL_PROMPT=0`, empty environment apart from `PATH`, and
//!   proxy settings only when [`GitFetcherConfig::keep_proxy_env`]);
//! - runs in its own process group and is killed, group and all, when the per-fetch
//!   timeout passes (60 s); HTTP transfers also give up when they stall for that long;
//! - fetches into one repository one at a time, and a fetch that fails for any reason
//!   (timeout, pack limit, `fsck`) leaves no temporary file in `objects/pack/`.
//!
//! One [`GitFetcher::fetch`] is one request to the server. Fetched objects are written
//! under `refs/purgatory/<oid>` so that a `git gc` cannot prune them before the events
//! that need them are released; purgatory deletes the ones no held event needs. A
//! server that lacks one of several ids refuses the whole request: the report says so,
//! and purgatory asks for the ids one at a time, each as its own throttled request.
//!
//! Where each part lives: `resolve` is the [`Resolver`] trait; `policy` decides whether
//! a URL may be fetched from and pins it ([`PinnedUrl`]); `process` spawns git with a
//! clean environment, a timeout and a process-group kill; `fetch` holds [`GitFetcher`];
//! `connectivity` decides which objects count as present (existing with their whole
//! history); `refs` names, lists and writes refs; `init` creates a bare repository with
//! `refs/purgatory` hidden from serving; `backend` is the [`GitBackend`] trait
//! purgatory runs git through; `error` is [`GitError`].
//!
//! [`CloneUrlPolicy`]: grasp_sync_core::url_policy::CloneUrlPolicy
//! [`GitOid`]: grasp_sync_core::nip34::GitOid

mod backend;
mod connectivity;
mod error;
mod fetch;
mod init;
mod permits;
mod policy;
mod process;
mod refs;
mod resolve;
#[cfg(test)]
mod tests;
mod version;

pub use backend::GitBackend;
pub use error::GitError;
pub use fetch::{
    FetchReport, GitFetcher, GitFetcherConfig, DEFAULT_MAX_MEMORY_BYTES, DEFAULT_MAX_PACK_BYTES,
    MAX_OIDS_PER_FETCH,
};
pub use init::{hidden_refs_value, HIDE_REFS_KEYS};
pub use policy::PinnedUrl;
pub use refs::{LocalRefs, NOSTR_REF_PREFIX, PURGATORY_REF_PREFIX};
pub use resolve::{
    CachedResolver, Resolver, StaticResolver, SystemResolver, RESOLVE_CACHE_ENTRIES,
    RESOLVE_CACHE_TTL, RESOLVE_TIMEOUT,
};
pub use version::{check_git_version, GitVersionError};
