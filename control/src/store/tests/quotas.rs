//! Counts, quotas and placement: what a create is admitted against, also under races.

use super::*;

#[test]
fn quota_refuses_the_fourth_per_user_and_the_global_limit() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let limits = QuotaLimits {
        per_user: 3,
        global: 5,
    };
    for n in 0..3 {
        store.insert_creating(&session(n, "a"), limits).unwrap();
    }
    match store.insert_creating(&session(3, "a"), limits) {
        Err(StoreError::Quota(q)) => assert_eq!(q.scope, policy::QuotaScope::User),
        other => panic!("expected user quota, got {other:?}"),
    }
    store.insert_creating(&session(4, "b"), limits).unwrap();
    store.insert_creating(&session(5, "b"), limits).unwrap();
    match store.insert_creating(&session(6, "c"), limits) {
        Err(StoreError::Quota(q)) => assert_eq!(q.scope, policy::QuotaScope::Global),
        other => panic!("expected global quota, got {other:?}"),
    }
    assert_eq!(store.get(&id(3)).unwrap(), None);
    assert_eq!(store.get(&id(6)).unwrap(), None);
    assert_eq!(store.counts(&sub("a")).unwrap(), (3, 5));
    assert_eq!(store.counts(&sub("c")).unwrap(), (0, 5));
    assert_eq!(store.rev(), 5, "refused creates do not bump the revision");
}

#[test]
fn concurrent_creates_for_one_user_admit_exactly_the_quota() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(open(dir.path()));
    let limits = QuotaLimits {
        per_user: 3,
        global: 1000,
    };
    let handles: Vec<_> = (0..16)
        .map(|n| {
            let store = Arc::clone(&store);
            std::thread::spawn(move || store.insert_creating(&session(n, "alice"), limits))
        })
        .collect();
    let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let ok = results.iter().filter(|r| r.is_ok()).count();
    let quota = results
        .iter()
        .filter(|r| matches!(r, Err(StoreError::Quota(_))))
        .count();
    assert_eq!((ok, quota), (3, 13));
    assert_eq!(store.counts(&sub("alice")).unwrap(), (3, 3));
    assert_eq!(store.list_active(Some(&sub("alice"))).unwrap().len(), 3);
    assert_eq!(store.rev(), 3);
}

#[test]
fn concurrent_creates_across_users_admit_exactly_the_global_quota() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(open(dir.path()));
    let limits = QuotaLimits {
        per_user: 10,
        global: 20,
    };
    let handles: Vec<_> = (0..80)
        .map(|n| {
            let store = Arc::clone(&store);
            let owner = format!("user{}", n % 8);
            std::thread::spawn(move || store.insert_creating(&session(n, &owner), limits))
        })
        .collect();
    let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let ok = results.iter().filter(|r| r.is_ok()).count();
    let quota = results
        .iter()
        .filter(|r| matches!(r, Err(StoreError::Quota(_))))
        .count();
    assert_eq!((ok, quota), (20, 60));
    assert_eq!(store.list_active(None).unwrap().len(), 20);
    let per_user: u32 = (0..8)
        .map(|u| store.counts(&sub(&format!("user{u}"))).unwrap().0)
        .sum();
    assert_eq!(per_user, 20);
    assert_eq!(store.counts(&sub("user0")).unwrap().1, 20);
    assert_eq!(store.recount().unwrap(), 20);
}

#[test]
fn counts_drop_right_after_end() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store.insert_creating(&session(1, "a"), ROOMY).unwrap();
    store.insert_creating(&session(2, "a"), ROOMY).unwrap();
    store.insert_creating(&session(3, "b"), ROOMY).unwrap();
    assert_eq!(store.counts(&sub("a")).unwrap(), (2, 3));
    store
        .end(
            &id(1),
            &ending(SessionState::Failed, "termgate", "no image", 9),
            10,
        )
        .unwrap();
    assert_eq!(store.counts(&sub("a")).unwrap(), (1, 2));
    assert_eq!(store.counts(&sub("b")).unwrap(), (1, 2));
    store
        .end(
            &id(2),
            &ending(SessionState::Gone, "termgate", "vanished", 9),
            10,
        )
        .unwrap();
    assert_eq!(store.counts(&sub("a")).unwrap(), (0, 1));
    assert_eq!(store.recount().unwrap(), 1);
    assert_eq!(store.counts(&sub("b")).unwrap(), (1, 1));
}

#[test]
fn placement_records_the_chosen_host_and_counts_every_active_session_per_host() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let mut first = session(1, "a");
    store
        .insert_placed(&mut first, ROOMY, |active, _| {
            assert!(active.is_empty());
            Ok("gpu-1".into())
        })
        .unwrap();
    assert_eq!(store.get(&id(1)).unwrap().unwrap().host, "gpu-1");
    // An unreachable session still holds its place on its host.
    store
        .update(&id(1), |s| {
            s.state = SessionState::Unreachable;
            s.container_id = Some("c1".into());
        })
        .unwrap();
    let mut second = session(2, "b");
    store
        .insert_placed(&mut second, ROOMY, |active, _| {
            assert_eq!(active, &BTreeMap::from([("gpu-1".to_owned(), 1)]));
            Ok("cpu-1".into())
        })
        .unwrap();
    assert_eq!(second.host, "cpu-1");
    let mut third = session(3, "c");
    let refused = store.insert_placed(&mut third, ROOMY, |_, _| Err("every host is full".into()));
    assert!(
        matches!(&refused, Err(StoreError::NoHost(m)) if m == "every host is full"),
        "{refused:?}"
    );
    assert!(store.get(&id(3)).unwrap().is_none(), "nothing recorded");
    assert_eq!(store.counts(&sub("a")).unwrap(), (1, 2));
}

#[test]
fn a_create_over_quota_hears_quota_before_placement_is_asked() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let one = QuotaLimits {
        per_user: 1,
        global: 10,
    };
    store
        .insert_placed(&mut session(1, "a"), one, |_, _| Ok("h".into()))
        .unwrap();
    let r = store.insert_placed(&mut session(2, "a"), one, |_, _| {
        panic!("placement must not be asked past the quota")
    });
    assert!(matches!(r, Err(StoreError::Quota(_))), "{r:?}");
}
