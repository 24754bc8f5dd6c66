//! The NIP-34 threads the sidecar tests put on a remote relay.

use grasp_sync_test_support::nip34::{sign, tag};
use nostr::prelude::{Event, Keys};

/// `count` issues of `user` on the repository `coordinate`, each with one
/// reply (kind 1111), the issues from `base + 1` on, the replies from
/// `base + 100` on.
pub(crate) fn issues_with_replies(
    user: &Keys,
    coordinate: &str,
    count: u64,
    base: u64,
) -> Vec<Event> {
    let mut events = Vec::new();
    for n in 0..count {
        let issue = sign(
            user,
            1621,
            &format!("issue {n}"),
            vec![tag(&["a", coordinate])],
            base + 1 + n,
        );
        let reply = sign(
            user,
            1111,
            &format!("reply {n}"),
            vec![tag(&["E", &issue.id.to_hex()])],
            base + 100 + n,
        );
        events.push(issue);
        events.push(reply);
    }
    events
}
