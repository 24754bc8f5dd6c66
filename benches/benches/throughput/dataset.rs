//! The benchmark's data set: N signed NIP-34 events over about 500
//! repositories, deterministic (fixed keys, contents and timestamps), signed
//! once on two threads and cached as JSON lines under
//! `target/grasp-bench-data/events-<N>.jsonl`.
//!
//! Per repository: its announcement (30617, signed per run, since it lists
//! the run's relay URLs), its state (30618), then groups of a root event and
//! what refers to it, by turns:
//! - an issue (1621, `a` → repository), a status (1630–1633, `e` root marker
//!   and `a`), two NIP-22 replies (1111, `E` → root; the second also `e` →
//!   the first);
//! - a patch (1617, `a`, `t root`), a status, two replies;
//! - a pull request (1618, `a`, `c` tip), its update (1619, `E` → the pull
//!   request), a status, one reply.
//!
//! So the engine reaches every event: announcements and states by Layer 1,
//! roots and statuses by their `a` tag (Layer 2), replies and updates by the
//! root's id (Layer 3).

use std::io::{BufRead as _, BufWriter, Write as _};
use std::path::{Path, PathBuf};

use grasp_sync_test_support::field::root_parts;
use grasp_sync_test_support::ids;
use grasp_sync_test_support::nip34::{tag, Announcement};
use nostr::prelude::{
    Event, EventId, FinalizeEvent as _, Keys, Kind, PublicKey, SecretKey, Tag, Timestamp,
    UnsignedEvent,
};

/// Events per repository (so 500 repositories at N = 100 000).
const EVENTS_PER_REPO: usize = 200;
/// Repositories at most.
const MAX_REPOS: usize = 500;
/// Authors of issues, patches, pull requests and replies.
pub(crate) const USERS: usize = 64;
/// The first `created_at` (2023-11-14); announcements are older.
pub(crate) const BASE_TIME: u64 = 1_700_000_000;

/// The kinds of the data set (the filter of `Client::sync`).
pub(crate) const KINDS: [u16; 11] = [
    30617, 30618, 1617, 1618, 1619, 1621, 1630, 1631, 1632, 1633, 1111,
];

/// A deterministic key: `class` keeps maintainers and users apart.
pub(crate) fn key(class: u8, index: usize) -> Keys {
    let mut bytes = [0x5a_u8; 32];
    bytes[0] = 0x11;
    bytes[1] = class;
    bytes[24..].copy_from_slice(&(index as u64 + 1).to_be_bytes());
    Keys::new(SecretKey::from_slice(&bytes).expect("a valid secret key"))
}

/// The number of repositories for `n` events.
pub(crate) fn repo_count(n: usize) -> usize {
    (n / EVENTS_PER_REPO).clamp(1, MAX_REPOS)
}

/// The maintainer of repository `r` and its identifier.
pub(crate) fn repository(r: usize) -> (Keys, String) {
    (key(1, r), format!("bench-repo-{r:04}"))
}

/// The `a` coordinate of repository `r`.
pub(crate) fn coordinate(r: usize) -> String {
    let (maintainer, identifier) = repository(r);
    ids::coordinate(&maintainer.public_key(), &identifier)
}

/// Events to sign: the signer's index (in `keys`) and the event.
pub(crate) struct Plan {
    pub(crate) keys: Vec<Keys>,
    pub(crate) events: Vec<(usize, UnsignedEvent)>,
    pub(crate) at: u64,
}

impl Plan {
    /// Plans an event of `kind` by signer `who`; returns its id and author.
    pub(crate) fn add(
        &mut self,
        who: usize,
        kind: u16,
        content: String,
        tags: Vec<Tag>,
    ) -> (EventId, PublicKey) {
        if self.events.len() % 3 != 0 {
            self.at += 1;
        }
        let pubkey = self.keys[who].public_key();
        let mut event = UnsignedEvent::new(
            pubkey,
            Timestamp::from_secs(self.at),
            Kind::Custom(kind),
            tags,
            content,
        );
        let id = event.id();
        self.events.push((who, event));
        (id, pubkey)
    }
}

/// The root kinds by turns, and the budget of events of one group.
fn group(turn: usize) -> (u16, usize) {
    match turn % 3 {
        0 => (1621, 4),
        1 => (1617, 4),
        _ => (1618, 4),
    }
}

/// Plans repository `r`'s state and `budget` more events (its announcement
/// is signed per run).
fn plan_repository(plan: &mut Plan, r: usize, mut budget: usize) {
    let (maintainer, identifier) = repository(r);
    let owner = USERS + r;
    let coord = coordinate(r);
    let owner_hex = maintainer.public_key().to_hex();
    if budget == 0 {
        return;
    }
    let tip = format!("{:040x}", r + 1);
    plan.add(
        owner,
        30618,
        String::new(),
        vec![
            tag(&["d", &identifier]),
            tag(&["refs/heads/main", &tip]),
            tag(&["HEAD", "ref: refs/heads/main"]),
        ],
    );
    budget -= 1;
    let mut turn = 0;
    while budget > 0 {
        let (kind, size) = group(turn);
        let size = size.min(budget);
        budget -= size;
        let user = (r * 7 + turn) % USERS;
        let (tags, content) = root_parts(r, &identifier, &coord, &owner_hex, kind, turn);
        let (root, author) = plan.add(user, kind, content, tags);
        let (root_hex, author_hex) = (root.to_hex(), author.to_hex());
        let mut follow: Vec<u16> = match kind {
            1618 => vec![1619, 1630 + (turn % 4) as u16, 1111],
            _ => vec![1630 + (turn % 4) as u16, 1111, 1111],
        };
        follow.truncate(size - 1);
        let mut first_reply: Option<EventId> = None;
        for (n, follow_kind) in follow.into_iter().enumerate() {
            let who = (user + n + 1) % USERS;
            let tags = match follow_kind {
                1619 => vec![
                    tag(&["E", &root_hex, "", &author_hex]),
                    tag(&["P", &author_hex]),
                    tag(&["c", &format!("{:040x}", (r << 20) + turn + 1)]),
                ],
                1111 => {
                    let mut tags = vec![
                        tag(&["E", &root_hex, "", &author_hex]),
                        tag(&["K", &kind.to_string()]),
                        tag(&["P", &author_hex]),
                    ];
                    match first_reply {
                        Some(parent) => {
                            tags.push(tag(&["e", &parent.to_hex()]));
                            tags.push(tag(&["k", "1111"]));
                        }
                        None => {
                            tags.push(tag(&["e", &root_hex, "", &author_hex]));
                            tags.push(tag(&["k", &kind.to_string()]));
                        }
                    }
                    tags
                }
                _ => vec![
                    tag(&["e", &root_hex, "", "root"]),
                    tag(&["a", &coord]),
                    tag(&["p", &author_hex]),
                ],
            };
            let content = format!("re {turn}.{n}: looks good to me");
            let (id, _) = plan.add(who, follow_kind, content, tags);
            if follow_kind == 1111 {
                first_reply.get_or_insert(id);
            }
        }
        turn += 1;
    }
}

/// Signs `plan` on two threads, in order.
pub(crate) fn sign_all(plan: Plan) -> Vec<Event> {
    let Plan { keys, events, .. } = plan;
    let half = events.len().div_ceil(2);
    let sign = |chunk: &[(usize, UnsignedEvent)]| -> Vec<Event> {
        chunk
            .iter()
            .map(|(who, event)| event.clone().finalize(&keys[*who]).expect("signing"))
            .collect()
    };
    std::thread::scope(|scope| {
        let (first, second) = events.split_at(half.min(events.len()));
        let other = scope.spawn(|| sign(second));
        let mut signed = sign(first);
        signed.extend(other.join().expect("the signing thread"));
        signed
    })
}

/// The `n - repos` events of the data set that do not depend on the run
/// (everything but the announcements), from the cache or generated.
pub(crate) fn base_events(target: &Path, n: usize) -> Vec<Event> {
    let dir = target.join("grasp-bench-data");
    let path: PathBuf = dir.join(format!("events-{n}.jsonl"));
    if let Ok(file) = std::fs::File::open(&path) {
        let events: Result<Vec<Event>, String> = std::io::BufReader::new(file)
            .lines()
            .map(|line| {
                let line = line.map_err(|e| e.to_string())?;
                Event::from_json(line).map_err(|e| e.to_string())
            })
            .collect();
        match events {
            Ok(events) if events.len() + repo_count(n) == n => return events,
            _ => eprintln!(
                "the cached data set {} is unusable: regenerating",
                path.display()
            ),
        }
    }
    let repos = repo_count(n);
    let mut keys: Vec<Keys> = (0..USERS).map(|u| key(2, u)).collect();
    keys.extend((0..repos).map(|r| repository(r).0));
    let mut plan = Plan {
        keys,
        events: Vec::with_capacity(n),
        at: BASE_TIME,
    };
    for r in 0..repos {
        let share = n / repos + usize::from(r < n % repos);
        // One event of the share is the announcement.
        plan_repository(&mut plan, r, share - 1);
    }
    let events = sign_all(plan);
    std::fs::create_dir_all(&dir).expect("creating target/grasp-bench-data");
    write_jsonl(&path, &events);
    events
}

/// The announcements of one run: each repository lists `relays` (the
/// remote relay, then the own relay's URL).
pub(crate) fn announcements(n: usize, relays: &[String]) -> Vec<Event> {
    (0..repo_count(n))
        .map(|r| {
            let (maintainer, identifier) = repository(r);
            Announcement::new(&identifier)
                .tag(tag(&["name", &identifier]))
                .tag(tag(&[
                    "description",
                    "a repository of the throughput benchmark",
                ]))
                .clone_urls([format!("https://git.example.com/{identifier}.git")])
                .relays(relays)
                .at(BASE_TIME - 1_000 + r as u64)
                .sign(&maintainer)
        })
        .collect()
}

/// Writes `events` as JSON lines to `path`.
pub(crate) fn write_jsonl(path: &Path, events: &[Event]) {
    let file = std::fs::File::create(path).expect("creating a JSON lines file");
    let mut out = BufWriter::new(file);
    for event in events {
        writeln!(out, "{}", event.as_json()).expect("writing JSON lines");
    }
    out.flush().expect("writing JSON lines");
}
