use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use proptest::prelude::*;
use sha2::Sha256;

use super::*;

/// HMAC-SHA256, computed independently of jsonwebtoken.
fn hs256(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut m = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key length");
    m.update(data);
    m.finalize().into_bytes().to_vec()
}

const NOW: u64 = 1_800_000_000;

fn claims() -> Claims {
    Claims {
        subject: "alice".into(),
        groups: vec!["chat".into(), "lab-*".into()],
        max_role: Role::Observer,
        max_priority: 3,
        issued_unix: NOW,
        expires_unix: NOW + 3600,
    }
}

fn keys() -> Keys {
    Keys::single("k1", b"secret").expect("valid key")
}

/// A token with the given header and payload JSON, signed with HS256
/// under `secret` whatever the header says (to forge algorithm claims).
fn forge(header: &str, payload: &str, secret: &[u8]) -> String {
    let body = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header),
        URL_SAFE_NO_PAD.encode(payload)
    );
    let sig = URL_SAFE_NO_PAD.encode(hs256(secret, body.as_bytes()));
    format!("{body}.{sig}")
}

const GOOD_PAYLOAD: &str = r#"{"sub":"mallory","iat":1800000000,"exp":1800003600,"groups":["*"],"role":"principal","max_priority":10}"#;

#[test]
fn minted_tokens_verify_and_carry_their_claims() {
    let t = mint("k1", b"secret", &claims()).expect("mint");
    assert_eq!(verify(&keys(), &t, NOW), Ok(claims()));
    assert_eq!(verify(&keys(), "", NOW), Err(AuthError::Missing));
    assert!(matches!(
        verify(&keys(), "nodot", NOW),
        Err(AuthError::Malformed(_))
    ));
}

#[test]
fn minted_tokens_are_standard_jwts() {
    let t = mint("k1", b"secret", &claims()).expect("mint");
    let parts: Vec<&str> = t.split('.').collect();
    assert_eq!(parts.len(), 3);
    let header: serde_json::Value =
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[0]).expect("b64")).expect("json");
    assert_eq!(header["alg"], "HS256");
    assert_eq!(header["kid"], "k1");
    let payload: serde_json::Value =
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[1]).expect("b64")).expect("json");
    assert_eq!(
        payload,
        serde_json::json!({
            "sub": "alice", "iat": NOW, "exp": NOW + 3600,
            "groups": ["chat", "lab-*"], "role": "observer", "max_priority": 3
        })
    );
    // The signature is plain HMAC-SHA256 over the first two parts: what a
    // client in another language computes.
    let body = format!("{}.{}", parts[0], parts[1]);
    assert_eq!(
        parts[2],
        URL_SAFE_NO_PAD.encode(hs256(b"secret", body.as_bytes()))
    );
}

#[test]
fn tokens_expire_after_a_small_leeway() {
    let t = mint("k1", b"secret", &claims()).expect("mint");
    let exp = claims().expires_unix;
    assert!(verify(&keys(), &t, exp).is_ok());
    assert!(verify(&keys(), &t, exp + LEEWAY_SECS).is_ok());
    assert_eq!(
        verify(&keys(), &t, exp + LEEWAY_SECS + 1),
        Err(AuthError::Expired)
    );
    let c = Claims {
        expires_unix: 0,
        ..claims()
    };
    assert!(matches!(
        mint("k1", b"secret", &c),
        Err(AuthError::BadKey(_))
    ));
}

#[test]
fn a_future_nbf_is_refused() {
    let p = r#"{"sub":"a","iat":0,"exp":1800003600,"nbf":1800000100,"groups":["*"],"role":"observer","max_priority":1}"#;
    let t = forge(r#"{"alg":"HS256","kid":"k1"}"#, p, b"secret");
    assert_eq!(verify(&keys(), &t, NOW), Err(AuthError::NotYetValid));
    assert!(verify(&keys(), &t, NOW + 100).is_ok());
}

#[test]
fn unknown_or_missing_key_ids_are_refused() {
    let t = mint("k2", b"secret", &claims()).expect("mint");
    assert_eq!(
        verify(&keys(), &t, NOW),
        Err(AuthError::UnknownKey("k2".into()))
    );
    let no_kid = forge(r#"{"alg":"HS256","typ":"JWT"}"#, GOOD_PAYLOAD, b"secret");
    assert_eq!(
        verify(&keys(), &no_kid, NOW),
        Err(AuthError::UnknownKey(String::new()))
    );
}

#[test]
fn a_token_signed_with_another_key_is_refused() {
    let t = mint("k1", b"not the secret", &claims()).expect("mint");
    assert_eq!(verify(&keys(), &t, NOW), Err(AuthError::BadSignature));
}

#[test]
fn rotation_accepts_every_configured_key() {
    let mut k = Keys::new();
    k.insert("old", b"first").expect("key");
    k.insert("new", b"second").expect("key");
    assert!(k.insert("new", b"third").is_err(), "a kid is given once");
    for (kid, secret) in [("old", &b"first"[..]), ("new", &b"second"[..])] {
        let t = mint(kid, secret, &claims()).expect("mint");
        assert_eq!(verify(&k, &t, NOW), Ok(claims()), "{kid}");
    }
    // A key id does not select another key's secret.
    let t = mint("new", b"first", &claims()).expect("mint");
    assert_eq!(verify(&k, &t, NOW), Err(AuthError::BadSignature));
    assert_eq!(format!("{k:?}"), r#"Keys { kids: ["new", "old"] }"#);
}

#[test]
fn alg_none_is_refused() {
    let body = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(r#"{"alg":"none","typ":"JWT","kid":"k1"}"#),
        URL_SAFE_NO_PAD.encode(GOOD_PAYLOAD)
    );
    for t in [format!("{body}."), body.clone()] {
        assert!(
            matches!(verify(&keys(), &t, NOW), Err(AuthError::Algorithm(_))),
            "{t}: {:?}",
            verify(&keys(), &t, NOW)
        );
    }
}

#[test]
fn other_algorithms_are_refused_even_with_the_right_key() {
    // HS512 with the relay's own secret: a valid signature, wrong algorithm.
    let mut h = Header::new(Algorithm::HS512);
    h.kid = Some("k1".into());
    let p: serde_json::Value = serde_json::from_str(GOOD_PAYLOAD).expect("json");
    let hs512 = jsonwebtoken::encode(&h, &p, &EncodingKey::from_secret(b"secret")).expect("encode");
    assert!(matches!(
        verify(&keys(), &hs512, NOW),
        Err(AuthError::Algorithm(_))
    ));
    // Algorithm confusion: a public-key alg whose "signature" is an HMAC
    // keyed with the secret.
    for alg in ["RS256", "ES256", "PS256", "EdDSA"] {
        let t = forge(
            &format!(r#"{{"alg":"{alg}","kid":"k1"}}"#),
            GOOD_PAYLOAD,
            b"secret",
        );
        assert!(
            matches!(verify(&keys(), &t, NOW), Err(AuthError::Algorithm(_))),
            "{alg}"
        );
    }
}

#[test]
fn a_tampered_payload_fails_the_signature() {
    let t = mint("k1", b"secret", &claims()).expect("mint");
    let parts: Vec<&str> = t.split('.').collect();
    let forged = URL_SAFE_NO_PAD.encode(GOOD_PAYLOAD);
    let t = format!("{}.{forged}.{}", parts[0], parts[2]);
    assert_eq!(verify(&keys(), &t, NOW), Err(AuthError::BadSignature));
}

#[test]
fn claims_of_the_wrong_type_or_range_are_malformed_not_absent() {
    // jsonwebtoken < 10.3 treated a mistyped `exp`/`nbf` as absent
    // (CVE-2026-25537); here every claim has one JSON type.
    for p in [
        r#"{"sub":"a","iat":0,"exp":"never","groups":["*"],"role":"principal","max_priority":1}"#,
        r#"{"sub":"a","iat":0,"exp":1800003600,"nbf":"later","groups":["*"],"role":"principal","max_priority":1}"#,
        r#"{"sub":"a","iat":0,"groups":["*"],"role":"principal","max_priority":1}"#,
        r#"{"sub":"a","iat":0,"exp":1800003600,"groups":"chat,lab","role":"principal","max_priority":1}"#,
        r#"{"sub":"a","iat":0,"exp":1800003600,"groups":["*"],"role":"root","max_priority":1}"#,
        r#"{"sub":"a","iat":0,"exp":1800003600,"groups":["*"],"role":"principal","max_priority":11}"#,
        r#"{"sub":"a","iat":0,"exp":1800003600,"groups":["*"],"role":"principal","max_priority":256}"#,
    ] {
        let t = forge(r#"{"alg":"HS256","kid":"k1"}"#, p, b"secret");
        assert!(
            matches!(verify(&keys(), &t, NOW), Err(AuthError::Malformed(_))),
            "{p}: {:?}",
            verify(&keys(), &t, NOW)
        );
    }
}

#[test]
fn group_patterns_and_roles() {
    let c = claims();
    assert!(c.allows("chat", Role::Observer));
    assert!(c.allows("lab-7", Role::MembershipObserver));
    assert!(!c.allows("chat", Role::Principal));
    assert!(!c.allows("other", Role::Observer));
    assert!(!c.allows("chat2", Role::Observer));
    assert!(Claims::anyone().allows("x", Role::Principal));
}

/// Names built from the characters the old `key=value` format choked on.
fn crafted_name() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![
            Just(','),
            Just('*'),
            Just('\n'),
            Just('\r'),
            Just('='),
            Just('"'),
            Just('\''),
            Just('\\'),
            Just('.'),
            Just(' '),
            Just('a'),
            Just('b'),
            Just('é'),
            Just('\u{2028}'),
            Just('\u{0}'),
            Just('🦀'),
        ],
        0..8,
    )
    .prop_map(|v| v.into_iter().collect())
}

proptest! {
    /// No crafted name widens a token's rights: a token naming exact
    /// groups (names that do not end in `*`, which would be a prefix
    /// pattern) carries exactly those names through mint and verify, and
    /// allows no other name.
    #[test]
    fn no_crafted_name_widens_a_token(
        named in proptest::collection::vec(crafted_name(), 0..4),
        probes in proptest::collection::vec(crafted_name(), 1..8),
        subject in crafted_name(),
    ) {
        let named: Vec<String> = named.into_iter().filter(|n| !n.ends_with('*')).collect();
        let c = Claims { subject, groups: named.clone(), ..claims() };
        let t = mint("k1", b"secret", &c).expect("mint");
        let back = verify(&keys(), &t, NOW).expect("verify");
        prop_assert_eq!(&back, &c);
        for g in probes.iter().chain(&named) {
            prop_assert_eq!(back.allows_group(g), named.contains(g), "{:?} in {:?}", g, named);
        }
        // Pieces of a named group (split at the old separators) are not granted.
        for n in &named {
            for piece in n.split([',', '\n', '=']) {
                prop_assert_eq!(back.allows_group(piece), named.iter().any(|m| m == piece));
            }
        }
    }

    /// A prefix pattern allows exactly the names that start with its prefix.
    #[test]
    fn a_prefix_pattern_allows_only_its_prefix(prefix in crafted_name(), probe in crafted_name()) {
        let c = Claims { groups: vec![format!("{prefix}*")], ..claims() };
        let back = verify(&keys(), &mint("k1", b"secret", &c).expect("mint"), NOW).expect("verify");
        prop_assert_eq!(back.allows_group(&probe), probe.starts_with(&prefix));
        let longer = format!("{prefix}{probe}");
        prop_assert!(back.allows_group(&longer));
    }
}
