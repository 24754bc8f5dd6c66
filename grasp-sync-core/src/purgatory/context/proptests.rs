use futures::executor::block_on;
use proptest::prelude::*;

use super::super::test_support::{oid, repo};
use super::*;
use crate::url_policy::CloneUrlPolicy;

proptest! {
    #[test]
    fn fetch_then_process_releases_exactly_the_satisfied_events(
        events in proptest::collection::vec(proptest::collection::btree_set(0u8..8, 1..4), 0..6),
        served in proptest::collection::btree_set(0u8..8, 0..8),
    ) {
        let ctx = MemorySyncContext::new();
        for needed in &events {
            ctx.add_pending_event(&repo(), needed.iter().map(|n| oid(*n)));
        }
        ctx.set_remote("https://a.example/r.git", served.iter().map(|n| oid(*n)));
        let url = CloneUrlPolicy::new().check("https://a.example/r.git");
        prop_assert!(url.is_ok());
        if let Ok(url) = url {
            let needed: Vec<GitOid> = ctx.collect_needed_oids(&repo()).into_iter().collect();
            let fetched = block_on(ctx.fetch_oids(Path::new("memory"), &url, &needed));
            prop_assert!(fetched.is_ok());
        }
        let released = block_on(ctx.process_satisfiable_events(&repo())).unwrap_or(usize::MAX);
        let satisfiable = events.iter().filter(|needed| needed.is_subset(&served)).count();
        prop_assert_eq!(released, satisfiable);
        prop_assert_eq!(ctx.has_pending_events(&repo()), satisfiable < events.len());
        for n in ctx.collect_needed_oids(&repo()) {
            prop_assert!(!served.iter().any(|s| oid(*s) == n));
        }
    }
}
