//! The field's data set: NIP-34 repositories of ours spread over two remote relays,
//! among other people's repositories and notes, as a GRASP server meets them on public
//! relays (the 4 000 repositories / 116 000 events of [`FIELD_REPOSITORIES`]).
//!
//! Each repository of ours has [`EVENTS_PER_REPOSITORY`] (29) events: the announcement
//! (30617, listing the remotes that hold the repository's conversation, then the own
//! relay's URL, so it is ours), its state (30618), and [`ROOTS_PER_REPOSITORY`] (9) root
//! events (issue 1621, patch 1617, pull request 1618 by turns), each with a NIP-22
//! comment (1111, `E` and `e`) and either a status (1630, `e` root marker and `a`) or a
//! second comment answering the first. A third of the repositories' conversations is on
//! the first remote only, a third on both, a third on the second only; every
//! announcement and state is on both.
//!
//! Not ours, never to be stored by a GRASP sync: [`STRANGER_REPOSITORIES`] other
//! people's repositories (announcement and state, on both remotes; a public relay holds
//! far more of those than of ours), an issue on every tenth of them, and
//! [`NOTES_PER_REMOTE`] notes on each remote. A sync reading every announcement and
//! state (Layer 1) reads them all: with 4 000 repositories of ours, each remote's
//! answer to that one filter carries 5 600 × 2 ids.
//!
//! Keys are fixed (secret keys derived from small numbers) and `created_at` starts on
//! an hour boundary at least a day in the past (strfry refuses events over 3 years old
//! or 900 s ahead), so the same arguments within the hour give the same event ids;
//! signatures still differ (BIP-340 auxiliary randomness). Signing runs on every core.

use std::collections::BTreeSet;

use nostr::prelude::*;

use crate::nip34::{sign, tag, Announcement};

/// The field's size: 4 000 repositories of ours, 116 000 events.
pub const FIELD_REPOSITORIES: usize = 4_000;
/// Root events per repository (each with two more events).
pub const ROOTS_PER_REPOSITORY: usize = 9;
/// The events of one repository: announcement, state, roots and what answers them.
pub const EVENTS_PER_REPOSITORY: usize = 2 + 3 * ROOTS_PER_REPOSITORY;
/// Maintainers of our repositories (one per repository would do; real ones hold
/// several), and as many authors of the strangers' repositories.
pub const MAINTAINERS: usize = 100;
/// Authors of roots and replies.
pub const USERS: usize = 64;
/// Other people's repositories on both remotes (not listing us: never stored). With
/// 400 of ours they make each remote's Layer 1 (every announcement and state) 4 000
/// events, a 256 KB `NEG-MSG` from strfry.
pub const STRANGER_REPOSITORIES: usize = 1_600;
/// Every this many stranger repositories, one has an issue (on both remotes).
pub const STRANGER_ISSUE_EVERY: usize = 10;
/// Notes on each remote (no filter of a GRASP sync matches them).
pub const NOTES_PER_REMOTE: usize = 50;

/// The data set, placed on the two remotes.
#[derive(Clone, Debug)]
pub struct Dataset {
    /// What each remote holds (import these), ours and the strangers'.
    pub remotes: [Vec<Event>; 2],
    /// What the own relay must hold after a GRASP sync: our repositories' events,
    /// `repositories ×` [`EVENTS_PER_REPOSITORY`].
    pub expected: BTreeSet<EventId>,
}

impl Dataset {
    /// Every event on either remote: what a sync of everything (`strfry sync`) takes.
    pub fn everything(&self) -> BTreeSet<EventId> {
        self.remotes
            .iter()
            .flatten()
            .map(|event| event.id)
            .collect()
    }
}

/// Which remotes hold a repository's conversation.
#[derive(Clone, Copy, PartialEq)]
enum Holder {
    First,
    Both,
    Second,
}

impl Holder {
    fn of_repository(r: usize) -> Holder {
        match r % 3 {
            0 => Holder::First,
            1 => Holder::Both,
            _ => Holder::Second,
        }
    }

    fn on(self, remote: usize) -> bool {
        match self {
            Holder::First => remote == 0,
            Holder::Second => remote == 1,
            Holder::Both => true,
        }
    }
}

/// The keys numbered `n` (a fixed secret key per number).
fn keys(n: usize) -> Keys {
    let mut secret = [0u8; 32];
    secret[0] = 0x5e;
    secret[24..].copy_from_slice(&(n as u64 + 1).to_be_bytes());
    Keys::new(SecretKey::from_slice(&secret).expect("a valid secret key"))
}

/// `repositories` repositories ([`EVENTS_PER_REPOSITORY`] events each) whose
/// announcements list the own relay `own` and the `remotes` holding their
/// conversation, with the strangers' repositories and notes (see the module doc).
pub fn dataset(repositories: usize, own: &RelayUrl, remotes: [&RelayUrl; 2]) -> Dataset {
    // strfry refuses events over 3 years old or 900 s ahead: the last event is at least
    // a day old.
    let span = (repositories * EVENTS_PER_REPOSITORY) as u64 / 2;
    let base = (Timestamp::now().as_secs() - 86_400 - span) / 3_600 * 3_600;
    let maintainers: Vec<Keys> = (0..MAINTAINERS).map(keys).collect();
    let users: Vec<Keys> = (MAINTAINERS..MAINTAINERS + USERS).map(keys).collect();
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let chunk = repositories.div_ceil(threads).max(1);
    let parts: Vec<[Vec<Event>; 2]> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..repositories)
            .step_by(chunk)
            .map(|first| {
                let (maintainers, users) = (&maintainers, &users);
                scope.spawn(move || {
                    let mut on: [Vec<Event>; 2] = [Vec::new(), Vec::new()];
                    for r in first..(first + chunk).min(repositories) {
                        repository(r, base, own, remotes, maintainers, users, &mut on);
                    }
                    on
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|worker| worker.join().expect("a signing thread"))
            .collect()
    });
    let mut set = Dataset {
        remotes: [Vec::new(), Vec::new()],
        expected: BTreeSet::new(),
    };
    for [first, second] in parts {
        set.expected
            .extend(first.iter().chain(&second).map(|event| event.id));
        set.remotes[0].extend(first);
        set.remotes[1].extend(second);
    }
    let theirs = strangers(base, &users);
    for events in &mut set.remotes {
        events.extend(theirs.iter().cloned());
    }
    for (r, events) in set.remotes.iter_mut().enumerate() {
        for n in 0..NOTES_PER_REMOTE {
            let note = format!("note {n} on remote {r}");
            events.push(sign(
                &users[n % USERS],
                1,
                &note,
                Vec::new(),
                base + n as u64,
            ));
        }
    }
    set
}

/// Not ours: other people's repositories, which do not list us, with their states and
/// a few issues (for both remotes). Discovery reads them all (Layer 1) and stores none.
fn strangers(base: u64, users: &[Keys]) -> Vec<Event> {
    let first = MAINTAINERS + USERS;
    let strangers: Vec<Keys> = (first..first + MAINTAINERS).map(keys).collect();
    let mut theirs = Vec::with_capacity(2 * STRANGER_REPOSITORIES);
    for n in 0..STRANGER_REPOSITORIES {
        let stranger = &strangers[n % strangers.len()];
        let identifier = format!("elsewhere-{n:05}");
        let at = base + n as u64;
        theirs.push(
            Announcement::new(&identifier)
                .relays(["wss://relay.elsewhere.example"])
                .at(at)
                .sign(stranger),
        );
        let tip = format!("{:040x}", n + 1);
        theirs.push(sign(
            stranger,
            30618,
            "",
            vec![tag(&["d", &identifier]), tag(&["refs/heads/main", &tip])],
            at,
        ));
        if n % STRANGER_ISSUE_EVERY == 0 {
            let coordinate = format!("30617:{}:{identifier}", stranger.public_key().to_hex());
            theirs.push(sign(
                &users[n % users.len()],
                1621,
                "an issue of a repository that does not list us",
                vec![tag(&["a", &coordinate])],
                at + 1,
            ));
        }
    }
    theirs
}

/// Repository `r`'s events, onto the remotes that hold them.
fn repository(
    r: usize,
    base: u64,
    own: &RelayUrl,
    remotes: [&RelayUrl; 2],
    maintainers: &[Keys],
    users: &[Keys],
    on: &mut [Vec<Event>; 2],
) {
    let holder = Holder::of_repository(r);
    let maintainer = &maintainers[r % maintainers.len()];
    let identifier = format!("repo-{r:05}");
    let coordinate = format!("30617:{}:{identifier}", maintainer.public_key().to_hex());
    // Two events to a second, each repository after the one before.
    let mut ticks = 2 * base + (r * EVENTS_PER_REPOSITORY) as u64;
    let mut next = || {
        ticks += 1;
        ticks / 2
    };
    let listed: Vec<&RelayUrl> = (0..2)
        .filter(|&remote| holder.on(remote))
        .map(|remote| remotes[remote])
        .chain([own])
        .collect();
    let announced = Announcement::new(&identifier)
        .tag(tag(&["name", &identifier]))
        .clone_urls([format!("https://git.example.com/{identifier}.git")])
        .relays(listed)
        .at(next())
        .sign(maintainer);
    let tip = format!("{:040x}", r + 1);
    let state = sign(
        maintainer,
        30618,
        "",
        vec![
            tag(&["d", &identifier]),
            tag(&["refs/heads/main", &tip]),
            tag(&["HEAD", "ref: refs/heads/main"]),
        ],
        next(),
    );
    // Discovery reads announcements and states on every remote.
    for events in on.iter_mut() {
        events.push(announced.clone());
        events.push(state.clone());
    }
    let owner_hex = maintainer.public_key().to_hex();
    let mut conversation = Vec::with_capacity(3 * ROOTS_PER_REPOSITORY);
    for turn in 0..ROOTS_PER_REPOSITORY {
        let author = &users[(r * 7 + turn) % users.len()];
        let kind = [1621, 1617, 1618][turn % 3];
        let (tags, content) = root_parts(r, &identifier, &coordinate, &owner_hex, kind, turn);
        let root = sign(author, kind, &content, tags, next());
        let (root_hex, author_hex) = (root.id.to_hex(), author.public_key().to_hex());
        let replier = &users[(r * 7 + turn + 1) % users.len()];
        let comment = sign(
            replier,
            1111,
            &format!("re {turn}: looks good to me"),
            vec![
                tag(&["E", &root_hex, "", &author_hex]),
                tag(&["K", &kind.to_string()]),
                tag(&["P", &author_hex]),
                tag(&["e", &root_hex, "", &author_hex]),
                tag(&["k", &kind.to_string()]),
            ],
            next(),
        );
        let third = if turn % 2 == 0 {
            sign(
                maintainer,
                1630,
                "open",
                vec![
                    tag(&["e", &root_hex, "", "root"]),
                    tag(&["a", &coordinate]),
                    tag(&["p", &author_hex]),
                ],
                next(),
            )
        } else {
            sign(
                author,
                1111,
                &format!("re re {turn}: thanks"),
                vec![
                    tag(&["E", &root_hex, "", &author_hex]),
                    tag(&["K", &kind.to_string()]),
                    tag(&["P", &author_hex]),
                    tag(&["e", &comment.id.to_hex()]),
                    tag(&["k", "1111"]),
                ],
                next(),
            )
        };
        conversation.extend([root, comment, third]);
    }
    for (remote, events) in on.iter_mut().enumerate() {
        if holder.on(remote) {
            events.extend(conversation.iter().cloned());
        }
    }
}

/// The tags and content of root number `turn` of repository `r` (`identifier`, its
/// `coordinate`, its owner's key in hex), of `kind`: `a` and `p`, then an issue's
/// (1621) `subject`, a patch's (1617) `t root`, or a pull request's `subject` and `c`
/// tip; the content names them, 120 bytes more. The throughput benchmark's roots too.
pub fn root_parts(
    r: usize,
    identifier: &str,
    coordinate: &str,
    owner_hex: &str,
    kind: u16,
    turn: usize,
) -> (Vec<Tag>, String) {
    let mut tags = vec![tag(&["a", coordinate]), tag(&["p", owner_hex])];
    match kind {
        1621 => tags.push(tag(&["subject", &format!("issue {turn} of {identifier}")])),
        1617 => tags.push(tag(&["t", "root"])),
        _ => {
            tags.push(tag(&["subject", &format!("pull request {turn}")]));
            tags.push(tag(&["c", &format!("{:040x}", (r << 20) + turn)]));
        }
    }
    let content = format!(
        "{identifier}: kind {kind} number {turn}\n{}",
        "x".repeat(120)
    );
    (tags, content)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(port: u16) -> RelayUrl {
        RelayUrl::parse(&format!("ws://127.0.0.1:{port}")).expect("a relay url")
    }

    #[test]
    fn places_ours_by_thirds_and_the_strangers_on_both() {
        let (own, first, second) = (url(1), url(2), url(3));
        let set = dataset(6, &own, [&first, &second]);
        assert_eq!(set.expected.len(), 6 * EVENTS_PER_REPOSITORY);
        let stranger_events =
            2 * STRANGER_REPOSITORIES + STRANGER_REPOSITORIES.div_ceil(STRANGER_ISSUE_EVERY);
        // Repositories 0, 3 on the first only; 1, 4 on both; 2, 5 on the second only:
        // each remote has the 6 announcements and states, and 4 conversations.
        let ours_on_each = 6 * 2 + 4 * 3 * ROOTS_PER_REPOSITORY;
        for events in &set.remotes {
            assert_eq!(
                events.len(),
                ours_on_each + stranger_events + NOTES_PER_REMOTE
            );
        }
        let everything = set.everything();
        assert!(set.expected.is_subset(&everything));
        assert_eq!(
            everything.len(),
            set.expected.len() + stranger_events + 2 * NOTES_PER_REMOTE
        );
    }

    #[test]
    fn the_same_arguments_give_the_same_ids() {
        let (own, first, second) = (url(1), url(2), url(3));
        let a = dataset(2, &own, [&first, &second]);
        let b = dataset(2, &own, [&first, &second]);
        // Unless the hour turned between the two.
        if a.remotes[0][0].created_at == b.remotes[0][0].created_at {
            assert_eq!(a.everything(), b.everything());
        }
    }
}
