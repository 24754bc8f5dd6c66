use futures::executor::block_on;

use super::super::test_support::{oid, repo, repo_named, repository};
use super::*;
use crate::url_policy::CloneUrlPolicy;

fn url(text: &str) -> CloneUrl {
    CloneUrlPolicy::new().check(text).expect("public https url")
}

fn ids(list: &[u8]) -> BTreeSet<GitOid> {
    list.iter().map(|n| oid(*n)).collect()
}

#[test]
fn repository_data_or_unknown() {
    let ctx = MemorySyncContext::new();
    let data = repository(&[&["https://a.example/r.git"]]);
    ctx.add_repository(&repo(), data.clone());
    assert_eq!(
        block_on(ctx.fetch_repository_data(&repo())).ok(),
        Some(data)
    );
    let other = repo_named("other");
    let missing = block_on(ctx.fetch_repository_data(&other));
    assert!(matches!(
        missing,
        Err(SyncContextError::UnknownRepository { repo }) if repo == other
    ));
}

#[test]
fn needed_oids_exclude_local_ones() {
    let ctx = MemorySyncContext::new();
    ctx.add_pending_event(&repo(), ids(&[1, 2]));
    ctx.add_pending_event(&repo(), ids(&[2, 3]));
    ctx.add_local_oid(oid(2));
    assert_eq!(ctx.collect_needed_oids(&repo()), ids(&[1, 3]));
    assert!(ctx.collect_needed_oids(&repo_named("other")).is_empty());
    assert!(ctx.oid_exists(&repo(), &oid(2)));
    assert!(!ctx.oid_exists(&repo(), &oid(1)));
}

#[test]
fn fetch_returns_the_intersection_and_stores_it() {
    let ctx = MemorySyncContext::new();
    ctx.set_remote("https://a.example/r.git", ids(&[1, 3, 9]));
    let asked = [oid(1), oid(2), oid(3)];
    let fetched =
        block_on(ctx.fetch_oids(Path::new("memory"), &url("https://a.example/r.git"), &asked));
    assert_eq!(fetched.ok(), Some(vec![oid(1), oid(3)]));
    assert!(ctx.oid_exists(&repo(), &oid(3)));
    assert!(!ctx.oid_exists(&repo(), &oid(9)));
    assert_eq!(
        ctx.fetch_log(),
        vec![FetchCall {
            url: "https://a.example/r.git".to_owned(),
            oids: asked.to_vec(),
        }]
    );
}

#[test]
fn failing_and_unknown_remotes_are_fetch_errors() {
    let ctx = MemorySyncContext::new();
    ctx.set_remote_error("https://down.example/r.git", "connection refused");
    let path = Path::new("memory");
    let down = block_on(ctx.fetch_oids(path, &url("https://down.example/r.git"), &[oid(1)]));
    assert!(matches!(
        &down,
        Err(SyncContextError::Fetch { reason, .. }) if reason == "connection refused"
    ));
    let message = down.err().map(|e| e.to_string()).unwrap_or_default();
    assert_eq!(
        message,
        "fetch from https://down.example/r.git failed: connection refused"
    );
    let unknown = block_on(ctx.fetch_oids(path, &url("https://nowhere.example/r.git"), &[oid(1)]));
    assert!(matches!(unknown, Err(SyncContextError::Fetch { .. })));
    assert_eq!(ctx.fetch_log().len(), 2);
    assert!(!ctx.oid_exists(&repo(), &oid(1)));
}

#[test]
fn process_releases_only_satisfied_events() {
    let ctx = MemorySyncContext::new();
    ctx.add_pending_event(&repo(), ids(&[1]));
    ctx.add_pending_event(&repo(), ids(&[1, 2]));
    assert!(ctx.has_pending_events(&repo()));
    assert_eq!(
        block_on(ctx.process_satisfiable_events(&repo())).ok(),
        Some(0)
    );

    ctx.add_local_oid(oid(1));
    assert_eq!(
        block_on(ctx.process_satisfiable_events(&repo())).ok(),
        Some(1)
    );
    assert!(ctx.has_pending_events(&repo()));

    ctx.add_local_oid(oid(2));
    assert_eq!(
        block_on(ctx.process_satisfiable_events(&repo())).ok(),
        Some(1)
    );
    assert!(!ctx.has_pending_events(&repo()));
    assert_eq!(ctx.released(&repo()), 2);
    assert_eq!(
        block_on(ctx.process_satisfiable_events(&repo())).ok(),
        Some(0)
    );
    assert_eq!(ctx.released(&repo_named("unknown")), 0);
}

#[test]
fn target_repo_and_our_domain() {
    let ctx = MemorySyncContext::default().with_our_domain("git.example.com");
    assert_eq!(
        ctx.own_service(),
        &OwnService::new().with_host("git.example.com")
    );
    assert_eq!(ctx.find_target_repo(&repo()), None);
    ctx.add_repository(&repo(), repository(&[&["https://a.example/r.git"]]));
    assert_eq!(ctx.find_target_repo(&repo()), Some(PathBuf::from("memory")));
    assert!(MemorySyncContext::new().own_service().is_empty());
}

#[test]
fn a_missing_local_repository_exists_once_created() {
    let ctx = MemorySyncContext::new();
    assert!(ctx.creates_repositories());
    assert!(
        block_on(ctx.create_target_repo(&repo())).is_err(),
        "unknown"
    );
    ctx.add_repository(&repo(), repository(&[&["https://a.example/r.git"]]));
    ctx.remove_local_repository(&repo());
    assert_eq!(ctx.find_target_repo(&repo()), None);
    let created = block_on(ctx.create_target_repo(&repo())).ok();
    assert_eq!(created, Some(PathBuf::from("memory")));
    assert_eq!(ctx.find_target_repo(&repo()), Some(PathBuf::from("memory")));
    assert!(!MemorySyncContext::new()
        .with_repository_creation(false)
        .creates_repositories());
}

#[test]
fn usable_as_a_shared_trait_object() {
    let ctx: std::sync::Arc<dyn SyncContext> = std::sync::Arc::new(MemorySyncContext::new());
    assert!(!ctx.has_pending_events(&repo()));
    assert!(block_on(ctx.fetch_repository_data(&repo())).is_err());
}

#[test]
fn a_strict_remote_refuses_a_request_for_objects_it_partly_lacks() {
    let ctx = MemorySyncContext::new();
    ctx.set_remote_strict("https://a.example/r.git", ids(&[1]));
    let path = Path::new("memory");
    let both = block_on(ctx.fetch_oids(path, &url("https://a.example/r.git"), &[oid(1), oid(2)]));
    assert!(matches!(both, Err(SyncContextError::ObjectsMissing { .. })));
    assert!(
        !ctx.oid_exists(&repo(), &oid(1)),
        "nothing of a refused request"
    );
    let one = block_on(ctx.fetch_oids(path, &url("https://a.example/r.git"), &[oid(1)]));
    assert_eq!(one.ok(), Some(vec![oid(1)]));
    let missing = block_on(ctx.fetch_oids(path, &url("https://a.example/r.git"), &[oid(2)]));
    assert_eq!(missing.ok(), Some(Vec::new()));
}

#[test]
fn io_error_keeps_its_source() {
    let error = SyncContextError::Io {
        operation: "opening repository".to_owned(),
        source: std::io::Error::new(std::io::ErrorKind::NotFound, "gone"),
    };
    assert_eq!(error.to_string(), "opening repository failed");
    assert!(std::error::Error::source(&error).is_some());
}
