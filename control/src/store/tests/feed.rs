//! The route feed and what it carries: changes, resets, epochs, locks, routes to
//! host pools and share links.

use super::*;

#[test]
fn feed_returns_changes_after_rev_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store.insert_creating(&session(1, "a"), ROOMY).unwrap();
    let route = run(&store, 1, "c1").route().unwrap();
    store
        .end(&id(1), &ending(SessionState::Terminated, "a", "bye", 7), 10)
        .unwrap();

    let page = store.feed(0).unwrap();
    assert_eq!(page.rev, 3);
    assert!(!page.reset);
    assert_eq!(
        page.changes,
        vec![
            Change::Remove {
                rev: 1,
                session: id(1)
            },
            Change::Upsert { rev: 2, route },
            Change::Remove {
                rev: 3,
                session: id(1)
            },
        ]
    );
    let page = store.feed(2).unwrap();
    assert_eq!(
        page.changes.iter().map(Change::rev).collect::<Vec<_>>(),
        vec![3]
    );
    let page = store.feed(3).unwrap();
    assert!(!page.reset);
    assert_eq!(page.rev, 3);
    assert!(page.changes.is_empty());
}

#[test]
fn feed_after_trimmed_log_resets_with_running_routes_and_locked_users() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), 3).unwrap();
    store.insert_creating(&session(1, "a"), ROOMY).unwrap(); // 1
    let route = run(&store, 1, "c1").route().unwrap(); // 2
    store.insert_creating(&session(2, "b"), ROOMY).unwrap(); // 3 (creating: no route)
    store.insert_creating(&session(3, "b"), ROOMY).unwrap(); // 4
    run(&store, 3, "c3"); // 5
    store
        .end(
            &id(3),
            &ending(SessionState::Exited, "termgate", "exit", 9),
            10,
        )
        .unwrap(); // 6
    assert!(store.lock_user(&sub("mallory"), &sub("admin"), 10).unwrap()); // 7
    assert_eq!(store.rev(), 7);

    // Retained: 5, 6, 7. after=4 still chains on; after=3 does not.
    let page = store.feed(4).unwrap();
    assert!(!page.reset);
    assert_eq!(
        page.changes.iter().map(Change::rev).collect::<Vec<_>>(),
        vec![5, 6, 7]
    );
    assert_eq!(
        store.t().unwrap().changes.len(),
        3,
        "the change log stays bounded"
    );

    let page = store.feed(3).unwrap();
    assert!(page.reset);
    assert_eq!(page.rev, 7);
    assert!(page.changes.is_empty());
    assert_eq!(page.routes, vec![route]);
    assert_eq!(page.locked, vec!["mallory".to_owned()]);
}

#[test]
fn a_poller_of_another_epoch_gets_a_reset_even_at_a_known_rev() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store.insert_creating(&session(1, "a"), ROOMY).unwrap();
    run(&store, 1, "c1");
    let epoch = store.epoch().to_owned();
    let same = store.feed_in(1, Some(&epoch)).unwrap();
    assert!(!same.reset, "the same epoch gets increments");
    assert_eq!(same.epoch, epoch);
    let restored = store.feed_in(1, Some("another-life")).unwrap();
    assert!(restored.reset, "another epoch gets the whole state");
    assert_eq!(restored.routes.len(), 1);
    assert_eq!(restored.epoch, epoch);
    // Reopening the same directory starts a new epoch: a restored copy could tell
    // another history under the same revisions.
    drop(store);
    let reopened = open(dir.path());
    assert_ne!(reopened.epoch(), epoch);
    assert!(reopened.feed_in(2, Some(&epoch)).unwrap().reset);
}

#[test]
fn feed_after_a_future_rev_resets() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store.insert_creating(&session(1, "a"), ROOMY).unwrap();
    let page = store.feed(42).unwrap();
    assert!(page.reset);
    assert_eq!(page.rev, 1);
    assert!(page.routes.is_empty());
    assert!(page.locked.is_empty());
}

#[test]
fn subscriber_sees_the_new_rev_after_insert() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let mut rx = store.subscribe();
    assert_eq!(*rx.borrow_and_update(), 0);
    store.insert_creating(&session(1, "a"), ROOMY).unwrap();
    assert!(rx.has_changed().unwrap());
    assert_eq!(*rx.borrow_and_update(), 1);
    // No-op writes publish nothing.
    assert!(!store.unlock_user(&sub("nobody")).unwrap());
    assert!(!rx.has_changed().unwrap());
}

#[test]
fn lock_and_unlock_are_idempotent_and_fed() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    assert!(!store.is_locked(&sub("eve")).unwrap());
    assert!(store.lock_user(&sub("eve"), &sub("admin"), 1).unwrap());
    assert!(!store.lock_user(&sub("eve"), &sub("admin"), 2).unwrap());
    assert_eq!(store.rev(), 1);
    assert!(store.is_locked(&sub("eve")).unwrap());
    assert!(store.lock_user(&sub("bob"), &sub("admin"), 3).unwrap());
    assert_eq!(
        store.locked_users().unwrap(),
        vec!["bob".to_owned(), "eve".to_owned()]
    );
    assert!(store.unlock_user(&sub("eve")).unwrap());
    assert!(!store.unlock_user(&sub("eve")).unwrap());
    assert!(!store.is_locked(&sub("eve")).unwrap());
    assert_eq!(store.rev(), 3);
    assert_eq!(
        store.feed(0).unwrap().changes,
        vec![
            Change::Lock {
                rev: 1,
                sub: "eve".into()
            },
            Change::Lock {
                rev: 2,
                sub: "bob".into()
            },
            Change::Unlock {
                rev: 3,
                sub: "eve".into()
            },
        ]
    );
}

#[test]
fn unreachable_sessions_stay_active_and_publish_an_unreachable_route_to_their_pool() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open(dir.path());
    let pool = crate::model::TtydAddress {
        addrs: vec!["unix:/run/gpu-1.sock".into()],
        base_path: String::new(),
    };
    store.set_pools(Pools::from([("gpu-1".to_owned(), pool.clone())]));
    let mut s = session(1, "a");
    store
        .insert_placed(&mut s, ROOMY, |_, _| Ok("gpu-1".into()))
        .unwrap();
    let running = run(&store, 1, "c1");
    let route = store.route_of(&running).expect("a running route");
    assert_eq!(
        (
            route.host.as_deref(),
            route.upstream.as_ref(),
            route.unreachable
        ),
        (Some("gpu-1"), Some(&pool), false)
    );
    let rev = store.rev();
    store
        .update(&id(1), |s| s.state = SessionState::Unreachable)
        .unwrap();
    let page = store.feed(rev).unwrap();
    match page.changes.as_slice() {
        [Change::Upsert { route, .. }] => {
            assert!(route.unreachable);
            assert_eq!(route.upstream.as_ref(), Some(&pool));
        }
        other => panic!("expected one upsert, got {other:?}"),
    }
    assert_eq!(store.counts(&sub("a")).unwrap(), (1, 1), "still counted");
    assert!(store.lookup(&id(1)).unwrap().unwrap().route.unreachable);
    // A host without a pool of its own is served by the gateway's.
    let mut other = session(2, "b");
    store
        .insert_placed(&mut other, ROOMY, |_, _| Ok("local".into()))
        .unwrap();
    let r = store.route_of(&run(&store, 2, "c2")).unwrap();
    assert_eq!((r.host.as_deref(), r.upstream), (Some("local"), None));
}

#[test]
fn share_links_ride_the_route_to_the_hosts_read_only_pool_and_a_revoke_is_an_upsert() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open(dir.path());
    let pool = |path: &str| crate::model::TtydAddress {
        addrs: vec![format!("unix:{path}")],
        base_path: String::new(),
    };
    store.set_pools(Pools::from([("gpu-1".to_owned(), pool("/run/gpu-1.sock"))]));
    store.set_viewer_pools(Pools::from([(
        "gpu-1".to_owned(),
        pool("/run/gpu-1-view.sock"),
    )]));
    let mut s = session(1, "a");
    store
        .insert_placed(&mut s, ROOMY, |_, _| Ok("gpu-1".into()))
        .unwrap();
    run(&store, 1, "c1");
    let token = policy::share::ShareToken::from_random(id(1), [9; 16]);
    let grant = token.grant(100, Some(2), policy::share::ShareMode::Anyone);
    let rev = store.rev();
    store
        .update(&id(1), |s| s.shares.push(grant.clone()))
        .unwrap();
    let route = match store.feed(rev).unwrap().changes.as_slice() {
        [Change::Upsert { route, .. }] => route.clone(),
        other => panic!("expected one upsert, got {other:?}"),
    };
    assert_eq!(route.shares, vec![grant.clone()]);
    assert_eq!(route.viewer_upstream, Some(pool("/run/gpu-1-view.sock")));
    assert!(
        !serde_json::to_string(&route)
            .unwrap()
            .contains(&token.to_string()),
        "the feed carries the hash, never the link"
    );
    let looked_up = store.lookup(&id(1)).unwrap().unwrap().route;
    assert_eq!(looked_up.shares, vec![grant]);
    // Revoked: the next upsert has no share, so gateways close its viewers.
    let rev = store.rev();
    store.update(&id(1), |s| s.shares.clear()).unwrap();
    match store.feed(rev).unwrap().changes.as_slice() {
        [Change::Upsert { route: after, .. }] => {
            assert_eq!(route.shares_gone(after), vec![token.id()]);
        }
        other => panic!("expected one upsert, got {other:?}"),
    }
}

#[test]
fn peers_ride_the_route_and_a_removal_is_an_upsert_without_them() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store.insert_creating(&session(1, "a"), ROOMY).unwrap();
    run(&store, 1, "c1");
    let grant = crate::model::PeerGrant {
        sub: "b".into(),
        expires_at: 100,
    };
    let rev = store.rev();
    store
        .update(&id(1), |s| s.peers.push(grant.clone()))
        .unwrap();
    let route = match store.feed(rev).unwrap().changes.as_slice() {
        [Change::Upsert { route, .. }] => route.clone(),
        other => panic!("expected one upsert, got {other:?}"),
    };
    assert_eq!(route.peers, vec![grant.clone()]);
    assert_eq!(
        store.lookup(&id(1)).unwrap().unwrap().route.peers,
        vec![grant]
    );
    // The same terminal: the owner's stay open; only the peer's are judged again.
    let rev = store.rev();
    store.update(&id(1), |s| s.peers.clear()).unwrap();
    match store.feed(rev).unwrap().changes.as_slice() {
        [Change::Upsert { route: after, .. }] => {
            assert!(after.peers.is_empty());
            assert!(route.same_terminal(after));
        }
        other => panic!("expected one upsert, got {other:?}"),
    }
}
