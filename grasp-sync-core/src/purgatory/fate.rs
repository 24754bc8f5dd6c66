//! Is this held event released or expired? The one answer, for purgatory's
//! store: at the release check (its objects were looked up in the local
//! repository) and at the expiry sweep alike.
//!
//! An event waits in purgatory at most the expiry time. Held that long, it
//! expires, whatever arrived since (the sweep runs every loop, so the data
//! would have to come in the instant after); before that it is released as
//! soon as the repository has every object it needs, and held otherwise.
//!
//! - [`held_event_fate`]: release, expire, or keep holding one event.

use std::collections::BTreeSet;
use std::time::Duration;

use nostr::prelude::Timestamp;

use crate::nip34::GitOid;

/// What becomes of one held event now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeldFate {
    /// The repository has every object it needs: hand it to the sink.
    Release,
    /// It waited the expiry time: drop it and report it.
    Expire,
    /// Keep holding it: objects are missing and it has time left.
    Hold,
}

/// The fate of an event that needs `needed`, held since `held_since`, at `now`
/// with this `expiry`, when the local repository is known to have `present`.
/// Expiry wins: an event held `expiry` or longer expires even if its objects
/// are present.
pub fn held_event_fate(
    needed: &BTreeSet<GitOid>,
    present: &BTreeSet<GitOid>,
    held_since: Timestamp,
    now: Timestamp,
    expiry: Duration,
) -> HeldFate {
    let expires_at = held_since.as_secs().saturating_add(expiry.as_secs());
    if expires_at <= now.as_secs() {
        HeldFate::Expire
    } else if needed.is_subset(present) {
        HeldFate::Release
    } else {
        HeldFate::Hold
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::purgatory::test_support::oid;

    const EXPIRY: Duration = Duration::from_secs(1800);

    fn at(secs: u64) -> Timestamp {
        Timestamp::from_secs(1_700_000_000 + secs)
    }

    fn oids(ns: &[u8]) -> BTreeSet<GitOid> {
        ns.iter().map(|&n| oid(n)).collect()
    }

    #[test]
    fn an_event_is_released_once_every_object_it_needs_is_present() {
        let needed = oids(&[1, 2]);
        let fate = |present: &[u8]| held_event_fate(&needed, &oids(present), at(0), at(60), EXPIRY);
        assert_eq!(fate(&[]), HeldFate::Hold);
        assert_eq!(fate(&[1]), HeldFate::Hold, "one object missing");
        assert_eq!(fate(&[1, 2]), HeldFate::Release);
        assert_eq!(fate(&[1, 2, 3]), HeldFate::Release, "more than needed");
    }

    #[test]
    fn an_event_expires_after_the_expiry_whatever_arrived() {
        let needed = oids(&[1]);
        let fate = |now: u64, present: &[u8]| {
            held_event_fate(&needed, &oids(present), at(0), at(now), EXPIRY)
        };
        assert_eq!(fate(1799, &[]), HeldFate::Hold, "a second left");
        assert_eq!(fate(1800, &[]), HeldFate::Expire, "held exactly the expiry");
        assert_eq!(fate(1800, &[1]), HeldFate::Expire, "expiry wins");
        assert_eq!(fate(1799, &[1]), HeldFate::Release);
    }

    #[test]
    fn an_expiry_beyond_the_end_of_time_does_not_wrap_around() {
        let fate = held_event_fate(
            &oids(&[1]),
            &BTreeSet::new(),
            at(0),
            Timestamp::from_secs(u64::MAX - 1),
            Duration::from_secs(u64::MAX),
        );
        assert_eq!(fate, HeldFate::Hold);
    }
}
