//! Registered secrets: one record per name, a name filed once, grants changed under
//! the write lock, and what was acknowledged still there after a reopen.

use super::{open, sub};
use crate::model::Secret;
use crate::store::StoreError;

fn secret(name: &str) -> Secret {
    Secret {
        name: name.into(),
        path: format!("/srv/secrets/{name}"),
        registered_by: sub("root"),
        registered_at: 1_700_000_000,
        grants: vec!["role:dev".into()],
    }
}

#[test]
fn a_secret_is_filed_once_changed_and_forgotten_and_survives_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = open(dir.path());
        store.insert_secret(&secret("b-token")).unwrap();
        store.insert_secret(&secret("a-token")).unwrap();
        assert!(matches!(
            store.insert_secret(&secret("a-token")),
            Err(StoreError::Conflict(_))
        ));
        let (changed, before) = store
            .change_secret("a-token", |s| {
                Ok(std::mem::replace(&mut s.grants, vec!["user:carol".into()]))
            })
            .unwrap();
        assert_eq!(before, ["role:dev"]);
        assert_eq!(changed.grants, ["user:carol"]);
        assert!(matches!(
            store.change_secret("missing", |_| Ok(())),
            Err(StoreError::NotFound)
        ));
        store.delete_secret("b-token").unwrap();
        assert!(matches!(
            store.delete_secret("b-token"),
            Err(StoreError::NotFound)
        ));
    }
    let store = open(dir.path());
    let listed = store.list_secrets().unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].name, "a-token");
    assert_eq!(listed[0].grants, ["user:carol"]);
    assert_eq!(
        store.get_secret("a-token").unwrap().as_ref(),
        Some(&listed[0])
    );
    assert_eq!(store.get_secret("b-token").unwrap(), None);
}
