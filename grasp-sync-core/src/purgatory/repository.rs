//! Which announcements speak for a repository: the pure rule that keeps
//! strangers out of a repository's purgatory sync.
//!
//! Purgatory syncs per repository, not per bare identifier. A repository is a
//! coordinate `30617:<owner>:<identifier>`: the owner is the author of a state
//! (30618), or the repository a pull request names in its `a` tag. Its clone
//! URLs come from the announcements of that identifier by its maintainer set
//! ([`maintainer_set`]: the owner, the keys its announcement lists in its NIP-34
//! `maintainers` tag, recursively), nothing else. Anybody may announce the same
//! identifier; such an announcement contributes no URL, and the git data is
//! fetched into the owner's repository only. A maintainer who has not announced
//! the repository belongs to every repository that lists them
//! ([`home_repositories`]): no one of them, least of all a stranger listing them, decides
//! for the others.
//!
//! Each answer reads the announcements of one identifier once, through an index by
//! author ([`AnnouncementsByAuthor`]): a maintainer set costs at most
//! [`MAX_REPOSITORY_MAINTAINERS`] lookups, and the homes of a held event one set per
//! announcement, whatever order or number the announcements come in.

use std::collections::{BTreeSet, HashMap, HashSet};

use nostr::key::PublicKey;

use crate::nip34::{GitOid, RepoAnnouncement, RepoRef};
use crate::url_policy::{CloneUrl, CloneUrlPolicy};

/// The most keys in one repository's maintainer set (the owner included): the owner
/// chose them, but an announcement listing thousands, or a chain of maintainers each
/// listing more, must not make one sync read thousands of announcements and try all
/// their URLs. Keys past it are ignored (logged at debug).
pub const MAX_REPOSITORY_MAINTAINERS: usize = 32;

/// The announcements that speak for one repository, and the clone URLs held events
/// name for their own objects.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RepositoryData {
    /// The owner's announcement, then those of its maintainer set
    /// ([`maintainer_set`]), in the order the set was found.
    pub announcements: Vec<RepoAnnouncement>,
    /// Held events that name clone URLs of their own (a pull request's `clone` tags,
    /// often the contributor's fork): those URLs are sources for these events' objects
    /// only.
    pub event_sources: Vec<EventSource>,
}

/// Where one held event's own objects may also be fetched from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventSource {
    /// The objects of the event still missing.
    pub missing: BTreeSet<GitOid>,
    /// The clone URLs the event names (not yet checked by a policy).
    pub clone_urls: Vec<String>,
}

impl RepositoryData {
    /// Every clone URL to consider, in order, with repetitions: the announcements'
    /// first, then those the held events name.
    pub fn clone_urls(&self) -> impl Iterator<Item = &str> {
        let announced = self
            .announcements
            .iter()
            .flat_map(|announcement| announcement.clone_urls.iter().map(String::as_str));
        let named = self
            .event_sources
            .iter()
            .flat_map(|source| source.clone_urls.iter().map(String::as_str));
        announced.chain(named)
    }

    /// Which of `missing` to ask `url` for: all of them from a clone URL of the
    /// repository's announcements; from a URL only held events name, the missing
    /// objects of those events (a contributor's fork has the pull request's commit,
    /// not the repository's branches). URLs are compared as `policy` normalises them.
    ///
    /// Runs the policy on every listed URL: for several URLs of one attempt, build
    /// [`UrlSources`] once and ask it instead.
    pub fn oids_to_ask(
        &self,
        url: &CloneUrl,
        missing: &BTreeSet<GitOid>,
        policy: &CloneUrlPolicy,
    ) -> BTreeSet<GitOid> {
        UrlSources::new(self, policy).oids_to_ask(url, missing)
    }
}

/// What each clone URL of a repository is a source for, normalised once: built from
/// its [`RepositoryData`] and the clone-URL policy at the start of an attempt, then
/// asked once per URL tried, each answer a lookup. The policy runs once per listed
/// URL, not once per listed URL for each URL tried.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UrlSources {
    /// The URLs the repository's announcements list: sources of every object.
    announced: HashSet<CloneUrl>,
    /// The missing objects of each held event that names URLs of its own.
    event_missing: Vec<BTreeSet<GitOid>>,
    /// Each URL held events name, with those events (indices into `event_missing`),
    /// each once.
    named_by: HashMap<CloneUrl, Vec<usize>>,
}

impl UrlSources {
    /// The URLs of `data` as `policy` normalises them (those it refuses are sources of
    /// nothing), with what each is a source for.
    pub fn new(data: &RepositoryData, policy: &CloneUrlPolicy) -> Self {
        let announced = data
            .announcements
            .iter()
            .flat_map(|announcement| &announcement.clone_urls)
            .filter_map(|raw| policy.check(raw).ok())
            .collect();
        let mut named_by: HashMap<CloneUrl, Vec<usize>> = HashMap::new();
        for (index, source) in data.event_sources.iter().enumerate() {
            for url in source
                .clone_urls
                .iter()
                .filter_map(|raw| policy.check(raw).ok())
            {
                let events = named_by.entry(url).or_default();
                if events.last() != Some(&index) {
                    events.push(index);
                }
            }
        }
        UrlSources {
            announced,
            event_missing: data
                .event_sources
                .iter()
                .map(|source| source.missing.clone())
                .collect(),
            named_by,
        }
    }

    /// Which of `missing` to ask `url` for: all of them from a URL the announcements
    /// list; from a URL only held events name, the objects of `missing` those events
    /// lacked; nothing from any other URL. The same answer as
    /// [`RepositoryData::oids_to_ask`] on the data this was built from.
    pub fn oids_to_ask(&self, url: &CloneUrl, missing: &BTreeSet<GitOid>) -> BTreeSet<GitOid> {
        if self.announced.contains(url) {
            return missing.clone();
        }
        let Some(events) = self.named_by.get(url) else {
            return BTreeSet::new();
        };
        events
            .iter()
            .filter_map(|index| self.event_missing.get(*index))
            .flatten()
            .filter(|oid| missing.contains(*oid))
            .cloned()
            .collect()
    }

    /// The order in which to ask `url` for `needed` one object at a time (a server
    /// refused them together): first the objects no held event says live elsewhere (a
    /// state's, a pull request naming no URL of its own), then those of events naming
    /// `url`, last those of events naming only other URLs. Only so many are asked per attempt, so a stranger's pull requests
    /// whose tips are said to be elsewhere (and often exist nowhere) cannot push an
    /// honest event's objects past them. Each group keeps `needed`'s order.
    pub fn one_at_a_time_order(&self, url: &CloneUrl, needed: &[GitOid]) -> Vec<GitOid> {
        let named_here: HashSet<&GitOid> = self
            .named_by
            .get(url)
            .into_iter()
            .flatten()
            .filter_map(|index| self.event_missing.get(*index))
            .flatten()
            .collect();
        let said_elsewhere: HashSet<&GitOid> = self.event_missing.iter().flatten().collect();
        let rank = |oid: &GitOid| {
            if named_here.contains(oid) {
                1
            } else if said_elsewhere.contains(oid) {
                2
            } else {
                0
            }
        };
        let mut ordered = needed.to_vec();
        ordered.sort_by_key(|oid| rank(oid));
        ordered
    }
}

/// The maintainer set of `repo`, the keys whose states count for it: the owner, the
/// keys the owner's announcement lists as maintainers, and, recursively, the keys
/// listed by the announcements of the same identifier by those maintainers. A listed
/// maintainer needs no announcement of their own (they are in the set; only the keys
/// their announcement would list are not). Breadth first, in the order listed, each
/// key once (cycles end there), at most [`MAX_REPOSITORY_MAINTAINERS`] keys.
///
/// `announcements` may hold any authors and identifiers; only those of `repo`'s
/// identifier count, the first of each author.
pub fn maintainer_set(repo: &RepoRef, announcements: &[RepoAnnouncement]) -> Vec<PublicKey> {
    AnnouncementsByAuthor::new(repo.identifier(), announcements).maintainer_set(repo)
}

/// The announcements of one identifier, the first of each author, by author.
#[derive(Debug)]
pub struct AnnouncementsByAuthor<'a> {
    by_author: HashMap<PublicKey, &'a RepoAnnouncement>,
}

impl<'a> AnnouncementsByAuthor<'a> {
    /// Indexes the announcements of `identifier` among `announcements` (any authors
    /// and identifiers; the first of each author counts).
    pub fn new(identifier: &str, announcements: &'a [RepoAnnouncement]) -> Self {
        let mut by_author = HashMap::new();
        for announcement in announcements {
            if announcement.repo.identifier() == identifier {
                by_author
                    .entry(*announcement.repo.pubkey())
                    .or_insert(announcement);
            }
        }
        AnnouncementsByAuthor { by_author }
    }

    /// The announcement by `author`, if any.
    pub fn of(&self, author: &PublicKey) -> Option<&'a RepoAnnouncement> {
        self.by_author.get(author).copied()
    }

    /// Each author's announcement, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &'a RepoAnnouncement> + '_ {
        self.by_author.values().copied()
    }

    /// [`maintainer_set`] of `repo` (of the indexed identifier).
    pub fn maintainer_set(&self, repo: &RepoRef) -> Vec<PublicKey> {
        maintainer_set_by(repo, |author| self.of(author))
    }
}

/// The breadth-first walk of [`maintainer_set`], reading announcements by author.
fn maintainer_set_by<'a>(
    repo: &RepoRef,
    announcement_of: impl Fn(&PublicKey) -> Option<&'a RepoAnnouncement>,
) -> Vec<PublicKey> {
    let mut set = vec![*repo.pubkey()];
    let mut next = 0;
    while next < set.len() {
        let Some(announcement) = announcement_of(&set[next]) else {
            next += 1;
            continue;
        };
        for maintainer in &announcement.maintainers {
            if set.contains(maintainer) {
                continue;
            }
            if set.len() >= MAX_REPOSITORY_MAINTAINERS {
                tracing::debug!(%repo, kept = MAX_REPOSITORY_MAINTAINERS, "maintainer set truncated");
                return set;
            }
            set.push(*maintainer);
        }
        next += 1;
    }
    set
}

/// The [`RepositoryData`] of `repo` among `announcements` (in any order, of any
/// authors and identifiers): the owner's announcement of `repo`'s identifier, then the
/// announcements of that identifier by the rest of its [`maintainer_set`], one per
/// author, in the order of the set. No event sources.
///
/// `None` when the owner's announcement is not among them: without it nobody
/// speaks for the repository. Announcements of other authors or identifiers
/// are ignored.
pub fn select_repository(
    repo: &RepoRef,
    announcements: impl IntoIterator<Item = RepoAnnouncement>,
) -> Option<RepositoryData> {
    let same_identifier: Vec<RepoAnnouncement> = announcements
        .into_iter()
        .filter(|announcement| announcement.repo.identifier() == repo.identifier())
        .collect();
    let index = AnnouncementsByAuthor::new(repo.identifier(), &same_identifier);
    index.of(repo.pubkey())?;
    let selected = index
        .maintainer_set(repo)
        .iter()
        .filter_map(|key| index.of(key).cloned())
        .collect();
    Some(RepositoryData {
        announcements: selected,
        event_sources: Vec::new(),
    })
}

/// The repositories a held event keyed `held` belongs to when its author has not
/// announced it: every repository of `candidates` (announcements of any identifiers,
/// the first of each author counting) whose [`maintainer_set`] holds the author, in
/// key order. A co-maintainer's state counts for each repository that lists them, each
/// deciding for itself; empty when none does. One maintainer set per announcement of
/// the identifier, each at most [`MAX_REPOSITORY_MAINTAINERS`] lookups.
pub fn home_repositories(held: &RepoRef, candidates: &[RepoAnnouncement]) -> Vec<RepoRef> {
    let index = AnnouncementsByAuthor::new(held.identifier(), candidates);
    let mut homes: Vec<RepoRef> = index
        .iter()
        .map(|announcement| &announcement.repo)
        .filter(|repo| *repo != held && index.maintainer_set(repo).contains(held.pubkey()))
        .cloned()
        .collect();
    homes.sort();
    homes
}

#[cfg(test)]
mod tests {
    use nostr::key::{Keys, PublicKey};

    use super::*;

    fn announce(
        author: &PublicKey,
        identifier: &str,
        url: &str,
        maintainers: &[PublicKey],
    ) -> RepoAnnouncement {
        RepoAnnouncement {
            repo: RepoRef::new(*author, identifier).expect("valid identifier"),
            relays: Vec::new(),
            clone_urls: vec![url.to_owned()],
            maintainers: maintainers.to_vec(),
            skipped: Vec::new(),
        }
    }

    fn urls(data: &RepositoryData) -> Vec<&str> {
        data.clone_urls().collect()
    }

    #[test]
    fn a_stranger_announcing_the_same_identifier_contributes_nothing() {
        let (owner, stranger) = (Keys::generate().public_key(), Keys::generate().public_key());
        let repo = RepoRef::new(owner, "r").expect("valid");
        let all = vec![
            announce(&stranger, "r", "https://stranger.example/r.git", &[]),
            announce(&owner, "r", "https://owner.example/r.git", &[]),
        ];
        let data = select_repository(&repo, all.clone()).expect("owner announced");
        assert_eq!(urls(&data), vec!["https://owner.example/r.git"]);
        // And the stranger's repository is the stranger's alone.
        let theirs = RepoRef::new(stranger, "r").expect("valid");
        let data = select_repository(&theirs, all).expect("stranger announced");
        assert_eq!(urls(&data), vec!["https://stranger.example/r.git"]);
    }

    #[test]
    fn the_maintainer_set_is_followed_recursively_and_strangers_are_not() {
        let keys: Vec<PublicKey> = (0..6).map(|_| Keys::generate().public_key()).collect();
        let (owner, first, second, third, stranger, silent) =
            (keys[0], keys[1], keys[2], keys[3], keys[4], keys[5]);
        let repo = RepoRef::new(owner, "r").expect("valid");
        let all = vec![
            announce(&second, "r", "https://second.example/r.git", &[]),
            announce(&stranger, "r", "https://stranger.example/r.git", &[owner]),
            announce(&first, "r", "https://first.example/r.git", &[owner, third]),
            announce(&third, "r", "https://third.example/r.git", &[first]),
            announce(
                &first,
                "other",
                "https://first.example/other.git",
                &[stranger],
            ),
            announce(
                &owner,
                "r",
                "https://owner.example/r.git",
                &[owner, first, silent, second],
            ),
        ];
        assert_eq!(
            maintainer_set(&repo, &all),
            vec![owner, first, silent, second, third],
            "breadth first, a maintainer without an announcement included, cycles once"
        );
        let data = select_repository(&repo, all).expect("owner announced");
        assert_eq!(
            urls(&data),
            vec![
                "https://owner.example/r.git",
                "https://first.example/r.git",
                "https://second.example/r.git",
                "https://third.example/r.git",
            ],
            "a key only a stranger or another identifier lists takes no part"
        );
    }

    #[test]
    fn a_maintainer_without_an_announcement_belongs_to_the_repository_listing_them() {
        let keys: Vec<PublicKey> = (0..3).map(|_| Keys::generate().public_key()).collect();
        let (owner, maintainer, stranger) = (keys[0], keys[1], keys[2]);
        let all = vec![
            announce(
                &stranger,
                "r",
                "https://stranger.example/r.git",
                &[stranger],
            ),
            announce(&owner, "r", "https://owner.example/r.git", &[maintainer]),
        ];
        let held = RepoRef::new(maintainer, "r").expect("valid");
        assert_eq!(
            home_repositories(&held, &all),
            vec![RepoRef::new(owner, "r").expect("valid")]
        );
        let unlisted = RepoRef::new(Keys::generate().public_key(), "r").expect("valid");
        assert_eq!(home_repositories(&unlisted, &all), Vec::<RepoRef>::new());
        let other_identifier = RepoRef::new(maintainer, "s").expect("valid");
        assert_eq!(
            home_repositories(&other_identifier, &all),
            Vec::<RepoRef>::new()
        );
    }

    #[test]
    fn a_maintainer_listed_by_a_stranger_too_belongs_to_both_repositories() {
        let (owner, maintainer) = (Keys::generate().public_key(), Keys::generate().public_key());
        // Whatever the stranger's key compares as.
        let strangers: Vec<PublicKey> = (0..8).map(|_| Keys::generate().public_key()).collect();
        let mut all = vec![announce(
            &owner,
            "r",
            "https://owner.example/r.git",
            &[maintainer],
        )];
        for stranger in &strangers {
            all.push(announce(
                stranger,
                "r",
                "https://withholds.example/r.git",
                &[maintainer],
            ));
        }
        let held = RepoRef::new(maintainer, "r").expect("valid");
        let homes = home_repositories(&held, &all);
        assert_eq!(homes.len(), 9, "{homes:?}");
        assert!(homes.contains(&RepoRef::new(owner, "r").expect("valid")));
        let mut sorted = homes.clone();
        sorted.sort();
        assert_eq!(homes, sorted, "in key order, the same every time");
    }

    #[test]
    fn a_url_only_an_event_names_is_asked_for_that_events_objects() {
        let policy = CloneUrlPolicy::new();
        let owner = Keys::generate().public_key();
        let oid = |n: u8| GitOid::parse(&format!("{n:02x}").repeat(20)).expect("hex");
        let mut data = RepositoryData {
            announcements: vec![announce(&owner, "r", "https://owner.example/r.git", &[])],
            event_sources: vec![EventSource {
                missing: BTreeSet::from([oid(2)]),
                clone_urls: vec!["https://fork.example/r.git".to_owned()],
            }],
        };
        let missing = BTreeSet::from([oid(1), oid(2)]);
        let ask = |data: &RepositoryData, url: &str| {
            let url = policy.check(url).expect("allowed");
            data.oids_to_ask(&url, &missing, &policy)
        };
        assert_eq!(ask(&data, "https://owner.example/r.git"), missing);
        assert_eq!(
            ask(&data, "https://fork.example/r.git"),
            BTreeSet::from([oid(2)])
        );
        assert_eq!(
            ask(&data, "https://elsewhere.example/r.git"),
            BTreeSet::new()
        );
        assert_eq!(
            urls(&data),
            vec!["https://owner.example/r.git", "https://fork.example/r.git"]
        );
        data.event_sources[0].clone_urls = vec!["https://owner.example/r.git".to_owned()];
        assert_eq!(ask(&data, "https://owner.example/r.git"), missing);
    }

    /// The answer before [`UrlSources`]: the policy run on every listed URL for each
    /// URL asked about.
    fn oids_to_ask_by_scanning(
        data: &RepositoryData,
        url: &CloneUrl,
        missing: &BTreeSet<GitOid>,
        policy: &CloneUrlPolicy,
    ) -> BTreeSet<GitOid> {
        let is_url = |raw: &String| policy.check(raw).is_ok_and(|checked| checked == *url);
        if data
            .announcements
            .iter()
            .any(|announcement| announcement.clone_urls.iter().any(is_url))
        {
            return missing.clone();
        }
        data.event_sources
            .iter()
            .filter(|source| source.clone_urls.iter().any(is_url))
            .flat_map(|source| source.missing.iter())
            .filter(|oid| missing.contains(*oid))
            .cloned()
            .collect()
    }

    #[test]
    fn url_sources_built_once_answer_as_the_scan_did_for_every_url() {
        let policy = CloneUrlPolicy::new();
        let owner = Keys::generate().public_key();
        let oid = |n: u8| GitOid::parse(&format!("{n:02x}").repeat(20)).expect("hex");
        // Hosts spelt in both cases, URLs listed twice, by announcements and events
        // alike, URLs the policy refuses, objects some events share.
        let host = |n: usize| {
            if n % 2 == 0 {
                format!("https://h{}.example/r.git", n % 7)
            } else {
                format!("https://H{}.EXAMPLE/r.git", n % 7)
            }
        };
        let mut announcement = announce(&owner, "r", &host(0), &[]);
        announcement.clone_urls.extend([
            host(1),
            host(7),
            "ext::sh -c evil".to_owned(),
            "git@github.com:a/b.git".to_owned(),
        ]);
        let event_sources: Vec<EventSource> = (0..12_u8)
            .map(|n| EventSource {
                missing: BTreeSet::from([oid(n), oid(n % 3 + 100)]),
                clone_urls: (0..3)
                    .map(|k| host(usize::from(n) + k))
                    .chain(["file:///etc".to_owned(), host(usize::from(n))])
                    .collect(),
            })
            .collect();
        let data = RepositoryData {
            announcements: vec![announcement],
            event_sources,
        };
        let sources = UrlSources::new(&data, &policy);
        let missing: BTreeSet<GitOid> = (0..8).chain(100..102).map(oid).collect();
        let asked: Vec<CloneUrl> = (0..14)
            .map(host)
            .chain(["https://elsewhere.example/r.git".to_owned()])
            .filter_map(|raw| policy.check(&raw).ok())
            .collect();
        let mut kinds = BTreeSet::new();
        for url in &asked {
            let answer = sources.oids_to_ask(url, &missing);
            assert_eq!(
                answer,
                oids_to_ask_by_scanning(&data, url, &missing, &policy),
                "{url}"
            );
            assert_eq!(answer, data.oids_to_ask(url, &missing, &policy), "{url}");
            kinds.insert(if answer == missing {
                "all"
            } else if answer.is_empty() {
                "none"
            } else {
                "some"
            });
        }
        assert_eq!(
            kinds,
            BTreeSet::from(["all", "none", "some"]),
            "every kind of answer checked"
        );
    }

    #[test]
    fn without_the_owners_announcement_nobody_speaks_for_the_repository() {
        let (owner, maintainer) = (Keys::generate().public_key(), Keys::generate().public_key());
        let repo = RepoRef::new(owner, "r").expect("valid");
        let all = vec![announce(
            &maintainer,
            "r",
            "https://m.example/r.git",
            &[owner],
        )];
        assert_eq!(select_repository(&repo, all), None);
        assert_eq!(select_repository(&repo, Vec::new()), None);
    }

    #[test]
    fn at_most_the_first_maintainers_are_read() {
        let owner = Keys::generate().public_key();
        let many: Vec<PublicKey> = (0..MAX_REPOSITORY_MAINTAINERS + 5)
            .map(|_| Keys::generate().public_key())
            .collect();
        let announcement = announce(&owner, "r", "https://owner.example/r.git", &many);
        let set = maintainer_set(&announcement.repo, std::slice::from_ref(&announcement));
        assert_eq!(set.len(), MAX_REPOSITORY_MAINTAINERS);
        assert_eq!(set[0], owner);
        assert_eq!(set[1..], many[..MAX_REPOSITORY_MAINTAINERS - 1]);
    }
}
