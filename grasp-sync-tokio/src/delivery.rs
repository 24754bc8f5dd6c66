//! A connection's reports on their way to the manager ([`Delivery`]), in
//! the order their frames arrived: an `EOSE` never overtakes the events
//! before it, though the frames are decoded in tasks of their own. The
//! connection's driver task keeps it and hands each report on as soon as
//! it is decoded and the manager's channel has room, between reading
//! frames; no task of its own forwards them.

use futures_util::future::BoxFuture;
use futures_util::stream::{FuturesOrdered, StreamExt};
use nostr::prelude::RelayUrl;
use tokio::sync::mpsc;

use crate::budget::BufferedShare;

use crate::decode::Pending;
use crate::inbound::{Inbound, Report};

/// Reports of one connection decoding or decoded, with their share of the
/// relay's inbound byte budget.
type Decoded = BoxFuture<'static, (Vec<Report>, Option<BufferedShare>)>;

/// The manager has stopped taking reports.
#[derive(Debug)]
pub(crate) struct ManagerGone;

/// The reports of one connection not yet handed to the manager, in arrival
/// order.
pub(crate) struct Delivery {
    relay: RelayUrl,
    generation: u64,
    inbound: mpsc::Sender<Inbound>,
    /// Reports decoding or decoded, oldest first.
    decoding: FuturesOrdered<Decoded>,
    /// The oldest reports, decoded, waiting for room in the manager's
    /// channel.
    ready: Option<Inbound>,
}

impl Delivery {
    /// Reports of connection `generation` to `relay`, for `inbound`.
    pub(crate) fn new(relay: RelayUrl, generation: u64, inbound: mpsc::Sender<Inbound>) -> Self {
        Delivery {
            relay,
            generation,
            inbound,
            decoding: FuturesOrdered::new(),
            ready: None,
        }
    }

    /// Queues a report (or frames decoding) after those queued before.
    pub(crate) fn push(&mut self, pending: Pending, budget: Option<BufferedShare>) {
        self.decoding.push_back(Box::pin(async move {
            let reports = match pending {
                Pending::Ready(report) => vec![report],
                Pending::Decoding(task) => match task.await {
                    Ok(reports) => reports,
                    // The decoding task panicked or was aborted (runtime
                    // shutting down): the frames count as malformed.
                    Err(_) => vec![Report::Malformed(0)],
                },
            };
            (reports, budget)
        }));
    }

    /// How many entries wait (decoding, or decoded and not handed on).
    pub(crate) fn len(&self) -> usize {
        self.decoding.len() + usize::from(self.ready.is_some())
    }

    /// Whether nothing waits.
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Hands the oldest entry to the manager once it is decoded and the
    /// manager's channel has room; pending while nothing waits.
    /// Cancel-safe: an entry taken is kept until it is sent.
    pub(crate) async fn deliver_one(&mut self) -> Result<(), ManagerGone> {
        if self.ready.is_none() {
            let Some((reports, budget)) = self.decoding.next().await else {
                return std::future::pending().await;
            };
            self.ready = Some(Inbound {
                relay: self.relay.clone(),
                generation: self.generation,
                reports,
                budget,
            });
        }
        let permit = self.inbound.reserve().await.map_err(|_| ManagerGone)?;
        if let Some(inbound) = self.ready.take() {
            permit.send(inbound);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn relay() -> RelayUrl {
        RelayUrl::parse("ws://127.0.0.1:1").expect("url")
    }

    #[tokio::test]
    async fn reports_go_on_in_arrival_order_though_a_later_one_is_decoded_first() {
        let (inbound, mut received) = mpsc::channel(4);
        let mut delivery = Delivery::new(relay(), 7, inbound);
        let (release, released) = tokio::sync::oneshot::channel::<()>();
        let slow = tokio::spawn(async move {
            let _ = released.await;
            vec![Report::Malformed(1)]
        });
        delivery.push(Pending::Decoding(slow), None);
        delivery.push(Pending::Ready(Report::Alive), None);
        // The ready report waits behind the one still decoding.
        let early =
            tokio::time::timeout(std::time::Duration::from_millis(50), delivery.deliver_one())
                .await;
        assert!(early.is_err(), "nothing overtakes the frames before it");
        assert_eq!(delivery.len(), 2, "a cancelled delivery loses nothing");
        release.send(()).expect("the decoder waits");
        delivery.deliver_one().await.expect("manager there");
        delivery.deliver_one().await.expect("manager there");
        assert!(delivery.is_empty());
        let first = received.recv().await.expect("first");
        let second = received.recv().await.expect("second");
        assert_eq!(first.generation, 7);
        assert!(matches!(first.reports[..], [Report::Malformed(1)]));
        assert!(matches!(second.reports[..], [Report::Alive]));
    }

    #[tokio::test]
    async fn a_decoded_report_waits_for_room_and_is_kept_when_the_wait_is_cancelled() {
        let (inbound, mut received) = mpsc::channel(1);
        let mut delivery = Delivery::new(relay(), 0, inbound);
        delivery.push(Pending::Ready(Report::Alive), None);
        delivery.push(Pending::Ready(Report::Connected), None);
        delivery.deliver_one().await.expect("room for one");
        // The channel is full: the second waits, and a cancelled wait keeps it.
        let blocked =
            tokio::time::timeout(std::time::Duration::from_millis(50), delivery.deliver_one())
                .await;
        assert!(blocked.is_err());
        assert_eq!(delivery.len(), 1);
        assert!(matches!(
            received.recv().await.expect("first").reports[..],
            [Report::Alive]
        ));
        delivery.deliver_one().await.expect("room again");
        assert!(matches!(
            received.recv().await.expect("second").reports[..],
            [Report::Connected]
        ));
        drop(received);
        delivery.push(Pending::Ready(Report::Alive), None);
        assert!(delivery.deliver_one().await.is_err(), "the manager is gone");
    }
}
