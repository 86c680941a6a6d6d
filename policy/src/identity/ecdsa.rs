//! ECDSA's one spelling. A signature `(r, s)` verifies as `(r, n - s)` too, so a token
//! could be re-spelled without its key: only the low-S spelling (`s <= n/2`) is
//! accepted, and termgate signs only that one. A JWS ECDSA signature is `r || s`, each
//! the size of the curve's order, big-endian (RFC 7518 §3.4).

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use jsonwebtoken::Algorithm;

/// The order of P-256's group (ES256), big-endian.
const P256_N: [u8; 32] = [
    0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    0xbc, 0xe6, 0xfa, 0xad, 0xa7, 0x17, 0x9e, 0x84, 0xf3, 0xb9, 0xca, 0xc2, 0xfc, 0x63, 0x25, 0x51,
];

/// Half of it, rounded down: the largest low `s`.
const P256_HALF_N: [u8; 32] = [
    0x7f, 0xff, 0xff, 0xff, 0x80, 0x00, 0x00, 0x00, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    0xde, 0x73, 0x7d, 0x56, 0xd3, 0x8b, 0xcf, 0x42, 0x79, 0xdc, 0xe5, 0x61, 0x7e, 0x31, 0x92, 0xa8,
];

/// The order of P-384's group (ES384), big-endian.
const P384_N: [u8; 48] = [
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xc7, 0x63, 0x4d, 0x81, 0xf4, 0x37, 0x2d, 0xdf,
    0x58, 0x1a, 0x0d, 0xb2, 0x48, 0xb0, 0xa7, 0x7a, 0xec, 0xec, 0x19, 0x6a, 0xcc, 0xc5, 0x29, 0x73,
];

/// Half of it, rounded down: the largest low `s`.
const P384_HALF_N: [u8; 48] = [
    0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xe3, 0xb1, 0xa6, 0xc0, 0xfa, 0x1b, 0x96, 0xef,
    0xac, 0x0d, 0x06, 0xd9, 0x24, 0x58, 0x53, 0xbd, 0x76, 0x76, 0x0c, 0xb5, 0x66, 0x62, 0x94, 0xb9,
];

/// The group order and its half for an ECDSA algorithm; `None` for any other.
fn order(alg: Algorithm) -> Option<(&'static [u8], &'static [u8])> {
    match alg {
        Algorithm::ES256 => Some((&P256_N, &P256_HALF_N)),
        Algorithm::ES384 => Some((&P384_N, &P384_HALF_N)),
        _ => None,
    }
}

/// The `s` of an `r || s` signature of `alg`, when it has the curve's length.
fn s_of(alg: Algorithm, sig: &[u8]) -> Option<(&'static [u8], &'static [u8], &[u8])> {
    let (n, half) = order(alg)?;
    if sig.len() != 2 * n.len() {
        return None;
    }
    let (_, s) = sig.split_at(n.len());
    Some((n, half, s))
}

/// Whether `signature` (base64url, as in the token) is an ECDSA signature of `alg`
/// whose `s` is above half the order. Other algorithms, and signatures that do not
/// decode to the curve's length, are not (the signature check refuses those itself).
pub(super) fn is_high_s(alg: Algorithm, signature: &str) -> bool {
    if order(alg).is_none() {
        return false;
    }
    let Ok(sig) = URL_SAFE_NO_PAD.decode(signature) else {
        return false;
    };
    // Equal-length big-endian numbers compare as byte strings.
    s_of(alg, &sig).is_some_and(|(_, half, s)| s > half)
}

/// `token` (a compact JWS signed with `alg`) with a high `s` replaced by `n - s`, the
/// spelling verification accepts. `None` if its ECDSA signature is not `r || s`.
pub(super) fn low_s(alg: Algorithm, token: String) -> Option<String> {
    if order(alg).is_none() {
        return Some(token);
    }
    let (input, signature) = token.rsplit_once('.')?;
    let mut sig = URL_SAFE_NO_PAD.decode(signature).ok()?;
    let (n, half, s) = s_of(alg, &sig)?;
    if s <= half {
        return Some(token);
    }
    let negated = negate(n, s);
    let at = sig.len() - negated.len();
    sig.get_mut(at..)?.copy_from_slice(&negated);
    Some(format!("{input}.{}", URL_SAFE_NO_PAD.encode(&sig)))
}

/// `n - s`, big-endian, for `s <= n` of the same length.
fn negate(n: &[u8], s: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; n.len()];
    let mut borrow = 0u16;
    for ((o, &a), &b) in out.iter_mut().zip(n).zip(s).rev() {
        let take = u16::from(b) + borrow;
        let have = u16::from(a) + 0x100;
        let d = have - take;
        *o = (d & 0xff) as u8;
        borrow = u16::from(d < 0x100);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_half_orders_are_half_the_orders() {
        for (n, half) in [
            (&P256_N[..], &P256_HALF_N[..]),
            (&P384_N[..], &P384_HALF_N[..]),
        ] {
            // n is odd: n - half = half + 1.
            let mut half_plus_one = half.to_vec();
            if let Some(last) = half_plus_one.last_mut() {
                *last += 1;
            }
            assert_eq!(negate(n, half), half_plus_one);
        }
    }

    #[test]
    fn only_ecdsa_signatures_above_half_the_order_are_high() {
        let sig = |s: &[u8]| URL_SAFE_NO_PAD.encode([vec![1u8; 32], s.to_vec()].concat());
        assert!(!is_high_s(Algorithm::ES256, &sig(&P256_HALF_N)));
        assert!(is_high_s(
            Algorithm::ES256,
            &sig(&negate(&P256_N, &P256_HALF_N))
        ));
        assert!(!is_high_s(Algorithm::RS256, &sig(&[0xff; 32])));
        assert!(!is_high_s(Algorithm::ES256, "not base64!"));
        assert!(
            !is_high_s(Algorithm::ES384, &sig(&[0xff; 32])),
            "wrong length"
        );
    }
}
