//! Whether a clone URL may be fetched from: the clone-URL policy, then (for host names)
//! the addresses the host resolves to. Spawns nothing.

use std::net::IpAddr;
use std::time::Duration;

use grasp_sync_core::url_policy::{is_forbidden_address, CloneUrl, CloneUrlPolicy};

use super::error::GitError;

/// How long resolving a clone URL's host may take.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(10);

/// Checks `url` against `policy` and, when `check_resolved_addresses` is set and the
/// policy refuses local addresses, the addresses its host resolves to.
pub(super) async fn check_url(
    policy: &CloneUrlPolicy,
    check_resolved_addresses: bool,
    url: &str,
) -> Result<CloneUrl, GitError> {
    let checked = policy.check(url).map_err(|source| GitError::Policy {
        url: url.to_owned(),
        source,
    })?;
    if check_resolved_addresses && !policy.allows_local_addresses() {
        check_resolved(&checked).await?;
    }
    Ok(checked)
}

/// Refuses host names that resolve to a forbidden address. IP literals were checked by
/// the policy already.
async fn check_resolved(url: &CloneUrl) -> Result<(), GitError> {
    let host = url.domain();
    if host.parse::<IpAddr>().is_ok() {
        return Ok(());
    }
    let lookup = tokio::time::timeout(RESOLVE_TIMEOUT, tokio::net::lookup_host((host, 443)));
    let resolve_error = |source| GitError::Resolve {
        url: url.as_str().to_owned(),
        source,
    };
    let addresses = lookup
        .await
        .map_err(|_| resolve_error(std::io::Error::from(std::io::ErrorKind::TimedOut)))?
        .map_err(resolve_error)?;
    for address in addresses {
        if is_forbidden_address(address.ip()) {
            return Err(GitError::ForbiddenAddress {
                url: url.as_str().to_owned(),
                address: address.ip(),
            });
        }
    }
    Ok(())
}
