//! Where a relay's connection stands: the one record of its lifecycle
//! (idle, connecting until a deadline, open with its connection), kept by
//! the relay's session. The reported [`ConnectionStatus`] is derived from
//! it.

use super::super::runtime::RelayConn;
use crate::clock::Instant;
use crate::model::ConnectionStatus;

/// Where a relay's connection stands.
#[derive(Debug, Default)]
pub(crate) enum Link {
    /// No connection and no attempt in flight: a connect may be tried when
    /// the relay's health allows.
    #[default]
    Idle,
    /// `Command::Connect` sent; the attempt is given up at `deadline`.
    Connecting {
        /// When the attempt is abandoned.
        deadline: Instant,
    },
    /// Open since `since`, with what is open and waiting on it.
    Open {
        /// When the connection opened (its stability counts from here).
        since: Instant,
        /// The connection's subscriptions, queue and live coverage.
        conn: Box<RelayConn>,
    },
}

impl Link {
    /// The reported lifecycle: disconnected, connecting or connected.
    pub(crate) fn status(&self) -> ConnectionStatus {
        match self {
            Link::Idle => ConnectionStatus::Disconnected,
            Link::Connecting { .. } => ConnectionStatus::Connecting,
            Link::Open { .. } => ConnectionStatus::Connected,
        }
    }

    /// The open connection, if any.
    pub(crate) fn conn(&self) -> Option<&RelayConn> {
        match self {
            Link::Open { conn, .. } => Some(conn),
            Link::Idle | Link::Connecting { .. } => None,
        }
    }

    /// [`Link::conn`], to change.
    pub(crate) fn conn_mut(&mut self) -> Option<&mut RelayConn> {
        match self {
            Link::Open { conn, .. } => Some(conn),
            Link::Idle | Link::Connecting { .. } => None,
        }
    }

    /// When the open connection opened; `None` while not connected.
    pub(crate) fn connected_since(&self) -> Option<Instant> {
        match self {
            Link::Open { since, .. } => Some(*since),
            Link::Idle | Link::Connecting { .. } => None,
        }
    }

    /// When the attempt in flight is given up; `None` without one.
    pub(crate) fn connect_deadline(&self) -> Option<Instant> {
        match self {
            Link::Connecting { deadline } => Some(*deadline),
            Link::Idle | Link::Open { .. } => None,
        }
    }

    /// An attempt starts, given up at `deadline`.
    pub(crate) fn start_connecting(&mut self, deadline: Instant) {
        *self = Link::Connecting { deadline };
    }

    /// The connection opened at `now`, with nothing open on it yet.
    pub(crate) fn open(&mut self, now: Instant) {
        *self = Link::Open {
            since: now,
            conn: Box::new(RelayConn::new(now)),
        };
    }

    /// Back to idle; the answer is the link as it was.
    pub(crate) fn close(&mut self) -> Link {
        std::mem::take(self)
    }
}
