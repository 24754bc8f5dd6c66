//! The generated NIP-34 data set: repositories with real commits on the git
//! server, and the events the remote relays hold: announcements, states,
//! patches, pull requests (with real commits) and their updates, issues,
//! NIP-22 replies, reactions, quotes, plus unrelated noise.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use grasp_purgatory::NpubLayout;
use grasp_sync_test_support::ids::coordinate;
use grasp_sync_test_support::nip34::{self, tag, Announcement};
use grasp_sync_test_support::time::Timestamps;
use nostr::prelude::{Event, EventId, Keys, RelayUrl, Tag, Timestamp};

use crate::git_support::{init_bare_repo, SourceRepo};

/// One repository of the data set.
struct RepoSpec {
    /// Its `d` identifier.
    identifier: &'static str,
    /// The remote relays its announcement lists (indices into the remotes).
    remotes: &'static [usize],
    /// Whether its maintainer publishes the announcement to the own relay
    /// (otherwise the sync discovers it on a remote, Layer 1).
    announce_on_own: bool,
}

/// The repositories: three on both remotes, one on each remote alone; the
/// last one is never published to the own relay.
const REPOS: [RepoSpec; 5] = [
    RepoSpec {
        identifier: "demo-alpha",
        remotes: &[0, 1],
        announce_on_own: true,
    },
    RepoSpec {
        identifier: "demo-beta",
        remotes: &[0, 1],
        announce_on_own: true,
    },
    RepoSpec {
        identifier: "demo-gamma",
        remotes: &[0, 1],
        announce_on_own: true,
    },
    RepoSpec {
        identifier: "demo-delta",
        remotes: &[0],
        announce_on_own: true,
    },
    RepoSpec {
        identifier: "demo-epsilon",
        remotes: &[1],
        announce_on_own: false,
    },
];

/// Issues per repository.
const ISSUES: usize = 40;
/// Patches per repository (the first is the root of the series).
const PATCHES: usize = 10;
/// Pull requests per repository, each with one update.
const PULL_REQUESTS: usize = 4;
/// NIP-22 replies per root event (the second answers the first).
const REPLIES_PER_ROOT: usize = 2;
/// Unrelated text notes.
const NOISE_NOTES: usize = 200;
/// Issues of a stranger's repository that does not list our relay.
const STRANGER_ISSUES: usize = 12;

/// Where the data set is served and stored.
pub(crate) struct Endpoints<'a> {
    /// The own relay (the service URL the announcements list).
    pub(crate) own: &'a RelayUrl,
    /// The remote relays.
    pub(crate) remotes: [&'a RelayUrl; 2],
    /// The clone URL of a repository directory name (`<identifier>.git`).
    pub(crate) clone_url: &'a dyn Fn(&str) -> String,
    /// Where the source repositories are created (served over HTTP).
    pub(crate) served: &'a Path,
    /// Purgatory's git root: an empty bare repository per repository.
    pub(crate) git_root: &'a Path,
}

/// A repository's local bare repository and the commits its events reference.
pub(crate) struct RepoCommits {
    /// The repository identifier.
    pub(crate) identifier: String,
    /// Its bare repository under the git root (empty at start).
    pub(crate) local: PathBuf,
    /// Every commit a state, pull request or update names.
    pub(crate) oids: Vec<String>,
}

/// The generated world of events.
pub(crate) struct DataSet {
    /// Events each remote relay holds (index as in [`Endpoints::remotes`]).
    pub(crate) remote_events: [Vec<Event>; 2],
    /// Announcements the maintainers publish to the own relay.
    pub(crate) own_announcements: Vec<Event>,
    /// What the generator made as noise (no filter of ours should match it).
    pub(crate) noise: BTreeSet<EventId>,
    /// The repositories and their referenced commits.
    pub(crate) repos: Vec<RepoCommits>,
}

impl DataSet {
    /// Repositories the sync should end up tracking.
    pub(crate) fn repository_count(&self) -> usize {
        self.repos.len()
    }
}

/// Generates the data set: source repositories under `served`, empty bare
/// repositories under the git root, signed events placed on the remotes.
pub(crate) fn generate(ends: &Endpoints<'_>) -> DataSet {
    let base = Timestamp::now().as_secs() - 7 * 24 * 3600;
    let mut gen = Generator {
        at: Timestamps::new(base, 2),
        count: 0,
        remote_events: [Vec::new(), Vec::new()],
        noise: BTreeSet::new(),
    };
    let users: Vec<Keys> = (0..4).map(|_| Keys::generate()).collect();
    let mut own_announcements = Vec::new();
    let mut repos = Vec::new();
    for spec in &REPOS {
        let (announcement, commits) = gen.repository(spec, &users, ends);
        if spec.announce_on_own {
            own_announcements.push(announcement);
        }
        repos.push(commits);
    }
    gen.noise(&users, ends);
    DataSet {
        remote_events: gen.remote_events,
        own_announcements,
        noise: gen.noise,
        repos,
    }
}

/// Signs events with increasing timestamps (two share a second) and
/// places them on the remotes.
struct Generator {
    /// The `created_at` of the events, two to a second.
    at: Timestamps,
    /// Events signed so far.
    count: u64,
    /// Events placed on each remote.
    remote_events: [Vec<Event>; 2],
    /// Events made as noise.
    noise: BTreeSet<EventId>,
}

impl Generator {
    /// A signed event of `kind` by `keys`.
    fn sign(&mut self, keys: &Keys, kind: u16, content: &str, tags: Vec<Tag>) -> Event {
        let at = self.next_at();
        nip34::sign(keys, kind, content, tags, at)
    }

    /// The `created_at` of the next event (counted: [`Generator::place`] takes
    /// turns by the count).
    fn next_at(&mut self) -> u64 {
        self.count += 1;
        self.at.next()
    }

    /// Puts `event` on one or both of `remotes` (by turns).
    fn place(&mut self, event: &Event, remotes: &[usize]) {
        let chosen: Vec<usize> = match remotes {
            [only] => vec![*only],
            _ => match self.count % 3 {
                0 => vec![remotes[0]],
                1 => vec![remotes[1]],
                _ => remotes.to_vec(),
            },
        };
        for remote in chosen {
            self.remote_events[remote].push(event.clone());
        }
    }

    /// Puts `event` on every one of `remotes`.
    fn place_all(&mut self, event: &Event, remotes: &[usize]) {
        for remote in remotes {
            self.remote_events[*remote].push(event.clone());
        }
    }

    /// One repository: commits on the git server, its events on its remotes.
    fn repository(
        &mut self,
        spec: &RepoSpec,
        users: &[Keys],
        ends: &Endpoints<'_>,
    ) -> (Event, RepoCommits) {
        let id = spec.identifier;
        let maintainer = Keys::generate();
        let source = SourceRepo::create(ends.served.join(format!("{id}.git")));
        for step in ["initial import", "add a README", "fix the build"] {
            source.commit(&format!("{id}: {step}"));
        }
        let main = source.tip().expect("the main branch has a tip");
        let dev = source.commit_unreferenced(&format!("{id}: work in progress"));
        source.set_ref("refs/heads/dev", &dev);
        let clone_url = (ends.clone_url)(&format!("{id}.git"));
        let coordinate = coordinate(&maintainer.public_key(), id);
        let relays = std::iter::once(ends.own).chain(spec.remotes.iter().map(|r| ends.remotes[*r]));
        let announcement = Announcement::new(id)
            .tag(tag(&["name", id]))
            .tag(tag(&["description", "a repository of the grasp-sync demo"]))
            .clone_urls([&clone_url])
            .relays(relays)
            .at(self.next_at())
            .sign(&maintainer);
        self.place_all(&announcement, spec.remotes);
        let state = self.sign(
            &maintainer,
            30618,
            "",
            vec![
                tag(&["d", id]),
                tag(&["refs/heads/main", &main]),
                tag(&["refs/heads/dev", &dev]),
                tag(&["HEAD", "ref: refs/heads/main"]),
            ],
        );
        self.place_all(&state, spec.remotes);
        let mut oids = vec![main, dev];
        let ctx = RepoContext {
            coordinate: &coordinate,
            maintainer: &maintainer,
            remotes: spec.remotes,
            users,
        };
        let mut roots = self.issues_and_patches(&ctx);
        roots.extend(self.pull_requests(&ctx, &source, &clone_url, &mut oids));
        for root in &roots {
            self.replies(&ctx, root);
        }
        self.quotes_and_comments(&ctx, &roots);
        let local = NpubLayout::new(ends.git_root)
            .path_of(&maintainer.public_key(), id)
            .expect("a valid repository path");
        init_bare_repo(&local);
        let commits = RepoCommits {
            identifier: id.to_owned(),
            local,
            oids,
        };
        (announcement, commits)
    }

    /// Issues and a patch series.
    fn issues_and_patches(&mut self, ctx: &RepoContext<'_>) -> Vec<Event> {
        let mut roots = Vec::new();
        let maintainer = ctx.maintainer.public_key().to_hex();
        for n in 0..ISSUES {
            let user = &ctx.users[n % ctx.users.len()];
            let issue = self.sign(
                user,
                1621,
                &format!("issue {n}: something is off"),
                vec![
                    tag(&["a", ctx.coordinate]),
                    tag(&["p", &maintainer]),
                    tag(&["subject", &format!("issue {n}")]),
                ],
            );
            self.place(&issue, ctx.remotes);
            roots.push(issue);
        }
        let mut first_patch: Option<EventId> = None;
        for n in 0..PATCHES {
            let user = &ctx.users[(n + 1) % ctx.users.len()];
            let mut tags = vec![tag(&["a", ctx.coordinate]), tag(&["p", &maintainer])];
            match first_patch {
                None => tags.push(tag(&["t", "root"])),
                Some(root) => tags.push(tag(&["e", &root.to_hex(), "", "reply"])),
            }
            let patch = self.sign(user, 1617, &format!("From: patch {n}\n---\n"), tags);
            first_patch.get_or_insert(patch.id);
            self.place(&patch, ctx.remotes);
            roots.push(patch);
        }
        roots
    }

    /// Pull requests with real commits, each with an update to a new tip.
    fn pull_requests(
        &mut self,
        ctx: &RepoContext<'_>,
        source: &SourceRepo,
        clone_url: &str,
        oids: &mut Vec<String>,
    ) -> Vec<Event> {
        let mut roots = Vec::new();
        let maintainer = ctx.maintainer.public_key().to_hex();
        for n in 0..PULL_REQUESTS {
            let author = &ctx.users[n % ctx.users.len()];
            let tip = source.commit_unreferenced(&format!("{}: proposal {n}", ctx.coordinate));
            let pr = self.sign(
                author,
                1618,
                &format!("please merge proposal {n}"),
                vec![
                    tag(&["a", ctx.coordinate]),
                    tag(&["p", &maintainer]),
                    tag(&["subject", &format!("proposal {n}")]),
                    tag(&["c", &tip]),
                    tag(&["clone", clone_url]),
                    tag(&["branch-name", &format!("proposal-{n}")]),
                ],
            );
            self.place(&pr, ctx.remotes);
            let revised =
                source.commit_unreferenced(&format!("{}: proposal {n}, revised", ctx.coordinate));
            let update = self.sign(
                author,
                1619,
                "",
                vec![
                    tag(&["a", ctx.coordinate]),
                    tag(&["E", &pr.id.to_hex()]),
                    tag(&["P", &author.public_key().to_hex()]),
                    tag(&["c", &revised]),
                    tag(&["clone", clone_url]),
                ],
            );
            self.place(&update, ctx.remotes);
            oids.extend([tip, revised]);
            roots.push(pr);
        }
        roots
    }

    /// NIP-22 replies to a root event (the second answers the first), and a
    /// reaction.
    fn replies(&mut self, ctx: &RepoContext<'_>, root: &Event) {
        let kind = root.kind.as_u16().to_string();
        let root_author = root.pubkey.to_hex();
        let mut parent: (String, String, String) =
            (root.id.to_hex(), kind.clone(), root_author.clone());
        for n in 0..REPLIES_PER_ROOT {
            let user = &ctx.users[(n + 2) % ctx.users.len()];
            let reply = self.sign(
                user,
                1111,
                &format!("reply {n}"),
                vec![
                    tag(&["E", &root.id.to_hex(), "", &root_author]),
                    tag(&["K", &kind]),
                    tag(&["P", &root_author]),
                    tag(&["e", &parent.0, "", &parent.2]),
                    tag(&["k", &parent.1]),
                    tag(&["p", &parent.2]),
                ],
            );
            self.place(&reply, ctx.remotes);
            parent = (
                reply.id.to_hex(),
                "1111".to_owned(),
                user.public_key().to_hex(),
            );
        }
        let reaction = self.sign(
            &ctx.users[0],
            7,
            "+",
            vec![tag(&["e", &root.id.to_hex()]), tag(&["p", &root_author])],
        );
        self.place(&reaction, ctx.remotes);
    }

    /// Notes quoting root events and the repository (`q`), and NIP-22
    /// comments on the repository itself (`A`).
    fn quotes_and_comments(&mut self, ctx: &RepoContext<'_>, roots: &[Event]) {
        for root in roots.iter().take(3) {
            let quote = self.sign(
                &ctx.users[1],
                1,
                &format!("look at nostr:{}", root.id.to_hex()),
                vec![tag(&["q", &root.id.to_hex(), "", &root.pubkey.to_hex()])],
            );
            self.place(&quote, ctx.remotes);
        }
        let quote = self.sign(
            &ctx.users[2],
            1,
            "a repository worth a look",
            vec![tag(&["q", ctx.coordinate])],
        );
        self.place(&quote, ctx.remotes);
        let maintainer = ctx.maintainer.public_key().to_hex();
        for n in 0..2 {
            let comment = self.sign(
                &ctx.users[3],
                1111,
                &format!("comment {n} on the repository"),
                vec![
                    tag(&["A", ctx.coordinate]),
                    tag(&["K", "30617"]),
                    tag(&["P", &maintainer]),
                ],
            );
            self.place(&comment, ctx.remotes);
        }
    }

    /// Unrelated events: text notes and replies to them, and a stranger's
    /// repository (its announcement is not noise: Layer 1 syncs every
    /// announcement; its issues and replies are).
    fn noise(&mut self, users: &[Keys], ends: &Endpoints<'_>) {
        let both = [0, 1];
        for n in 0..NOISE_NOTES {
            let note = self.sign(&users[n % users.len()], 1, &format!("gm {n}"), Vec::new());
            self.place(&note, &both);
            self.noise.insert(note.id);
            if n % 4 == 0 {
                let reply = self.sign(
                    &users[(n + 1) % users.len()],
                    1111,
                    "gm to you too",
                    vec![tag(&["E", &note.id.to_hex()]), tag(&["K", "1"])],
                );
                self.place(&reply, &both);
                self.noise.insert(reply.id);
            }
        }
        let stranger = Keys::generate();
        let identifier = "someone-elses-repo";
        let announcement = self.sign(
            &stranger,
            30617,
            "",
            vec![
                tag(&["d", identifier]),
                tag(&["clone", &(ends.clone_url)("someone-elses-repo.git")]),
                tag(&["relays", ends.remotes[0].as_str()]),
            ],
        );
        self.place_all(&announcement, &[0]);
        let coordinate = coordinate(&stranger.public_key(), identifier);
        for n in 0..STRANGER_ISSUES {
            let issue = self.sign(
                &users[n % users.len()],
                1621,
                &format!("stranger issue {n}"),
                vec![tag(&["a", &coordinate])],
            );
            self.place(&issue, &both);
            self.noise.insert(issue.id);
            let reply = self.sign(
                &users[(n + 1) % users.len()],
                1111,
                "same here",
                vec![tag(&["E", &issue.id.to_hex()]), tag(&["K", "1621"])],
            );
            self.place(&reply, &both);
            self.noise.insert(reply.id);
        }
    }
}

/// What the events of one repository share.
struct RepoContext<'a> {
    /// `30617:<maintainer>:<identifier>`.
    coordinate: &'a str,
    /// The maintainer.
    maintainer: &'a Keys,
    /// The remotes its events go to.
    remotes: &'a [usize],
    /// The contributors.
    users: &'a [Keys],
}
