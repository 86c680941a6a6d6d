//! The store on disk: reopening a directory, corrupt records, a fresh store.

use super::*;

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
fn a_corrupt_record_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let good = session(1, "a");
    {
        let store = open(dir.path());
        store.insert_creating(&good, ROOMY).unwrap();
    }
    {
        let db = open_sled(dir.path());
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
