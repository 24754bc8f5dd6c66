//! Signed NIP-34 events (and the NIP-01/NIP-22 events around them) for tests.
//!
//! Every builder takes the author's [`Keys`] and a `created_at` in unix
//! seconds (`at`) unless the time does not matter ([`T0`]).
//! Repositories are named by their coordinate text (anything that displays as
//! `30617:<owner-hex>:<identifier>`, such as the core's `RepoRef` or
//! [`coordinate`]).

use std::fmt::Display;

use nostr::prelude::*;

use crate::ids::{coordinate, T0};

/// A commit id for events whose tip does not matter.
pub const TIP: &str = "0123456789abcdef0123456789abcdef01234567";

/// An event of `kind` by `keys` with `content`, `tags` and `created_at` = `at`.
pub fn sign(keys: &Keys, kind: u16, content: &str, tags: Vec<Tag>, at: u64) -> Event {
    EventBuilder::new(Kind::Custom(kind), content)
        .tags(tags)
        .custom_created_at(Timestamp::from_secs(at))
        .finalize(keys)
        .expect("signing a test event")
}

/// A tag from its values (`tag(&["e", &id, "", "root"])`).
pub fn tag(values: &[&str]) -> Tag {
    Tag::parse(values.iter().copied()).expect("a valid tag")
}

/// A repository announcement (30617) under construction: `d` = the
/// identifier, then (each only when not empty) extra tags, `clone`, `relays`
/// and `maintainers`, in that order.
///
/// ```
/// use grasp_sync_test_support::nip34::Announcement;
/// # let keys = nostr::prelude::Keys::generate();
/// let event = Announcement::new("repo")
///     .relays(["wss://relay.example.com"])
///     .clone_urls(["https://git.example.com/repo.git"])
///     .at(1_700_000_000)
///     .sign(&keys);
/// assert_eq!(event.kind.as_u16(), 30617);
/// ```
#[derive(Clone, Debug)]
pub struct Announcement {
    identifier: String,
    extra: Vec<Tag>,
    clone_urls: Vec<String>,
    relays: Vec<String>,
    maintainers: Vec<PublicKey>,
    at: u64,
}

impl Announcement {
    /// An announcement of `identifier` with no other tag, at [`T0`].
    pub fn new(identifier: &str) -> Self {
        Announcement {
            identifier: identifier.to_owned(),
            extra: Vec::new(),
            clone_urls: Vec::new(),
            relays: Vec::new(),
            maintainers: Vec::new(),
            at: T0,
        }
    }

    /// Lists `relays` (URLs or any text) in the `relays` tag.
    pub fn relays<I>(mut self, relays: I) -> Self
    where
        I: IntoIterator,
        I::Item: Display,
    {
        self.relays
            .extend(relays.into_iter().map(|r| r.to_string()));
        self
    }

    /// Lists `urls` in the `clone` tag.
    pub fn clone_urls<I>(mut self, urls: I) -> Self
    where
        I: IntoIterator,
        I::Item: Display,
    {
        self.clone_urls
            .extend(urls.into_iter().map(|u| u.to_string()));
        self
    }

    /// Lists `maintainers` in the `maintainers` tag.
    pub fn maintainers<I>(mut self, maintainers: I) -> Self
    where
        I: IntoIterator<Item = PublicKey>,
    {
        self.maintainers.extend(maintainers);
        self
    }

    /// Adds `tag` after `d` (a `name`, a `description`, ...).
    pub fn tag(mut self, tag: Tag) -> Self {
        self.extra.push(tag);
        self
    }

    /// Sets `created_at` to `at`.
    pub fn at(mut self, at: u64) -> Self {
        self.at = at;
        self
    }

    /// The announcement signed by `keys`.
    pub fn sign(&self, keys: &Keys) -> Event {
        let mut tags = vec![Tag::identifier(&self.identifier)];
        tags.extend(self.extra.iter().cloned());
        let lists = [
            ("clone", self.clone_urls.clone()),
            ("relays", self.relays.clone()),
            (
                "maintainers",
                self.maintainers.iter().map(PublicKey::to_hex).collect(),
            ),
        ];
        for (name, values) in lists {
            if !values.is_empty() {
                let tag = std::iter::once(name.to_owned()).chain(values);
                tags.push(Tag::parse(tag).expect("a valid list tag"));
            }
        }
        sign(keys, 30617, "", tags, self.at)
    }
}

/// The announcement of `identifier` listing `relays`, at `at`.
pub fn announcement(keys: &Keys, identifier: &str, relays: &[&RelayUrl], at: u64) -> Event {
    Announcement::new(identifier)
        .relays(relays)
        .at(at)
        .sign(keys)
}

/// A repository state (30618) of `identifier` whose refs `refs/heads/b<i>`
/// point at `oids`.
pub fn state(keys: &Keys, identifier: &str, oids: &[&str], at: u64) -> Event {
    let mut tags = vec![Tag::identifier(identifier)];
    for (index, oid) in oids.iter().enumerate() {
        tags.push(tag(&[&format!("refs/heads/b{index}"), oid]));
    }
    sign(keys, 30618, "", tags, at)
}

/// A root event (1617 patch, 1618 pull request, 1621 issue) of `repo`, which
/// it tags with `a`.
pub fn root(keys: &Keys, kind: u16, repo: &impl Display, content: &str, at: u64) -> Event {
    sign(
        keys,
        kind,
        content,
        vec![tag(&["a", &repo.to_string()])],
        at,
    )
}

/// A pull request (1618) of `owner`'s `identifier` proposing the commit
/// `tip` (`a` and `c` tags), at [`T0`].
pub fn pull_request(keys: &Keys, owner: &PublicKey, identifier: &str, tip: &str) -> Event {
    let a = coordinate(owner, identifier);
    sign(keys, 1618, "", vec![tag(&["a", &a]), tag(&["c", tip])], T0)
}

/// A pull request update (1619) of the pull request `pr` of `repo`, moving it
/// to `tip`: `E` (the pull request), `a` and `c` tags.
pub fn pr_update(keys: &Keys, pr: &EventId, repo: &impl Display, tip: &str, at: u64) -> Event {
    let tags = vec![
        tag(&["E", &pr.to_hex()]),
        tag(&["a", &repo.to_string()]),
        tag(&["c", tip]),
    ];
    sign(keys, 1619, "", tags, at)
}

/// A reply (NIP-22 comment, 1111) to `root` with both `E` and `e` tags.
pub fn reply(keys: &Keys, root: &EventId, content: &str, at: u64) -> Event {
    let tags = vec![tag(&["E", &root.to_hex()]), tag(&["e", &root.to_hex()])];
    sign(keys, 1111, content, tags, at)
}

/// A status (1630 open) of `root`: it tags its root with `e` (marker `root`)
/// and its repository with `a`, so it matches Layer 2 and Layer 3 filters
/// alike.
pub fn status(keys: &Keys, root: &EventId, repo: &impl Display, at: u64) -> Event {
    let tags = vec![
        tag(&["e", &root.to_hex(), "", "root"]),
        tag(&["a", &repo.to_string()]),
    ];
    sign(keys, 1630, "open", tags, at)
}

/// A text note quoting `value` (a coordinate or an event id) with `q`.
pub fn quote(keys: &Keys, value: &str, at: u64) -> Event {
    sign(keys, 1, "quoting", vec![tag(&["q", value])], at)
}

/// A comment (1111) tagging `repo` with an uppercase `A`.
pub fn upper_a(keys: &Keys, repo: &impl Display, at: u64) -> Event {
    let tags = vec![tag(&["A", &repo.to_string()])];
    sign(keys, 1111, "comment on repo", tags, at)
}

/// A NIP-65 relay list (10002) by `keys`: `write` as `r` tags without a
/// marker, `read` as `r` tags marked `read`.
pub fn relay_list(keys: &Keys, write: &[&RelayUrl], read: &[&RelayUrl], at: u64) -> Event {
    let mut tags: Vec<Tag> = write
        .iter()
        .map(|relay| tag(&["r", relay.as_str()]))
        .collect();
    tags.extend(read.iter().map(|relay| tag(&["r", relay.as_str(), "read"])));
    sign(keys, 10002, "", tags, at)
}

/// A GRASP server list (10317) by `keys`: one `g` tag per relay.
pub fn grasp_list(keys: &Keys, relays: &[&RelayUrl], at: u64) -> Event {
    let tags = relays
        .iter()
        .map(|relay| tag(&["g", relay.as_str()]))
        .collect();
    sign(keys, 10317, "", tags, at)
}

/// A text note no filter of ours asks for.
pub fn noise(keys: &Keys, content: &str, at: u64) -> Event {
    sign(keys, 1, content, Vec::new(), at)
}

/// `n` text notes by `keys`, `created_at` = `base`, `base + 1`, ..., content
/// `"{label} {i}"`.
pub fn notes(keys: &Keys, n: usize, base: u64, label: &str) -> Vec<Event> {
    (0..n)
        .map(|i| noise(keys, &format!("{label} {i}"), base + i as u64))
        .collect()
}

/// `event` with the signature of `other`: its id still matches its content,
/// its signature does not verify.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn announcement_lists_what_it_was_given_in_order() {
        let keys = Keys::generate();
        let maintainer = Keys::generate().public_key();
        let event = Announcement::new("repo")
            .tag(tag(&["name", "Repo"]))
            .relays(["wss://a.example.com", "wss://b.example.com"])
            .clone_urls(["https://git.example.com/repo.git"])
            .maintainers([maintainer])
            .at(42)
            .sign(&keys);
        let tags: Vec<Vec<String>> = event.tags.iter().map(|t| t.clone().to_vec()).collect();
        assert_eq!(
            tags,
            vec![
                vec!["d".to_owned(), "repo".to_owned()],
                vec!["name".to_owned(), "Repo".to_owned()],
                vec![
                    "clone".to_owned(),
                    "https://git.example.com/repo.git".to_owned()
                ],
                vec![
                    "relays".to_owned(),
                    "wss://a.example.com".to_owned(),
                    "wss://b.example.com".to_owned()
                ],
                vec!["maintainers".to_owned(), maintainer.to_hex()],
            ]
        );
        assert_eq!(event.created_at, Timestamp::from_secs(42));
        assert!(event.verify().is_ok());
    }

    #[test]
    fn forged_keeps_the_id_and_breaks_the_signature() {
        let keys = Keys::generate();
        let genuine = noise(&keys, "a", 1);
        let other = noise(&keys, "b", 2);
        let forged = forged(&genuine, &other);
        assert_eq!(forged.id, genuine.id);
        assert!(forged.verify_id());
        assert!(forged.verify().is_err());
    }

    #[test]
    fn state_names_one_ref_per_oid() {
        let keys = Keys::generate();
        let event = state(&keys, "repo", &[&"ab".repeat(20), &"cd".repeat(20)], 5);
        let refs: Vec<String> = event
            .tags
            .iter()
            .filter_map(|t| t.as_slice().first().cloned())
            .collect();
        assert_eq!(refs, vec!["d", "refs/heads/b0", "refs/heads/b1"]);
    }
}
