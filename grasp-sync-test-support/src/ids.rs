//! Ids as the tests write them: git object ids and repository coordinates; unique
//! numbers for file names.

use nostr::prelude::PublicKey;

/// `created_at` of events whose time does not matter (2023-11-14).
pub const T0: u64 = 1_700_000_000;

/// A 40-hex git object id made of the byte `n` twenty times (`oid(0xab)` is
/// `"abab…ab"`).
pub fn oid(n: u8) -> String {
    format!("{n:02x}").repeat(20)
}

/// The coordinate `30617:<owner-hex>:<identifier>` of `owner`'s repository
/// `identifier`, as `a` tags carry it.
pub fn coordinate(owner: &PublicKey, identifier: &str) -> String {
    format!("30617:{}:{identifier}", owner.to_hex())
}

/// A number no other call in this process returns (the time's nanoseconds under
/// a counter), for names of files and directories.
pub fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    (NEXT.fetch_add(1, Ordering::Relaxed) << 32) | u64::from(nanos)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr::prelude::Keys;

    #[test]
    fn oid_is_forty_hex_digits_of_one_byte() {
        assert_eq!(oid(0x0a), "0a".repeat(20));
        assert_eq!(oid(0xff).len(), 40);
    }

    #[test]
    fn coordinate_names_kind_owner_and_identifier() {
        let keys = Keys::generate();
        let text = coordinate(&keys.public_key(), "repo");
        assert_eq!(text, format!("30617:{}:repo", keys.public_key().to_hex()));
    }
}
