//! Git object ids.

use std::fmt;
use std::str::FromStr;

/// Length in hex characters of a SHA-1 object id.
const SHA1_HEX_LEN: usize = 40;
/// Length in hex characters of a SHA-256 object id.
const SHA256_HEX_LEN: usize = 64;

/// A git object id: 40 (SHA-1) or 64 (SHA-256) lowercase hex characters.
///
/// Uppercase input is lowercased, so two spellings of one id compare equal.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GitOid(String);

/// Why a text is not a git object id.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GitOidError {
    /// The text is neither 40 nor 64 bytes long.
    #[error("object id is {len} bytes long, expected 40 or 64 hex characters")]
    WrongLength {
        /// Length of the text in bytes.
        len: usize,
    },
    /// The text holds a character that is not a hex digit.
    #[error("object id has a non-hex character at byte {index}")]
    NotHex {
        /// Byte offset of the first non-hex byte.
        index: usize,
    },
}

impl GitOid {
    /// Parses 40 or 64 hex characters (either case).
    pub fn parse(text: &str) -> Result<Self, GitOidError> {
        if text.len() != SHA1_HEX_LEN && text.len() != SHA256_HEX_LEN {
            return Err(GitOidError::WrongLength { len: text.len() });
        }
        if let Some(index) = text.bytes().position(|byte| !byte.is_ascii_hexdigit()) {
            return Err(GitOidError::NotHex { index });
        }
        Ok(Self(text.to_ascii_lowercase()))
    }

    /// The id as lowercase hex.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for GitOid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for GitOid {
    type Err = GitOidError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::parse(text)
    }
}

impl AsRef<str> for GitOid {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_sha1_and_sha256_lengths() {
        let sha1 = "a".repeat(40);
        let sha256 = "0123456789abcdef".repeat(4);
        assert_eq!(GitOid::parse(&sha1).unwrap().as_str(), sha1);
        assert_eq!(GitOid::parse(&sha256).unwrap().to_string(), sha256);
    }

    #[test]
    fn lowercases_uppercase_input() {
        let oid = GitOid::parse(&"ABCDEF0123".repeat(4)).unwrap();
        assert_eq!(oid.as_str(), "abcdef0123".repeat(4));
        assert_eq!(oid, GitOid::parse(&"abcdef0123".repeat(4)).unwrap());
    }

    #[test]
    fn refuses_other_lengths() {
        for len in [0, 39, 41, 63, 65, 128] {
            assert_eq!(
                GitOid::parse(&"a".repeat(len)),
                Err(GitOidError::WrongLength { len })
            );
        }
    }

    #[test]
    fn refuses_non_hex_characters() {
        let mut text = "a".repeat(40);
        text.replace_range(7..8, "g");
        assert_eq!(GitOid::parse(&text), Err(GitOidError::NotHex { index: 7 }));
        assert!(GitOid::parse(&format!("{}é", "a".repeat(38))).is_err());
        assert!(GitOid::parse(&format!(" {}", "a".repeat(39))).is_err());
    }
}

#[cfg(test)]
mod proptests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn valid_ids_parse_to_their_lowercase(text in "([0-9a-fA-F]{40}|[0-9a-fA-F]{64})") {
            let oid = GitOid::parse(&text).unwrap();
            prop_assert_eq!(oid.as_str(), text.to_ascii_lowercase());
        }

        #[test]
        fn parse_never_panics_and_accepts_only_hex(text in any::<String>()) {
            if let Ok(oid) = GitOid::parse(&text) {
                prop_assert!(matches!(oid.as_str().len(), 40 | 64));
                prop_assert!(oid.as_str().bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
            }
        }
    }
}
