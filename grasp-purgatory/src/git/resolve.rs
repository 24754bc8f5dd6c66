//! Name resolution for clone URLs, behind a trait the caller can replace.
//!
//! A clone URL's host is resolved once, by a [`Resolver`]; the addresses are checked and
//! git is made to connect to the checked address (see [`super::pin`]), so a name that
//! resolves to something else a moment later (DNS rebinding) changes nothing.
//! [`SystemResolver`] asks the operating system; [`StaticResolver`] (the core's, shared
//! with the relay connections) answers from a fixed table (tests, or names pinned by
//! configuration).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use grasp_sync_core::clock::{Clock, Instant};
pub use grasp_sync_core::resolve::{Resolver, StaticResolver};
use indexmap::IndexMap;

/// How long [`SystemResolver`] may take for one name.
pub const RESOLVE_TIMEOUT: Duration = Duration::from_secs(10);

/// The operating system's resolver (`getaddrinfo` through tokio), bounded by
/// [`RESOLVE_TIMEOUT`].
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemResolver;

#[async_trait]
impl Resolver for SystemResolver {
    async fn resolve(&self, host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>> {
        let lookup = tokio::net::lookup_host((host, port));
        let addresses = tokio::time::timeout(RESOLVE_TIMEOUT, lookup)
            .await
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))??;
        Ok(addresses.collect())
    }
}

/// How long [`CachedResolver`] keeps an answer: 60 s.
pub const RESOLVE_CACHE_TTL: Duration = Duration::from_secs(60);

/// The most names [`CachedResolver`] remembers (the oldest are forgotten first): 4 096.
pub const RESOLVE_CACHE_ENTRIES: usize = 4096;

/// What [`CachedResolver`] keeps: per (name, port), when it was asked and the answer,
/// oldest first.
type Answers = IndexMap<(String, u16), (Instant, Vec<SocketAddr>)>;

/// A resolver that gives the same answer for a name for [`RESOLVE_CACHE_TTL`]: the
/// throttle that keys a host name by the address block it resolves to and the fetch
/// that connects to that address ask this one, so a name server answering differently
/// each time cannot have a fetch counted against one block and sent to another.
/// Failures are not kept. At most [`RESOLVE_CACHE_ENTRIES`] names, the oldest forgotten
/// first.
pub struct CachedResolver {
    inner: Arc<dyn Resolver>,
    clock: Arc<dyn Clock>,
    answers: Mutex<Answers>,
}

impl std::fmt::Debug for CachedResolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachedResolver")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl CachedResolver {
    /// Remembers what `inner` answers, for [`RESOLVE_CACHE_TTL`] of `clock`'s time.
    pub fn new(inner: Arc<dyn Resolver>, clock: Arc<dyn Clock>) -> Self {
        CachedResolver {
            inner,
            clock,
            answers: Mutex::new(IndexMap::new()),
        }
    }

    fn answers(&self) -> MutexGuard<'_, Answers> {
        self.answers.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The kept answer for `key`, if it is still fresh at `now`.
    fn fresh(&self, key: &(String, u16), now: Instant) -> Option<Vec<SocketAddr>> {
        let answers = self.answers();
        let (at, addresses) = answers.get(key)?;
        (now.saturating_duration_since(*at) < RESOLVE_CACHE_TTL).then(|| addresses.clone())
    }

    /// Keeps `addresses` for `key` from `now`, forgetting the oldest names when full.
    fn keep(&self, key: (String, u16), now: Instant, addresses: Vec<SocketAddr>) {
        let mut answers = self.answers();
        answers.shift_remove(&key);
        while answers.len() >= RESOLVE_CACHE_ENTRIES {
            answers.shift_remove_index(0);
        }
        answers.insert(key, (now, addresses));
    }
}

#[async_trait]
impl Resolver for CachedResolver {
    async fn resolve(&self, host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>> {
        let key = (host.trim_end_matches('.').to_ascii_lowercase(), port);
        if let Some(addresses) = self.fresh(&key, self.clock.now()) {
            return Ok(addresses);
        }
        let addresses = self.inner.resolve(host, port).await?;
        self.keep(key, self.clock.now(), addresses.clone());
        Ok(addresses)
    }
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;
    use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

    use grasp_sync_core::clock::ManualClock;
    use nostr::prelude::Timestamp;

    use super::*;

    /// A name server that answers a new address each time it is asked (`10.0.<n>.1`):
    /// a rebinding attacker's.
    #[derive(Debug, Default)]
    struct Rebinding {
        asked: AtomicU8,
    }

    #[async_trait]
    impl Resolver for Rebinding {
        async fn resolve(&self, _host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>> {
            let n = self.asked.fetch_add(1, Ordering::SeqCst);
            let address: IpAddr = format!("10.0.{n}.1").parse().expect("an address");
            Ok(vec![SocketAddr::new(address, port)])
        }
    }

    /// The throttle and the fetch ask the cache in turn: both get the first answer for
    /// the whole time to live, whatever the name server answers meanwhile; then the name
    /// is asked again.
    #[tokio::test]
    async fn one_answer_per_name_for_the_time_to_live() {
        let inner = Arc::new(Rebinding::default());
        let clock = Arc::new(ManualClock::new(Timestamp::from_secs(1_750_000_000)));
        let cache = CachedResolver::new(inner.clone(), clock.clone());
        let first = cache.resolve("Evil.Example.", 443).await.unwrap();
        clock.advance(RESOLVE_CACHE_TTL - Duration::from_secs(1));
        assert_eq!(cache.resolve("evil.example", 443).await.unwrap(), first);
        assert_eq!(inner.asked.load(Ordering::SeqCst), 1);
        clock.advance(Duration::from_secs(1));
        assert_ne!(cache.resolve("evil.example", 443).await.unwrap(), first);
        assert_eq!(inner.asked.load(Ordering::SeqCst), 2);
    }

    mockall::mock! {
        Clock {}
        impl Clock for Clock {
            fn now(&self) -> Instant;
            fn unix_time(&self) -> Timestamp;
        }
    }

    mockall::mock! {
        #[derive(Debug)]
        NameServer {}
        #[async_trait]
        impl Resolver for NameServer {
            async fn resolve(&self, host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>>;
        }
    }

    /// The time to live runs from when the answer arrived, not from when it was asked
    /// for, and on the monotonic clock only (the wall clock is never read: setting it
    /// neither expires nor extends an answer). A name server that takes 10 s to answer
    /// (the mocked clock moves while it answers, a step a manual clock cannot take in
    /// the middle of a call) is not asked again 55 s after its answer, 65 s after the
    /// question, and is at 60 s after it.
    #[tokio::test]
    async fn the_time_to_live_runs_from_the_answer() {
        let secs = Arc::new(AtomicU64::new(0));
        let mut clock = MockClock::new();
        let read = Arc::clone(&secs);
        clock
            .expect_now()
            .returning(move || Instant::from_secs(read.load(Ordering::SeqCst)));
        clock.expect_unix_time().never();
        // The first answer, then another: which one the cache gives tells whether it
        // asked again.
        let first: SocketAddr = "203.0.113.1:443".parse().unwrap();
        let second: SocketAddr = "203.0.113.2:443".parse().unwrap();
        let mut name_server = MockNameServer::new();
        let mut order = mockall::Sequence::new();
        for answer in [first, second] {
            let answering = Arc::clone(&secs);
            name_server
                .expect_resolve()
                .withf(|host, port| host == "git.example" && *port == 443)
                .times(1)
                .in_sequence(&mut order)
                .returning(move |_, _| {
                    answering.fetch_add(10, Ordering::SeqCst);
                    Ok(vec![answer])
                });
        }
        let cache = CachedResolver::new(Arc::new(name_server), Arc::new(clock));
        // Asked at 0, answered at 10; kept at 65; asked again at 70.
        for (at, answer) in [(0, first), (65, first), (70, second)] {
            secs.store(at, Ordering::SeqCst);
            let got = cache.resolve("git.example", 443).await.unwrap();
            assert_eq!(got, vec![answer], "at {at} s");
        }
    }

    /// A failed resolution is not kept: the next question asks the name server again,
    /// at once.
    #[tokio::test]
    async fn a_failure_is_asked_again_at_once() {
        let clock = Arc::new(ManualClock::new(Timestamp::from_secs(1_750_000_000)));
        let mut name_server = MockNameServer::new();
        let mut order = mockall::Sequence::new();
        name_server
            .expect_resolve()
            .times(1)
            .in_sequence(&mut order)
            .returning(|_, _| Err(std::io::ErrorKind::TimedOut.into()));
        let address: SocketAddr = "203.0.113.1:443".parse().unwrap();
        name_server
            .expect_resolve()
            .times(1)
            .in_sequence(&mut order)
            .returning(move |_, _| Ok(vec![address]));
        let cache = CachedResolver::new(Arc::new(name_server), clock);
        assert!(cache.resolve("git.example", 443).await.is_err());
        assert_eq!(
            cache.resolve("git.example", 443).await.unwrap(),
            vec![address]
        );
        assert_eq!(
            cache.resolve("git.example", 443).await.unwrap(),
            vec![address]
        );
    }

    /// At most [`RESOLVE_CACHE_ENTRIES`] names are kept, the oldest forgotten first.
    #[tokio::test]
    async fn the_cache_is_bounded() {
        let clock = Arc::new(ManualClock::new(Timestamp::from_secs(1_750_000_000)));
        let cache = CachedResolver::new(Arc::new(Rebinding::default()), clock);
        for n in 0..RESOLVE_CACHE_ENTRIES + 10 {
            cache.resolve(&format!("n{n}.example"), 443).await.unwrap();
        }
        let answers = cache.answers();
        assert_eq!(answers.len(), RESOLVE_CACHE_ENTRIES);
        assert!(!answers.contains_key(&("n0.example".to_owned(), 443)));
    }
}
