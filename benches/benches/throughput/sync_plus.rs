//! The Sync+ world of paths (i) and (j) (GRASP-03): the data set's
//! participants publish relay lists, and some of their conversation is only
//! on their own outbox relays.
//!
//! - **Relay lists** (kind 10002, signed per run since they name the run's
//!   relay URLs, on the remote relay, which every announcement lists): each
//!   of the 64 users and the maintainers of the first
//!   [`LIST_MAINTAINERS`] repositories. Most name 2 of the
//!   [`POPULAR`] shared "popular" outbox relays (every fourth user all
//!   three); users `0..PERSONAL` add an outbox relay of their own; every
//!   fifth user marks the inbox relay `read` (it is in no list as a write
//!   relay, so it is never synced).
//! - **Outbox-only conversation** (on each of its author's write relays,
//!   never on the remote): for 2 of every 5 root events of the data set, a
//!   NIP-22 reply (1111, `E` → root) or a status (1630–1633, `e` root
//!   marker and `a`; by the repository's maintainer when it publishes a
//!   list, else by the root's author): ~10 % more events.
//! - **Noise** (on the same relays, never to be stored): reactions (kind
//!   7) to the data set's replies (not to root events nor repositories:
//!   Layers 2 and 3 ask for every kind tagging those, so a reaction to a
//!   root event is conversation) and text notes.
//! - **The inbox relay** (marked `read` only): replies to roots that must
//!   never arrive.
//!
//! Every outbox relay is a `bench_relay` process like the remote.

use std::collections::HashMap;
use std::path::PathBuf;

use grasp_sync_test_support::nip34::{relay_list, tag};
use nostr::prelude::{Event, EventId, Keys, PublicKey, RelayUrl, Tag};

use super::dataset::{self, Plan, BASE_TIME, USERS};
use super::relays::{free_port, RelayProcess, RelaySpec, RunDir};

/// Shared outbox relays most lists name.
pub(crate) const POPULAR: usize = 3;
/// Users with an outbox relay of their own (users `0..PERSONAL`).
pub(crate) const PERSONAL: usize = 8;
/// Maintainers of repositories `0..LIST_MAINTAINERS` publish a list too.
pub(crate) const LIST_MAINTAINERS: usize = 8;
/// The inbox relay: after the popular and personal ones.
const INBOX: usize = POPULAR + PERSONAL;
/// Outbox relays, the inbox included.
pub(crate) const RELAYS: usize = INBOX + 1;
/// `created_at` of the outbox-only events (after the data set's).
const OUTBOX_TIME: u64 = BASE_TIME + 10_000_000;
/// `created_at` of the relay lists.
const LIST_TIME: u64 = BASE_TIME + 20_000_000;

/// The signer index (in [`Plan::keys`]) of maintainer `m`.
fn maintainer_signer(m: usize) -> usize {
    USERS + m
}

/// The write relays (indices) of user `u`.
fn user_writes(u: usize) -> Vec<usize> {
    let mut relays = if u % 4 == 3 {
        (0..POPULAR).collect()
    } else {
        vec![u % POPULAR, (u + 1) % POPULAR]
    };
    if u < PERSONAL {
        relays.push(POPULAR + u);
    }
    relays
}

/// The write relays (indices) of maintainer `m` (< [`LIST_MAINTAINERS`]).
fn maintainer_writes(m: usize) -> Vec<usize> {
    vec![(m + 2) % POPULAR, m % POPULAR]
}

/// The write relays of signer `who` (a user, or a maintainer with a list).
fn writes_of(who: usize) -> Vec<usize> {
    if who < USERS {
        user_writes(who)
    } else {
        maintainer_writes(who - USERS)
    }
}

/// The run-independent part of the world: signed events per relay.
pub(crate) struct World {
    /// Per relay (index): the events it holds.
    pub(crate) per_relay: Vec<Vec<Event>>,
    /// Conversation only on outbox relays: each must reach the store.
    pub(crate) outbox_only: Vec<EventId>,
    /// Noise and the inbox's replies: none may reach the store.
    pub(crate) never: Vec<EventId>,
}

/// Builds the world over the data set `base` (`n` events): signed on two
/// threads, a second or so; not cached.
pub(crate) fn world(base: &[Event], n: usize) -> World {
    let repos = dataset::repo_count(n);
    let users: HashMap<PublicKey, usize> = (0..USERS)
        .map(|u| (dataset::key(2, u).public_key(), u))
        .collect();
    let coordinates: HashMap<String, usize> =
        (0..repos).map(|r| (dataset::coordinate(r), r)).collect();
    let mut keys: Vec<Keys> = (0..USERS).map(|u| dataset::key(2, u)).collect();
    keys.extend((0..LIST_MAINTAINERS.min(repos)).map(|m| dataset::repository(m).0));
    let mut plan = Plan {
        keys,
        events: Vec::new(),
        at: OUTBOX_TIME,
    };
    // (where: relay indices, must arrive)
    let mut placed: Vec<(Vec<usize>, bool)> = Vec::new();
    // Reactions go to replies: an event tagging a root event or a
    // repository is the repository's conversation (Layers 2 and 3 ask for
    // every kind), one tagging a reply is not.
    let replies: Vec<&Event> = base.iter().filter(|e| e.kind.as_u16() == 1111).collect();
    let roots = base
        .iter()
        .filter(|e| matches!(e.kind.as_u16(), 1617 | 1618 | 1621));
    for (j, root) in roots.enumerate() {
        let Some(&author) = users.get(&root.pubkey) else {
            continue;
        };
        let Some(r) = root
            .tags
            .iter()
            .map(|t| t.as_slice())
            .find(|t| t.first().is_some_and(|name| name == "a"))
            .and_then(|t| t.get(1))
            .and_then(|coordinate| coordinates.get(coordinate.as_str()).copied())
        else {
            continue;
        };
        let coordinate = dataset::coordinate(r);
        let (root_hex, author_hex) = (root.id.to_hex(), root.pubkey.to_hex());
        let kind = root.kind.as_u16().to_string();
        match j % 5 {
            0 => {
                let who = (author + 9) % USERS;
                let tags = reply_tags(&root_hex, &author_hex, &kind);
                plan.add(who, 1111, format!("outbox reply {j}"), tags);
                placed.push((writes_of(who), true));
            }
            2 => {
                let who = if r < LIST_MAINTAINERS {
                    maintainer_signer(r)
                } else {
                    author
                };
                let status = 1630 + ((j / 5) % 4) as u16;
                let tags = vec![
                    tag(&["e", &root_hex, "", "root"]),
                    tag(&["a", &coordinate]),
                    tag(&["p", &author_hex]),
                ];
                plan.add(who, status, format!("outbox status {j}"), tags);
                placed.push((writes_of(who), true));
            }
            _ => {}
        }
        if j % 10 == 1 && !replies.is_empty() {
            let who = (author + 5) % USERS;
            let reply = replies[j % replies.len()];
            let tags: Vec<Tag> = vec![
                tag(&["e", &reply.id.to_hex()]),
                tag(&["p", &reply.pubkey.to_hex()]),
                tag(&["k", "1111"]),
            ];
            plan.add(who, 7, "+".into(), tags);
            placed.push((writes_of(who), false));
        }
        if j % 25 == 3 {
            let who = (author + 17) % USERS;
            let tags = reply_tags(&root_hex, &author_hex, &kind);
            plan.add(who, 1111, format!("inbox reply {j}"), tags);
            placed.push((vec![INBOX], false));
        }
    }
    for u in 0..USERS {
        for i in 0..20 {
            plan.add(u, 1, format!("note {i} by user {u}"), Vec::new());
            placed.push((user_writes(u), false));
        }
    }
    let signed = dataset::sign_all(plan);
    let mut world = World {
        per_relay: vec![Vec::new(); RELAYS],
        outbox_only: Vec::new(),
        never: Vec::new(),
    };
    for (event, (relays, arrives)) in signed.into_iter().zip(placed) {
        if arrives {
            world.outbox_only.push(event.id);
        } else {
            world.never.push(event.id);
        }
        for relay in relays {
            world.per_relay[relay].push(event.clone());
        }
    }
    world
}

/// The outbox relays of one run, running; stopped on drop.
pub(crate) struct Outboxes {
    /// Their URLs, by index (the inbox last).
    pub(crate) urls: Vec<RelayUrl>,
    /// The processes.
    pub(crate) relays: Vec<RelayProcess>,
}

impl Outboxes {
    /// The inbox relay's URL (marked `read` only).
    pub(crate) fn inbox(&self) -> &RelayUrl {
        &self.urls[INBOX]
    }

    /// CPU seconds they used so far, together.
    pub(crate) fn cpu(&self) -> f64 {
        self.relays.iter().map(RelayProcess::cpu).sum()
    }
}

/// Starts the world's outbox relays in `dir`, each loading its events.
pub(crate) fn start_outboxes(world: &World, dir: &RunDir) -> Outboxes {
    let mut urls = Vec::new();
    let mut relays = Vec::new();
    for (i, events) in world.per_relay.iter().enumerate() {
        let port = free_port();
        let file: PathBuf = dir.0.join(format!("outbox-{i}.jsonl"));
        dataset::write_jsonl(&file, events);
        let relay = RelayProcess::start(
            &RelaySpec {
                name: "outbox",
                db: dir.0.join(format!("outbox-{i}-lmdb")),
                load: vec![file],
                write_limit: None,
                no_negentropy: false,
                own: false,
            },
            port,
        );
        assert_eq!(relay.loaded, events.len(), "outbox relay {i} loaded");
        urls.push(RelayUrl::parse(&format!("ws://127.0.0.1:{port}")).expect("a relay URL"));
        relays.push(relay);
    }
    Outboxes { urls, relays }
}

/// The relay lists of one run (users', then the listing maintainers'),
/// naming `outboxes`' URLs.
pub(crate) fn relay_lists(outboxes: &Outboxes, repos: usize) -> Vec<Event> {
    let urls = &outboxes.urls;
    let list = |keys: &Keys, writes: Vec<usize>, read_inbox: bool| {
        let write: Vec<&RelayUrl> = writes.iter().map(|i| &urls[*i]).collect();
        let read: Vec<&RelayUrl> = if read_inbox {
            vec![outboxes.inbox()]
        } else {
            Vec::new()
        };
        relay_list(keys, &write, &read, LIST_TIME)
    };
    let mut lists: Vec<Event> = (0..USERS)
        .map(|u| list(&dataset::key(2, u), user_writes(u), u % 5 == 0))
        .collect();
    lists.extend(
        (0..LIST_MAINTAINERS.min(repos))
            .map(|m| list(&dataset::repository(m).0, maintainer_writes(m), false)),
    );
    lists
}

/// The tags of a NIP-22 reply to the root `root_hex` of kind `kind` by
/// `author_hex`: `E`/`e` (the root), `K`/`k` (its kind), `P` (its author).
fn reply_tags(root_hex: &str, author_hex: &str, kind: &str) -> Vec<Tag> {
    vec![
        tag(&["E", root_hex, "", author_hex]),
        tag(&["K", kind]),
        tag(&["P", author_hex]),
        tag(&["e", root_hex, "", author_hex]),
        tag(&["k", kind]),
    ]
}
