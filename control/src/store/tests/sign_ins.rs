//! Sign-ins and revocations through the store.

use super::*;

fn sign_in(token: &[u8], who: &str, created_at: u64) -> crate::model::SignIn {
    crate::model::SignIn {
        fingerprint: policy::revocation::Fingerprint::of(token),
        sub: sub(who),
        created_at,
        expires_at: 5000,
        method: "token".into(),
        gateway: "gw".into(),
        user_agent: "ua".into(),
        client: "127.0.0.1".into(),
    }
}

#[test]
fn a_revoked_sign_in_is_fed_survives_a_reopen_and_is_forgotten_once_expired() {
    use policy::revocation::Revocation;
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store.put_sign_in(&sign_in(b"t1", "alice", 10)).unwrap();
    store.put_sign_in(&sign_in(b"t2", "alice", 20)).unwrap();
    store.put_sign_in(&sign_in(b"t3", "bob", 30)).unwrap();
    let mine = store.sign_ins(Some(&sub("alice")), 100).unwrap();
    assert_eq!(
        mine.iter().map(|s| s.created_at).collect::<Vec<_>>(),
        vec![20, 10],
        "newest first, one user's only"
    );
    let before = store.rev();
    let r = Revocation::SignIn {
        fingerprint: policy::revocation::Fingerprint::of(b"t1"),
        sub: "alice".into(),
        expires_at: 5000,
    };
    assert!(store.revoke(&r).unwrap());
    assert!(
        !store.revoke(&r).unwrap(),
        "the same revocation twice: once fed"
    );
    assert_eq!(store.rev(), before + 1);
    let page = store.feed(before).unwrap();
    assert_eq!(
        page.changes,
        vec![Change::Revoke {
            rev: before + 1,
            revocation: r.clone()
        }]
    );
    assert_eq!(store.sign_ins(Some(&sub("alice")), 100).unwrap().len(), 1);
    // A revoked sign-in cannot be recorded again.
    assert!(store.put_sign_in(&sign_in(b"t1", "alice", 40)).is_err());
    drop(store);
    let store = open(dir.path());
    assert_eq!(store.revocations().unwrap(), vec![r.clone()]);
    assert_eq!(store.feed_in(0, Some("another")).unwrap().revoked, vec![r]);
    // Past the tokens' expiry, the leeway and a margin, both sign-ins and revocations go.
    let leeway = 300;
    let keep = policy::revocation::keep_until(5000, leeway);
    assert_eq!(store.prune_sign_ins(keep - 1, leeway).unwrap(), 0);
    let gone = store.prune_sign_ins(keep, leeway).unwrap();
    assert_eq!(gone, 3, "two sign-ins and one revocation");
    assert!(store.revocations().unwrap().is_empty());
    assert!(store.sign_ins(None, 0).unwrap().is_empty());
}

#[test]
fn a_sign_in_that_must_be_new_is_recorded_once_and_never_after_its_sign_out() {
    use policy::revocation::Revocation;
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store.put_new_sign_in(&sign_in(b"c1", "alice", 10)).unwrap();
    let again = store.put_new_sign_in(&sign_in(b"c1", "alice", 11));
    assert!(
        matches!(again, Err(StoreError::Conflict(ref m)) if m.contains("made already")),
        "{again:?}"
    );
    assert_eq!(
        store.sign_ins(Some(&sub("alice")), 100).unwrap()[0].created_at,
        10,
        "the first record is kept"
    );
    store
        .revoke(&Revocation::SignIn {
            fingerprint: policy::revocation::Fingerprint::of(b"c1"),
            sub: "alice".into(),
            expires_at: 5000,
        })
        .unwrap();
    assert!(matches!(
        store.put_new_sign_in(&sign_in(b"c1", "alice", 12)),
        Err(StoreError::Conflict(_))
    ));
    // Other sign-ins are unaffected: a repeated ordinary record still replaces.
    store.put_sign_in(&sign_in(b"t1", "alice", 20)).unwrap();
    store.put_sign_in(&sign_in(b"t1", "alice", 21)).unwrap();
}
