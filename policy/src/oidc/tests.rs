use super::*;
use serde_json::json;

fn claims(v: Value) -> Map<String, Value> {
    v.as_object().unwrap().clone()
}

fn want(now: u64) -> IdTokenExpectations<'static> {
    IdTokenExpectations {
        issuer: "https://idp.example",
        client_id: "termgate",
        nonce: "n-1",
        now,
        leeway: 30,
    }
}

fn good(now: u64) -> Value {
    json!({"iss":"https://idp.example","aud":"termgate","exp":now+300,"iat":now,"nonce":"n-1","sub":"u1"})
}

#[test]
fn pkce_challenge_is_base64url_of_sha256_without_padding() {
    // Computed independently: base64.urlsafe_b64encode(hashlib.sha256(v).digest()).
    assert_eq!(
        pkce_challenge("dBjftJeZ4CVP-mJ92K1gnxzOzwdXFIb9WAnbaK2ZwHBD2oA3K48"),
        "k1SgQJQBnK7tSjrSVMI9VtlJJPLe_rc_ys5wg4Z6Ess"
    );
}

#[test]
fn a_sealed_flow_opens_until_it_expires_and_never_under_another_key() {
    let sealer = FlowSealer::new(b"k1").unwrap();
    let flow = Flow::new([[1; 32], [2; 32], [3; 32]], 1000);
    let cookie = sealer.seal(&flow);
    assert_eq!(sealer.open(&cookie, 1000), Ok(flow.clone()));
    assert_eq!(
        sealer.open(&cookie, 1000 + FLOW_TTL_SECS),
        Err(OidcError::FlowExpired)
    );
    assert_eq!(
        FlowSealer::new(b"k2").unwrap().open(&cookie, 1000),
        Err(OidcError::FlowMissing)
    );
    let mut tampered = cookie.clone().into_bytes();
    let mid = tampered.len() / 2;
    tampered[mid] = if tampered[mid] == b'A' { b'B' } else { b'A' };
    assert_eq!(
        sealer.open(&String::from_utf8(tampered).unwrap(), 1000),
        Err(OidcError::FlowMissing)
    );
    assert_ne!(flow.state, flow.nonce);
    assert_eq!(flow.challenge(), pkce_challenge(&flow.verifier));
}

#[test]
fn callbacks_parse_strictly_and_check_state_issuer_and_errors() {
    let flow = Flow::new([[1; 32], [2; 32], [3; 32]], 0);
    let q = format!(
        "code=a%2Bb&state={}&iss=https%3A%2F%2Fidp.example",
        flow.state
    );
    let c = Callback::parse(&q).unwrap();
    assert_eq!(c.code.as_deref(), Some("a+b"));
    assert_eq!(check_callback(&c, &flow, "https://idp.example"), Ok("a+b"));
    assert_eq!(
        check_callback(&c, &flow, "https://other.example"),
        Err(OidcError::WrongIssuer)
    );
    let tampered = Callback::parse(&format!("code=x&state={}x", flow.state)).unwrap();
    assert_eq!(
        check_callback(&tampered, &flow, "i"),
        Err(OidcError::StateMismatch)
    );
    assert!(matches!(
        Callback::parse("state=a&state=b"),
        Err(OidcError::BadCallback(_))
    ));
    assert!(matches!(
        Callback::parse("code=%zz"),
        Err(OidcError::BadCallback(_))
    ));
    let denied = Callback::parse(&format!(
        "error=access_denied&error_description=no+way&state={}",
        flow.state
    ))
    .unwrap();
    assert_eq!(
        check_callback(&denied, &flow, "i"),
        Err(OidcError::ProviderRefused("access_denied: no way".into()))
    );
    let no_code = Callback::parse(&format!("state={}", flow.state)).unwrap();
    assert!(matches!(
        check_callback(&no_code, &flow, "i"),
        Err(OidcError::BadCallback(_))
    ));
}

#[test]
fn id_token_claims_are_checked_one_by_one() {
    let now = 10_000;
    assert_eq!(
        check_id_token(&claims(good(now)), &want(now)),
        Ok(now + 300)
    );
    let with = |k: &str, v: Value| {
        let mut c = claims(good(now));
        c.insert(k.into(), v);
        c
    };
    let check = |c: Map<String, Value>| check_id_token(&c, &want(now));
    assert_eq!(
        check(with("iss", json!("https://evil"))),
        Err(OidcError::WrongIssuer)
    );
    assert_eq!(
        check(with("aud", json!("other"))),
        Err(OidcError::WrongAudience)
    );
    assert_eq!(
        check(with("aud", json!(["other", "termgate"]))),
        Err(OidcError::WrongAudience),
        "several audiences need azp"
    );
    let mut both = with("aud", json!(["other", "termgate"]));
    both.insert("azp".into(), json!("termgate"));
    assert_eq!(check(both), Ok(now + 300));
    assert_eq!(
        check(with("azp", json!("other"))),
        Err(OidcError::WrongAudience)
    );
    assert_eq!(check(with("exp", json!(now - 31))), Err(OidcError::Expired));
    assert_eq!(
        check(with("exp", json!(now - 10))),
        Ok(now - 10),
        "within leeway"
    );
    assert_eq!(
        check(with("iat", json!(now + 100))),
        Err(OidcError::Expired)
    );
    assert_eq!(
        check(with("nonce", json!("n-2"))),
        Err(OidcError::NonceMismatch)
    );
    let mut no_nonce = claims(good(now));
    no_nonce.remove("nonce");
    assert_eq!(check(no_nonce), Err(OidcError::NonceMismatch));
    let mut no_exp = claims(good(now));
    no_exp.remove("exp");
    assert!(matches!(check(no_exp), Err(OidcError::InvalidIdToken(_))));
}

fn rules() -> SignInRules {
    SignInRules {
        sub_claim: "preferred_username".into(),
        admin_claim: Some("groups".into()),
        admin_values: vec!["ops".into()],
        allowed_email_domains: vec![],
        allowed_groups: vec![],
        groups_claim: "groups".into(),
        session_max_secs: 3600,
    }
}

#[test]
fn the_grant_takes_sub_admin_and_the_earlier_end() {
    let c = claims(json!({"preferred_username":"alice","groups":["dev","ops"]}));
    let g = rules().grant(&c, 500, 100).unwrap();
    assert_eq!((g.sub.as_str(), g.admin, g.exp), ("alice", true, 500));
    assert_eq!(rules().grant(&c, 100_000, 100).unwrap().exp, 3700);
    let c = claims(json!({"preferred_username":"bob","groups":"dev"}));
    assert!(!rules().grant(&c, 500, 100).unwrap().admin);
    for bad in [
        json!({}),
        json!({"preferred_username":"a b"}),
        json!({"preferred_username":7}),
    ] {
        assert_eq!(
            rules().grant(&claims(bad), 500, 100),
            Err(OidcError::BadSubject("preferred_username".into()))
        );
    }
}

#[test]
fn domains_and_groups_restrict_who_signs_in() {
    let r = SignInRules {
        allowed_email_domains: vec!["example.com".into()],
        allowed_groups: vec!["dev".into()],
        ..rules()
    };
    let ok = json!({"preferred_username":"a","email":"a@Example.com","groups":["dev"]});
    assert!(r.grant(&claims(ok), 500, 100).is_ok());
    for refused in [
        json!({"preferred_username":"a","email":"a@evil.com","groups":["dev"]}),
        json!({"preferred_username":"a","email":"a@example.com.evil","groups":["dev"]}),
        json!({"preferred_username":"a","email":"a@example.com","email_verified":false,"groups":["dev"]}),
        json!({"preferred_username":"a","groups":["dev"]}),
        json!({"preferred_username":"a","email":"a@example.com","groups":["ops"]}),
        json!({"preferred_username":"a","email":"a@example.com"}),
    ] {
        assert!(
            matches!(
                r.grant(&claims(refused.clone()), 500, 100),
                Err(OidcError::NotAllowed(_))
            ),
            "{refused}"
        );
    }
}

#[test]
fn an_email_names_the_user_only_when_the_provider_says_it_is_verified() {
    // A provider that lets people type any address (and many do, for a new account)
    // would otherwise let anyone become alice@example.com.
    let r = SignInRules {
        sub_claim: "email".into(),
        ..rules()
    };
    let code = |v: Value| {
        r.grant(&claims(v), 500, 100)
            .map(|g| g.sub)
            .map_err(|e| e.code())
    };
    assert_eq!(
        code(json!({"email":"alice@example.com","email_verified":true})),
        Ok(Sub::parse("alice@example.com").unwrap())
    );
    for unverified in [
        json!({"email":"alice@example.com"}),
        json!({"email":"alice@example.com","email_verified":false}),
        json!({"email":"alice@example.com","email_verified":"true"}),
        json!({"email":"alice@example.com","email_verified":null}),
    ] {
        assert_eq!(
            code(unverified.clone()),
            Err("oidc_email_unverified"),
            "{unverified}"
        );
    }
    // Any other claim is taken as the provider gives it (its opt-in is the
    // configuration's business).
    let sub = SignInRules {
        sub_claim: "sub".into(),
        ..rules()
    };
    assert_eq!(
        sub.grant(&claims(json!({"sub":"u-1","email":"x@y"})), 500, 100)
            .unwrap()
            .sub
            .as_str(),
        "u-1"
    );
}

#[test]
fn form_encoding_round_trips_through_percent_decoding() {
    let s = "a b&c=d/é+~";
    let enc = form_encode(&[("k", s)]);
    assert_eq!(enc, "k=a%20b%26c%3Dd%2F%C3%A9%2B~");
    assert_eq!(
        percent_decode(enc.strip_prefix("k=").unwrap()).as_deref(),
        Some(s)
    );
    assert_eq!(percent_decode("%"), None);
    assert_eq!(percent_decode("%ff"), None);
}

#[test]
fn every_refusal_has_its_own_code() {
    let all = [
        OidcError::FlowMissing,
        OidcError::FlowExpired,
        OidcError::StateMismatch,
        OidcError::Replayed,
        OidcError::ProviderRefused(String::new()),
        OidcError::BadCallback(""),
        OidcError::WrongIssuer,
        OidcError::CodeRejected(String::new()),
        OidcError::InvalidIdToken(String::new()),
        OidcError::WrongAudience,
        OidcError::NonceMismatch,
        OidcError::Expired,
        OidcError::BadSubject(String::new()),
        OidcError::EmailUnverified,
        OidcError::NotAllowed(""),
        OidcError::ProviderUnavailable(String::new()),
    ];
    let codes: std::collections::BTreeSet<_> = all.iter().map(OidcError::code).collect();
    assert_eq!(codes.len(), all.len());
    assert!(codes.iter().all(|c| c.starts_with("oidc_")));
}
