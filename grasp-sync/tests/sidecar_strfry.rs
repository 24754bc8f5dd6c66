//! The `grasp-sync` sidecar between real strfry relays, at strfry's defaults (the relay
//! GRASP servers are most often synced from, and often run as their own relay).
//!
//! Two strfry relays hold NIP-34 repositories, 29 events each like the field's 4 000
//! repositories / 116 029 events: the announcement (30617, listing the remotes that hold
//! the repository's conversation, then the own relay's URL, so it is ours), its state
//! (30618), and nine root events (issue 1621, patch 1617, pull request 1618 by turns),
//! each with a NIP-22 comment (1111, `E` and `e`) and either a status (1630, `e` root
//! marker and `a`) or a second comment answering the first. A third of the repositories'
//! conversations is on the first remote only, a third on both, a third on the second only;
//! every announcement and state is on both. Not ours, never stored: 1 600 other people's
//! repositories (announcement and state, on both remotes; a public relay holds far more
//! of those than of ours), a few of their issues, and notes. A third strfry is the own
//! relay and starts empty.
//!
//! `grasp-sync --once` with its defaults (plus `--allow-local-addresses`, the first remote
//! as bootstrap relay; no `--git-root`) must exit 0 and leave the own relay holding exactly
//! the repositories' events (read with `strfry export`: a REQ is clamped to 500 events).
//! strfry builds its NIP-77 answers with a 500 000-byte negentropy frame limit,
//! hex-encoded, so its `NEG-MSG`s are larger than the 128 KiB frames it accepts. Layers 2
//! and 3 are asked for 100 repositories or roots a filter, but Layer 1 is one filter:
//! with 400 repositories of ours (11 600 events) and the 1 600 others, each remote's
//! answer to it carries 4 000 ids, 256 KB of hex (the field's 4 000 repositories:
//! 512 KB); each test measures it first. The `#[ignore]`d twins run the field's size (4 000 repositories, 116 000 events):
//! `cargo test --release -p grasp-sync --test sidecar_strfry -- --ignored --nocapture`.
//!
//! Needs strfry (`$STRFRY_BIN`, else `.ci/install-strfry`); without it each test prints a
//! `skipped:` line and passes, except under CI (see `support::strfry_binary`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../grasp-sync-tokio/tests/support/mod.rs"]
mod support;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use grasp_sync_test_support::nip34::Announcement;
use negentropy::{Negentropy, NegentropyStorageVector};
use nostr::prelude::*;
use support::{connect_client, sign, strfry_binary, tag, Strfry};
use tokio::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_grasp-sync");
/// The CI twins' size: 11 600 events, strfry's answers well over 128 KiB.
const REPOSITORIES: usize = 400;
/// The field's size (the `#[ignore]`d twins): 116 000 events.
const BIG_REPOSITORIES: usize = 4_000;
/// Root events per repository (each with two more events).
const ROOTS_PER_REPOSITORY: usize = 9;
/// The events of one repository: announcement, state, roots and what answers them.
const EVENTS_PER_REPOSITORY: usize = 2 + 3 * ROOTS_PER_REPOSITORY;
/// Maintainers (one per repository would do; real ones hold several).
const MAINTAINERS: usize = 100;
/// Authors of roots and replies.
const USERS: usize = 64;
/// Other people's repositories on both remotes (not listing us: never stored). With
/// ours, they make each remote's Layer 1 (every announcement and state) 4 000 events,
/// a 256 KB `NEG-MSG` from strfry.
const STRANGER_REPOSITORIES: usize = 1_600;
/// Notes on each remote (no filter of ours matches them).
const NOTES_PER_REMOTE: usize = 50;

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

/// The data set, placed on the two remotes.
struct Dataset {
    remotes: [Vec<Event>; 2],
    /// What the own relay must hold after the sync.
    expected: BTreeSet<EventId>,
}

/// `repositories` repositories (29 events each) for the own relay `own` on `remotes`,
/// signed on every core.
fn dataset(repositories: usize, own: &RelayUrl, remotes: [&RelayUrl; 2]) -> Dataset {
    // strfry refuses events over 3 years old or 900 s ahead: the last event is a day old.
    let base =
        Timestamp::now().as_secs() - 86_400 - (repositories * EVENTS_PER_REPOSITORY) as u64 / 2;
    let maintainers: Vec<Keys> = (0..MAINTAINERS).map(|_| Keys::generate()).collect();
    let users: Vec<Keys> = (0..USERS).map(|_| Keys::generate()).collect();
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
    // Not ours: other people's repositories, which do not list us (a public relay holds
    // far more of them than of ours), with their states and a few issues, on both remotes.
    // Discovery reads them all (Layer 1) and stores none.
    let strangers: Vec<Keys> = (0..MAINTAINERS).map(|_| Keys::generate()).collect();
    for n in 0..STRANGER_REPOSITORIES {
        let stranger = &strangers[n % strangers.len()];
        let identifier = format!("elsewhere-{n:05}");
        let at = base + n as u64;
        let announced = Announcement::new(&identifier)
            .relays(["wss://relay.elsewhere.example"])
            .at(at)
            .sign(stranger);
        let tip = format!("{:040x}", n + 1);
        let state = sign(
            stranger,
            30618,
            "",
            vec![tag(&["d", &identifier]), tag(&["refs/heads/main", &tip])],
            at,
        );
        let mut theirs = vec![announced, state];
        if n % 10 == 0 {
            let coordinate = format!("30617:{}:{identifier}", stranger.public_key().to_hex());
            theirs.push(sign(
                &users[n % USERS],
                1621,
                "an issue of a repository that does not list us",
                vec![tag(&["a", &coordinate])],
                at + 1,
            ));
        }
        for events in &mut set.remotes {
            events.extend(theirs.iter().cloned());
        }
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

/// Repository `r`'s 29 events, onto the remotes that hold them.
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
        let mut tags = vec![tag(&["a", &coordinate]), tag(&["p", &owner_hex])];
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

/// strfry's largest frame, the 128 KiB it accepts (`relay.maxWebsocketPayloadSize`).
const STRFRY_ACCEPTS: usize = 131_072;

/// The bytes of the `NEG-MSG` `relay` answers a client holding nothing with, for the
/// Layer 1 filter (announcements and states).
async fn first_neg_msg_len(relay: &RelayUrl) -> usize {
    let mut storage = NegentropyStorageVector::new();
    storage.seal().unwrap();
    let mut negentropy = Negentropy::owned(storage, 0).unwrap();
    let initial = hex::encode(negentropy.initiate().unwrap());
    let mut client = connect_client(relay).await;
    client
        .send(format!(
            r#"["NEG-OPEN","probe",{{"kinds":[30617,30618]}},"{initial}"]"#
        ))
        .await;
    let answer = client.recv_text(Duration::from_secs(30)).await.unwrap();
    assert!(answer.starts_with(r#"["NEG-MSG","probe""#), "{answer:.200}");
    client.send(r#"["NEG-CLOSE","probe"]"#).await;
    client.close().await;
    answer.len()
}

/// How a `grasp-sync --once` run ended.
struct Run {
    code: Option<i32>,
    elapsed: Duration,
    stdout: String,
    stderr: String,
}

impl Run {
    /// The summary, the last lines of the log, for failure messages.
    fn describe(&self) -> String {
        let log: Vec<&str> = self.stderr.lines().collect();
        let tail = log[log.len().saturating_sub(40)..].join("\n");
        format!(
            "exit {:?} after {:?}\n--- summary (stdout)\n{}\n--- last lines of the log\n{tail}",
            self.code, self.elapsed, self.stdout
        )
    }
}

/// `grasp-sync --once` from `bootstrap` into `own`, with `env` on top of its defaults.
async fn sync_once(
    own: &RelayUrl,
    bootstrap: &RelayUrl,
    env: &[(&str, &str)],
    timeout: Duration,
) -> Run {
    let mut command = Command::new(BIN);
    command
        .args([
            "--own-relay",
            own.as_str(),
            "--bootstrap-relay",
            bootstrap.as_str(),
            "--allow-local-addresses",
            "--once",
            "--timeout",
            &timeout.as_secs().to_string(),
        ])
        .env("RUST_LOG", "warn")
        .env_remove("NGIT_SYNC_DISABLE_NEGENTROPY")
        .env_remove("NGIT_SYNC_MAX_MESSAGE_BYTES")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for (name, value) in env {
        command.env(name, value);
    }
    let started = Instant::now();
    let child = command.spawn().expect("starting grasp-sync");
    let output = tokio::time::timeout(timeout + Duration::from_secs(60), child.wait_with_output())
        .await
        .unwrap_or_else(|_| {
            panic!("grasp-sync --once did not exit within its --timeout and a minute")
        })
        .expect("grasp-sync --once");
    Run {
        code: output.status.code(),
        elapsed: started.elapsed(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Two remotes with `repositories` repositories, an empty own relay, one `--once` run
/// with `env`: it exits 0 and the own relay holds exactly the expected events.
async fn syncs_exactly(
    bin: &Path,
    name: &str,
    repositories: usize,
    env: &[(&str, &str)],
    timeout: Duration,
) {
    let own = Strfry::start(bin).await;
    let first = Strfry::start(bin).await;
    let second = Strfry::start(bin).await;
    let started = Instant::now();
    let data = dataset(repositories, &own.url(), [&first.url(), &second.url()]);
    let generated = started.elapsed();
    assert_eq!(data.expected.len(), repositories * EVENTS_PER_REPOSITORY);
    let started = Instant::now();
    for (relay, events) in [(&first, &data.remotes[0]), (&second, &data.remotes[1])] {
        assert_eq!(relay.import(events).await, events.len());
    }
    let imported = started.elapsed();
    let mut answers = Vec::new();
    for relay in [&first, &second] {
        let bytes = first_neg_msg_len(&relay.url()).await;
        assert!(
            bytes > STRFRY_ACCEPTS,
            "{name}: strfry's first NEG-MSG for Layer 1 is larger than the 128 KiB it \
             accepts ({bytes} bytes)"
        );
        answers.push(bytes.to_string());
    }

    let run = sync_once(&own.url(), &first.url(), env, timeout).await;
    println!(
        "{name}: {repositories} repositories, {} events ({} on the first remote, {} on the \
         second) signed in {generated:.1?}, imported in {imported:.1?}; strfry's first NEG-MSG \
         for Layer 1: {} bytes; grasp-sync --once: exit {:?} in {:.1?}\n{}",
        data.expected.len(),
        data.remotes[0].len(),
        data.remotes[1].len(),
        answers.join(" and "),
        run.code,
        run.elapsed,
        run.stdout.trim_end()
    );
    assert_eq!(
        run.code,
        Some(0),
        "{name}: grasp-sync --once exits 0: {}",
        run.describe()
    );
    let held = own.ids().await;
    let missing = data.expected.difference(&held).count();
    let extra = held.difference(&data.expected).count();
    assert!(
        missing == 0 && extra == 0,
        "{name}: the own relay holds exactly the {} expected events: {missing} missing, \
         {extra} extra\n{}",
        data.expected.len(),
        run.describe()
    );
}

/// The CI twin of the field's sync: NIP-77 from strfry, whose answers exceed 128 KiB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn syncs_from_strfry_into_strfry_over_nip77() {
    let Some(bin) = strfry_binary() else { return };
    syncs_exactly(&bin, "NIP-77", REPOSITORIES, &[], Duration::from_secs(240)).await;
}

/// The same by REQ only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn syncs_from_strfry_into_strfry_over_req() {
    let Some(bin) = strfry_binary() else { return };
    let env = [("NGIT_SYNC_DISABLE_NEGENTROPY", "1")];
    syncs_exactly(&bin, "REQ", REPOSITORIES, &env, Duration::from_secs(240)).await;
}

/// With a message limit below strfry's `NEG-MSG`s (128 KiB, as the sidecar had by
/// default), NIP-77 frames over the limit are no reason to call strfry unreachable: the
/// relay is synced by REQ, completely, and the run exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nip77_answers_over_the_message_limit_fall_back_to_req() {
    let Some(bin) = strfry_binary() else { return };
    let env = [("NGIT_SYNC_MAX_MESSAGE_BYTES", "131072")];
    syncs_exactly(
        &bin,
        "NIP-77 over a 128 KiB limit",
        REPOSITORIES,
        &env,
        Duration::from_secs(240),
    )
    .await;
}

/// The field's size over NIP-77 (release: see the module doc).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the field's size (116 000 events): run with --release -- --ignored --nocapture"]
async fn big_syncs_from_strfry_into_strfry_over_nip77() {
    let Some(bin) = strfry_binary() else { return };
    syncs_exactly(
        &bin,
        "big NIP-77",
        BIG_REPOSITORIES,
        &[],
        Duration::from_secs(1_200),
    )
    .await;
}

/// The field's size by REQ only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the field's size (116 000 events): run with --release -- --ignored --nocapture"]
async fn big_syncs_from_strfry_into_strfry_over_req() {
    let Some(bin) = strfry_binary() else { return };
    let env = [("NGIT_SYNC_DISABLE_NEGENTROPY", "1")];
    syncs_exactly(
        &bin,
        "big REQ",
        BIG_REPOSITORIES,
        &env,
        Duration::from_secs(1_200),
    )
    .await;
}

/// What strfry's own NIP-77 client (`strfry sync --dir=down`) takes for the same data,
/// from both remotes into an empty strfry, for comparison (it also takes the notes and
/// the stranger's events: it syncs everything).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a baseline for the big twins: run with --release -- --ignored --nocapture"]
async fn big_strfry_sync_baseline() {
    let Some(bin) = strfry_binary() else { return };
    let own = Strfry::start(&bin).await;
    let first = Strfry::start(&bin).await;
    let second = Strfry::start(&bin).await;
    let data = dataset(BIG_REPOSITORIES, &own.url(), [&first.url(), &second.url()]);
    for (relay, events) in [(&first, &data.remotes[0]), (&second, &data.remotes[1])] {
        assert_eq!(relay.import(events).await, events.len());
    }
    let mut total = Duration::ZERO;
    for (name, remote) in [("first", &first), ("second", &second)] {
        let sync = own.sync_down(&remote.url()).await;
        total += sync.elapsed;
        println!(
            "strfry sync --dir=down from the {name} remote: {:.1?}",
            sync.elapsed
        );
    }
    let held = own.ids().await;
    assert!(data.expected.is_subset(&held));
    println!(
        "strfry sync: {} events ({} of them ours) in {total:.1?}",
        held.len(),
        data.expected.len()
    );
}
