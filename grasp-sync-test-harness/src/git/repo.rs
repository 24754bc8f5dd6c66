//! A bare source repository that tests put commits into.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};

use super::cli::{git, git_command, git_with_input, init_bare_repo};

/// Committer/author time of the first commit (seconds since the epoch); each further
/// commit made through one [`SourceRepo`] is one second later.
const FIRST_COMMIT_TIME: u64 = 1_700_000_000;

/// A bare repository on disk. Commits are made with plumbing (`hash-object`,
/// `mktree`, `commit-tree`) and a fixed author, committer and clock, so the same
/// sequence of calls always produces the same object ids.
///
/// Each commit's tree holds one file, `message.txt`, containing the message.
#[derive(Debug)]
pub struct SourceRepo {
    path: PathBuf,
    commits_made: AtomicU64,
}

impl SourceRepo {
    /// The branch [`SourceRepo::commit`] advances (`HEAD` points at it).
    pub const BRANCH: &'static str = "refs/heads/main";

    /// Creates an empty bare repository at `path` (parents included).
    pub fn create(path: impl Into<PathBuf>) -> SourceRepo {
        let path = path.into();
        init_bare_repo(&path);
        SourceRepo {
            path,
            commits_made: AtomicU64::new(0),
        }
    }

    /// The repository directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Makes a commit on top of [`SourceRepo::BRANCH`] (a root commit if the branch is
    /// unborn), advances the branch to it, and returns its 40-hex object id.
    pub fn commit(&self, message: &str) -> String {
        let oid = self.commit_unreferenced(message);
        self.set_ref(Self::BRANCH, &oid);
        oid
    }

    /// Makes a commit whose parent is the tip of [`SourceRepo::BRANCH`] (if any) but
    /// that NO ref points at, like a pull-request tip pushed only as objects. It stays
    /// fetchable by id over protocol v2. Returns its object id.
    pub fn commit_unreferenced(&self, message: &str) -> String {
        let tree = self.tree_with_message(message);
        let parent = self.tip();
        self.commit_tree(&tree, parent.as_deref(), message)
    }

    /// Points `name` (a full ref name such as `refs/heads/pr`) at `oid`.
    pub fn set_ref(&self, name: &str, oid: &str) {
        git(&self.path, &["update-ref", name, oid]);
    }

    /// The commit [`SourceRepo::BRANCH`] points at, `None` while it is unborn.
    pub fn tip(&self) -> Option<String> {
        let output = git_command(&self.path)
            .args(["rev-parse", "--verify", "--quiet", Self::BRANCH])
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .expect("running git rev-parse");
        let oid = String::from_utf8_lossy(&output.stdout).trim().to_owned();
        (output.status.success() && !oid.is_empty()).then_some(oid)
    }

    /// Names of the refs whose history contains `oid` (empty for unreferenced commits).
    pub fn refs_containing(&self, oid: &str) -> Vec<String> {
        let listing = git(
            &self.path,
            &["for-each-ref", "--format=%(refname)", "--contains", oid],
        );
        listing.lines().map(str::to_owned).collect()
    }

    /// Writes a tree holding `message.txt` with `message` as content; returns its id.
    fn tree_with_message(&self, message: &str) -> String {
        let blob = git_with_input(
            &self.path,
            &["hash-object", "-w", "--stdin"],
            message.as_bytes(),
        );
        let listing = format!("100644 blob {blob}\tmessage.txt\n");
        git_with_input(&self.path, &["mktree"], listing.as_bytes())
    }

    /// `git commit-tree` with the fixed identity and the next commit time.
    fn commit_tree(&self, tree: &str, parent: Option<&str>, message: &str) -> String {
        let date = format!("{} +0000", self.next_commit_time());
        let mut cmd = git_command(&self.path);
        cmd.args(["commit-tree", tree]);
        if let Some(parent) = parent {
            cmd.args(["-p", parent]);
        }
        let output = cmd
            .args(["-m", message])
            .envs(identity_env(&date))
            .stdin(Stdio::null())
            .output()
            .expect("running git commit-tree");
        assert!(
            output.status.success(),
            "git commit-tree failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    }

    /// Seconds since the epoch for the next commit.
    fn next_commit_time(&self) -> u64 {
        FIRST_COMMIT_TIME + self.commits_made.fetch_add(1, Ordering::Relaxed)
    }
}

/// Fixed author and committer, both dated `date`.
fn identity_env(date: &str) -> [(&'static str, String); 6] {
    [
        ("GIT_AUTHOR_NAME", "Purgatory Test".to_owned()),
        ("GIT_AUTHOR_EMAIL", "test@example.invalid".to_owned()),
        ("GIT_AUTHOR_DATE", date.to_owned()),
        ("GIT_COMMITTER_NAME", "Purgatory Test".to_owned()),
        ("GIT_COMMITTER_EMAIL", "test@example.invalid".to_owned()),
        ("GIT_COMMITTER_DATE", date.to_owned()),
    ]
}
