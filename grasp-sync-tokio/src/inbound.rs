//! What connection tasks report to the manager: a [`Report`] tagged with
//! its relay and connection generation ([`Inbound`]).

use crate::budget::BufferedShare;
use grasp_sync_core::screen::Refused;
use grasp_sync_core::verified::VerifiedEvent;
use nostr::prelude::{RelayMessage, RelayUrl, SubscriptionId};

/// What a connection task reports to the manager.
#[derive(Debug)]
pub(crate) enum Report {
    /// The WebSocket is open.
    Connected,
    /// The connection could not be opened.
    ConnectFailed(String),
    /// Every address the relay's host resolved to was refused by the relay
    /// policy: nothing was connected.
    AddressRefused(String),
    /// A message from the relay and its size on the wire.
    Message(Box<RelayMessage<'static>>, usize),
    /// An `EVENT` from the relay, screened and its id and signature
    /// checked (or refused, and why), and its size on the wire.
    Event {
        subscription_id: SubscriptionId,
        checked: Result<VerifiedEvent, Refused>,
        size: usize,
    },
    /// An `EVENT` frame refused before it was parsed (longer than the
    /// event size limit).
    Refused(Refused),
    /// A message over the WebSocket size limit, of this many bytes: the
    /// connection cannot read past it and has ended.
    MessageTooLarge(usize),
    /// A WebSocket pong to our ping: the relay is alive (fed to the engine
    /// as `handle_relay_alive`).
    Alive,
    /// A frame that is not a NIP-01/NIP-77 message.
    Malformed(usize),
    /// The connection closed.
    Disconnected(String),
    /// The relay's NIP-11 limits, fetched after the connection opened.
    Limits(grasp_sync_core::engine::RelayLimits),
}

/// Reports tagged with their relay and connection generation (reports of
/// an older connection to the same relay are stale): one, or the frames
/// received together, in the order they arrived (one message through the
/// channel and one engine call for a run of events, not one per event).
#[derive(Debug)]
pub(crate) struct Inbound {
    pub(crate) relay: RelayUrl,
    pub(crate) generation: u64,
    pub(crate) reports: Vec<Report>,
    /// The reports' share of the inbound byte budgets (the relay's and the
    /// shared one), given back when they are dropped (after they were
    /// handled).
    pub(crate) budget: Option<BufferedShare>,
}
