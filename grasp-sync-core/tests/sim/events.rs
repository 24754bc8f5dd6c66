//! Builders of signed NIP-34 events for the simulations.

use nostr::prelude::*;

use grasp_sync_core::RepoRef;

/// A repository announcement listing `relays`.
pub fn announcement(keys: &Keys, identifier: &str, relays: &[&RelayUrl], at: u64) -> Event {
    let mut relays_tag = vec!["relays".to_owned()];
    relays_tag.extend(relays.iter().map(|relay| relay.to_string()));
    let tags = vec![
        Tag::identifier(identifier),
        Tag::parse(relays_tag).expect("relays tag"),
        Tag::parse([
            "clone",
            &format!("https://git.example.com/{identifier}.git"),
        ])
        .expect("clone tag"),
    ];
    sign(keys, Kind::Custom(30617), "", tags, at)
}

/// The ref of the repository `identifier` announced by `keys`.
pub fn repo_ref(keys: &Keys, identifier: &str) -> RepoRef {
    RepoRef::new(keys.public_key(), identifier).expect("valid repo ref")
}

/// A root event (1617 patch, 1618 PR, 1621 issue) of `repo`.
pub fn root(keys: &Keys, kind: u16, repo: &RepoRef, content: &str, at: u64) -> Event {
    let tags = vec![Tag::parse(["a", &repo.to_string()]).expect("a tag")];
    sign(keys, Kind::Custom(kind), content, tags, at)
}

/// A reply (NIP-22 comment) to `root` using the uppercase `E` tag.
pub fn reply(keys: &Keys, root: &EventId, content: &str, at: u64) -> Event {
    let tags = vec![
        Tag::parse(["E", &root.to_hex()]).expect("E tag"),
        Tag::parse(["e", &root.to_hex()]).expect("e tag"),
    ];
    sign(keys, Kind::Custom(1111), content, tags, at)
}

/// A status (1630 open) of `root`: it tags its root with `e` and its
/// repository with `a`, so it matches Layer 2 and Layer 3 filters alike.
pub fn status(keys: &Keys, root: &EventId, repo: &RepoRef, at: u64) -> Event {
    let tags = vec![
        Tag::parse(["e", &root.to_hex(), "", "root"]).expect("e tag"),
        Tag::parse(["a", &repo.to_string()]).expect("a tag"),
    ];
    sign(keys, Kind::Custom(1630), "open", tags, at)
}

/// A PR update (1619) pointing at its PR with `E`.
pub fn pr_update(keys: &Keys, pr: &EventId, repo: &RepoRef, at: u64) -> Event {
    let tags = vec![
        Tag::parse(["E", &pr.to_hex()]).expect("E tag"),
        Tag::parse(["a", &repo.to_string()]).expect("a tag"),
        Tag::parse(["c", "0123456789abcdef0123456789abcdef01234567"]).expect("c tag"),
    ];
    sign(keys, Kind::Custom(1619), "", tags, at)
}

/// A note quoting `value` (a repo ref or an event id) with `q`.
pub fn quote(keys: &Keys, value: &str, at: u64) -> Event {
    let tags = vec![Tag::parse(["q", value]).expect("q tag")];
    sign(keys, Kind::TextNote, "quoting", tags, at)
}

/// An event tagging `repo` with uppercase `A`.
pub fn upper_a(keys: &Keys, repo: &RepoRef, at: u64) -> Event {
    let tags = vec![Tag::parse(["A", &repo.to_string()]).expect("A tag")];
    sign(keys, Kind::Custom(1111), "comment on repo", tags, at)
}

/// A repository state (30618).
pub fn state(keys: &Keys, identifier: &str, at: u64) -> Event {
    let tags = vec![
        Tag::identifier(identifier),
        Tag::parse([
            "refs/heads/main",
            "0123456789abcdef0123456789abcdef01234567",
        ])
        .expect("ref tag"),
    ];
    sign(keys, Kind::Custom(30618), "", tags, at)
}

/// An unrelated note.
pub fn noise(keys: &Keys, content: &str, at: u64) -> Event {
    sign(keys, Kind::TextNote, content, Vec::new(), at)
}

/// `event` with its signature replaced by another event's: the id still
/// matches the content, the signature does not.
pub fn forged(event: &Event, other: &Event) -> Event {
    Event::new(
        event.id,
        event.pubkey,
        event.created_at,
        event.kind,
        event.tags.clone().to_vec(),
        event.content.clone(),
        other.sig,
    )
}

fn sign(keys: &Keys, kind: Kind, content: &str, tags: Vec<Tag>, at: u64) -> Event {
    EventBuilder::new(kind, content)
        .tags(tags)
        .custom_created_at(Timestamp::from_secs(at))
        .finalize(keys)
        .expect("signing works")
}

/// A repository announcement listing `relays` and the `maintainers`.
pub fn announcement_with_maintainers(
    keys: &Keys,
    identifier: &str,
    relays: &[&RelayUrl],
    maintainers: &[&Keys],
    at: u64,
) -> Event {
    let plain = announcement(keys, identifier, relays, at);
    let mut tags: Vec<Tag> = plain.tags.iter().cloned().collect();
    let mut values = vec!["maintainers".to_owned()];
    values.extend(maintainers.iter().map(|keys| keys.public_key().to_hex()));
    tags.push(Tag::parse(values).expect("maintainers tag"));
    sign(keys, Kind::Custom(30617), "", tags, at)
}
