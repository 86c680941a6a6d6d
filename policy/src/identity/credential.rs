//! Where a request carries its token: the `Authorization` header's bearer token and
//! the session cookie.

/// The token of an `Authorization` header value with the `Bearer` scheme (in any case),
/// without surrounding whitespace. Other schemes and an empty token are `None`: the
/// caller then has no bearer credential at all.
pub fn bearer(header_value: &[u8]) -> Option<&[u8]> {
    let value = header_value.trim_ascii();
    let (scheme, token) = value.split_at(value.iter().position(|b| *b == b' ')?);
    let token = token.trim_ascii();
    (scheme.eq_ignore_ascii_case(b"bearer") && !token.is_empty()).then_some(token)
}

/// The values of the cookie `name` in one `Cookie` header value, in order: each pair
/// whose name is exactly `name`, whitespace around the pair ignored, its value as sent
/// (an empty value is `b""`); a pair without `=` is no cookie.
fn cookie_values<'a, 'n>(
    header_value: &'a [u8],
    name: &'n str,
) -> impl Iterator<Item = &'a [u8]> + use<'a, 'n> {
    header_value.split(|b| *b == b';').filter_map(move |pair| {
        pair.trim_ascii()
            .strip_prefix(name.as_bytes())?
            .strip_prefix(b"=")
    })
}

/// The value of the cookie `name` in one `Cookie` header value: the first pair whose
/// name is exactly `name` (see [`cookie_values`]).
pub fn cookie<'a>(header_value: &'a [u8], name: &str) -> Option<&'a [u8]> {
    cookie_values(header_value, name).next()
}

/// Whether the `Cookie` header values carry the cookie `name` with two different
/// values (in one header or across several). Which one counts would be a guess, and a
/// proxy in front may guess differently, so such a request is refused like a repeated
/// `Authorization` header. The same value twice is no ambiguity.
pub fn session_cookie_is_ambiguous<'a>(
    cookie_headers: impl IntoIterator<Item = &'a [u8]>,
    name: &str,
) -> bool {
    let mut first: Option<&[u8]> = None;
    for value in cookie_headers {
        for v in cookie_values(value, name) {
            match first {
                None => first = Some(v),
                Some(f) if f != v => return true,
                Some(_) => {}
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_takes_the_token_of_the_bearer_scheme_only() {
        assert_eq!(bearer(b"Bearer abc"), Some(&b"abc"[..]));
        assert_eq!(bearer(b"bEaReR abc"), Some(&b"abc"[..]));
        assert_eq!(bearer(b"  Bearer   abc  "), Some(&b"abc"[..]));
        for refused in [
            &b"Bearer"[..],
            b"Bearer ",
            b"Bearer    ",
            b"",
            b"Basic abc",
            b"Bearerabc",
            b"Bearer\tabc",
            b"Token abc",
        ] {
            assert_eq!(
                bearer(refused),
                None,
                "{:?}",
                String::from_utf8_lossy(refused)
            );
        }
    }

    #[test]
    fn cookie_takes_the_first_pair_of_the_exact_name() {
        let header = b"a=1; termgate_sessionx=no;  termgate_session=yes ;termgate_session=late";
        assert_eq!(cookie(header, "termgate_session"), Some(b"yes".as_slice()));
        assert_eq!(cookie(header, "a"), Some(b"1".as_slice()));
        assert_eq!(cookie(b"x=", "x"), Some(b"".as_slice()));
        for absent in [
            b"".as_slice(),
            b"termgate_session",
            b"xtermgate_session=no",
            b"termgate_session_2=no",
            b"a=termgate_session=no",
        ] {
            assert_eq!(
                cookie(absent, "termgate_session"),
                None,
                "{}",
                String::from_utf8_lossy(absent)
            );
        }
    }

    #[test]
    fn two_different_session_cookies_are_ambiguous_and_the_same_one_twice_is_not() {
        let amb = |headers: &[&str]| {
            session_cookie_is_ambiguous(headers.iter().map(|h| h.as_bytes()), "sid")
        };
        assert!(amb(&["sid=a; sid=b"]));
        assert!(amb(&["sid=a", "x=1; sid=b"]));
        assert!(amb(&["sid=a; sid="]));
        assert!(amb(&["sid=a; sid=a; sid=b"]));
        assert!(!amb(&[]));
        assert!(!amb(&["sid=a"]));
        assert!(!amb(&["sid=a; sid=a"]));
        assert!(!amb(&["sid=a", " sid=a "]));
        // Other names, however similar, are other cookies.
        assert!(!amb(&["sid=a; sid2=b; xsid=c; sid =d; SID=e"]));
    }
}
