//! The store's behaviour through its API, with a look at the trees where a test
//! needs to break them: the helpers every part shares, and the parts by topic.

mod feed;
mod quotas;
mod records;
mod reopen;
mod secrets;
mod sign_ins;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use policy::{QuotaLimits, SessionId, Sub};

use super::keys::{COUNTS, SESSIONS};
use super::{Ending, Store, StoreError, ANY_ACTIVE};
use crate::model::{Change, Pools, Session, SessionState};

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
        peers: Vec::new(),
        workspace: None,
    }
}

/// Opens the store, waiting a little for sled to release the file lock of a store
/// that was just dropped (its background flusher lets go asynchronously).
fn open(dir: &Path) -> Store {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match Store::open(dir, 100) {
            Ok(s) => return s,
            // sled reports its lock as an I/O error, which the store calls `Unavailable`.
            Err(e @ (StoreError::Db(_) | StoreError::Unavailable(_)))
                if e.to_string().contains("could not acquire lock")
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(e) => panic!("open: {e:?}"),
        }
    }
}

/// Opens the raw sled database of a store that was just dropped, waiting like [`open`]
/// for sled to release its file lock.
fn open_sled(dir: &Path) -> sled::Db {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match sled::open(dir) {
            Ok(db) => return db,
            Err(e)
                if e.to_string().contains("could not acquire lock")
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(e) => panic!("sled open: {e:?}"),
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
