//! The token suite: each case asserts the exact refusal reason.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use policy::identity::MAX_TOKEN_BYTES;
use policy::{KeyError, KeyMaterial, PemKey, Principal, TokenError, Verifier, VerifierSettings};
use proptest::prelude::*;
use serde_json::{json, Value};

const NOW: u64 = 1_800_000_000;
const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef-test-only";

fn fixture(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn settings() -> VerifierSettings {
    VerifierSettings {
        issuer: Some("termgate".into()),
        audience: Some("termgate-gw".into()),
        leeway_secs: 30,
        admin_role: "admin".into(),
        max_lifetime_secs: None,
    }
}

fn claims() -> Value {
    json!({"sub": "alice", "exp": NOW + 600, "iat": NOW, "iss": "termgate", "aud": "termgate-gw"})
}

fn with(mut base: Value, key: &str, value: Value) -> Value {
    base[key] = value;
    base
}

fn without(mut base: Value, key: &str) -> Value {
    base.as_object_mut().unwrap().remove(key);
    base
}

fn sign(alg: Algorithm, key: &EncodingKey, kid: Option<&str>, claims: &Value) -> String {
    let mut h = Header::new(alg);
    h.kid = kid.map(String::from);
    jsonwebtoken::encode(&h, claims, key).unwrap()
}

fn hs(claims: &Value) -> String {
    sign(
        Algorithm::HS256,
        &EncodingKey::from_secret(SECRET).unwrap(),
        None,
        claims,
    )
}

fn hs_verifier() -> Verifier {
    Verifier::new(&KeyMaterial::Hs256Secret(SECRET.to_vec()), settings()).unwrap()
}

fn rsa_key() -> EncodingKey {
    EncodingKey::from_rsa_pem(&fixture("rsa.key")).unwrap()
}
fn ec_key() -> EncodingKey {
    EncodingKey::from_ec_pem(&fixture("ec.key")).unwrap()
}
fn ed_key() -> EncodingKey {
    EncodingKey::from_ed_pem(&fixture("ed.key")).unwrap()
}

fn pem_verifier() -> Verifier {
    let keys = ["rsa.pub", "ec.pub", "ed.pub"]
        .iter()
        .map(|f| PemKey {
            kid: None,
            pem: fixture(f),
        })
        .collect();
    Verifier::new(&KeyMaterial::PemPublicKeys(keys), settings()).unwrap()
}

fn rsa_only_verifier() -> Verifier {
    Verifier::new(
        &KeyMaterial::PemPublicKeys(vec![PemKey {
            kid: None,
            pem: fixture("rsa.pub"),
        }]),
        settings(),
    )
    .unwrap()
}

fn jwks_verifier() -> Verifier {
    let rsa = {
        let mut j = Jwk::from_encoding_key(&rsa_key(), Algorithm::RS256).unwrap();
        j.common.key_id = Some("rsa-1".into());
        j
    };
    let ec = {
        let mut j = Jwk::from_encoding_key(&ec_key(), Algorithm::ES256).unwrap();
        j.common.key_id = Some("ec-1".into());
        j
    };
    let doc = serde_json::to_vec(&JwkSet {
        keys: vec![rsa, ec],
    })
    .unwrap();
    Verifier::new(&KeyMaterial::Jwks(doc), settings()).unwrap()
}

fn reason(v: &Verifier, token: &[u8]) -> &'static str {
    match v.verify(token, NOW) {
        Ok(p) => panic!("token unexpectedly accepted for {}", p.sub),
        Err(e) => e.reason(),
    }
}

fn ok(v: &Verifier, token: &str) -> Principal {
    v.verify(token.as_bytes(), NOW)
        .unwrap_or_else(|e| panic!("refused: {e}"))
}

#[test]
fn valid_hs256_token_is_accepted() {
    let p = ok(&hs_verifier(), &hs(&claims()));
    assert_eq!(p.sub.as_str(), "alice");
    assert!(!p.admin);
    assert_eq!(p.expires_at, NOW + 600);
}

#[test]
fn valid_rs256_token_is_accepted() {
    let t = sign(Algorithm::RS256, &rsa_key(), None, &claims());
    assert_eq!(ok(&pem_verifier(), &t).sub.as_str(), "alice");
}

#[test]
fn valid_es256_token_is_accepted() {
    let t = sign(Algorithm::ES256, &ec_key(), None, &claims());
    assert_eq!(ok(&pem_verifier(), &t).sub.as_str(), "alice");
}

#[test]
fn valid_eddsa_token_is_accepted() {
    let t = sign(Algorithm::EdDSA, &ed_key(), None, &claims());
    assert_eq!(ok(&pem_verifier(), &t).sub.as_str(), "alice");
}

#[test]
fn admin_role_grants_admin_and_other_roles_do_not() {
    let v = hs_verifier();
    assert!(ok(&v, &hs(&with(claims(), "roles", json!(["dev", "admin"])))).admin);
    assert!(!ok(&v, &hs(&with(claims(), "roles", json!(["dev", "Admin"])))).admin);
    assert_eq!(
        reason(&v, hs(&with(claims(), "roles", json!("admin"))).as_bytes()),
        "invalid_claim"
    );
    assert_eq!(
        reason(&v, hs(&with(claims(), "roles", json!([1]))).as_bytes()),
        "invalid_claim"
    );
}

#[test]
fn tampered_payload_is_bad_signature() {
    let t = hs(&claims());
    let mut parts: Vec<String> = t.split('.').map(String::from).collect();
    let evil = with(claims(), "sub", json!("mallory"));
    parts[1] = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&evil).unwrap());
    assert_eq!(
        reason(&hs_verifier(), parts.join(".").as_bytes()),
        "bad_signature"
    );
}

#[test]
fn tampered_signature_is_bad_signature() {
    for t in [
        hs(&claims()),
        sign(Algorithm::RS256, &rsa_key(), None, &claims()),
    ] {
        let (head, sig) = t.rsplit_once('.').unwrap();
        let mut raw = URL_SAFE_NO_PAD.decode(sig).unwrap();
        raw[0] ^= 0x01;
        let forged = format!("{head}.{}", URL_SAFE_NO_PAD.encode(raw));
        let v = if t == hs(&claims()) {
            hs_verifier()
        } else {
            pem_verifier()
        };
        assert_eq!(reason(&v, forged.as_bytes()), "bad_signature");
    }
}

#[test]
fn token_from_another_rsa_key_is_bad_signature() {
    let other = EncodingKey::from_rsa_pem(&fixture("rsa2.key")).unwrap();
    let t = sign(Algorithm::RS256, &other, None, &claims());
    assert_eq!(reason(&pem_verifier(), t.as_bytes()), "bad_signature");
}

#[test]
fn alg_none_is_refused() {
    let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"none","typ":"JWT"}"#);
    let payload = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&claims()).unwrap());
    for sig in ["", "AAAA"] {
        let t = format!("{header}.{payload}.{sig}");
        assert_eq!(
            reason(&hs_verifier(), t.as_bytes()),
            "algorithm_not_allowed"
        );
        assert_eq!(
            reason(&pem_verifier(), t.as_bytes()),
            "algorithm_not_allowed"
        );
    }
    let t = format!(
        "{}.{payload}.",
        URL_SAFE_NO_PAD.encode(br#"{"alg":"None"}"#)
    );
    assert_eq!(
        reason(&hs_verifier(), t.as_bytes()),
        "algorithm_not_allowed"
    );
}

#[test]
fn hs256_signed_with_the_rsa_public_key_is_algorithm_confusion() {
    // The classic attack: use the public key's bytes as an HMAC secret.
    let public = fixture("rsa.pub");
    let t = sign(
        Algorithm::HS256,
        &EncodingKey::from_secret(&public).unwrap(),
        None,
        &claims(),
    );
    assert_eq!(
        reason(&rsa_only_verifier(), t.as_bytes()),
        "algorithm_not_allowed"
    );
    assert_eq!(
        reason(&pem_verifier(), t.as_bytes()),
        "algorithm_not_allowed"
    );
    assert_eq!(
        reason(&jwks_verifier(), t.as_bytes()),
        "algorithm_not_allowed"
    );
}

#[test]
fn algorithm_of_another_family_than_the_keys_is_refused() {
    let t = sign(Algorithm::ES256, &ec_key(), None, &claims());
    assert_eq!(
        reason(&rsa_only_verifier(), t.as_bytes()),
        "algorithm_not_allowed"
    );
    let t = sign(Algorithm::RS256, &rsa_key(), None, &claims());
    assert_eq!(
        reason(&hs_verifier(), t.as_bytes()),
        "algorithm_not_allowed"
    );
}

#[test]
fn expired_beyond_leeway_is_expired_and_within_leeway_is_accepted() {
    let v = hs_verifier();
    assert_eq!(
        reason(&v, hs(&with(claims(), "exp", json!(NOW - 31))).as_bytes()),
        "expired"
    );
    assert_eq!(
        reason(&v, hs(&with(claims(), "exp", json!(NOW - 30))).as_bytes()),
        "expired"
    );
    assert_eq!(
        ok(&v, &hs(&with(claims(), "exp", json!(NOW - 29))))
            .sub
            .as_str(),
        "alice"
    );
}

#[test]
fn nbf_in_the_future_is_not_yet_valid() {
    let v = hs_verifier();
    assert_eq!(
        reason(&v, hs(&with(claims(), "nbf", json!(NOW + 31))).as_bytes()),
        "not_yet_valid"
    );
    assert_eq!(
        ok(&v, &hs(&with(claims(), "nbf", json!(NOW + 30))))
            .sub
            .as_str(),
        "alice"
    );
    assert_eq!(
        reason(&v, hs(&with(claims(), "nbf", json!("soon"))).as_bytes()),
        "invalid_claim"
    );
}

#[test]
fn wrong_issuer_is_refused() {
    let v = hs_verifier();
    assert_eq!(
        reason(
            &v,
            hs(&with(claims(), "iss", json!("someone-else"))).as_bytes()
        ),
        "wrong_issuer"
    );
    assert_eq!(
        reason(&v, hs(&without(claims(), "iss")).as_bytes()),
        "missing_claim"
    );
}

#[test]
fn wrong_audience_is_refused() {
    let v = hs_verifier();
    assert_eq!(
        reason(&v, hs(&with(claims(), "aud", json!("other"))).as_bytes()),
        "wrong_audience"
    );
    assert_eq!(
        reason(&v, hs(&with(claims(), "aud", json!(["a", "b"]))).as_bytes()),
        "wrong_audience"
    );
    assert_eq!(
        ok(&v, &hs(&with(claims(), "aud", json!(["a", "termgate-gw"]))))
            .sub
            .as_str(),
        "alice"
    );
    assert_eq!(
        reason(&v, hs(&without(claims(), "aud")).as_bytes()),
        "missing_claim"
    );
}

#[test]
fn missing_sub_is_missing_claim() {
    assert_eq!(
        reason(&hs_verifier(), hs(&without(claims(), "sub")).as_bytes()),
        "missing_claim"
    );
}

#[test]
fn missing_exp_is_missing_claim() {
    assert_eq!(
        reason(&hs_verifier(), hs(&without(claims(), "exp")).as_bytes()),
        "missing_claim"
    );
}

#[test]
fn bad_sub_characters_are_invalid_sub() {
    let v = hs_verifier();
    for sub in [
        json!("al ice"),
        json!("alice/../bob"),
        json!(""),
        json!("ålice"),
        json!("a".repeat(129)),
        json!(42),
    ] {
        assert_eq!(
            reason(&v, hs(&with(claims(), "sub", sub.clone())).as_bytes()),
            "invalid_sub",
            "{sub}"
        );
    }
}

#[test]
fn unknown_kid_is_refused() {
    let t = sign(Algorithm::RS256, &rsa_key(), Some("rsa-9"), &claims());
    assert_eq!(reason(&jwks_verifier(), t.as_bytes()), "unknown_kid");
    let named = Verifier::new(
        &KeyMaterial::PemPublicKeys(vec![PemKey {
            kid: Some("k1".into()),
            pem: fixture("rsa.pub"),
        }]),
        settings(),
    )
    .unwrap();
    assert_eq!(reason(&named, t.as_bytes()), "unknown_kid");
}

#[test]
fn jwks_selects_the_key_by_kid() {
    let v = jwks_verifier();
    let t = sign(Algorithm::RS256, &rsa_key(), Some("rsa-1"), &claims());
    assert_eq!(ok(&v, &t).sub.as_str(), "alice");
    let t = sign(Algorithm::ES256, &ec_key(), Some("ec-1"), &claims());
    assert_eq!(ok(&v, &t).sub.as_str(), "alice");
    // A kid naming a key of another family than the token's alg.
    let t = sign(Algorithm::ES256, &ec_key(), Some("rsa-1"), &claims());
    assert_eq!(reason(&v, t.as_bytes()), "algorithm_not_allowed");
}

#[test]
fn oversized_token_is_refused_before_parsing() {
    let big = hs(&with(claims(), "pad", json!("x".repeat(MAX_TOKEN_BYTES))));
    assert!(big.len() > MAX_TOKEN_BYTES);
    assert_eq!(reason(&hs_verifier(), big.as_bytes()), "oversized");
    assert_eq!(
        reason(&hs_verifier(), &vec![b'a'; MAX_TOKEN_BYTES + 1]),
        "oversized"
    );
}

#[test]
fn non_utf8_is_malformed() {
    let mut t = hs(&claims()).into_bytes();
    t[3] = 0xff;
    assert_eq!(reason(&hs_verifier(), &t), "malformed");
}

#[test]
fn truncated_tokens_are_refused() {
    let v = hs_verifier();
    let t = hs(&claims());
    let (without_sig, _) = t.rsplit_once('.').unwrap();
    assert_eq!(reason(&v, without_sig.as_bytes()), "malformed");
    assert_eq!(reason(&v, b""), "malformed");
    let first_dot = t.find('.').unwrap();
    assert_eq!(reason(&v, &t.as_bytes()[..first_dot]), "malformed");
    assert_eq!(reason(&v, &t.as_bytes()[..first_dot / 2]), "malformed");
    // Cut anywhere: never accepted, never a panic.
    for cut in 0..t.len() {
        let r = reason(&v, &t.as_bytes()[..cut]);
        assert!(
            matches!(r, "malformed" | "bad_signature"),
            "cut at {cut}: {r}"
        );
    }
}

#[test]
fn garbage_header_or_payload_is_malformed() {
    let v = hs_verifier();
    assert_eq!(reason(&v, b"a.b.c"), "malformed");
    assert_eq!(reason(&v, b"....."), "malformed");
    let h = URL_SAFE_NO_PAD.encode(br#"{"alg":"HS256"}"#);
    let crit = URL_SAFE_NO_PAD.encode(br#"{"alg":"HS256","crit":["exp"]}"#);
    assert_eq!(
        reason(&v, format!("{crit}.e30.AAAA").as_bytes()),
        "malformed"
    );
    // A correctly signed payload that is not a JSON object.
    let key = EncodingKey::from_secret(SECRET).unwrap();
    let t = jsonwebtoken::encode(&Header::new(Algorithm::HS256), &json!([1, 2]), &key).unwrap();
    assert!(matches!(
        reason(&v, t.as_bytes()),
        "malformed" | "bad_signature"
    ));
    assert_eq!(
        reason(&v, format!("{h}.!!!.AAAA").as_bytes()),
        "bad_signature"
    );
}

#[test]
fn unusable_key_material_is_refused_at_construction() {
    assert!(matches!(
        Verifier::new(
            &KeyMaterial::PemPublicKeys(vec![PemKey {
                kid: None,
                pem: b"not pem".to_vec()
            }]),
            settings()
        ),
        Err(KeyError::UnsupportedPem { index: 0 })
    ));
    assert!(matches!(
        Verifier::new(&KeyMaterial::Jwks(b"{".to_vec()), settings()),
        Err(KeyError::BadJwks(_))
    ));
    assert!(matches!(
        Verifier::new(&KeyMaterial::Jwks(br#"{"keys":[]}"#.to_vec()), settings()),
        Err(KeyError::NoKeys)
    ));
    let dup = vec![
        PemKey {
            kid: Some("a".into()),
            pem: fixture("rsa.pub"),
        },
        PemKey {
            kid: Some("a".into()),
            pem: fixture("ec.pub"),
        },
    ];
    assert_eq!(
        Verifier::new(&KeyMaterial::PemPublicKeys(dup), settings()).unwrap_err(),
        KeyError::DuplicateKid("a".into())
    );
    let oct = br#"{"keys":[{"kty":"oct","k":"c2VjcmV0","kid":"x"}]}"#;
    assert!(matches!(
        Verifier::new(&KeyMaterial::Jwks(oct.to_vec()), settings()),
        Err(KeyError::BadJwk { index: 0, .. })
    ));
}

#[test]
fn allowed_algorithms_follow_the_keys() {
    assert_eq!(
        hs_verifier().allowed_algorithms().collect::<Vec<_>>(),
        ["HS256"]
    );
    assert_eq!(
        pem_verifier().allowed_algorithms().collect::<Vec<_>>(),
        ["ES256", "EdDSA", "RS256"]
    );
}

#[test]
fn signer_tokens_verify() {
    let s = policy::Signer::from_private_pem(&fixture("ed.key"), None).unwrap();
    let t = s
        .sign(&policy::TokenClaims {
            sub: "bob".into(),
            exp: NOW + 60,
            iat: NOW,
            iss: Some("termgate".into()),
            aud: Some("termgate-gw".into()),
            roles: vec!["admin".into()],
            jti: None,
            sid: None,
        })
        .unwrap();
    let p = ok(&pem_verifier(), &t);
    assert_eq!((p.sub.as_str(), p.admin), ("bob", true));
    assert!(policy::Signer::hs256(b"short").is_err());
}

/// The order of P-256's group, big-endian.
const P256_N: [u8; 32] = [
    0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    0xbc, 0xe6, 0xfa, 0xad, 0xa7, 0x17, 0x9e, 0x84, 0xf3, 0xb9, 0xca, 0xc2, 0xfc, 0x63, 0x25, 0x51,
];

/// The order of P-384's group, big-endian.
const P384_N: [u8; 48] = [
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xc7, 0x63, 0x4d, 0x81, 0xf4, 0x37, 0x2d, 0xdf,
    0x58, 0x1a, 0x0d, 0xb2, 0x48, 0xb0, 0xa7, 0x7a, 0xec, 0xec, 0x19, 0x6a, 0xcc, 0xc5, 0x29, 0x73,
];

/// The `s` half of a token's ECDSA signature (`r || s`).
fn ecdsa_s(token: &str, n: &[u8]) -> Vec<u8> {
    let (_, sig) = token.rsplit_once('.').unwrap();
    let sig = URL_SAFE_NO_PAD.decode(sig).unwrap();
    assert_eq!(sig.len(), 2 * n.len());
    sig[n.len()..].to_vec()
}

/// `n - s`, big-endian, for `0 < s < n`.
fn negate(n: &[u8], s: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; n.len()];
    let mut borrow = 0u16;
    for i in (0..n.len()).rev() {
        let take = u16::from(s[i]) + borrow;
        let have = u16::from(n[i]);
        borrow = u16::from(take > have);
        out[i] = (have + (borrow << 8) - take) as u8;
    }
    out
}

/// The twin of an ECDSA-signed token: its signature `(r, s)` spelled `(r, n - s)`,
/// which the curve's equation accepts as well.
fn ecdsa_twin(token: &str, n: &[u8]) -> String {
    let (input, sig) = token.rsplit_once('.').unwrap();
    let mut sig = URL_SAFE_NO_PAD.decode(sig).unwrap();
    let s = negate(n, &sig[n.len()..]);
    sig[n.len()..].copy_from_slice(&s);
    format!("{input}.{}", URL_SAFE_NO_PAD.encode(&sig))
}

/// Whether a token's `s` is the lower of `s` and `n - s`.
fn low_s(token: &str, n: &[u8]) -> bool {
    let s = ecdsa_s(token, n);
    s <= negate(n, &s)
}

#[test]
fn the_negation_helper_is_right() {
    let one = {
        let mut v = vec![0u8; 32];
        v[31] = 1;
        v
    };
    let mut n_minus_one = P256_N.to_vec();
    n_minus_one[31] -= 1;
    assert_eq!(negate(&P256_N, &one), n_minus_one);
    assert_eq!(negate(&P256_N, &n_minus_one), one);
}

/// ECDSA signatures are malleable: `(r, n - s)` verifies wherever `(r, s)` does. Only
/// the low-S spelling is accepted, termgate signs only that one, and both spellings
/// name the same sign-in, so a signed-out cookie cannot come back re-spelled.
#[test]
fn an_es256_token_re_spelled_with_n_minus_s_is_refused_and_names_the_same_sign_in() {
    use policy::revocation::{CredentialId, Fingerprint, Revocation, RevocationSet, RevokedWhy};
    let signer = policy::Signer::from_private_pem(&fixture("ec.key"), None).unwrap();
    let v = pem_verifier();
    // ECDSA signing here is deterministic (RFC 6979); a few tokens make it all but
    // certain that some came out of the signing library high-S.
    for i in 0..16 {
        let t = signer
            .sign(&policy::TokenClaims {
                sub: "alice".into(),
                exp: NOW + 600,
                iat: NOW,
                iss: Some("termgate".into()),
                aud: Some("termgate-gw".into()),
                roles: vec![],
                jti: Some(format!("j-{i}")),
                sid: None,
            })
            .unwrap();
        assert!(low_s(&t, &P256_N), "termgate signs low-S only: {t}");
        let who = ok(&v, &t);
        let twin = ecdsa_twin(&t, &P256_N);
        assert_ne!(twin, t);
        assert_eq!(reason(&v, twin.as_bytes()), "bad_signature");
        assert_eq!(
            Fingerprint::of(twin.as_bytes()),
            Fingerprint::of(t.as_bytes()),
            "the signature is no part of the token's identity"
        );
        let mut signed_out = RevocationSet::new();
        signed_out.insert(&Revocation::SignIn {
            fingerprint: Fingerprint::of(t.as_bytes()),
            sub: "alice".into(),
            expires_at: NOW + 600,
        });
        assert_eq!(
            signed_out.check(&CredentialId::of(twin.as_bytes(), &who)),
            Some(RevokedWhy::SignedOut)
        );
    }
}

/// Another issuer's ES256 and ES384 tokens: the low-S spelling verifies, the high-S one
/// is a bad signature.
#[test]
fn es256_and_es384_tokens_verify_only_low_s() {
    let p384 = Verifier::new(
        &KeyMaterial::PemPublicKeys(vec![PemKey {
            kid: None,
            pem: fixture("ec384.pub"),
        }]),
        settings(),
    )
    .unwrap();
    let cases: [(Algorithm, EncodingKey, Verifier, &[u8]); 2] = [
        (Algorithm::ES256, ec_key(), pem_verifier(), &P256_N),
        (
            Algorithm::ES384,
            EncodingKey::from_ec_pem(&fixture("ec384.key")).unwrap(),
            p384,
            &P384_N,
        ),
    ];
    for (alg, key, v, n) in &cases {
        for i in 0..4 {
            let t = sign(
                *alg,
                key,
                None,
                &with(claims(), "jti", json!(format!("j-{i}"))),
            );
            let twin = ecdsa_twin(&t, n);
            let (low, high) = if low_s(&t, n) { (t, twin) } else { (twin, t) };
            assert_eq!(ok(v, &low).sub.as_str(), "alice", "{alg:?}");
            assert_eq!(reason(v, high.as_bytes()), "bad_signature", "{alg:?}");
        }
    }
}

const BASE64URL: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// Whether `changed` differs from `token` only in the last character of the signature,
/// and only in bits that base64url discards (the decoded signature is the same).
fn only_padding_bits_changed(token: &str, changed: &[u8]) -> bool {
    use base64::engine::{general_purpose::GeneralPurpose, DecodePaddingMode};
    // Decodes like URL_SAFE_NO_PAD but ignores the unused low bits of the last
    // character instead of refusing them.
    const LENIENT: GeneralPurpose = GeneralPurpose::new(
        &base64::alphabet::URL_SAFE,
        base64::engine::GeneralPurposeConfig::new()
            .with_decode_allow_trailing_bits(true)
            .with_decode_padding_mode(DecodePaddingMode::RequireNone),
    );
    let t = token.as_bytes();
    let (Some((&last, head)), Some((_, changed_head))) = (t.split_last(), changed.split_last())
    else {
        return false;
    };
    let Some(dot) = t.iter().rposition(|&b| b == b'.') else {
        return false;
    };
    head == changed_head
        && last != changed[changed.len() - 1]
        && matches!(
            (LENIENT.decode(&t[dot + 1..]), LENIENT.decode(&changed[dot + 1..])),
            (Ok(a), Ok(b)) if a == b
        )
}

/// The forged-signature property trusts `only_padding_bits_changed` to excuse an
/// accepted token, so it must excuse exactly the equivalent spellings: an HS256
/// signature is 32 bytes in 43 characters, leaving 2 unused bits, so 3 other last
/// characters decode to the same bytes, and no change elsewhere is excused.
#[test]
fn only_the_three_equivalent_last_characters_count_as_padding_changes() {
    let t = hs(&claims());
    let excused = |pos: usize| {
        BASE64URL
            .iter()
            .filter(|&&b| only_padding_bits_changed(&t, &mutate(&t, pos, b)))
            .count()
    };
    assert_eq!(excused(t.len() - 1), 3);
    assert!((0..t.len() - 1).all(|pos| excused(pos) == 0));
}

fn mutate(token: &str, pos: usize, byte: u8) -> Vec<u8> {
    let mut t = token.as_bytes().to_vec();
    if !t.is_empty() {
        let i = pos % t.len();
        t[i] = byte;
    }
    t
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn verify_never_panics_on_random_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = hs_verifier().verify(&bytes, NOW);
        let _ = pem_verifier().verify(&bytes, NOW);
    }

    #[test]
    fn any_single_byte_change_to_a_valid_token_is_refused(
        // Aim half the positions at the signature's last character and draw half the
        // bytes from base64url, so that some changes touch only its padding bits.
        pos in prop_oneof![any::<usize>(), Just(hs(&claims()).len() - 1)],
        byte in prop_oneof![any::<u8>(), proptest::sample::select(BASE64URL)],
    ) {
        let t = hs(&claims());
        let m = mutate(&t, pos, byte);
        prop_assume!(m != t.as_bytes());
        let r = hs_verifier().verify(&m, NOW);
        if only_padding_bits_changed(&t, &m) {
            // The same signature bytes: accepting it forges nothing.
            if let Ok(p) = r {
                prop_assert_eq!(p.sub.as_str(), "alice");
            }
        } else {
            prop_assert!(r.is_err(), "forgery accepted: {}", String::from_utf8_lossy(&m));
        }
    }

    #[test]
    fn structured_garbage_never_panics(h in "[A-Za-z0-9_-]{0,40}", p in "[A-Za-z0-9_-]{0,80}", s in "[A-Za-z0-9_-]{0,80}") {
        let t = format!("{h}.{p}.{s}");
        let r = hs_verifier().verify(t.as_bytes(), NOW);
        prop_assert!(r.is_err());
        let reason = r.unwrap_err().reason();
        prop_assert!(["malformed", "algorithm_not_allowed", "bad_signature"].contains(&reason), "{}", reason);
    }
}

#[test]
fn every_reason_code_is_snake_case_and_distinct() {
    let all = [
        TokenError::Oversized,
        TokenError::Malformed("x"),
        TokenError::AlgorithmNotAllowed("x".into()),
        TokenError::UnknownKid("x".into()),
        TokenError::BadSignature,
        TokenError::Expired,
        TokenError::NotYetValid,
        TokenError::WrongIssuer,
        TokenError::WrongAudience,
        TokenError::MissingClaim("x"),
        TokenError::InvalidClaim("x"),
        TokenError::InvalidSub,
    ];
    let mut codes: Vec<_> = all.iter().map(|e| e.reason()).collect();
    assert!(codes
        .iter()
        .all(|c| c.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')));
    codes.sort();
    codes.dedup();
    assert_eq!(codes.len(), all.len());
}

#[test]
fn a_token_living_longer_than_the_maximum_is_refused() {
    let day = 86_400;
    let v = Verifier::new(
        &KeyMaterial::Hs256Secret(SECRET.to_vec()),
        VerifierSettings {
            max_lifetime_secs: Some(day),
            ..settings()
        },
    )
    .unwrap();
    let issued_now = |exp: u64| with(claims(), "exp", json!(exp));
    assert_eq!(ok(&v, &hs(&issued_now(NOW + day))).sub.as_str(), "alice");
    assert_eq!(
        reason(&v, hs(&issued_now(NOW + day + 31)).as_bytes()),
        "lifetime_too_long",
        "beyond the maximum and the leeway"
    );
    // Without iat the remaining lifetime counts.
    assert_eq!(
        reason(
            &v,
            hs(&without(issued_now(NOW + 2 * day), "iat")).as_bytes()
        ),
        "lifetime_too_long"
    );
    assert_eq!(
        ok(&v, &hs(&without(issued_now(NOW + 600), "iat")))
            .sub
            .as_str(),
        "alice"
    );
    // An old iat with a far exp is as long-lived as it looks.
    assert_eq!(
        reason(
            &v,
            hs(&with(issued_now(NOW + 600), "iat", json!(NOW - 2 * day))).as_bytes()
        ),
        "lifetime_too_long"
    );
    assert_eq!(
        reason(
            &v,
            hs(&with(claims(), "iat", json!("yesterday"))).as_bytes()
        ),
        "invalid_claim"
    );
}

/// A token signed with `key` as `alg`, naming `kid` (or none), with any claims.
fn signed(key: &EncodingKey, alg: Algorithm, kid: Option<&str>, claims: &Value) -> String {
    let mut h = Header::new(alg);
    h.kid = kid.map(str::to_owned);
    jsonwebtoken::encode(&h, claims, key).unwrap()
}

#[test]
fn a_providers_key_set_keeps_the_usable_keys_and_checks_only_the_signature() {
    let mut rsa = Jwk::from_encoding_key(&rsa_key(), Algorithm::RS256).unwrap();
    rsa.common.key_id = Some("sig-1".into());
    let mut enc = Jwk::from_encoding_key(&ec_key(), Algorithm::ES256).unwrap();
    enc.common.key_id = Some("enc-1".into());
    enc.common.public_key_use = Some(jsonwebtoken::jwk::PublicKeyUse::Encryption);
    let oct = Jwk::from_encoding_key(&EncodingKey::from_secret(SECRET).unwrap(), Algorithm::HS256)
        .unwrap();
    let doc = serde_json::to_vec(&JwkSet {
        keys: vec![oct.clone(), enc.clone(), rsa],
    })
    .unwrap();
    // Verifier::new refuses the whole set for its symmetric key; a provider's set
    // leaves it out.
    assert!(Verifier::new(&KeyMaterial::Jwks(doc.clone()), settings()).is_err());
    let v = Verifier::from_provider_jwks(&doc).unwrap();
    // An ID token's sub need not be a termgate user name, and no claim is checked here.
    let id_token = json!({"sub": "auth0|123", "aud": ["x"], "exp": 1});
    let claims = v
        .verify_signature(signed(&rsa_key(), Algorithm::RS256, Some("sig-1"), &id_token).as_bytes())
        .unwrap();
    assert_eq!(claims["sub"], json!("auth0|123"));
    let without_kid = signed(&rsa_key(), Algorithm::RS256, None, &id_token);
    assert!(v.verify_signature(without_kid.as_bytes()).is_ok());
    for (token, why) in [
        (
            signed(&ec_key(), Algorithm::ES256, Some("enc-1"), &id_token),
            "algorithm_not_allowed",
        ),
        (
            signed(&rsa_key(), Algorithm::RS256, Some("sig-2"), &id_token),
            "unknown_kid",
        ),
        (hs(&id_token), "algorithm_not_allowed"),
    ] {
        assert_eq!(
            v.verify_signature(token.as_bytes()).unwrap_err().reason(),
            why
        );
    }
    // A provider's ES256 ID token verifies in either spelling: it comes from the
    // token endpoint, and providers need not sign low-S.
    let mut ec = Jwk::from_encoding_key(&ec_key(), Algorithm::ES256).unwrap();
    ec.common.key_id = Some("ec-1".into());
    let v = Verifier::from_provider_jwks(&serde_json::to_vec(&JwkSet { keys: vec![ec] }).unwrap())
        .unwrap();
    let t = signed(&ec_key(), Algorithm::ES256, Some("ec-1"), &id_token);
    for spelling in [ecdsa_twin(&t, &P256_N), t] {
        assert!(v.verify_signature(spelling.as_bytes()).is_ok());
    }
    let unusable = serde_json::to_vec(&JwkSet {
        keys: vec![oct, enc],
    })
    .unwrap();
    assert_eq!(
        Verifier::from_provider_jwks(&unusable).unwrap_err(),
        KeyError::NoKeys
    );
}
