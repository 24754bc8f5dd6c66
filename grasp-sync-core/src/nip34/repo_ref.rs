//! Repository references: `30617:<pubkey-hex>:<identifier>`.

use std::fmt;
use std::str::FromStr;

use nostr::key::PublicKey;

use super::{clip, parse_hex_public_key, KIND_REPO_ANNOUNCEMENT};

/// The longest repository identifier accepted, in bytes.
pub const MAX_IDENTIFIER_LEN: usize = 1024;

/// The kind part of a repository reference, as written.
const REPO_REF_KIND: &str = "30617";

/// A reference to a repository announcement: `30617:<pubkey-hex>:<identifier>`.
///
/// The pubkey is the announcement's author; the identifier is its `d` tag (non-empty, at
/// most [`MAX_IDENTIFIER_LEN`] bytes, any characters including `:`). It formats back as
/// exactly `30617:<64 lowercase hex>:<identifier>`, the string `a` tags carry.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RepoRef {
    pubkey: PublicKey,
    identifier: String,
}

/// Why a repository reference is invalid.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RepoRefError {
    /// The text has fewer than three `:`-separated parts.
    #[error("expected '30617:<pubkey>:<identifier>', found {found} part(s)")]
    MissingParts {
        /// How many parts were found.
        found: usize,
    },
    /// The kind part is not `30617`.
    #[error("expected kind 30617, found '{found}'")]
    WrongKind {
        /// The kind part found (shortened if long).
        found: String,
    },
    /// The pubkey part is not 64 lowercase hex characters.
    #[error("invalid public key '{found}'")]
    InvalidPublicKey {
        /// The pubkey part found (shortened if long).
        found: String,
    },
    /// The identifier is empty.
    #[error("identifier is empty")]
    EmptyIdentifier,
    /// The identifier is longer than [`MAX_IDENTIFIER_LEN`] bytes.
    #[error("identifier is {len} bytes long, more than the {max} allowed")]
    IdentifierTooLong {
        /// Length of the identifier in bytes.
        len: usize,
        /// The limit that was exceeded.
        max: usize,
    },
}

impl RepoRef {
    /// A reference to the repository `identifier` announced by `pubkey`.
    pub fn new(pubkey: PublicKey, identifier: impl Into<String>) -> Result<Self, RepoRefError> {
        let identifier = identifier.into();
        check_identifier(&identifier)?;
        Ok(Self { pubkey, identifier })
    }

    /// Parses `30617:<64 lowercase hex>:<identifier>`, splitting at the first two `:` (the
    /// identifier may contain more).
    pub fn parse(text: &str) -> Result<Self, RepoRefError> {
        let (kind, rest) = text
            .split_once(':')
            .ok_or(RepoRefError::MissingParts { found: 1 })?;
        check_kind(kind)?;
        let (pubkey, identifier) = rest
            .split_once(':')
            .ok_or(RepoRefError::MissingParts { found: 2 })?;
        let pubkey =
            parse_hex_public_key(pubkey).ok_or_else(|| RepoRefError::InvalidPublicKey {
                found: clip(pubkey),
            })?;
        Self::new(pubkey, identifier)
    }

    /// The announcement's author.
    pub fn pubkey(&self) -> &PublicKey {
        &self.pubkey
    }

    /// The repository identifier (the announcement's `d` tag).
    pub fn identifier(&self) -> &str {
        &self.identifier
    }
}

impl fmt::Display for RepoRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{KIND_REPO_ANNOUNCEMENT}:{}:{}",
            self.pubkey.to_hex(),
            self.identifier
        )
    }
}

impl FromStr for RepoRef {
    type Err = RepoRefError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::parse(text)
    }
}

fn check_kind(kind: &str) -> Result<(), RepoRefError> {
    if kind == REPO_REF_KIND {
        Ok(())
    } else {
        Err(RepoRefError::WrongKind { found: clip(kind) })
    }
}

fn check_identifier(identifier: &str) -> Result<(), RepoRefError> {
    if identifier.is_empty() {
        return Err(RepoRefError::EmptyIdentifier);
    }
    if identifier.len() > MAX_IDENTIFIER_LEN {
        return Err(RepoRefError::IdentifierTooLong {
            len: identifier.len(),
            max: MAX_IDENTIFIER_LEN,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr::key::Keys;

    fn pubkey() -> PublicKey {
        Keys::generate().public_key()
    }

    #[test]
    fn formats_and_parses_back() {
        let key = pubkey();
        let repo = RepoRef::new(key, "grasp-sync").unwrap();
        let text = repo.to_string();
        assert_eq!(text, format!("30617:{}:grasp-sync", key.to_hex()));
        assert_eq!(RepoRef::parse(&text).unwrap(), repo);
        assert_eq!(text.parse::<RepoRef>().unwrap(), repo);
        assert_eq!(repo.pubkey(), &key);
        assert_eq!(repo.identifier(), "grasp-sync");
    }

    #[test]
    fn identifier_may_contain_colons() {
        let key = pubkey();
        let repo = RepoRef::parse(&format!("30617:{}:a:b::c", key.to_hex())).unwrap();
        assert_eq!(repo.identifier(), "a:b::c");
        assert_eq!(repo.to_string(), format!("30617:{}:a:b::c", key.to_hex()));
    }

    #[test]
    fn refuses_other_kinds() {
        let hex = pubkey().to_hex();
        assert_eq!(
            RepoRef::parse(&format!("30618:{hex}:repo")),
            Err(RepoRefError::WrongKind {
                found: "30618".into()
            })
        );
        assert!(matches!(
            RepoRef::parse(&format!("030617:{hex}:repo")),
            Err(RepoRefError::WrongKind { .. })
        ));
    }

    #[test]
    fn refuses_bad_public_keys() {
        let hex = pubkey().to_hex();
        for bad in [
            "zz".repeat(32),
            hex.to_uppercase(),
            format!("{hex}00"),
            hex[..62].to_owned(),
            String::new(),
            format!("npub1{}", &hex[..20]),
        ] {
            assert!(
                matches!(
                    RepoRef::parse(&format!("30617:{bad}:repo")),
                    Err(RepoRefError::InvalidPublicKey { .. })
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn refuses_missing_parts() {
        let hex = pubkey().to_hex();
        assert_eq!(
            RepoRef::parse("30617"),
            Err(RepoRefError::MissingParts { found: 1 })
        );
        assert_eq!(
            RepoRef::parse(&format!("30617:{hex}")),
            Err(RepoRefError::MissingParts { found: 2 })
        );
        assert_eq!(
            RepoRef::parse(""),
            Err(RepoRefError::MissingParts { found: 1 })
        );
    }

    #[test]
    fn refuses_empty_identifier() {
        let hex = pubkey().to_hex();
        assert_eq!(
            RepoRef::parse(&format!("30617:{hex}:")),
            Err(RepoRefError::EmptyIdentifier)
        );
        assert_eq!(
            RepoRef::new(pubkey(), ""),
            Err(RepoRefError::EmptyIdentifier)
        );
    }

    #[test]
    fn identifier_length_limit() {
        let key = pubkey();
        assert!(RepoRef::new(key, "x".repeat(MAX_IDENTIFIER_LEN)).is_ok());
        assert_eq!(
            RepoRef::new(key, "x".repeat(MAX_IDENTIFIER_LEN + 1)),
            Err(RepoRefError::IdentifierTooLong {
                len: MAX_IDENTIFIER_LEN + 1,
                max: MAX_IDENTIFIER_LEN
            })
        );
    }

    #[test]
    fn errors_clip_hostile_text() {
        let long_kind = "9".repeat(10_000);
        match RepoRef::parse(&format!("{long_kind}:x:y")) {
            Err(RepoRefError::WrongKind { found }) => assert!(found.len() <= 128),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn orders_by_pubkey_then_identifier() {
        let key = pubkey();
        let a = RepoRef::new(key, "a").unwrap();
        let b = RepoRef::new(key, "b").unwrap();
        assert!(a < b);
    }
}

#[cfg(test)]
mod proptests {
    use super::*;
    use proptest::prelude::*;

    fn valid_identifier() -> impl Strategy<Value = String> {
        prop_oneof![
            ".{1,64}",
            "[a-z0-9-]{1,40}",
            "[:a-z]{1,20}",
            any::<String>().prop_filter("non-empty and short enough", |s| {
                !s.is_empty() && s.len() <= MAX_IDENTIFIER_LEN
            }),
        ]
    }

    proptest! {
        #[test]
        fn display_then_parse_round_trips(
            key in any::<[u8; 32]>(),
            identifier in valid_identifier(),
        ) {
            let repo = RepoRef::new(PublicKey::from_byte_array(key), identifier.clone()).unwrap();
            let text = repo.to_string();
            let (kind_and_key, rest) = text.split_at(71);
            prop_assert!(kind_and_key.starts_with("30617:"));
            prop_assert!(kind_and_key[6..70]
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
            prop_assert_eq!(rest, identifier.as_str());
            prop_assert_eq!(RepoRef::parse(&text), Ok(repo));
        }

        #[test]
        fn parse_never_panics(text in any::<String>()) {
            let _ = RepoRef::parse(&text);
        }

        #[test]
        fn parse_accepts_only_what_formats_back_identically(text in "30617:[0-9a-fA-F]{62,66}:.{0,10}") {
            if let Ok(repo) = RepoRef::parse(&text) {
                prop_assert_eq!(repo.to_string(), text);
            }
        }
    }
}
