//! A negentropy (NIP-77, protocol version 1) message that never lets a client finish.
//!
//! Wire format (negentropy v1): the version byte `0x61`, then ranges, each an upper bound
//! (timestamp as a delta-encoded varint where 0 means "infinity", then the id prefix length
//! and bytes), a mode (0 skip, 1 fingerprint, 2 id list) and its payload. Varints are
//! big-endian base 128 with the high bit set on every byte but the last.
//!
//! The message has two ranges: `[0, T)` as an id list of `ids` fresh random ids (the client
//! records them as needed and answers nothing for that range), and `[T, ∞)` as a random
//! fingerprint (which never matches, so the client must answer with its items or
//! sub-fingerprints for that range: the session goes on). Answering every client message
//! with a new one of these keeps a session going for ever, claiming new ids each round.

use super::rng::SeededRng;

/// Negentropy protocol version 1.
const PROTOCOL_VERSION: u8 = 0x61;
const MODE_FINGERPRINT: u64 = 1;
const MODE_ID_LIST: u64 = 2;
/// Upper bound of the id-list range (any timestamp works; the client does not check
/// that the claimed ids fall in the range).
const SPLIT_TIMESTAMP: u64 = 1_000_000_000;

/// One endless message (binary; hex-encode it for `NEG-MSG`) claiming `ids` new ids.
pub(crate) fn message(rng: &mut SeededRng, ids: usize) -> Vec<u8> {
    let mut out = vec![PROTOCOL_VERSION];
    // [0, SPLIT): id list. Delta from the previous timestamp (0), plus one.
    out.extend(varint(SPLIT_TIMESTAMP + 1));
    out.extend(varint(0)); // no id prefix in the bound
    out.extend(varint(MODE_ID_LIST));
    out.extend(varint(ids as u64));
    for _ in 0..ids {
        out.extend(rng.bytes32());
    }
    // [SPLIT, ∞): a fingerprint that matches nothing.
    out.extend(varint(0)); // infinity
    out.extend(varint(0));
    out.extend(varint(MODE_FINGERPRINT));
    out.extend(&rng.bytes32()[..16]);
    out
}

/// Negentropy's varint.
fn varint(mut n: u64) -> Vec<u8> {
    let mut out = vec![(n & 0x7f) as u8];
    n >>= 7;
    while n > 0 {
        out.push((n & 0x7f) as u8 | 0x80);
        n >>= 7;
    }
    out.reverse();
    out
}
