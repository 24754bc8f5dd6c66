//! What the own side ends with, checked the way a user sees it: every event of the data
//! set on the own relay, and every repository under the git root serving its state's
//! `refs/heads/main` and `HEAD` and each pull request's and update's tip at
//! `refs/nostr/<id>`.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use grasp_sync_test_support::strfry::Strfry;

use crate::data::{Dataset, Repository};

/// `"exact"`, or what is missing.
pub(crate) fn check(data: &Dataset, git_root: &Path, own: &Strfry) -> String {
    let held = own.ids();
    let missing_events = data.events.iter().filter(|e| !held.contains(&e.id)).count();
    let wrong: Vec<String> = data
        .repositories
        .iter()
        .filter_map(|repository| wrong_refs(repository, git_root))
        .collect();
    match (missing_events, wrong.len()) {
        (0, 0) => "exact".to_owned(),
        (events, repositories) => format!(
            "NOT SERVED: {events} events missing on the own relay, {repositories} repositories \
             wrong (first: {})",
            wrong.first().map_or("none", String::as_str)
        ),
    }
}

/// What `repository` serves wrong, if anything.
fn wrong_refs(repository: &Repository, git_root: &Path) -> Option<String> {
    let path = repository.served_path(git_root);
    let refs = served_refs(&path);
    let name = &repository.identifier;
    if refs.get("refs/heads/main") != Some(&repository.main) {
        return Some(format!(
            "{name}: refs/heads/main {:?}",
            refs.get("refs/heads/main")
        ));
    }
    let head = std::fs::read_to_string(path.join("HEAD")).unwrap_or_default();
    if head.trim() != "ref: refs/heads/main" {
        return Some(format!("{name}: HEAD {head:?}"));
    }
    for (id, tip) in &repository.tips {
        let name_of = format!("refs/nostr/{}", id.to_hex());
        if refs.get(&name_of) != Some(tip) {
            return Some(format!("{name}: {name_of} {:?}", refs.get(&name_of)));
        }
    }
    None
}

/// Every ref of the bare repository `path` (`git for-each-ref`); empty if it is none.
pub(crate) fn served_refs(path: &Path) -> BTreeMap<String, String> {
    let Ok(output) = Command::new("git")
        .arg("-C")
        .arg(path)
        .args(["for-each-ref", "--format=%(refname) %(objectname)"])
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
    else {
        return BTreeMap::new();
    };
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| line.split_once(' '))
        .map(|(name, oid)| (name.to_owned(), oid.to_owned()))
        .collect()
}
