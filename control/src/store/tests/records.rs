//! Session records through the store: the lifecycle from insert to end, history
//! trimming, listing by owner, rebuilt records and input times.

use super::*;

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
