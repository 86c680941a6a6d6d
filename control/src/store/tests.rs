//! The store's behaviour through its API, with a look at the trees where a test
//! needs to break them.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::*;

const ROOMY: QuotaLimits = QuotaLimits {
    per_user: 1000,
    global: 100_000,
};

fn id(n: u32) -> SessionId {
    let b = n.to_be_bytes();
    SessionId::from_random([0, 0, 0, 0, 0, 0, b[0], b[1], b[2], b[3]])
}

fn sub(s: &str) -> Sub {
    Sub::parse(s).expect("valid sub")
}

fn session(n: u32, owner: &str) -> Session {
    Session {
        id: id(n),
        owner: sub(owner),
        name: format!("s{n}"),
        profile: "shell".into(),
        host: "local".into(),
        options: BTreeMap::new(),
        state: SessionState::Creating,
        created_at: 1000 + u64::from(n),
        container_id: None,
        ended_at: None,
        ended_by: None,
        end_reason: None,
        last_input: None,
        record: Default::default(),
        shares: Vec::new(),
    }
}

/// Opens the store, waiting a little for sled to release the file lock of a store
/// that was just dropped (its background flusher lets go asynchronously).
fn open(dir: &Path) -> Store {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match Store::open(dir, 100) {
            Ok(s) => return s,
            Err(StoreError::Db(e))
                if e.to_string().contains("could not acquire lock")
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(e) => panic!("open: {e:?}"),
        }
    }
}

/// An end that holds whatever active state the session is in.
fn ending(state: SessionState, by: &'static str, reason: &'static str, at: u64) -> Ending<'static> {
    Ending {
        from: ANY_ACTIVE,
        state,
        by,
        reason,
        at,
    }
}

fn run(store: &Store, n: u32, container: &str) -> Session {
    store
        .update(&id(n), |s| {
            s.state = SessionState::Running;
            s.container_id = Some(container.to_owned());
        })
        .expect("update")
}

#[test]
fn insert_get_update_end_round_trip_and_history() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let s = session(1, "alice");
    store.insert_creating(&s, ROOMY).unwrap();
    assert_eq!(store.get(&s.id).unwrap(), Some(s.clone()));
    assert_eq!(store.rev(), 1);

    let running = run(&store, 1, "c1");
    assert_eq!(running.state, SessionState::Running);
    assert_eq!(store.get(&s.id).unwrap(), Some(running.clone()));
    assert_eq!(store.rev(), 2);

    let ended = store
        .end(
            &s.id,
            &ending(SessionState::Terminated, "alice", "user asked", 5000),
            10,
        )
        .unwrap();
    assert_eq!(ended.state, SessionState::Terminated);
    assert_eq!(ended.ended_at, Some(5000));
    assert_eq!(ended.ended_by.as_deref(), Some("alice"));
    assert_eq!(ended.end_reason.as_deref(), Some("user asked"));
    assert_eq!(store.get(&s.id).unwrap(), None);
    assert_eq!(store.get_ended(&s.id).unwrap(), Some(ended.clone()));
    assert_eq!(store.list_active(Some(&sub("alice"))).unwrap(), vec![]);
    assert_eq!(
        store.list_history(Some(&sub("alice")), 10).unwrap(),
        vec![ended.clone()]
    );
    assert_eq!(store.list_history(None, 10).unwrap(), vec![ended]);
    assert_eq!(store.rev(), 3);
}

#[test]
fn second_end_is_not_found() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store.insert_creating(&session(1, "a"), ROOMY).unwrap();
    store
        .end(
            &id(1),
            &ending(SessionState::Exited, "termgate", "exit 0", 10),
            10,
        )
        .unwrap();
    let rev = store.rev();
    assert!(matches!(
        store.end(
            &id(1),
            &ending(SessionState::Exited, "termgate", "exit 0", 11),
            10
        ),
        Err(StoreError::NotFound)
    ));
    assert!(matches!(
        store.update(&id(1), |_| {}),
        Err(StoreError::NotFound)
    ));
    assert_eq!(store.rev(), rev);
}

#[test]
fn an_end_decided_on_a_state_the_record_has_left_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store.insert_creating(&session(1, "a"), ROOMY).unwrap();
    // The reconciler decided on `creating`; the create recorded `running` first.
    run(&store, 1, "c1");
    let rev = store.rev();
    let failed = Ending {
        from: &[SessionState::Creating],
        state: SessionState::Failed,
        by: "termgate",
        reason: "creation did not finish",
        at: 9,
    };
    assert!(matches!(
        store.end(&id(1), &failed, 10),
        Err(StoreError::StateChanged(SessionState::Running))
    ));
    assert_eq!(store.rev(), rev, "a refused end bumps nothing");
    assert_eq!(store.counts(&sub("a")).unwrap(), (1, 1));
    assert_eq!(
        store.get(&id(1)).unwrap().unwrap().state,
        SessionState::Running
    );
    assert_eq!(store.get_ended(&id(1)).unwrap(), None);

    // The other order: the reconciler's end wins, and the create then finds nothing
    // to mark running.
    store.insert_creating(&session(2, "a"), ROOMY).unwrap();
    let ended = store.end(&id(2), &failed, 10).unwrap();
    assert_eq!(ended.state, SessionState::Failed);
    assert!(matches!(
        store.update(&id(2), |s| s.state = SessionState::Running),
        Err(StoreError::NotFound)
    ));
    assert_eq!(store.counts(&sub("a")).unwrap(), (1, 1));
}

#[test]
fn transitions_outside_the_rules_are_conflicts() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let s = session(1, "a");
    store.insert_creating(&s, ROOMY).unwrap();
    assert!(matches!(
        store.insert_creating(&s, ROOMY),
        Err(StoreError::Conflict(_))
    ));
    let mut running = session(2, "a");
    running.state = SessionState::Running;
    assert!(matches!(
        store.insert_creating(&running, ROOMY),
        Err(StoreError::Conflict(_))
    ));
    assert!(matches!(
        store.update(&s.id, |s| s.state = SessionState::Exited),
        Err(StoreError::Conflict(_))
    ));
    assert!(matches!(
        store.update(&s.id, |s| s.owner = sub("b")),
        Err(StoreError::Conflict(_))
    ));
    assert!(matches!(
        store.end(&s.id, &ending(SessionState::Stopping, "a", "", 1), 10),
        Err(StoreError::Conflict(_))
    ));
    // Ended ids stay taken.
    store
        .end(&s.id, &ending(SessionState::Terminated, "a", "", 1), 10)
        .unwrap();
    assert!(matches!(
        store.insert_creating(&s, ROOMY),
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(store.counts(&sub("a")).unwrap(), (0, 0));
}

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
fn everything_survives_reopening_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    let (running, ended) = {
        let store = open(dir.path());
        store.insert_creating(&session(1, "a"), ROOMY).unwrap();
        store.insert_creating(&session(2, "a"), ROOMY).unwrap();
        let running = run(&store, 1, "c1");
        let ended = store
            .end(
                &id(2),
                &ending(SessionState::Terminated, "a", "done", 50),
                10,
            )
            .unwrap();
        store.lock_user(&sub("eve"), &sub("admin"), 3).unwrap();
        (running, ended)
    };
    let store = open(dir.path());
    assert_eq!(store.rev(), 5);
    assert_eq!(store.get(&id(1)).unwrap(), Some(running.clone()));
    assert_eq!(store.get_ended(&id(2)).unwrap(), Some(ended));
    assert_eq!(store.counts(&sub("a")).unwrap(), (1, 1));
    assert!(store.is_locked(&sub("eve")).unwrap());
    assert_eq!(store.feed(0).unwrap().changes.len(), 5);
    assert_eq!(store.list_active(Some(&sub("a"))).unwrap(), vec![running]);
    // And it keeps counting from where it was.
    store.insert_creating(&session(3, "a"), ROOMY).unwrap();
    assert_eq!(store.rev(), 6);
}

#[test]
fn history_trimming_keeps_the_newest_n_per_owner() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    for n in 0..6 {
        store.insert_creating(&session(n, "a"), ROOMY).unwrap();
        store
            .end(
                &id(n),
                &ending(SessionState::Exited, "termgate", "exit", 100 + u64::from(n)),
                3,
            )
            .unwrap();
    }
    store.insert_creating(&session(10, "b"), ROOMY).unwrap();
    store
        .end(
            &id(10),
            &ending(SessionState::Exited, "termgate", "exit", 1),
            3,
        )
        .unwrap();

    let kept: Vec<SessionId> = store
        .list_history(Some(&sub("a")), 100)
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(kept, vec![id(5), id(4), id(3)]);
    assert_eq!(store.get_ended(&id(0)).unwrap(), None);
    assert_eq!(store.list_history(Some(&sub("a")), 2).unwrap().len(), 2);
    // Another owner's trimming left b alone, and b's left a alone.
    assert_eq!(store.list_history(Some(&sub("b")), 10).unwrap().len(), 1);
    let all: Vec<SessionId> = store
        .list_history(None, 10)
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(all, vec![id(5), id(4), id(3), id(10)]);
}

#[test]
fn list_active_by_owner_returns_only_that_owners_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    // "ab" and "a.b" start like "a"; only "a\0" is a's prefix (a sub holds no NUL).
    for (n, owner) in [(1, "a"), (2, "ab"), (3, "a.b"), (4, "a"), (5, "b")] {
        store.insert_creating(&session(n, owner), ROOMY).unwrap();
    }
    let a: Vec<SessionId> = store
        .list_active(Some(&sub("a")))
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(a, vec![id(1), id(4)]);
    assert_eq!(store.list_active(Some(&sub("a.b"))).unwrap().len(), 1);
    assert_eq!(store.list_active(Some(&sub("nobody"))).unwrap(), vec![]);
    assert_eq!(store.list_active(None).unwrap().len(), 5);
}

#[test]
fn a_corrupt_record_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let good = session(1, "a");
    {
        let store = open(dir.path());
        store.insert_creating(&good, ROOMY).unwrap();
    }
    {
        let db = sled::open(dir.path()).unwrap();
        let sessions = db.open_tree(SESSIONS).unwrap();
        sessions
            .insert(id(2).as_str(), &b"\xff{not json"[..])
            .unwrap();
        // A valid record filed under another id is corrupt too.
        sessions
            .insert(id(3).as_str(), serde_json::to_vec(&good).unwrap())
            .unwrap();
        db.open_tree(COUNTS)
            .unwrap()
            .insert(b"g", &b"xyz"[..])
            .unwrap();
        db.flush().unwrap();
    }
    let store = open(dir.path());
    assert_eq!(store.get(&id(1)).unwrap(), Some(good));
    assert!(matches!(store.get(&id(2)), Err(StoreError::Corrupt(_))));
    assert!(matches!(store.get(&id(3)), Err(StoreError::Corrupt(_))));
    assert!(matches!(
        store.list_active(None),
        Err(StoreError::Corrupt(_))
    ));
    assert!(matches!(
        store.counts(&sub("a")),
        Err(StoreError::Corrupt(_))
    ));
    assert!(matches!(
        store.update(&id(2), |_| {}),
        Err(StoreError::Corrupt(_))
    ));
}

#[test]
fn is_empty_on_a_fresh_dir_and_not_after_an_insert() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    assert!(store.is_empty());
    store.insert_creating(&session(1, "a"), ROOMY).unwrap();
    assert!(!store.is_empty());
    store
        .end(&id(1), &ending(SessionState::Terminated, "a", "", 1), 10)
        .unwrap();
    assert!(!store.is_empty(), "history alone makes a store non-empty");
}

#[test]
fn insert_rebuilt_counts_active_skips_present_and_feeds_routes() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store.insert_creating(&session(1, "a"), ROOMY).unwrap();
    let mut running = session(2, "a");
    running.state = SessionState::Running;
    running.container_id = Some("c2".into());
    let mut exited = session(3, "b");
    exited.state = SessionState::Exited;
    exited.ended_at = Some(77);
    let batch = vec![
        session(1, "a"),
        running.clone(),
        exited.clone(),
        running.clone(),
    ];
    assert_eq!(store.insert_rebuilt(&batch).unwrap(), 2);
    assert_eq!(store.counts(&sub("a")).unwrap(), (2, 2));
    assert_eq!(store.counts(&sub("b")).unwrap(), (0, 2));
    assert_eq!(store.get(&running.id).unwrap(), Some(running.clone()));
    assert_eq!(store.get_ended(&exited.id).unwrap(), Some(exited.clone()));
    assert_eq!(
        store.list_history(Some(&sub("b")), 5).unwrap(),
        vec![exited.clone()]
    );
    assert_eq!(
        store.feed(1).unwrap().changes,
        vec![
            Change::Upsert {
                rev: 2,
                route: running.route().unwrap()
            },
            Change::Remove {
                rev: 3,
                session: exited.id
            },
        ]
    );
    assert_eq!(store.insert_rebuilt(&batch).unwrap(), 0);
    assert_eq!(store.rev(), 3);
}

#[test]
fn list_active_by_owner_over_ten_thousand_records() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let batch: Vec<Session> = (0..10_000).map(|n| session(n, "bulk")).collect();
    assert_eq!(store.insert_rebuilt(&batch).unwrap(), 10_000);
    store
        .insert_creating(&session(20_000, "other"), ROOMY)
        .unwrap();
    let list = store.list_active(Some(&sub("bulk"))).unwrap();
    assert_eq!(list.len(), 10_000);
    assert!(list.windows(2).all(|w| w[0].created_at <= w[1].created_at));
    assert_eq!(store.counts(&sub("bulk")).unwrap(), (10_000, 10_001));
}

#[test]
fn a_record_written_before_hosts_reads_as_the_local_host() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(1, "a");
    let mut old = serde_json::to_value(&s).unwrap();
    old.as_object_mut().unwrap().remove("host");
    {
        let db = sled::open(dir.path()).unwrap();
        db.open_tree(SESSIONS)
            .unwrap()
            .insert(id(1).as_str(), serde_json::to_vec(&old).unwrap())
            .unwrap();
        db.flush().unwrap();
    }
    let store = open(dir.path());
    let read = store.get(&id(1)).unwrap().expect("the old record");
    assert_eq!(read.host, "local");
    assert_eq!(read, s);
}

#[test]
fn placement_records_the_chosen_host_and_counts_every_active_session_per_host() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let mut first = session(1, "a");
    store
        .insert_placed(&mut first, ROOMY, |active| {
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
        .insert_placed(&mut second, ROOMY, |active| {
            assert_eq!(active, &BTreeMap::from([("gpu-1".to_owned(), 1)]));
            Ok("cpu-1".into())
        })
        .unwrap();
    assert_eq!(second.host, "cpu-1");
    let mut third = session(3, "c");
    let refused = store.insert_placed(&mut third, ROOMY, |_| Err("every host is full".into()));
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
        .insert_placed(&mut session(1, "a"), one, |_| Ok("h".into()))
        .unwrap();
    let r = store.insert_placed(&mut session(2, "a"), one, |_| {
        panic!("placement must not be asked past the quota")
    });
    assert!(matches!(r, Err(StoreError::Quota(_))), "{r:?}");
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
        .insert_placed(&mut s, ROOMY, |_| Ok("gpu-1".into()))
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
        .insert_placed(&mut other, ROOMY, |_| Ok("local".into()))
        .unwrap();
    let r = store.route_of(&run(&store, 2, "c2")).unwrap();
    assert_eq!((r.host.as_deref(), r.upstream), (Some("local"), None));
}

#[test]
fn input_times_only_move_forward_skip_unknown_ids_and_never_bump_the_revision() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store.insert_creating(&session(1, "alice"), ROOMY).unwrap();
    store.insert_creating(&session(2, "bob"), ROOMY).unwrap();
    run(&store, 1, "c1");
    let rev = store.rev();

    // Two reports of one session in a batch: the later time wins; an unknown id and a
    // time from the future (clamped to now) are harmless.
    let moved = store
        .record_input(
            &[(id(1), 2000), (id(1), 1990), (id(9), 2000), (id(2), 9999)],
            3000,
        )
        .unwrap();
    assert_eq!(moved, 2);
    assert_eq!(store.get(&id(1)).unwrap().unwrap().last_input, Some(2000));
    assert_eq!(store.get(&id(2)).unwrap().unwrap().last_input, Some(3000));
    // Not forward: nothing written.
    assert_eq!(
        store
            .record_input(&[(id(1), 2000), (id(1), 1500)], 3000)
            .unwrap(),
        0
    );
    assert_eq!(store.get(&id(1)).unwrap().unwrap().last_input, Some(2000));
    assert_eq!(
        store.rev(),
        rev,
        "gateways have nothing to learn from input times"
    );

    // Ended sessions keep their last input in history and take no more.
    store
        .end(
            &id(1),
            &ending(SessionState::Terminated, "termgate", "idle: x", 2500),
            10,
        )
        .unwrap();
    assert_eq!(store.record_input(&[(id(1), 2600)], 3000).unwrap(), 0);
    assert_eq!(
        store.get_ended(&id(1)).unwrap().unwrap().last_input,
        Some(2000)
    );
    drop(store);
    let store = open(dir.path());
    assert_eq!(store.get(&id(2)).unwrap().unwrap().last_input, Some(3000));
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
        .insert_placed(&mut s, ROOMY, |_| Ok("gpu-1".into()))
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
    // Past the tokens' expiry (and the leeway), both sign-ins and revocations go.
    let gone = store
        .prune_sign_ins(5000 + policy::revocation::KEEP_AFTER_EXPIRY_SECS)
        .unwrap();
    assert_eq!(gone, 3, "two sign-ins and one revocation");
    assert!(store.revocations().unwrap().is_empty());
    assert!(store.sign_ins(None, 0).unwrap().is_empty());
}
