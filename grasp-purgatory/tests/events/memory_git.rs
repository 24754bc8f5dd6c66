//! A [`GitBackend`] in memory: remotes that serve a set of objects or fail, a delay per
//! fetch (in tokio time, so it runs on virtual time), and a record of every fetch.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use grasp_purgatory::git::LocalRefs;
use grasp_purgatory::{FetchReport, GitBackend, GitError, RepoLocator};
use grasp_sync_core::nip34::{GitOid, RepoRef};
use grasp_sync_core::purgatory::RefChange;
use grasp_sync_core::url_policy::extract_domain;
use tokio::time::Instant;

/// One fetch as the "server" saw it.
#[derive(Clone, Debug)]
pub struct FetchRecord {
    pub url: String,
    pub domain: String,
    pub oids: Vec<GitOid>,
    pub started: Instant,
}

#[derive(Default)]
struct State {
    remotes: HashMap<String, Option<BTreeSet<GitOid>>>,
    local: BTreeSet<GitOid>,
    refs: HashMap<String, GitOid>,
    log: Vec<FetchRecord>,
    in_flight: HashMap<String, usize>,
    max_in_flight: HashMap<String, usize>,
}

/// The in-memory backend. Every repository path shares one object set.
#[derive(Default)]
pub struct MemoryGit {
    state: Mutex<State>,
    delay: Duration,
}

impl MemoryGit {
    pub fn with_delay(delay: Duration) -> Self {
        MemoryGit {
            state: Mutex::default(),
            delay,
        }
    }

    /// `url` serves these objects.
    pub fn serve(&self, url: &str, oids: impl IntoIterator<Item = String>) {
        let set = oids
            .into_iter()
            .map(|o| GitOid::parse(&o).unwrap())
            .collect();
        self.state
            .lock()
            .unwrap()
            .remotes
            .insert(url.to_owned(), Some(set));
    }

    /// Every fetch from `url` fails (an unreachable server).
    pub fn fail(&self, url: &str) {
        self.state
            .lock()
            .unwrap()
            .remotes
            .insert(url.to_owned(), None);
    }

    /// Puts an object in the local repository (as a push would).
    pub fn push_local(&self, oid: &str) {
        self.state
            .lock()
            .unwrap()
            .local
            .insert(GitOid::parse(oid).unwrap());
    }

    pub fn log(&self) -> Vec<FetchRecord> {
        self.state.lock().unwrap().log.clone()
    }

    pub fn max_in_flight(&self, domain: &str) -> usize {
        self.state
            .lock()
            .unwrap()
            .max_in_flight
            .get(domain)
            .copied()
            .unwrap_or(0)
    }

    pub fn refs(&self) -> HashMap<String, GitOid> {
        self.state.lock().unwrap().refs.clone()
    }

    fn begin(&self, url: &str, oids: &[GitOid]) -> String {
        let domain = extract_domain(url).unwrap_or_default();
        let mut state = self.state.lock().unwrap();
        state.log.push(FetchRecord {
            url: url.to_owned(),
            domain: domain.clone(),
            oids: oids.to_vec(),
            started: Instant::now(),
        });
        let now = {
            let count = state.in_flight.entry(domain.clone()).or_default();
            *count += 1;
            *count
        };
        let max = state.max_in_flight.entry(domain.clone()).or_default();
        *max = (*max).max(now);
        domain
    }

    fn end(&self, url: &str, domain: &str, oids: &[GitOid]) -> Result<FetchReport, GitError> {
        let mut state = self.state.lock().unwrap();
        if let Some(count) = state.in_flight.get_mut(domain) {
            *count -= 1;
        }
        let served = match state.remotes.get(url) {
            Some(Some(served)) => served.clone(),
            _ => {
                return Err(GitError::Failed {
                    operation: "fetch",
                    status: "exit status: 128".to_owned(),
                    stderr: format!("unable to access '{url}'"),
                })
            }
        };
        let got: BTreeSet<GitOid> = oids
            .iter()
            .filter(|o| served.contains(*o))
            .cloned()
            .collect();
        state.local.extend(got.iter().cloned());
        let present: BTreeSet<GitOid> = oids
            .iter()
            .filter(|o| state.local.contains(*o))
            .cloned()
            .collect();
        let missing = oids
            .iter()
            .filter(|o| !present.contains(*o))
            .cloned()
            .collect();
        Ok(FetchReport {
            present,
            missing,
            error: None,
        })
    }
}

#[async_trait]
impl GitBackend for MemoryGit {
    async fn fetch(
        &self,
        _repo: &Path,
        url: &str,
        oids: &[GitOid],
    ) -> Result<FetchReport, GitError> {
        let domain = self.begin(url, oids);
        tokio::time::sleep(self.delay).await;
        self.end(url, &domain, oids)
    }

    async fn existing(&self, _repo: &Path, oids: &[GitOid]) -> Result<BTreeSet<GitOid>, GitError> {
        let state = self.state.lock().unwrap();
        Ok(oids
            .iter()
            .filter(|o| state.local.contains(*o))
            .cloned()
            .collect())
    }

    async fn update_refs(
        &self,
        _repo: &Path,
        updates: &[(String, Option<GitOid>)],
    ) -> Result<(), GitError> {
        let mut state = self.state.lock().unwrap();
        for (name, oid) in updates {
            match oid {
                Some(oid) => state.refs.insert(name.clone(), oid.clone()),
                None => state.refs.remove(name),
            };
        }
        Ok(())
    }

    async fn local_refs(&self, _repo: &Path) -> Result<LocalRefs, GitError> {
        let state = self.state.lock().unwrap();
        Ok(LocalRefs {
            refs: state.refs.clone().into_iter().collect(),
            head: None,
        })
    }

    async fn apply_ref_changes(
        &self,
        _repo: &Path,
        changes: &[RefChange],
        _head: Option<&str>,
    ) -> Result<(), GitError> {
        let mut state = self.state.lock().unwrap();
        // One transaction: nothing applies when a ref is not at its old value.
        if let Some(moved) = changes
            .iter()
            .find(|change| state.refs.get(&change.name) != change.old.as_ref())
        {
            return Err(GitError::Failed {
                operation: "update-ref",
                status: "exit status: 128".to_owned(),
                stderr: format!("cannot lock ref '{}'", moved.name),
            });
        }
        for change in changes {
            match &change.new {
                Some(oid) => state.refs.insert(change.name.clone(), oid.clone()),
                None => state.refs.remove(&change.name),
            };
        }
        Ok(())
    }

    async fn init_bare(&self, repo: &Path) -> Result<(), GitError> {
        std::fs::create_dir_all(repo).map_err(|source| GitError::Io {
            operation: "init",
            source,
        })
    }

    async fn purgatory_refs(&self, _repo: &Path) -> Result<Vec<String>, GitError> {
        let state = self.state.lock().unwrap();
        Ok(state
            .refs
            .keys()
            .filter(|name| name.starts_with("refs/purgatory/"))
            .cloned()
            .collect())
    }
}

/// Every repository is this one path.
pub struct OneRepo(pub PathBuf);

impl RepoLocator for OneRepo {
    fn locate(&self, _repo: &RepoRef) -> Option<PathBuf> {
        Some(self.0.clone())
    }
}
