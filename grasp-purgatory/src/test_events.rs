//! Signed NIP-34 events for unit tests.

use nostr::prelude::*;

pub(crate) fn sign(keys: &Keys, kind: u16, tags: Vec<Vec<String>>, at: u64) -> Event {
    let tags: Vec<Tag> = tags.into_iter().map(|t| Tag::parse(t).unwrap()).collect();
    EventBuilder::new(Kind::from(kind), "")
        .tags(tags)
        .custom_created_at(Timestamp::from_secs(at))
        .finalize(keys)
        .unwrap()
}

pub(crate) fn tag(values: &[&str]) -> Vec<String> {
    values.iter().map(|v| (*v).to_owned()).collect()
}

pub(crate) fn hex(n: u8) -> String {
    format!("{n:02x}").repeat(20)
}

/// A state of `identifier` whose refs point at `oids`.
pub(crate) fn state(keys: &Keys, identifier: &str, oids: &[&str], at: u64) -> Event {
    let mut tags = vec![tag(&["d", identifier])];
    for (index, oid) in oids.iter().enumerate() {
        tags.push(tag(&[&format!("refs/heads/b{index}"), oid]));
    }
    sign(keys, 30618, tags, at)
}

/// A pull request of `identifier` (announced by `owner`) proposing `tip`.
pub(crate) fn pull_request(keys: &Keys, owner: &PublicKey, identifier: &str, tip: &str) -> Event {
    let a = format!("30617:{}:{identifier}", owner.to_hex());
    sign(
        keys,
        1618,
        vec![tag(&["a", &a]), tag(&["c", tip])],
        1_700_000_000,
    )
}
