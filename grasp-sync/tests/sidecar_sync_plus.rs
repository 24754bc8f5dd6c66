//! GRASP-03 "Sync+" through the `grasp-sync` sidecar, over real relays on 127.0.0.1:
//! replies published only to participants' own write relays ("outbox relays") reach the
//! own relay; what those relays hold that is not this repository's conversation never
//! does.
//!
//! The repository `alpha` is announced on its relay R (a nostr-relay-builder relay, the
//! sidecar's bootstrap relay), listing R and the own relay, with one maintainer, B, who
//! has no announcement of their own. R holds an issue and a pull request by participant
//! A, A's kind 10002 (one `r` tag without marker: O1, the real nostr-rs-relay 0.8.12
//! with its defaults; one marked `read`: X, a relay the sidecar must never contact) and
//! B's kind 10317 (`g`: O2, a nostr-relay-builder relay).
//!
//! O1 and O2 alone hold the conversation: NIP-22 comments on the issue and the pull
//! request (by the participants and by strangers, one nested under another comment),
//! statuses, a pull request update, an issue of `alpha` that exists only on O2, and a
//! stranger's comment on O1 on that O2-only issue (found once the issue is a root of
//! ours). They also hold what is not `alpha`'s conversation: notes, announcements of
//! other repositories that list the own relay (Layer 1 on an outbox relay would make
//! them ours) and their states, those repositories' issues and patches and the
//! participants' comments on them. X holds a comment on the issue.
//!
//! Expected: every conversation event reaches the own relay; once historic sync is
//! complete (`/status`) and a few seconds more, no event that is not `alpha`'s
//! conversation or what R holds is there, and X saw no connection at all. Then a comment
//! published only to O1 arrives live. `/status` says why each relay is synced
//! (`reasons`): O1 and O2 for `outbox` only.
//!
//! Needs the nostr-rs-relay binary (`.ci/install-nostr-rs-relay`; see
//! `support::nostr_rs_relay_binary`). `RUST_LOG` is passed to the sidecar (default
//! `info`); its log is printed when the test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "common/http.rs"]
mod http;
use grasp_sync_test_harness::relays as support;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use grasp_sync_core::RepoRef;
use grasp_sync_test_support::nip34::{state, Announcement, TIP};
use http::{free_port, get};
use nostr::prelude::*;
use support::{connect_client, sign, tag, NostrRsRelay, TestRelay, TestRelayConfig};
use tokio::process::{Child, Command};

const BIN: &str = env!("CARGO_BIN_EXE_grasp-sync");
/// Bound on every wait for the sidecar: the conversation arriving, historic sync
/// complete, a live event arriving.
const DEADLINE: Duration = Duration::from_secs(120);
/// How long after historic sync the own relay is watched for what must never come.
const NEVER_MARGIN: Duration = Duration::from_secs(5);

/// Events with names, for messages that say which one is missing or came.
#[derive(Default)]
struct Named(Vec<(&'static str, Event)>);

impl Named {
    fn add(&mut self, name: &'static str, event: &Event) {
        self.0.push((name, event.clone()));
    }

    fn ids(&self) -> BTreeSet<EventId> {
        self.0.iter().map(|(_, event)| event.id).collect()
    }

    fn events(&self) -> Vec<Event> {
        self.0.iter().map(|(_, event)| event.clone()).collect()
    }

    /// The names of those of them `held` holds (`true`) or lacks (`false`).
    fn names(&self, held: &BTreeSet<EventId>, holds: bool) -> Vec<&'static str> {
        (self.0.iter())
            .filter(|(_, event)| held.contains(&event.id) == holds)
            .map(|(name, _)| *name)
            .collect()
    }
}

/// What each relay holds, and what the own relay must and must not come to hold.
struct World {
    /// On R: the announcement, the roots, the participants' relay lists.
    on_r: Named,
    on_o1: Named,
    on_o2: Named,
    on_x: Named,
    /// On O1 or O2, and `alpha`'s conversation.
    conversation: Named,
    /// On O1, O2 or X, and never to reach the own relay.
    forbidden: Named,
    /// Participant A, the issue's author (for the live comment).
    a: Keys,
    /// A's issue on R.
    issue: Event,
}

/// A NIP-22 comment by `keys` on `root` (`E`, `K`, `P`), replying to `parent` (`e`, `k`,
/// `p`; the root itself when `None`).
fn comment(keys: &Keys, root: &Event, parent: Option<&Event>, content: &str, at: u64) -> Event {
    let parent = parent.unwrap_or(root);
    let (root_id, parent_id) = (root.id.to_hex(), parent.id.to_hex());
    let (root_kind, parent_kind) = (root.kind.as_u16().to_string(), parent.kind.as_u16());
    let (root_author, parent_author) = (root.pubkey.to_hex(), parent.pubkey.to_hex());
    sign(
        keys,
        1111,
        content,
        vec![
            tag(&["E", &root_id]),
            tag(&["K", &root_kind]),
            tag(&["P", &root_author]),
            tag(&["e", &parent_id]),
            tag(&["k", &parent_kind.to_string()]),
            tag(&["p", &parent_author]),
        ],
        at,
    )
}

/// A status (`kind` 1630..=1633) of `root` in `repo`: `e` (marker `root`), `a`, `p`.
fn status(keys: &Keys, kind: u16, root: &Event, repo: &str, at: u64) -> Event {
    sign(
        keys,
        kind,
        "",
        vec![
            tag(&["e", &root.id.to_hex(), "", "root"]),
            tag(&["a", repo]),
            tag(&["p", &root.pubkey.to_hex()]),
        ],
        at,
    )
}

/// The events of the module documentation, placed by name.
fn world(own: &RelayUrl, r: &RelayUrl, o1: &RelayUrl, o2: &RelayUrl, x: &RelayUrl) -> World {
    let base = Timestamp::now().as_secs() - 10_000;
    let owner = Keys::generate();
    let a = Keys::generate();
    let b = Keys::generate();
    let stranger = Keys::generate();
    let other = Keys::generate();

    // R: the repository, its roots, the participants' relay lists.
    let alpha = Announcement::new("alpha")
        .relays([own, r])
        .maintainers([b.public_key()])
        .at(base)
        .sign(&owner);
    let repo = RepoRef::new(owner.public_key(), "alpha")
        .unwrap()
        .to_string();
    let issue = sign(
        &a,
        1621,
        "issue on R",
        vec![
            tag(&["a", &repo]),
            tag(&["p", &owner.public_key().to_hex()]),
        ],
        base + 10,
    );
    let mut w = World {
        on_r: Named::default(),
        on_o1: Named::default(),
        on_o2: Named::default(),
        on_x: Named::default(),
        conversation: Named::default(),
        forbidden: Named::default(),
        a: a.clone(),
        issue: issue.clone(),
    };
    let pr = sign(
        &a,
        1618,
        "pull request on R",
        vec![
            tag(&["a", &repo]),
            tag(&["p", &owner.public_key().to_hex()]),
            tag(&["subject", "a change"]),
            tag(&["c", TIP]),
        ],
        base + 11,
    );
    let a_relays = sign(
        &a,
        10002,
        "",
        vec![tag(&["r", o1.as_str()]), tag(&["r", x.as_str(), "read"])],
        base + 20,
    );
    let b_grasp = sign(&b, 10317, "", vec![tag(&["g", o2.as_str()])], base + 21);
    w.on_r.add("alpha's announcement", &alpha);
    w.on_r.add("A's issue", &issue);
    w.on_r.add("A's pull request", &pr);
    w.on_r.add("A's 10002", &a_relays);
    w.on_r.add("B's 10317", &b_grasp);

    // O1 (A's write relay), conversation.
    let a_comment = comment(&a, &issue, None, "A on the issue, O1", base + 100);
    let stranger_comment = comment(
        &stranger,
        &issue,
        None,
        "stranger on the issue, O1",
        base + 101,
    );
    let a_status = status(&a, 1632, &issue, &repo, base + 102);
    let stranger_pr_reply = comment(&stranger, &pr, None, "stranger on the PR, O1", base + 103);
    // O2 (B's GRASP server), conversation.
    let b_pr_reply = comment(&b, &pr, None, "B on the PR, O2", base + 200);
    let b_pr_status = status(&b, 1631, &pr, &repo, base + 201);
    let nested = comment(
        &stranger,
        &issue,
        Some(&a_comment),
        "stranger under A's comment, O2",
        base + 202,
    );
    let pr_update = sign(
        &b,
        1619,
        "",
        vec![
            tag(&["a", &repo]),
            tag(&["E", &pr.id.to_hex()]),
            tag(&["P", &a.public_key().to_hex()]),
            tag(&["c", TIP]),
        ],
        base + 203,
    );
    let o2_issue = sign(
        &b,
        1621,
        "issue only on O2",
        vec![tag(&["a", &repo])],
        base + 204,
    );
    // On O1, a comment on the issue that only O2 holds.
    let on_o2_issue = comment(
        &stranger,
        &o2_issue,
        None,
        "stranger on the O2 issue, O1",
        base + 205,
    );
    for (name, event) in [
        ("A's comment on the issue (O1)", &a_comment),
        ("a stranger's comment on the issue (O1)", &stranger_comment),
        ("A's status of the issue (O1)", &a_status),
        ("a stranger's reply to the PR (O1)", &stranger_pr_reply),
        (
            "a stranger's comment on the O2-only issue (O1)",
            &on_o2_issue,
        ),
    ] {
        w.on_o1.add(name, event);
        w.conversation.add(name, event);
    }
    for (name, event) in [
        ("B's reply to the PR (O2)", &b_pr_reply),
        ("B's status of the PR (O2)", &b_pr_status),
        ("a stranger's reply under A's comment (O2)", &nested),
        ("B's PR update (O2)", &pr_update),
        ("B's issue only on O2", &o2_issue),
    ] {
        w.on_o2.add(name, event);
        w.conversation.add(name, event);
    }

    // Not alpha's conversation, on O1: a note, and a repository `beta` that lists the
    // own relay and O1 (Layer 1 there would make it ours) with its state, an issue and
    // A's comment on it.
    let beta = Announcement::new("beta")
        .relays([own, o1])
        .at(base + 300)
        .sign(&other);
    let beta_repo = RepoRef::new(other.public_key(), "beta")
        .unwrap()
        .to_string();
    let beta_state = state(&other, "beta", &[TIP], base + 301);
    let beta_issue = sign(
        &other,
        1621,
        "beta's issue",
        vec![tag(&["a", &beta_repo])],
        base + 302,
    );
    let a_on_beta = comment(&a, &beta_issue, None, "A on beta's issue", base + 303);
    let a_note = sign(&a, 1, "A's note, O1", Vec::new(), base + 304);
    for (name, event) in [
        ("beta's announcement (O1)", &beta),
        ("beta's state (O1)", &beta_state),
        ("beta's issue (O1)", &beta_issue),
        ("A's comment on beta's issue (O1)", &a_on_beta),
        ("A's note (O1)", &a_note),
    ] {
        w.on_o1.add(name, event);
        w.forbidden.add(name, event);
    }
    // On O2: maintainer B's own repository `gamma`, listing the own relay and O2, its
    // state, B's patch and a stranger's comment on it; B's note.
    let gamma = Announcement::new("gamma")
        .relays([own, o2])
        .at(base + 400)
        .sign(&b);
    let gamma_repo = RepoRef::new(b.public_key(), "gamma").unwrap().to_string();
    let gamma_state = state(&b, "gamma", &[TIP], base + 401);
    let gamma_patch = sign(
        &b,
        1617,
        "gamma's patch",
        vec![tag(&["a", &gamma_repo])],
        base + 402,
    );
    let on_gamma = comment(
        &stranger,
        &gamma_patch,
        None,
        "stranger on gamma's patch",
        base + 403,
    );
    let b_note = sign(&b, 1, "B's note, O2", Vec::new(), base + 404);
    for (name, event) in [
        ("gamma's announcement (O2)", &gamma),
        ("gamma's state (O2)", &gamma_state),
        ("gamma's patch (O2)", &gamma_patch),
        ("a stranger's comment on gamma's patch (O2)", &on_gamma),
        ("B's note (O2)", &b_note),
    ] {
        w.on_o2.add(name, event);
        w.forbidden.add(name, event);
    }
    // X: A's read relay. Its comment on the issue is conversation, but nothing is read
    // from a relay marked `read`.
    let on_x = comment(
        &a,
        &issue,
        None,
        "A on the issue, only on A's read relay",
        base + 500,
    );
    w.on_x.add("A's comment on A's read relay (X)", &on_x);
    w.forbidden.add("A's comment on A's read relay (X)", &on_x);
    w
}

async fn status_of(port: u16) -> Option<serde_json::Value> {
    serde_json::from_str(&get(port, "/status").await?).ok()
}

/// The `/status` entry of the relay on `relay_port`.
fn relay_entry(status: &serde_json::Value, relay_port: u16) -> Option<serde_json::Value> {
    let needle = format!("127.0.0.1:{relay_port}");
    status["relays"]
        .as_array()?
        .iter()
        .find(|relay| {
            relay["relay"]
                .as_str()
                .is_some_and(|url| url.contains(&needle))
        })
        .cloned()
}

/// The sidecar, its log (stderr) written to `log`.
fn sidecar(own: &RelayUrl, bootstrap: &RelayUrl, metrics_port: u16, log: &PathBuf) -> Child {
    let log = std::fs::File::create(log).expect("sidecar log");
    Command::new(BIN)
        .args([
            "--own-relay",
            own.as_str(),
            "--bootstrap-relay",
            bootstrap.as_str(),
            "--allow-local-addresses",
            "--metrics-addr",
            &format!("127.0.0.1:{metrics_port}"),
        ])
        .env("NGIT_SYNC_BATCH_WINDOW_MS", "200")
        .env("NGIT_SYNC_BASE_BACKOFF_SECS", "1")
        .env("NGIT_SYNC_MAX_BACKOFF_SECS", "2")
        .env(
            "RUST_LOG",
            std::env::var("RUST_LOG").unwrap_or_else(|_| "info".to_owned()),
        )
        .stdout(Stdio::null())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .expect("start grasp-sync")
}

/// The last lines of the sidecar's log, for failure messages.
fn log_tail(log: &PathBuf) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(80)..].join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_on_participants_outbox_relays_arrive_and_nothing_else_does() {
    let own = TestRelay::start(TestRelayConfig::default()).await;
    let r = TestRelay::start(TestRelayConfig::default()).await;
    let o1 = NostrRsRelay::start().await;
    let o2 = TestRelay::start(TestRelayConfig::default()).await;
    let x = TestRelay::start(TestRelayConfig::default()).await;
    let w = world(&own.url(), &r.url(), &o1.url(), &o2.url(), &x.url());
    r.add_events(&w.on_r.events()).await;
    o2.add_events(&w.on_o2.events()).await;
    x.add_events(&w.on_x.events()).await;
    let mut client = connect_client(&o1.url()).await;
    let on_o1 = w.on_o1.events();
    assert_eq!(client.publish_all(&on_o1, 20).await, on_o1.len());
    client.close().await;

    let log = std::env::temp_dir().join(format!("sidecar-sync-plus-{}.log", std::process::id()));
    let metrics_port = free_port();
    let mut child = sidecar(&own.url(), &r.url(), metrics_port, &log);
    let started = tokio::time::Instant::now();
    let deadline = started + DEADLINE;

    // Every conversation event from O1 and O2 arrives (and what R holds).
    let mut wanted = w.conversation.ids();
    wanted.extend(w.on_r.ids());
    loop {
        let held = own.event_ids().await;
        if wanted.is_subset(&held) {
            break;
        }
        if let Ok(Some(exit)) = child.try_wait() {
            panic!("grasp-sync exited: {exit}\n{}", log_tail(&log));
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "within {DEADLINE:?}, missing from the own relay: {:?} {:?}\nforbidden ones \
             there: {:?}\n/status: {}\nsidecar log:\n{}",
            w.on_r.names(&held, false),
            w.conversation.names(&held, false),
            w.forbidden.names(&held, true),
            status_of(metrics_port).await.unwrap_or_default(),
            log_tail(&log)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let arrived_in = started.elapsed();

    // Historic sync complete, then a margin: what is not the conversation never came.
    let complete = loop {
        if let Some(status) = status_of(metrics_port).await {
            if status["historic_sync_complete"] == serde_json::Value::Bool(true) {
                break status;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "historic sync not complete within {DEADLINE:?}: {}\nsidecar log:\n{}",
            status_of(metrics_port).await.unwrap_or_default(),
            log_tail(&log)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let complete_in = started.elapsed();
    tokio::time::sleep(NEVER_MARGIN).await;
    let held = own.event_ids().await;
    let came = w.forbidden.names(&held, true);
    assert!(
        came.is_empty(),
        "not alpha's conversation, yet on the own relay: {came:?}\nsidecar log:\n{}",
        log_tail(&log)
    );
    let unknown: Vec<&EventId> = held.difference(&wanted).collect();
    assert!(
        unknown.is_empty(),
        "the own relay holds exactly R's events and the conversation: {} more ({unknown:?})",
        unknown.len()
    );
    assert_eq!(
        x.connections_seen(),
        0,
        "a relay marked `read` in A's 10002 is never contacted"
    );

    // The outbox relays are in /status, each sent events of the conversation.
    for (name, port, expected) in [
        ("O1 (nostr-rs-relay)", o1.port(), &w.on_o1),
        ("O2 (nostr-relay-builder)", o2.port(), &w.on_o2),
    ] {
        let entry = relay_entry(&complete, port)
            .unwrap_or_else(|| panic!("{name} is tracked in /status: {complete}"));
        let received = entry["events_received"].as_u64().unwrap_or(0);
        let again = entry["events_received_again"].as_u64().unwrap_or(0);
        let conversation = expected.ids().intersection(&w.conversation.ids()).count() as u64;
        println!(
            "{name}: {received} events received ({again} of them again), \
             {conversation} of its events are alpha's conversation"
        );
        assert!(received >= 1, "{name} sent events: {entry}");
        // Why the relay is synced (`RelayStatus::reasons` in /status).
        assert_eq!(
            entry.get("reasons"),
            Some(&serde_json::json!(["outbox"])),
            "{name} is synced as a participant's outbox relay only: {entry}"
        );
    }
    println!(
        "conversation on the own relay after {arrived_in:?}, historic sync complete after \
         {complete_in:?}"
    );

    // Live: a comment published to O1 only, after historic sync, arrives.
    let live = comment(
        &w.a,
        &w.issue,
        None,
        "A on the issue, live, O1",
        Timestamp::now().as_secs(),
    );
    let mut client = connect_client(&o1.url()).await;
    assert_eq!(client.publish_all(std::slice::from_ref(&live), 1).await, 1);
    client.close().await;
    let published = tokio::time::Instant::now();
    let deadline = published + DEADLINE;
    while !own.event_ids().await.contains(&live.id) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the live comment on O1 never reached the own relay\nsidecar log:\n{}",
            log_tail(&log)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    println!(
        "live comment from O1 on the own relay after {:?}",
        published.elapsed()
    );
    let held = own.event_ids().await;
    assert!(w.forbidden.names(&held, true).is_empty());
    assert_eq!(x.connections_seen(), 0);
    child.start_kill().unwrap();
    let _ = child.wait().await;
    let _ = std::fs::remove_file(&log);
}
