//! The expected content of the own relay, computed from what the remote
//! relays hold, independently of the sync: the announcements published to
//! the own relay, plus on every relay our repositories list, everything the
//! three layers' filters match there.
//!
//! - Layer 1: the announcements and states (30617, 30618) of our
//!   repositories by their authors (not every announcement read to discover
//!   repositories: someone else's, listing only other relays, stays there).
//! - Layer 2: events tagging one of our repositories (`a`, `A`, `q`) that
//!   lists this relay.
//! - Layer 3: events tagging (`e`, `E`, `q`) a root event (patch, pull
//!   request, issue) of such a repository.
//!
//! Our repositories are the announcements listing the own relay, whether
//! published to it or found on a relay we sync (Layer 1).

use std::collections::{BTreeMap, BTreeSet};

use grasp_sync_test_support::ids;
use nostr::prelude::{Event, EventId, RelayUrl};

/// Announcements, states.
const LAYER1_KINDS: [u16; 2] = [30617, 30618];
/// Patches, pull requests, issues.
const ROOT_KINDS: [u16; 3] = [1617, 1618, 1621];

/// One remote relay's URL and events.
pub(crate) struct RemoteContent<'a> {
    /// The relay.
    pub(crate) url: &'a RelayUrl,
    /// Everything it holds.
    pub(crate) events: &'a [Event],
}

/// The ids the own relay should hold after the sync.
pub(crate) fn expected(
    own: &RelayUrl,
    own_published: &[Event],
    remotes: &[RemoteContent<'_>],
) -> BTreeSet<EventId> {
    let ours = our_repositories(own, own_published, remotes);
    let mut expected: BTreeSet<EventId> = own_published.iter().map(|event| event.id).collect();
    let mut roots: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    // Root events found by Layer 3 can be roots too: repeat until stable.
    loop {
        let before = (expected.len(), roots.len());
        for remote in remotes {
            let repos: BTreeSet<&str> = ours
                .iter()
                .filter(|(_, relays)| relays.contains(remote.url))
                .map(|(coordinate, _)| coordinate.as_str())
                .collect();
            if repos.is_empty() {
                continue;
            }
            let relay_roots: BTreeSet<&str> = roots
                .iter()
                .filter(|(_, of)| of.iter().any(|repo| repos.contains(repo.as_str())))
                .map(|(id, _)| id.as_str())
                .collect();
            for event in remote.events {
                let layer1 = LAYER1_KINDS.contains(&event.kind.as_u16()) && is_ours(event, &ours);
                let layer2 = tag_values(event, &["a", "A", "q"]).any(|v| repos.contains(v));
                let layer3 = tag_values(event, &["e", "E", "q"]).any(|v| relay_roots.contains(v));
                if layer1 || layer2 || layer3 {
                    expected.insert(event.id);
                }
            }
        }
        for remote in remotes {
            for event in remote.events.iter().filter(|e| expected.contains(&e.id)) {
                if !ROOT_KINDS.contains(&event.kind.as_u16()) {
                    continue;
                }
                let of: BTreeSet<String> = tag_values(event, &["a"])
                    .filter(|value| ours.contains_key(*value))
                    .map(str::to_owned)
                    .collect();
                if !of.is_empty() {
                    roots.entry(event.id.to_hex()).or_default().extend(of);
                }
            }
        }
        if (expected.len(), roots.len()) == before {
            return expected;
        }
    }
}

/// Our repositories (coordinate → the remote relays they list): the
/// announcements listing `own`, published to it or found on a relay one of
/// them lists.
fn our_repositories(
    own: &RelayUrl,
    own_published: &[Event],
    remotes: &[RemoteContent<'_>],
) -> BTreeMap<String, BTreeSet<RelayUrl>> {
    let mut ours = BTreeMap::new();
    for event in own_published {
        consider(own, event, &mut ours);
    }
    loop {
        let before = ours.len();
        let registered: BTreeSet<RelayUrl> = ours.values().flatten().cloned().collect();
        for remote in remotes.iter().filter(|r| registered.contains(r.url)) {
            for event in remote.events {
                consider(own, event, &mut ours);
            }
        }
        if ours.len() == before {
            return ours;
        }
    }
}

/// `true` if the announcement or state `event` is of one of `ours` by its
/// author: the sync stores only those Layer 1 events (GRASP-01's rule, which
/// the engine applies itself when it knows the service's URLs), not every
/// announcement it reads to discover repositories.
fn is_ours(event: &Event, ours: &BTreeMap<String, BTreeSet<RelayUrl>>) -> bool {
    tag_values(event, &["d"])
        .next()
        .is_some_and(|identifier| ours.contains_key(&ids::coordinate(&event.pubkey, identifier)))
}

/// Adds `event` to `ours` if it is an announcement listing `own`.
fn consider(own: &RelayUrl, event: &Event, ours: &mut BTreeMap<String, BTreeSet<RelayUrl>>) {
    if event.kind.as_u16() != 30617 {
        return;
    }
    let Some(identifier) = tag_values(event, &["d"]).next() else {
        return;
    };
    let relays: BTreeSet<RelayUrl> = event
        .tags
        .iter()
        .filter(|tag| tag.as_slice().first().map(String::as_str) == Some("relays"))
        .flat_map(|tag| tag.as_slice().iter().skip(1))
        .filter_map(|url| RelayUrl::parse(url).ok())
        .collect();
    if relays.contains(own) {
        let coordinate = ids::coordinate(&event.pubkey, identifier);
        let listed = relays.into_iter().filter(|relay| relay != own).collect();
        ours.entry(coordinate).or_insert(listed);
    }
}

/// The first values of `event`'s tags named one of `names`.
fn tag_values<'a>(event: &'a Event, names: &'a [&str]) -> impl Iterator<Item = &'a str> + 'a {
    event
        .tags
        .iter()
        .filter_map(move |tag| match tag.as_slice() {
            [name, value, ..] if names.contains(&name.as_str()) => Some(value.as_str()),
            _ => None,
        })
}
