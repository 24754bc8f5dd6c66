//! One NIP-77 negentropy session, client side: local items in, hex messages
//! out, the ids the relay has and we lack collected on the way.

use negentropy::{Id, Negentropy, NegentropyStorageVector};
use nostr::prelude::{EventId, Timestamp};

/// Why a negentropy session cannot go on.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// The relay's message is not valid hex.
    #[error("negentropy message is not hex")]
    NotHex,
    /// The negentropy protocol failed.
    #[error("negentropy failed: {0}")]
    Protocol(String),
    /// The relay kept the reconciliation going past the round cap.
    #[error("negentropy session cut off after {rounds} rounds")]
    TooManyRounds {
        /// Rounds answered before the cut.
        rounds: u32,
    },
    /// The relay claimed more missing ids than one session may collect.
    #[error("negentropy session cut off: more than {cap} missing ids")]
    TooManyNeeded {
        /// The cap that was hit.
        cap: usize,
    },
}

impl SessionError {
    /// `true` for a cut by one of the session caps (`Caps::max_negentropy_rounds`, `Caps::max_negentropy_need`).
    pub(crate) fn is_cap(&self) -> bool {
        matches!(
            self,
            SessionError::TooManyRounds { .. } | SessionError::TooManyNeeded { .. }
        )
    }
}

/// Bounds of one session: a relay cannot keep it going forever, nor make us
/// collect ids without end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SessionCaps {
    /// Relay messages answered before the session is cut off.
    pub(crate) max_rounds: u32,
    /// Missing ids collected before the session is cut off.
    pub(crate) max_need: usize,
}

/// A client-side reconciliation in progress.
pub(crate) struct NegSession {
    negentropy: Negentropy<'static, NegentropyStorageVector>,
    /// Ids the relay has and we do not.
    pub(crate) need: Vec<EventId>,
    /// Relay messages answered so far.
    rounds: u32,
    caps: SessionCaps,
}

impl std::fmt::Debug for NegSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NegSession")
            .field("need", &self.need.len())
            .field("rounds", &self.rounds)
            .finish_non_exhaustive()
    }
}

/// What to do after a relay's `NEG-MSG`.
#[derive(Debug)]
pub(crate) enum Step {
    /// Send this hex message.
    Continue(String),
    /// Reconciliation finished.
    Done,
}

impl NegSession {
    /// Starts a session over our `items`; returns it and the hex initial
    /// message.
    pub(crate) fn start(
        items: &[(EventId, Timestamp)],
        frame_size_limit: u64,
        caps: SessionCaps,
    ) -> Result<(Self, String), SessionError> {
        let mut storage = NegentropyStorageVector::with_capacity(items.len());
        for (id, created_at) in items {
            storage
                .insert(created_at.as_secs(), Id::from_byte_array(id.to_bytes()))
                .map_err(protocol)?;
        }
        storage.seal().map_err(protocol)?;
        let mut negentropy = Negentropy::owned(storage, frame_size_limit).map_err(protocol)?;
        let initial = negentropy.initiate().map_err(protocol)?;
        Ok((
            NegSession {
                negentropy,
                need: Vec::new(),
                rounds: 0,
                caps,
            },
            hex_encode(&initial),
        ))
    }

    /// Feeds the relay's hex message. A message past the round cap, or one
    /// that would take the missing ids past their cap, ends the session with
    /// an error ([`SessionError::is_cap`]).
    pub(crate) fn step(&mut self, message: &str) -> Result<Step, SessionError> {
        self.rounds = self.rounds.saturating_add(1);
        if self.rounds > self.caps.max_rounds {
            return Err(SessionError::TooManyRounds {
                rounds: self.caps.max_rounds,
            });
        }
        let bytes = hex_decode(message).ok_or(SessionError::NotHex)?;
        let mut have = Vec::new();
        let mut need = Vec::new();
        let next = self
            .negentropy
            .reconcile_with_ids(&bytes, &mut have, &mut need)
            .map_err(protocol)?;
        if self.need.len().saturating_add(need.len()) > self.caps.max_need {
            return Err(SessionError::TooManyNeeded {
                cap: self.caps.max_need,
            });
        }
        self.need.extend(
            need.iter()
                .map(|id| EventId::from_byte_array(id.to_bytes())),
        );
        Ok(match next {
            Some(message) => Step::Continue(hex_encode(&message)),
            None => Step::Done,
        })
    }
}

fn protocol(error: negentropy::Error) -> SessionError {
    SessionError::Protocol(error.to_string())
}

fn hex_encode(bytes: &[u8]) -> String {
    hex::encode(bytes)
}

fn hex_decode(text: &str) -> Option<Vec<u8>> {
    hex::decode(text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u8) -> EventId {
        EventId::from_byte_array([n; 32])
    }

    const CAPS: SessionCaps = SessionCaps {
        max_rounds: 100,
        max_need: 1_000,
    };

    #[test]
    fn hex_round_trips_and_rejects_garbage() {
        let bytes = vec![0u8, 1, 0xab, 0xff];
        assert_eq!(hex_decode(&hex_encode(&bytes)), Some(bytes));
        assert_eq!(hex_decode("abc"), None);
        assert_eq!(hex_decode("zz"), None);
    }

    #[test]
    fn reconciles_against_a_relay_side_negentropy() {
        let ours: Vec<(EventId, Timestamp)> = (1..=20)
            .map(|n| (id(n), Timestamp::from_secs(u64::from(n))))
            .collect();
        let mut relay_storage = NegentropyStorageVector::new();
        for n in 10..=40u8 {
            relay_storage
                .insert(u64::from(n), Id::from_byte_array([n; 32]))
                .unwrap();
        }
        relay_storage.seal().unwrap();
        let mut relay = Negentropy::owned(relay_storage, 0).unwrap();

        let (mut session, mut message) = NegSession::start(&ours, 0, CAPS).unwrap();
        for _ in 0..10 {
            let reply = relay.reconcile(&hex_decode(&message).unwrap()).unwrap();
            match session.step(&hex_encode(&reply)).unwrap() {
                Step::Continue(next) => message = next,
                Step::Done => break,
            }
        }
        let mut need = session.need.clone();
        need.sort();
        let expected: Vec<EventId> = (21..=40).map(id).collect();
        assert_eq!(need, expected);
    }

    #[test]
    fn garbage_from_the_relay_is_an_error() {
        let (mut session, _) = NegSession::start(&[], 0, CAPS).unwrap();
        assert_eq!(session.step("xyz").unwrap_err(), SessionError::NotHex);
        assert!(matches!(
            session.step("00ff"),
            Err(SessionError::Protocol(_))
        ));
    }

    /// Ids numbered from `first`, `count` of them, `created_at` = number.
    fn numbered(first: u32, count: u32) -> Vec<(EventId, Timestamp)> {
        (first..first + count)
            .map(|n| {
                let mut id = [0u8; 32];
                id[..4].copy_from_slice(&n.to_be_bytes());
                (
                    EventId::from_byte_array(id),
                    Timestamp::from_secs(u64::from(n % 10_000)),
                )
            })
            .collect()
    }

    /// A relay-side negentropy over `items`.
    fn relay_with(items: &[(EventId, Timestamp)]) -> Negentropy<'static, NegentropyStorageVector> {
        let mut storage = NegentropyStorageVector::new();
        for (id, at) in items {
            storage
                .insert(at.as_secs(), Id::from_byte_array(id.to_bytes()))
                .unwrap();
        }
        storage.seal().unwrap();
        Negentropy::owned(storage, 0).unwrap()
    }

    #[test]
    fn a_relay_that_never_finishes_is_cut_off_at_the_round_cap() {
        let caps = SessionCaps {
            max_rounds: 5,
            max_need: 100_000,
        };
        // Sets large enough that the relay answers with fingerprints.
        let (mut session, initial) = NegSession::start(&numbered(0, 2_000), 0, caps).unwrap();
        let mut relay = relay_with(&numbered(20_000, 2_000));
        // The relay answers every message with its first reply again: a
        // valid message of fingerprints that always asks for another round.
        let endless = hex_encode(&relay.reconcile(&hex_decode(&initial).unwrap()).unwrap());
        for round in 0..5 {
            let step = session.step(&endless);
            assert!(
                matches!(step, Ok(Step::Continue(_))),
                "round {round}: {step:?}"
            );
        }
        let error = session.step(&endless).unwrap_err();
        assert_eq!(error, SessionError::TooManyRounds { rounds: 5 });
        assert!(error.is_cap());
        assert_eq!(session.rounds, 6, "the sixth message is not reconciled");
    }

    #[test]
    fn a_relay_claiming_too_many_missing_ids_is_cut_off() {
        let caps = SessionCaps {
            max_rounds: 100,
            max_need: 10,
        };
        let (mut session, initial) = NegSession::start(&[], 0, caps).unwrap();
        let mut relay = relay_with(&numbered(1, 40));
        let reply = relay.reconcile(&hex_decode(&initial).unwrap()).unwrap();
        let error = session.step(&hex_encode(&reply)).unwrap_err();
        assert_eq!(error, SessionError::TooManyNeeded { cap: 10 });
        assert!(session.need.len() <= 10);
    }
}
