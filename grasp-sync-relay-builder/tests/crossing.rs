//! The crossing between nostr versions, for real: values made by
//! nostr-relay-builder's nostr 0.44 go to ours (0.45) and back through
//! `grasp_sync_core::crossing` (generic over the other side's type) and
//! `grasp_sync_relay_builder::convert` (the same over the `r44` types).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use grasp_sync_core::crossing::{self, Crossed};
use grasp_sync_core::filters::matches;
use grasp_sync_relay_builder::convert;
use nostr::prelude as ours;
use nostr_relay_builder::prelude as r44;

/// A 0.44 event of `kind` with the given tags, signed by `keys` (0.44).
fn r44_event(keys: &r44::Keys, kind: u16, content: &str, tags: &[&[&str]], at: u64) -> r44::Event {
    let tags = tags
        .iter()
        .map(|tag| r44::Tag::parse(tag.iter().copied()).expect("a tag"));
    r44::EventBuilder::new(r44::Kind::from(kind), content)
        .tags(tags)
        .custom_created_at(r44::Timestamp::from_secs(at))
        .sign_with_keys(keys)
        .expect("signed")
}

#[test]
fn a_0_44_event_crosses_to_ours_and_back_and_its_signature_verifies_on_both_sides() {
    let keys = r44::Keys::generate();
    let theirs = r44_event(
        &keys,
        1621,
        "an issue: ünïcode, \"quotes\", \\ and \n newlines",
        &[&["a", "30617:abc:repo"], &["t", "bug"]],
        1_700_000_000,
    );
    assert!(theirs.verify().is_ok());
    let mine: ours::Event = crossing::event_from(&theirs).expect("0.44 → ours");
    assert!(
        mine.verify().is_ok(),
        "the signature verifies with nostr 0.45"
    );
    assert_eq!(mine.id.to_bytes(), theirs.id.to_bytes());
    assert_eq!(mine.pubkey.to_bytes(), theirs.pubkey.to_bytes());
    assert_eq!(mine.content, theirs.content);
    assert_eq!(mine.kind.as_u16(), 1621);
    assert_eq!(mine.tags.len(), 2);
    let back: r44::Event = crossing::event_into(&mine).expect("ours → 0.44");
    assert_eq!(back, theirs);
    assert!(back.verify().is_ok(), "and still with nostr 0.44");
    // The relay builder's helpers say the same.
    assert_eq!(convert::event_from_r44(&theirs).expect("from"), mine);
    assert_eq!(convert::event_to_r44(&mine).expect("to"), theirs);
}

#[test]
fn ours_matches_the_same_events_as_a_0_44_filter_with_a_tags_since_until_limit() {
    let keys = r44::Keys::generate();
    let repo = "30617:abc:repo";
    let other = "30617:abc:other";
    let events = [
        r44_event(&keys, 1621, "in range, ours", &[&["a", repo]], 150),
        r44_event(&keys, 1617, "in range, other repo", &[&["a", other]], 150),
        r44_event(&keys, 1621, "too old", &[&["a", repo]], 50),
        r44_event(&keys, 1621, "too new", &[&["a", repo]], 250),
        r44_event(&keys, 1, "wrong kind", &[&["a", repo]], 150),
        r44_event(
            &keys,
            1618,
            "both repos",
            &[&["a", other], &["a", repo]],
            200,
        ),
    ];
    let theirs = r44::Filter::new()
        .kinds([
            r44::Kind::from(1621),
            r44::Kind::from(1617),
            r44::Kind::from(1618),
        ])
        .custom_tags(
            r44::SingleLetterTag::lowercase(r44::Alphabet::A),
            [repo.to_owned()],
        )
        .since(r44::Timestamp::from_secs(100))
        .until(r44::Timestamp::from_secs(200))
        .limit(10);
    let mine: ours::Filter = crossing::filter_from(&theirs).expect("0.44 → ours");
    assert_eq!(mine.limit, Some(10));
    assert_eq!(mine.since, Some(ours::Timestamp::from_secs(100)));
    assert_eq!(mine.until, Some(ours::Timestamp::from_secs(200)));
    let by_them: Vec<bool> = events
        .iter()
        .map(|event| theirs.match_event(event, r44::MatchEventOptions::new()))
        .collect();
    let by_us: Vec<bool> = events
        .iter()
        .map(|event| matches(&mine, &convert::event_from_r44(event).expect("crosses")))
        .collect();
    assert_eq!(by_them, [true, false, false, false, false, true]);
    assert_eq!(by_us, by_them);
    let back: r44::Filter = convert::filter_to_r44(&mine).expect("ours → 0.44");
    assert_eq!(back, theirs);
    assert_eq!(convert::filter_from_r44(&theirs).expect("from"), mine);
}

#[test]
fn ids_and_urls_cross_both_ways() {
    let event = r44_event(&r44::Keys::generate(), 1, "x", &[], 1);
    let id: ours::EventId = crossing::event_id_from(&event.id).expect("id");
    assert_eq!(id.to_bytes(), event.id.to_bytes());
    assert_eq!(crossing::event_id_from_bytes(event.id.to_bytes()), id);
    assert_eq!(convert::id_from_r44(&event.id), id);
    assert_eq!(convert::id_to_r44(&id), event.id);
    let back: r44::EventId = crossing::event_id_into(&id).expect("id back");
    assert_eq!(back, event.id);
    let (item_id, at) = convert::item_from_r44((event.id, event.created_at));
    assert_eq!((item_id, at.as_secs()), (id, 1));

    let theirs = r44::RelayUrl::parse("wss://relay.example.com/path").expect("url");
    let mine: ours::RelayUrl = crossing::relay_url_from(&theirs).expect("url");
    assert_eq!(mine.as_str(), theirs.as_str());
    let back: r44::RelayUrl = crossing::relay_url_into(&mine).expect("url back");
    assert_eq!(back, theirs);
    assert_eq!(convert::relay_url_from_r44(&theirs).expect("from"), mine);
    assert_eq!(convert::relay_url_to_r44(&mine).expect("to"), theirs);
}

#[test]
fn malformed_input_is_an_error_not_a_panic() {
    // Raw JSON a host holds.
    for json in ["", "not json", "{", "[1,2]", r#"{"id":"00"}"#] {
        let error = crossing::event_from_json(json).expect_err(json);
        assert_eq!(error.crossed(), Crossed::Event, "{json}");
    }
    // A 0.44 event's JSON with its id cut short, its kind out of range or
    // its signature not hex: no 0.45 event.
    let event = r44_event(&r44::Keys::generate(), 1, "x", &[], 1);
    let json: serde_json::Value = serde_json::to_value(&event).expect("json");
    for (field, bad) in [
        ("id", serde_json::json!("abcd")),
        ("kind", serde_json::json!(70_000)),
        ("sig", serde_json::json!("zz")),
        ("pubkey", serde_json::json!(5)),
    ] {
        let mut broken = json.clone();
        broken[field] = bad;
        let error = crossing::event_from(&broken).expect_err(field);
        assert_eq!(error.crossed(), Crossed::Event);
        assert!(
            error.to_string().contains("event"),
            "the error says what failed: {error}"
        );
    }
    // A relay URL that is no relay URL on our side.
    let error = crossing::relay_url_from(&"https://example.com").expect_err("not ws");
    assert_eq!(error.crossed(), Crossed::RelayUrl);
    let error = crossing::filter_from(&serde_json::json!({"since": "yesterday"}))
        .expect_err("since is seconds");
    assert_eq!(error.crossed(), Crossed::Filter);
}

#[test]
fn a_0_44_key_timestamp_and_coordinate_cross_to_ours_and_back() {
    let keys = r44::Keys::generate();
    let key = keys.public_key();
    let mine: ours::PublicKey = crossing::public_key_from(&key).expect("0.44 key → ours");
    assert_eq!(mine.to_hex(), key.to_hex());
    assert_eq!(crossing::public_key_from_bytes(key.to_bytes()), mine);
    let back: r44::PublicKey = crossing::public_key_into(&mine).expect("ours → 0.44");
    assert_eq!(back, key);

    let at = r44::Timestamp::from_secs(1_700_000_000);
    let mine = crossing::timestamp_from(&at).expect("0.44 timestamp → ours");
    assert_eq!(mine.as_secs(), 1_700_000_000);
    let back: r44::Timestamp = crossing::timestamp_into(&mine).expect("ours → 0.44");
    assert_eq!(back, at);

    let coordinate = r44::Coordinate::new(r44::Kind::from(30617), key).identifier("repo");
    let mine = crossing::coordinate_from(&coordinate).expect("0.44 coordinate → ours");
    assert_eq!(mine.kind.as_u16(), 30617);
    assert_eq!(mine.public_key.to_hex(), key.to_hex());
    assert_eq!(mine.identifier, "repo");
    let back: r44::Coordinate = crossing::coordinate_into(&mine).expect("ours → 0.44");
    assert_eq!(back, coordinate);

    let error = crossing::timestamp_from(&"yesterday").expect_err("not seconds");
    assert_eq!(error.crossed(), Crossed::Timestamp);
}
