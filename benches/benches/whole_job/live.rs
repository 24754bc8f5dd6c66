//! Part `live` of the whole-job benchmark: from a new state's arrival to the new ref
//! served (see the program's doc).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::{SinkExt as _, StreamExt as _};
use nostr::prelude::Timestamp;
use tokio_tungstenite::tungstenite::Message;

use crate::data::{new_state, owner_keys, push_commit};
use crate::sidecar::{self, CountingPath};
use crate::world::World;

/// Repositories of the live part.
const REPOSITORIES: usize = 200;
/// Git hosts of the live part: 200 states at 5 a second are 15 a minute per host, half
/// the default budget.
const HOSTS: usize = 20;
/// States published a second.
const PER_SECOND: u64 = 5;
/// The longest wait for the first sync, and for the last state after it was sent.
const PATIENCE: Duration = Duration::from_secs(300);

/// The commit `path`'s `refs/heads/main` names (a loose ref, else `packed-refs`).
fn main_of(path: &Path) -> Option<String> {
    if let Ok(text) = std::fs::read_to_string(path.join("refs/heads/main")) {
        let oid = text.trim();
        if oid.len() == 40 {
            return Some(oid.to_owned());
        }
    }
    let packed = std::fs::read_to_string(path.join("packed-refs")).ok()?;
    packed
        .lines()
        .filter_map(|line| line.split_once(' '))
        .find(|(_, name)| *name == "refs/heads/main")
        .map(|(oid, _)| oid.to_owned())
}

/// The `p`th percentile (nearest rank) of sorted `values`.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Runs the part; `false` when a state was not served within [`PATIENCE`].
pub(crate) fn run(bin: &Path) -> bool {
    let world = World::make(bin, "live", HOSTS, REPOSITORIES);
    let (data, hosts, dir) = (&world.data, &world.hosts, &world.dir);
    let _own = world.own_relay(bin);
    let git_root = dir.path().join("git-root");
    std::fs::create_dir_all(&git_root).expect("the git root");
    let counting = CountingPath::install(dir.path());
    let args = world.sidecar_args(&git_root, None);
    let mut child = sidecar::spawn(None, &args, &counting, &dir.path().join("sidecar.log"));
    let served: Vec<PathBuf> = data
        .repositories
        .iter()
        .map(|repository| repository.served_path(&git_root))
        .collect();
    let started = Instant::now();
    let all_served = loop {
        let done = data
            .repositories
            .iter()
            .zip(&served)
            .all(|(repository, path)| main_of(path).as_ref() == Some(&repository.main));
        if done || started.elapsed() > PATIENCE {
            break done;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    println!(
        "\n## live: {REPOSITORIES} repositories on {HOSTS} hosts served by a running sidecar in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    if !all_served {
        let _ = child.kill();
        let _ = child.wait();
        println!("not every repository was served within {PATIENCE:?}");
        return false;
    }
    // Let the first sync's last releases and reconciliations end.
    std::thread::sleep(Duration::from_secs(5));
    let pushed: Vec<String> = data
        .repositories
        .iter()
        .enumerate()
        .map(|(r, repository)| {
            let source =
                hosts.roots[repository.host].join(format!("{}.git", repository.identifier));
            push_commit(&source, &format!("repository {r}: live change"))
        })
        .collect();
    let at = Timestamp::now().as_secs();
    let states: Vec<String> = data
        .repositories
        .iter()
        .zip(&pushed)
        .enumerate()
        .map(|(r, (repository, oid))| {
            let event = new_state(&owner_keys(r), repository, oid, at);
            format!(r#"["EVENT",{}]"#, event.as_json())
        })
        .collect();
    let sent: Arc<Mutex<Vec<Option<Instant>>>> = Arc::new(Mutex::new(vec![None; REPOSITORIES]));
    let publisher = {
        let (sent, remote_url) = (Arc::clone(&sent), world.remote.url().to_string());
        std::thread::spawn(move || publish(&remote_url, &states, &sent))
    };
    let mut seen: Vec<Option<Instant>> = vec![None; REPOSITORIES];
    let mut last_sent = Instant::now();
    loop {
        let sent_now = sent.lock().map(|sent| sent.clone()).unwrap_or_default();
        for (r, at) in sent_now.iter().enumerate() {
            if at.is_some() && seen[r].is_none() && main_of(&served[r]).as_ref() == Some(&pushed[r])
            {
                seen[r] = Some(Instant::now());
            }
        }
        if let Some(latest) = sent_now.iter().flatten().max() {
            last_sent = *latest;
        }
        let all_sent = sent_now.iter().all(Option::is_some);
        if all_sent && (seen.iter().all(Option::is_some) || last_sent.elapsed() > PATIENCE) {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let published = publisher.join().unwrap_or(0);
    let sent_at = sent.lock().map(|sent| sent.clone()).unwrap_or_default();
    let mut latencies: Vec<f64> = sent_at
        .iter()
        .zip(&seen)
        .filter_map(|(sent, seen)| {
            Some(seen.as_ref()?.duration_since(*sent.as_ref()?).as_secs_f64())
        })
        .collect();
    latencies.sort_by(f64::total_cmp);
    let confirmed = data
        .repositories
        .iter()
        .zip(&pushed)
        .filter(|(repository, oid)| {
            ls_remote_main(&repository.served_path(&git_root)).as_ref() == Some(*oid)
        })
        .count();
    let _ = child.kill();
    let _ = child.wait();
    println!(
        "{REPOSITORIES} states at {PER_SECOND} a second ({published} accepted by the remote): served {} of them; \
         latency from sending to served p50 {:.3} s, p99 {:.3} s, max {:.3} s; `git ls-remote` confirms {confirmed}",
        latencies.len(),
        percentile(&latencies, 50.0),
        percentile(&latencies, 99.0),
        latencies.last().copied().unwrap_or(f64::NAN),
    );
    latencies.len() == REPOSITORIES && confirmed == REPOSITORIES
}

/// `refs/heads/main` as `git ls-remote` of the served repository `path` lists it.
fn ls_remote_main(path: &Path) -> Option<String> {
    let output = std::process::Command::new("git")
        .arg("ls-remote")
        .arg(path)
        .arg("refs/heads/main")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .ok()?;
    String::from_utf8_lossy(&output.stdout)
        .split_whitespace()
        .next()
        .map(str::to_owned)
}

/// Sends each of `frames` to `relay`, [`PER_SECOND`] a second, noting when each was
/// sent in `sent`; returns how many the relay accepted.
fn publish(relay: &str, frames: &[String], sent: &Mutex<Vec<Option<Instant>>>) -> usize {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let (socket, _) = tokio_tungstenite::connect_async(relay)
            .await
            .expect("connecting to the remote");
        let (mut write, mut read) = socket.split();
        let reader = tokio::spawn(async move {
            let mut accepted = 0;
            while let Some(Ok(message)) = read.next().await {
                if let Message::Text(text) = message {
                    if text.starts_with(r#"["OK""#) && text.contains(",true,") {
                        accepted += 1;
                    }
                }
            }
            accepted
        });
        let start = tokio::time::Instant::now();
        let every = Duration::from_millis(1_000 / PER_SECOND);
        for (r, frame) in frames.iter().enumerate() {
            tokio::time::sleep_until(start + every * r as u32).await;
            if let Ok(mut sent) = sent.lock() {
                sent[r] = Some(Instant::now());
            }
            write
                .send(Message::text(frame.clone()))
                .await
                .expect("sending a state");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let _ = write.close().await;
        tokio::time::timeout(Duration::from_secs(5), reader)
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or(0)
    })
}
