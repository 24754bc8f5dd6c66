//! Waiting on a purgatory's published status, and comparing ref listings.

use std::time::Duration;

use grasp_purgatory::PurgatoryStatus;
use tokio::sync::watch;

/// How long the serving tests give a purgatory to settle.
pub const SETTLE: Duration = Duration::from_secs(30);

/// Waits until the published status satisfies `done`, at most `within`; panics with
/// the last status seen.
pub async fn until(
    status: &mut watch::Receiver<PurgatoryStatus>,
    within: Duration,
    done: impl FnMut(&PurgatoryStatus) -> bool,
) -> PurgatoryStatus {
    let found = match tokio::time::timeout(within, status.wait_for(done)).await {
        Ok(Ok(found)) => Some(found.clone()),
        _ => None,
    };
    found.unwrap_or_else(|| panic!("not within {within:?}: {:#?}", *status.borrow()))
}

/// `(ref name, object id)` pairs, owned and sorted, to compare with a listing.
pub fn pairs(refs: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut pairs: Vec<(String, String)> = refs
        .iter()
        .map(|(name, oid)| ((*name).to_owned(), (*oid).to_owned()))
        .collect();
    pairs.sort();
    pairs
}
