//! The `grasp-sync` sidecar between real strfry relays, at strfry's defaults (the relay
//! GRASP servers are most often synced from, and often run as their own relay).
//!
//! Two strfry relays hold the field's data set (`grasp_sync_test_support::field`):
//! NIP-34 repositories of ours, 29 events each, a third of the conversations on the
//! first remote only, a third on both, a third on the second only; every announcement
//! and state on both; 1 600 other people's repositories and notes that are never to be
//! stored. A third strfry is the own relay and starts empty.
//!
//! `grasp-sync --once` with its defaults (plus `--allow-local-addresses`, the first remote
//! as bootstrap relay; no `--git-root`) must exit 0 and leave the own relay holding exactly
//! the repositories' events (read with `strfry export`: a REQ is clamped to 500 events).
//! strfry builds its NIP-77 answers with a 500 000-byte negentropy frame limit,
//! hex-encoded, so its `NEG-MSG`s are larger than the 128 KiB frames it accepts. Layers 2
//! and 3 are asked for 100 repositories or roots a filter, but Layer 1 is one filter:
//! with 400 repositories of ours (11 600 events) and the 1 600 others, each remote's
//! answer to it carries 4 000 ids, 256 KB of hex (the field's 4 000 repositories:
//! 11 200 ids, 717 KB); each test measures it first. The `#[ignore]`d twins run the field's size
//! (4 000 repositories, 116 000 events):
//! `cargo test --release -p grasp-sync --test sidecar_strfry -- --ignored --nocapture`.
//! How fast, beside `strfry sync` on the same data, is the benchmark's to say:
//! `cargo bench -p grasp-sync-benches --bench strfry_sync`.
//!
//! Needs strfry (`$STRFRY_BIN`, else `.ci/install-strfry`); without it each test prints a
//! `skipped:` line and passes, except under CI (see `support::strfry_binary`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use grasp_sync_test_harness::relays as support;

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use grasp_sync_test_support::field::{dataset, EVENTS_PER_REPOSITORY, FIELD_REPOSITORIES};
use negentropy::{Negentropy, NegentropyStorageVector};
use nostr::prelude::*;
use support::{connect_client, strfry_binary, Strfry};
use tokio::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_grasp-sync");
/// The CI twins' size: 11 600 events, strfry's answers well over 128 KiB.
const REPOSITORIES: usize = 400;

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
    let own = Strfry::start(bin);
    let first = Strfry::start(bin);
    let second = Strfry::start(bin);
    let started = Instant::now();
    let data = dataset(repositories, &own.url(), [&first.url(), &second.url()]);
    let generated = started.elapsed();
    assert_eq!(data.expected.len(), repositories * EVENTS_PER_REPOSITORY);
    let started = Instant::now();
    for (relay, events) in [(&first, &data.remotes[0]), (&second, &data.remotes[1])] {
        assert_eq!(relay.import(events), events.len());
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
    let held = own.ids();
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
        FIELD_REPOSITORIES,
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
        FIELD_REPOSITORIES,
        &env,
        Duration::from_secs(1_200),
    )
    .await;
}
