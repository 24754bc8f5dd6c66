//! The chaos test's data set, generated from the seed: demo-sized NIP-34 repositories on
//! three announced remote relays and one outbox relay, and the ids the own relay must end
//! with, known by construction.
//!
//! What the sync must bring (the three layers of the spec, on the relays our repositories
//! list; every announced remote is listed by some repository, so every one is connected):
//!
//! - Layer 1: every announcement (30617) and state (30618) of our repositories on any
//!   remote (a stranger's repository that does not list us is read for discovery and
//!   never stored: the own relay's URL is the service relay);
//! - Layer 2: events tagging (`a`) one of our repositories, on a relay that repository
//!   lists;
//! - Layer 3: events tagging (`e`, `E`, `q`) a root event (patch 1617, pull request 1618,
//!   issue 1621) of our repositories, on a relay the repository lists.
//!
//! And what it must not: notes without tags, the stranger's issues and their replies, and
//! events tagging our repository on a remote the repository does not list.
//!
//! Sync+ (GRASP-03): the last remote is listed by no announcement; it is the outbox relay
//! of some participants, who name it in relay lists on the announced remotes: a user's
//! NIP-65 10002 (write; an announced remote marked `read`, which is no outbox), another
//! user's 10317, and the 10317 of a maintainer with no announcement of their own (named in
//! one repository's `maintainers` tag). Every user takes part in every repository, so the
//! outbox relay is synced for each repository's Layers 2 and 3 (never Layer 1). It holds
//! conversation that exists nowhere else, all expected: comments on roots, statuses, a
//! comment tagging the repository with `A`, an issue and a comment on it; and what is not
//! our conversation, never expected: notes, another repository's announcement, state,
//! issue and a comment on that issue. The relay lists are stored like any synced event.
//! Issues misplaced on an announced remote stay unsynced: no list names those as write
//! relays.

use std::collections::{BTreeMap, BTreeSet};

use grasp_sync_test_support::ids;
use grasp_sync_test_support::nip34::{grasp_list, relay_list};
use grasp_sync_test_support::time::Timestamps;
use nostr::prelude::*;

use crate::support::{sign, tag, SeededRng};

/// Our repositories: the remotes each lists, and whether its maintainer also publishes
/// the announcement to the own relay (otherwise the sync discovers it, Layer 1).
const REPOS: [(&[usize], bool); 6] = [
    (&[0, 1, 2], true),
    (&[0, 1], true),
    (&[1, 2], true),
    (&[0], true),
    (&[2], false),
    (&[0, 2], false),
];
/// Issues, patches and pull requests per repository.
const ISSUES: usize = 20;
const PATCHES: usize = 8;
const PULL_REQUESTS: usize = 4;
/// Issues of a repository placed on a remote it does not list (not synced).
const MISPLACED: usize = 3;
/// Tagless notes spread over the remotes.
const NOISE: usize = 120;
/// The stranger's issues (its repository does not list us).
const STRANGER_ISSUES: usize = 10;
/// The repository whose announcement names a maintainer (who has no announcement of their
/// own and publishes a 10317 naming the outbox relay): discovered, not on the own relay.
const MAINTAINED: usize = 5;
/// Per repository, comments on its roots that only the outbox relay holds.
const OUTBOX_COMMENTS: usize = 3;
/// Per repository, statuses of its roots that only the outbox relay holds.
const OUTBOX_STATUSES: usize = 2;
/// Tagless notes on the outbox relay.
const OUTBOX_NOISE: usize = 20;

/// One of our repositories.
pub(crate) struct Repo {
    /// `30617:<pubkey>:<d>`.
    pub(crate) coordinate: String,
    /// The remotes it lists (indices).
    pub(crate) remotes: Vec<usize>,
    /// Its root events.
    pub(crate) roots: Vec<EventId>,
}

/// The generated data set.
pub(crate) struct DataSet {
    /// Published to the own relay before the sync starts (announcements).
    pub(crate) own: Vec<Event>,
    /// What each remote holds.
    pub(crate) remotes: Vec<Vec<Event>>,
    /// What the own relay must hold in the end.
    pub(crate) expected: BTreeSet<EventId>,
    /// Kind and a short description of every generated event (for failure messages).
    pub(crate) described: BTreeMap<EventId, String>,
    /// Our repositories (the live publisher adds to them).
    pub(crate) repos: Vec<Repo>,
    /// Authors of issues and replies.
    pub(crate) users: Vec<Keys>,
    /// The outbox relay (index in the remotes, the last): no announcement lists it.
    pub(crate) outbox: usize,
    /// The maintainer of repository [`MAINTAINED`] (set while it is generated).
    maintainer: Option<Keys>,
    /// Roots of another repository, on the outbox relay only (not ours).
    pub(crate) foreign_roots: Vec<EventId>,
}

impl DataSet {
    /// Generates the data set for `own` and `remotes` (the last is the outbox relay) from
    /// `rng`, timestamps from `base`.
    pub(crate) fn generate(
        rng: &mut SeededRng,
        own: &RelayUrl,
        remotes: &[RelayUrl],
        base: u64,
    ) -> DataSet {
        let users: Vec<Keys> = (0..4).map(|_| rng.keys()).collect();
        let mut set = DataSet {
            own: Vec::new(),
            remotes: vec![Vec::new(); remotes.len()],
            expected: BTreeSet::new(),
            described: BTreeMap::new(),
            repos: Vec::new(),
            users,
            outbox: remotes.len() - 1,
            maintainer: None,
            foreign_roots: Vec::new(),
        };
        let mut clock = Timestamps::new(base, 2);
        for (index, (listed, on_own)) in REPOS.iter().enumerate() {
            set.repository(rng, &mut clock, own, remotes, index, listed, *on_own);
        }
        set.stranger(rng, &mut clock, remotes);
        set.outbox_relay(rng, &mut clock, remotes);
        for n in 0..NOISE {
            let author = rng.pick(&set.users).clone();
            let note = sign(&author, 1, &format!("noise {n}"), Vec::new(), clock.next());
            let remote = rng.below(remotes.len() as u64) as usize;
            set.place(&note, &[remote], false, "noise note");
        }
        set
    }

    /// Records `event` on `on` (remotes), expected or not.
    pub(crate) fn place(&mut self, event: &Event, on: &[usize], expected: bool, what: &str) {
        for remote in on {
            self.remotes[*remote].push(event.clone());
        }
        if expected {
            self.expected.insert(event.id);
        }
        let expected = if expected { "expected" } else { "not expected" };
        let refers: Vec<String> = event
            .tags
            .iter()
            .filter_map(|tag| match tag.as_slice() {
                [name, value, ..] if ["a", "e", "E", "q"].contains(&name.as_str()) => {
                    Some(format!("{name}:{value}"))
                }
                _ => None,
            })
            .collect();
        self.described.insert(
            event.id,
            format!(
                "kind {} {what} on remotes {on:?} ({expected}), created_at {}, tags {refers:?}",
                event.kind, event.created_at
            ),
        );
    }

    /// The remotes announcements list (all but the outbox relay).
    pub(crate) fn announced(&self) -> Vec<usize> {
        (0..self.outbox).collect()
    }

    /// A non-empty random subset of `of`.
    pub(crate) fn subset(rng: &mut SeededRng, of: &[usize]) -> Vec<usize> {
        loop {
            let chosen: Vec<usize> = of.iter().copied().filter(|_| rng.chance(0.6)).collect();
            if !chosen.is_empty() {
                return chosen;
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn repository(
        &mut self,
        rng: &mut SeededRng,
        clock: &mut Timestamps,
        own: &RelayUrl,
        remotes: &[RelayUrl],
        index: usize,
        listed: &[usize],
        on_own: bool,
    ) {
        let maintainer = rng.keys();
        let identifier = format!("chaos-{index}");
        let mut relays = vec![own.to_string()];
        relays.extend(listed.iter().map(|r| remotes[*r].to_string()));
        let relays: Vec<&str> = std::iter::once("relays")
            .chain(relays.iter().map(String::as_str))
            .collect();
        let mut tags = vec![tag(&["d", &identifier]), tag(&relays)];
        if index == MAINTAINED {
            let named = rng.keys();
            tags.push(tag(&["maintainers", &named.public_key().to_hex()]));
            self.maintainer = Some(named);
        }
        let announcement = sign(&maintainer, 30617, "", tags, clock.next());
        if on_own {
            self.own.push(announcement.clone());
            self.expected.insert(announcement.id);
        }
        self.place(&announcement, listed, true, "announcement");
        let state = sign(
            &maintainer,
            30618,
            "",
            vec![
                tag(&["d", &identifier]),
                tag(&["refs/heads/main", &"ab".repeat(20)]),
            ],
            clock.next(),
        );
        self.place(&state, listed, true, "state");
        let coordinate = ids::coordinate(&maintainer.public_key(), &identifier);
        self.repos.push(Repo {
            coordinate: coordinate.clone(),
            remotes: listed.to_vec(),
            roots: Vec::new(),
        });
        let kinds = std::iter::repeat_n(1621, ISSUES)
            .chain(std::iter::repeat_n(1617, PATCHES))
            .chain(std::iter::repeat_n(1618, PULL_REQUESTS));
        for (n, kind) in kinds.enumerate() {
            let author = rng.pick(&self.users).clone();
            let root = sign(
                &author,
                kind,
                &format!("{coordinate} root {n}"),
                vec![tag(&["a", &coordinate])],
                clock.next(),
            );
            let on = Self::subset(rng, listed);
            self.place(&root, &on, true, "root");
            self.repos[index].roots.push(root.id);
            self.replies(rng, clock, index, &root);
        }
        let unlisted: Vec<usize> = (self.announced().into_iter())
            .filter(|r| !listed.contains(r))
            .collect();
        if !unlisted.is_empty() {
            for n in 0..MISPLACED {
                let author = rng.pick(&self.users).clone();
                let issue = sign(
                    &author,
                    1621,
                    &format!("{coordinate} misplaced {n}"),
                    vec![tag(&["a", &coordinate])],
                    clock.next(),
                );
                let on = [*rng.pick(&unlisted)];
                self.place(
                    &issue,
                    &on,
                    false,
                    "issue on a remote its repository does not list",
                );
            }
        }
    }

    /// Replies, a reaction, a quote and (for a pull request) an update to `root` of repo
    /// `index`, each on a random subset of the repository's remotes.
    pub(crate) fn replies(
        &mut self,
        rng: &mut SeededRng,
        clock: &mut Timestamps,
        index: usize,
        root: &Event,
    ) {
        let listed = self.repos[index].remotes.clone();
        let coordinate = self.repos[index].coordinate.clone();
        let root_hex = root.id.to_hex();
        let author = rng.pick(&self.users).clone();
        let mut replies = vec![
            sign(
                &author,
                1111,
                "a comment",
                vec![
                    tag(&["E", &root_hex]),
                    tag(&["K", &root.kind.to_string()]),
                    tag(&["P", &root.pubkey.to_hex()]),
                ],
                clock.next(),
            ),
            sign(
                &author,
                1622,
                "a reply",
                vec![tag(&["e", &root_hex])],
                clock.next(),
            ),
        ];
        if rng.chance(0.5) {
            replies.push(sign(
                &author,
                7,
                "+",
                vec![tag(&["e", &root_hex])],
                clock.next(),
            ));
        }
        if rng.chance(0.3) {
            replies.push(sign(
                &author,
                1,
                "look at this",
                vec![tag(&["q", &root_hex])],
                clock.next(),
            ));
        }
        if root.kind == Kind::Custom(1618) {
            replies.push(sign(
                &author,
                1619,
                "",
                vec![tag(&["E", &root_hex]), tag(&["a", &coordinate])],
                clock.next(),
            ));
        }
        for reply in &replies {
            let on = Self::subset(rng, &listed);
            self.place(reply, &on, true, "reply to a root");
        }
    }

    /// A stranger's repository listing remote 0 but not us: its announcement and state are
    /// read by Layer 1 but not ours, so not stored; its issues and their replies are not
    /// synced either.
    fn stranger(&mut self, rng: &mut SeededRng, clock: &mut Timestamps, remotes: &[RelayUrl]) {
        let stranger = rng.keys();
        let announcement = sign(
            &stranger,
            30617,
            "",
            vec![
                tag(&["d", "strangers"]),
                tag(&["relays", remotes[0].as_str()]),
            ],
            clock.next(),
        );
        self.place(&announcement, &[0], false, "stranger's announcement");
        let state = sign(
            &stranger,
            30618,
            "",
            vec![tag(&["d", "strangers"])],
            clock.next(),
        );
        self.place(&state, &[0], false, "stranger's state");
        let coordinate = ids::coordinate(&stranger.public_key(), "strangers");
        for n in 0..STRANGER_ISSUES {
            let issue = sign(
                &stranger,
                1621,
                &format!("stranger {n}"),
                vec![tag(&["a", &coordinate])],
                clock.next(),
            );
            self.place(&issue, &[0], false, "stranger's issue");
            let reply = sign(
                &stranger,
                1111,
                "stranger's reply",
                vec![tag(&["E", &issue.id.to_hex()])],
                clock.next(),
            );
            self.place(&reply, &[0], false, "reply to a stranger's issue");
        }
    }
}

impl DataSet {
    /// Sync+: the participants' relay lists naming the outbox relay (on announced remotes),
    /// and the outbox relay's own events: our conversation found nowhere else (expected)
    /// and what is not our conversation (not expected).
    fn outbox_relay(&mut self, rng: &mut SeededRng, clock: &mut Timestamps, remotes: &[RelayUrl]) {
        let outbox = &remotes[self.outbox];
        let announced = self.announced();
        let read_only = &remotes[announced[announced.len() - 1]];
        let lists = [
            (
                relay_list(&self.users[0], &[outbox], &[read_only], clock.next()),
                "a user's 10002 naming the outbox relay (write) and a remote marked read",
            ),
            (
                grasp_list(&self.users[1], &[outbox], clock.next()),
                "a user's 10317 naming the outbox relay",
            ),
        ];
        for (list, what) in &lists {
            let on = Self::subset(rng, &announced);
            self.place(list, &on, true, what);
        }
        let maintainer = self.maintainer.clone().expect("the maintained repository");
        let list = grasp_list(&maintainer, &[outbox], clock.next());
        let on = Self::subset(rng, &self.repos[MAINTAINED].remotes.clone());
        self.place(
            &list,
            &on,
            true,
            "an announcement-less maintainer's 10317 naming the outbox relay",
        );

        let at = [self.outbox];
        let guest = rng.keys();
        for index in 0..self.repos.len() {
            let coordinate = self.repos[index].coordinate.clone();
            let of = |what: &str| format!("{what} (chaos-{index})");
            for n in 0..OUTBOX_COMMENTS {
                let root = *rng.pick(&self.repos[index].roots);
                let author = if n == 0 {
                    guest.clone()
                } else {
                    rng.pick(&self.users).clone()
                };
                let comment = comment(&author, &root, &format!("outbox comment {n}"), clock.next());
                self.place(&comment, &at, true, &of("comment only on the outbox relay"));
            }
            for _ in 0..OUTBOX_STATUSES {
                let root = *rng.pick(&self.repos[index].roots);
                let author = if index == MAINTAINED {
                    maintainer.clone()
                } else {
                    rng.pick(&self.users).clone()
                };
                let kind = status_kind(rng);
                let status = status(&author, &root, &coordinate, kind, clock.next());
                self.place(&status, &at, true, &of("status only on the outbox relay"));
            }
            let author = rng.pick(&self.users).clone();
            let upper = sign(
                &author,
                1111,
                "on the repository, only on the outbox relay",
                vec![tag(&["A", &coordinate])],
                clock.next(),
            );
            self.place(&upper, &at, true, &of("A comment only on the outbox relay"));
            let issue = sign(
                &author,
                1621,
                &format!("{coordinate} outbox issue"),
                vec![tag(&["a", &coordinate])],
                clock.next(),
            );
            self.place(&issue, &at, true, &of("issue only on the outbox relay"));
            self.repos[index].roots.push(issue.id);
            let reply = comment(&guest, &issue.id, "on the outbox issue", clock.next());
            self.place(&reply, &at, true, &of("comment on an outbox-only issue"));
        }

        let other = rng.keys();
        let announcement = sign(
            &other,
            30617,
            "",
            vec![tag(&["d", "elsewhere"]), tag(&["relays", outbox.as_str()])],
            clock.next(),
        );
        self.place(
            &announcement,
            &at,
            false,
            "another repository's announcement",
        );
        let state = sign(
            &other,
            30618,
            "",
            vec![
                tag(&["d", "elsewhere"]),
                tag(&["refs/heads/main", &"cd".repeat(20)]),
            ],
            clock.next(),
        );
        self.place(&state, &at, false, "another repository's state");
        let other_coordinate = ids::coordinate(&other.public_key(), "elsewhere");
        let issue = sign(
            &other,
            1621,
            "not ours",
            vec![tag(&["a", &other_coordinate])],
            clock.next(),
        );
        self.place(&issue, &at, false, "another repository's issue");
        self.foreign_roots.push(issue.id);
        let author = self.users[0].clone();
        let reply = comment(&author, &issue.id, "on another repository", clock.next());
        self.place(&reply, &at, false, "comment on another repository's issue");
        for n in 0..OUTBOX_NOISE {
            let author = rng.pick(&self.users).clone();
            let note = sign(
                &author,
                1,
                &format!("outbox noise {n}"),
                Vec::new(),
                clock.next(),
            );
            self.place(&note, &at, false, "noise note on the outbox relay");
        }
    }
}

/// A NIP-22 comment (1111) on `root` (`E`), at `at`.
pub(crate) fn comment(keys: &Keys, root: &EventId, content: &str, at: u64) -> Event {
    sign(keys, 1111, content, vec![tag(&["E", &root.to_hex()])], at)
}

/// A status kind (1630 open … 1633 draft), chosen by `rng`.
pub(crate) fn status_kind(rng: &mut SeededRng) -> u16 {
    1630 + rng.below(4) as u16
}

/// A status of `kind` of `root` of the repository `coordinate`: `e` (marker `root`) and
/// `a`, at `at`.
pub(crate) fn status(keys: &Keys, root: &EventId, coordinate: &str, kind: u16, at: u64) -> Event {
    let tags = vec![
        tag(&["e", &root.to_hex(), "", "root"]),
        tag(&["a", coordinate]),
    ];
    sign(keys, kind, "", tags, at)
}
