//! The whole job's data set: `n` repositories spread over git hosts, each a real bare
//! repository (made with one `git fast-import`) and 22 signed events that name its
//! commits.
//!
//! Per repository (owner `MAINTAINERS` keys in turn, identifier `job-<r>`):
//! - the announcement (30617): clone URLs our own service's first (the GRASP layout on
//!   the own relay's host, never fetched from), then its git host's; relays the remote
//!   and the own relay;
//! - the state (30618): `refs/heads/main` at the main commit, `HEAD` at `main`;
//! - two pull requests (1618) by contributors, each with a `clone` tag and a tip on a
//!   branch of its own, and an update (1619) of each, to a child of that tip;
//! - four issues (1621), three replies (1111) to each.
//!
//! Every commit is on the repository's own host, so a repository needs its objects from
//! one clone URL: the politeness floor of the set is the per-host rate's (see
//! [`politeness_floor`]).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use grasp_sync_test_support::nip34::{sign, tag, Announcement};
use nostr::prelude::{Event, EventId, Keys, PublicKey, SecretKey, Timestamp, ToBech32};

/// Events per repository.
pub(crate) const EVENTS_PER_REPOSITORY: usize = 22;
/// Owners the repositories are spread over.
const MAINTAINERS: usize = 100;
/// Contributors opening pull requests, issues and replies.
const USERS: usize = 64;
/// Pull requests per repository (each with one update).
const PULL_REQUESTS: usize = 2;
/// Issues per repository.
const ISSUES: usize = 4;
/// Replies per issue.
const REPLIES: usize = 3;

/// One repository of the data set: where its source lives and what it must serve.
#[derive(Clone, Debug)]
pub(crate) struct Repository {
    /// Its owner.
    pub(crate) owner: PublicKey,
    /// Its identifier (`d` tag).
    pub(crate) identifier: String,
    /// Its git host (an index into the hosts).
    pub(crate) host: usize,
    /// The commit its state puts at `refs/heads/main`.
    pub(crate) main: String,
    /// Each pull request and update event with its tip: served at `refs/nostr/<id>`.
    pub(crate) tips: Vec<(EventId, String)>,
}

impl Repository {
    /// Its directory under a GRASP git root (`<npub>/<identifier>.git`).
    pub(crate) fn served_path(&self, git_root: &Path) -> PathBuf {
        let npub = self.owner.to_bech32().expect("an npub");
        git_root.join(npub).join(format!("{}.git", self.identifier))
    }
}

/// The data set: the repositories and every event of theirs.
#[derive(Debug)]
pub(crate) struct Dataset {
    /// The repositories, by index.
    pub(crate) repositories: Vec<Repository>,
    /// Their events.
    pub(crate) events: Vec<Event>,
}

/// Deterministic keys: number `n` of the data set.
fn keys(n: usize) -> Keys {
    let mut secret = [0u8; 32];
    secret[0] = 0x6a;
    secret[24..].copy_from_slice(&(n as u64 + 1).to_be_bytes());
    Keys::new(SecretKey::from_slice(&secret).expect("a valid secret key"))
}

/// Where things are: the git hosts' base URLs (`http://127.0.k.1:port`) and project
/// roots, the own relay (listed by every announcement; its host is our own service),
/// and the remote relay the events are read from.
#[derive(Clone, Debug)]
pub(crate) struct Places<'a> {
    /// Each git host's `http://addr:port`.
    pub(crate) host_urls: &'a [String],
    /// Each git host's project root.
    pub(crate) host_roots: &'a [PathBuf],
    /// `ws://127.0.0.1:<port>` of the own relay.
    pub(crate) own_relay: &'a str,
    /// The own relay's port (our own service's clone URLs are on it).
    pub(crate) own_port: u16,
    /// `ws://…` of the remote relay.
    pub(crate) remote: &'a str,
}

/// `n` repositories over `places.host_urls.len()` hosts, their source repositories made
/// under the hosts' roots; `created_at` values start a day ago (strfry takes nothing
/// over 900 s ahead).
pub(crate) fn dataset(n: usize, places: &Places<'_>) -> Dataset {
    let maintainers: Vec<Keys> = (0..MAINTAINERS).map(keys).collect();
    let users: Vec<Keys> = (MAINTAINERS..MAINTAINERS + USERS).map(keys).collect();
    let base = Timestamp::now().as_secs() - 86_400 - (n * EVENTS_PER_REPOSITORY) as u64;
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()) * 2;
    let chunk = n.div_ceil(threads).max(1);
    let parts: Vec<(Vec<Repository>, Vec<Event>)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..n)
            .step_by(chunk)
            .map(|first| {
                let (maintainers, users) = (&maintainers, &users);
                scope.spawn(move || {
                    let mut repositories = Vec::new();
                    let mut events = Vec::new();
                    for r in first..(first + chunk).min(n) {
                        let (repository, these) =
                            repository(r, base, places, &maintainers[r % MAINTAINERS], users);
                        repositories.push(repository);
                        events.extend(these);
                    }
                    (repositories, events)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|worker| worker.join().expect("a data set thread"))
            .collect()
    });
    let mut set = Dataset {
        repositories: Vec::with_capacity(n),
        events: Vec::with_capacity(n * EVENTS_PER_REPOSITORY),
    };
    for (repositories, events) in parts {
        set.repositories.extend(repositories);
        set.events.extend(events);
    }
    set
}

/// The commits of one source repository: main, then each pull request's tip and its
/// update's.
struct Commits {
    main: String,
    pull_requests: Vec<(String, String)>,
}

/// Repository `r`: its source made on its host, its events signed.
fn repository(
    r: usize,
    base: u64,
    places: &Places<'_>,
    owner: &Keys,
    users: &[Keys],
) -> (Repository, Vec<Event>) {
    let host = r % places.host_urls.len();
    let identifier = format!("job-{r:05}");
    let source = places.host_roots[host].join(format!("{identifier}.git"));
    let commits = make_source(&source, r);
    let clone_url = format!("{}/{identifier}.git", places.host_urls[host]);
    let npub = owner.public_key().to_bech32().expect("an npub");
    let own_clone = format!(
        "http://127.0.0.1:{}/{npub}/{identifier}.git",
        places.own_port
    );
    let coordinate = format!("30617:{}:{identifier}", owner.public_key().to_hex());
    let owner_hex = owner.public_key().to_hex();
    let mut at = base + (r * EVENTS_PER_REPOSITORY) as u64;
    let mut next = || {
        at += 1;
        at
    };
    let mut events = Vec::with_capacity(EVENTS_PER_REPOSITORY);
    events.push(
        Announcement::new(&identifier)
            .tag(tag(&["name", &identifier]))
            .clone_urls([own_clone, clone_url.clone()])
            .relays([places.remote, places.own_relay])
            .at(next())
            .sign(owner),
    );
    events.push(sign(
        owner,
        30618,
        "",
        vec![
            tag(&["d", &identifier]),
            tag(&["refs/heads/main", &commits.main]),
            tag(&["HEAD", "ref: refs/heads/main"]),
        ],
        next(),
    ));
    let mut tips = Vec::new();
    for (p, (tip, update)) in commits.pull_requests.iter().enumerate() {
        let author = &users[(r * 7 + p) % users.len()];
        let pull_request = sign(
            author,
            1618,
            &format!("pull request {p} of {identifier}"),
            vec![
                tag(&["a", &coordinate]),
                tag(&["p", &owner_hex]),
                tag(&["subject", &format!("pull request {p}")]),
                tag(&["c", tip]),
                tag(&["clone", &clone_url]),
            ],
            next(),
        );
        let revised = sign(
            author,
            1619,
            "",
            vec![
                tag(&["E", &pull_request.id.to_hex()]),
                tag(&["a", &coordinate]),
                tag(&["p", &owner_hex]),
                tag(&["c", update]),
                tag(&["clone", &clone_url]),
            ],
            next(),
        );
        tips.push((pull_request.id, tip.clone()));
        tips.push((revised.id, update.clone()));
        events.extend([pull_request, revised]);
    }
    for i in 0..ISSUES {
        let author = &users[(r * 5 + i) % users.len()];
        let issue = sign(
            author,
            1621,
            &format!("issue {i} of {identifier}: it does not build on a Tuesday"),
            vec![
                tag(&["a", &coordinate]),
                tag(&["p", &owner_hex]),
                tag(&["subject", &format!("issue {i}")]),
            ],
            next(),
        );
        let (root_hex, author_hex) = (issue.id.to_hex(), author.public_key().to_hex());
        for reply in 0..REPLIES {
            let replier = &users[(r * 3 + i + reply + 1) % users.len()];
            events.push(sign(
                replier,
                1111,
                &format!("re {i}.{reply}: seen it too"),
                vec![
                    tag(&["E", &root_hex, "", &author_hex]),
                    tag(&["K", "1621"]),
                    tag(&["P", &author_hex]),
                    tag(&["e", &root_hex, "", &author_hex]),
                    tag(&["k", "1621"]),
                ],
                next(),
            ));
        }
        events.push(issue);
    }
    debug_assert_eq!(events.len(), EVENTS_PER_REPOSITORY);
    let repository = Repository {
        owner: owner.public_key(),
        identifier,
        host,
        main: commits.main,
        tips,
    };
    (repository, events)
}

/// Makes the bare repository `path` with `git fast-import`: `main` with one commit,
/// and per pull request a branch with its tip and a child of it (the update).
fn make_source(path: &Path, r: usize) -> Commits {
    std::fs::create_dir_all(path).expect("a source repository directory");
    run_git(
        path,
        &["init", "--quiet", "--bare", "--initial-branch=main"],
        None,
    );
    let mut stream = String::new();
    let commit = |stream: &mut String,
                  branch: &str,
                  mark: usize,
                  from: Option<usize>,
                  text: &str| {
        let file = format!("{text}\n");
        stream.push_str(&format!(
            "commit refs/heads/{branch}\nmark :{mark}\ncommitter Bench <bench@example.com> {} +0000\n\
             data {}\n{text}\n",
            1_700_000_000 + mark,
            text.len() + 1
        ));
        if let Some(from) = from {
            stream.push_str(&format!("from :{from}\n"));
        }
        stream.push_str(&format!(
            "M 644 inline README\ndata {}\n{file}\n",
            file.len()
        ));
    };
    commit(&mut stream, "main", 1, None, &format!("repository {r}"));
    for p in 0..PULL_REQUESTS {
        let tip = 2 + 2 * p;
        commit(
            &mut stream,
            &format!("pr-{p}"),
            tip,
            Some(1),
            &format!("repository {r}: change {p}"),
        );
        commit(
            &mut stream,
            &format!("pr-{p}-v2"),
            tip + 1,
            Some(tip),
            &format!("repository {r}: change {p}, revised"),
        );
    }
    let marks = path.join("bench-marks");
    let marks_arg = format!("--export-marks={}", marks.display());
    run_git(
        path,
        &["fast-import", "--quiet", &marks_arg],
        Some(stream.as_bytes()),
    );
    let text = std::fs::read_to_string(&marks).expect("fast-import's marks");
    let _ = std::fs::remove_file(&marks);
    let mut oids = vec![String::new(); 2 + 2 * PULL_REQUESTS];
    for line in text.lines() {
        if let Some((mark, oid)) = line.trim_start_matches(':').split_once(' ') {
            if let Ok(mark) = mark.parse::<usize>() {
                if mark < oids.len() {
                    oids[mark] = oid.to_owned();
                }
            }
        }
    }
    Commits {
        main: oids[1].clone(),
        pull_requests: (0..PULL_REQUESTS)
            .map(|p| (oids[2 + 2 * p].clone(), oids[3 + 2 * p].clone()))
            .collect(),
    }
}

/// Adds a commit on top of `main` in the source repository `path` and moves `main` to
/// it (a push to the host); returns its id.
pub(crate) fn push_commit(path: &Path, text: &str) -> String {
    let stream = format!(
        "commit refs/heads/main\nmark :1\ncommitter Bench <bench@example.com> 1700001000 +0000\n\
         data {}\n{text}\nfrom refs/heads/main^0\nM 644 inline README\ndata {}\n{text}\n\n",
        text.len() + 1,
        text.len() + 1
    );
    let marks = path.join("bench-marks");
    let marks_arg = format!("--export-marks={}", marks.display());
    run_git(
        path,
        &["fast-import", "--quiet", &marks_arg],
        Some(stream.as_bytes()),
    );
    let text = std::fs::read_to_string(&marks).expect("fast-import's marks");
    let _ = std::fs::remove_file(&marks);
    text.split_whitespace().nth(1).expect("a mark").to_owned()
}

/// A new state of `repository` putting `main` at `oid`, at `at`.
pub(crate) fn new_state(owner: &Keys, repository: &Repository, oid: &str, at: u64) -> Event {
    sign(
        owner,
        30618,
        "",
        vec![
            tag(&["d", &repository.identifier]),
            tag(&["refs/heads/main", oid]),
            tag(&["HEAD", "ref: refs/heads/main"]),
        ],
        at,
    )
}

/// The owner keys of repository `r` (the data set's).
pub(crate) fn owner_keys(r: usize) -> Keys {
    keys(r % MAINTAINERS)
}

/// Runs git in `dir` with no user or system configuration; panics with its stderr on
/// failure.
fn run_git(dir: &Path, args: &[&str], input: Option<&[u8]>) {
    let mut child = Command::new("git")
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .env("LC_ALL", "C")
        .args(args)
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running git");
    if let (Some(input), Some(mut stdin)) = (input, child.stdin.take()) {
        stdin.write_all(input).expect("git's stdin");
    }
    let output = child.wait_with_output().expect("waiting for git");
    assert!(
        output.status.success(),
        "git {args:?} in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The politeness floor of a data set whose repositories each need one fetch from
/// their host: with `per_minute` fetches a minute per host, the last of a host's `m`
/// fetches starts no earlier than 60·⌊(m−1)/per_minute⌋ s.
pub(crate) fn politeness_floor(
    repositories: &[Repository],
    hosts: usize,
    per_minute: usize,
) -> u64 {
    (0..hosts)
        .map(|host| repositories.iter().filter(|r| r.host == host).count())
        .filter(|&m| m > 0)
        .map(|m| 60 * ((m - 1) / per_minute) as u64)
        .max()
        .unwrap_or(0)
}
