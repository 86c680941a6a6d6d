use super::*;

fn id(n: u8) -> SessionId {
    SessionId::from_random([n; 10])
}

fn answer(route: Route, rev: u64) -> RouteLookup {
    RouteLookup {
        route,
        owner_locked: false,
        rev,
        epoch: "e1".into(),
    }
}

fn route(n: u8, owner: &str) -> Route {
    Route::container(id(n), owner, format!("c{n}"))
}

fn page(rev: u64, changes: Vec<Change>) -> FeedPage {
    FeedPage {
        epoch: "e1".into(),
        rev,
        reset: false,
        changes,
        routes: vec![],
        locked: vec![],
        revoked: vec![],
    }
}

#[test]
fn a_snapshot_older_than_a_learned_route_does_not_revoke_it() {
    let c = RouteCache::new(Duration::from_secs(1));
    c.apply(&page(3, vec![]));
    // Admitted on a lookup at revision 5 of the same epoch...
    c.learn(id(1), Some(answer(route(1, "alice"), 5)));
    // ...then a reset taken at 4, before the session was running.
    let mut stale = page(4, vec![]);
    stale.reset = true;
    assert!(c.apply(&stale).is_empty(), "nothing revoked");
    assert_eq!(c.get(&id(1)), Lookup::Hit(Arc::new(route(1, "alice"))));
    // A reset at a later revision without it is the truth.
    let mut later = page(6, vec![]);
    later.reset = true;
    assert_eq!(c.apply(&later).sessions, vec![id(1)]);
    assert_eq!(c.get(&id(1)), Lookup::Miss);
}

#[test]
fn increments_of_another_epoch_are_refused_and_ask_for_everything() {
    let c = RouteCache::new(Duration::from_secs(1));
    c.apply(&page(
        3,
        vec![Change::Upsert {
            rev: 3,
            route: route(1, "alice"),
        }],
    ));
    assert_eq!((c.rev(), c.epoch().as_str()), (3, "e1"));
    let mut other = page(
        4,
        vec![Change::Remove {
            rev: 4,
            session: id(1),
        }],
    );
    other.epoch = "e2".into();
    assert!(c.apply(&other).is_empty());
    assert_eq!(
        c.get(&id(1)),
        Lookup::Hit(Arc::new(route(1, "alice"))),
        "not applied"
    );
    assert_eq!(
        (c.rev(), c.epoch().as_str()),
        (0, ""),
        "the next poll asks for everything"
    );
}

#[test]
fn upsert_then_remove_revokes_the_session() {
    let c = RouteCache::new(Duration::from_secs(1));
    assert!(!c.is_synced());
    c.apply(&page(
        1,
        vec![Change::Upsert {
            rev: 1,
            route: route(1, "alice"),
        }],
    ));
    assert!(c.is_synced());
    assert_eq!(c.get(&id(1)), Lookup::Hit(Arc::new(route(1, "alice"))));
    let r = c.apply(&page(
        2,
        vec![Change::Remove {
            rev: 2,
            session: id(1),
        }],
    ));
    assert_eq!(r.sessions, vec![id(1)]);
    assert_eq!(c.get(&id(1)), Lookup::Miss);
}

#[test]
fn an_owner_change_revokes_live_terminals() {
    let c = RouteCache::new(Duration::from_secs(1));
    c.apply(&page(
        1,
        vec![Change::Upsert {
            rev: 1,
            route: route(1, "alice"),
        }],
    ));
    let r = c.apply(&page(
        2,
        vec![Change::Upsert {
            rev: 2,
            route: route(1, "bob"),
        }],
    ));
    assert_eq!(r.sessions, vec![id(1)]);
}

#[test]
fn lock_and_unlock_follow_the_feed() {
    let c = RouteCache::new(Duration::from_secs(1));
    let r = c.apply(&page(
        1,
        vec![Change::Lock {
            rev: 1,
            sub: "alice".into(),
        }],
    ));
    assert_eq!(r.users, vec!["alice".to_string()]);
    assert!(c.is_locked("alice"));
    c.apply(&page(
        2,
        vec![Change::Unlock {
            rev: 2,
            sub: "alice".into(),
        }],
    ));
    assert!(!c.is_locked("alice"));
}

#[test]
fn a_reset_replaces_everything_and_revokes_what_vanished() {
    let c = RouteCache::new(Duration::from_secs(1));
    c.apply(&page(
        3,
        vec![
            Change::Upsert {
                rev: 1,
                route: route(1, "alice"),
            },
            Change::Upsert {
                rev: 2,
                route: route(2, "bob"),
            },
        ],
    ));
    let r = c.apply(&FeedPage {
        epoch: "e1".into(),
        rev: 1,
        reset: true,
        changes: vec![],
        routes: vec![route(2, "bob"), route(3, "carol")],
        locked: vec!["dave".into()],
        revoked: vec![],
    });
    assert_eq!(r.sessions, vec![id(1)]);
    assert_eq!(r.users, vec!["dave".to_string()]);
    assert_eq!(
        c.rev(),
        1,
        "a reset may move the revision backwards (restored store)"
    );
    assert_eq!(c.len(), 2);
}

#[test]
fn stale_changes_and_stale_lookups_are_ignored() {
    let c = RouteCache::new(Duration::from_secs(1));
    c.apply(&page(
        5,
        vec![Change::Remove {
            rev: 5,
            session: id(1),
        }],
    ));
    c.apply(&page(
        5,
        vec![Change::Upsert {
            rev: 4,
            route: route(1, "alice"),
        }],
    ));
    assert_eq!(c.get(&id(1)), Lookup::Miss);
    c.learn(id(1), Some(answer(route(1, "alice"), 4)));
    assert_eq!(c.get(&id(1)), Lookup::Miss);
    c.learn(id(1), Some(answer(route(1, "alice"), 6)));
    assert_eq!(c.get(&id(1)), Lookup::Hit(Arc::new(route(1, "alice"))));
}

#[test]
fn a_create_seen_in_one_answer_revokes_nothing() {
    let c = RouteCache::new(Duration::from_secs(1));
    c.apply(&page(1, vec![]));
    let r = c.apply(&page(
        3,
        vec![
            Change::Remove {
                rev: 2,
                session: id(1),
            },
            Change::Upsert {
                rev: 3,
                route: route(1, "alice"),
            },
        ],
    ));
    assert!(r.is_empty(), "{r:?}");
    let r = c.apply(&page(
        5,
        vec![
            Change::Lock {
                rev: 4,
                sub: "bob".into(),
            },
            Change::Unlock {
                rev: 5,
                sub: "bob".into(),
            },
        ],
    ));
    assert!(r.is_empty(), "{r:?}");
}

#[test]
fn a_route_learned_ahead_of_the_feed_survives_older_changes() {
    let c = RouteCache::new(Duration::from_secs(1));
    c.apply(&page(1, vec![]));
    c.learn(id(1), Some(answer(route(1, "alice"), 3)));
    // The feed catches up one change at a time: `remove` (creating) at 2 is older
    // than what the lookup saw.
    let r = c.apply(&page(
        2,
        vec![Change::Remove {
            rev: 2,
            session: id(1),
        }],
    ));
    assert!(r.is_empty(), "{r:?}");
    assert_eq!(c.get(&id(1)), Lookup::Hit(Arc::new(route(1, "alice"))));
    let r = c.apply(&page(
        4,
        vec![
            Change::Upsert {
                rev: 3,
                route: route(1, "alice"),
            },
            Change::Remove {
                rev: 4,
                session: id(1),
            },
        ],
    ));
    assert_eq!(r.sessions, vec![id(1)]);
}

#[test]
fn negative_answers_are_learned_after_sync_too() {
    let c = RouteCache::new(Duration::from_secs(5));
    c.apply(&page(7, vec![]));
    c.learn(id(4), None);
    assert_eq!(c.get(&id(4)), Lookup::Negative);
}

#[test]
fn negative_answers_expire() {
    let c = RouteCache::new(Duration::from_millis(30));
    c.learn(id(9), None);
    assert_eq!(c.get(&id(9)), Lookup::Negative);
    std::thread::sleep(Duration::from_millis(40));
    assert_eq!(c.get(&id(9)), Lookup::Miss);
}

fn principal(sub: &str) -> policy::Principal {
    policy::Principal {
        sub: policy::Sub::parse(sub).unwrap(),
        admin: false,
        roles: vec![],
        expires_at: 10_000,
        issued_at: 100,
        jti: Some("j-1".into()),
    }
}

#[test]
fn a_fed_revocation_refuses_its_credential_and_a_reset_replaces_the_set() {
    let c = RouteCache::new(Duration::from_secs(1));
    let alice = principal("alice");
    assert_eq!(c.revoked(b"t1", &alice), None);
    let signed_out = Revocation::SignIn {
        fingerprint: policy::revocation::Fingerprint::of(b"t1"),
        sub: "alice".into(),
        expires_at: 10_000,
    };
    let r = c.apply(&page(
        1,
        vec![Change::Revoke {
            rev: 1,
            revocation: signed_out.clone(),
        }],
    ));
    assert_eq!(r.credentials, vec![signed_out.clone()]);
    assert_eq!(c.revoked(b"t1", &alice), Some(RevokedWhy::SignedOut));
    assert_eq!(c.revoked(b"t2", &alice), None, "another sign-in stays");
    // A reset that no longer lists it (control forgot it once expired) drops it;
    // one that lists a jti refuses that token.
    let mut reset = page(5, vec![]);
    reset.reset = true;
    reset.revoked = vec![Revocation::Token {
        jti: "j-1".into(),
        expires_at: 10_000,
    }];
    let r = c.apply(&reset);
    assert_eq!(r.credentials.len(), 1, "every entry is enforced again");
    assert_eq!(c.revoked(b"t2", &alice), Some(RevokedWhy::Revoked));
    c.prune_revoked(policy::revocation::keep_until(10_000, 30) - 1, 30);
    assert_eq!(c.revoked(b"t2", &alice), Some(RevokedWhy::Revoked));
    c.prune_revoked(policy::revocation::keep_until(10_000, 30), 30);
    assert_eq!(c.revoked(b"t2", &alice), None);
    assert_eq!(c.revoked_len(), 0);
}
