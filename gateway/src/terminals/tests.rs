use super::*;

fn fp(n: u8) -> Fingerprint {
    Fingerprint::of(&[n])
}

fn who(sub: &str) -> Principal {
    Principal {
        sub: policy::Sub::parse(sub).unwrap(),
        admin: false,
        roles: Vec::new(),
        expires_at: 0,
        issued_at: 0,
        jti: None,
    }
}
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;

fn id(n: u8) -> SessionId {
    SessionId::from_random([n; 10])
}

#[test]
fn limits_per_user_and_per_session_hold_and_free_on_drop() {
    let t = Terminals::new(2, 1);
    let a = t.admit(id(1), &who("alice"), None, fp(0)).unwrap();
    assert_eq!(
        t.admit(id(1), &who("alice"), None, fp(0)).err(),
        Some(LimitHit::Session)
    );
    let b = t.admit(id(2), &who("alice"), None, fp(0)).unwrap();
    assert_eq!(
        t.admit(id(3), &who("alice"), None, fp(0)).err(),
        Some(LimitHit::User)
    );
    drop(a);
    assert!(t.admit(id(1), &who("alice"), None, fp(0)).is_ok());
    drop(b);
    assert_eq!(t.open(), 0);
}

fn elsewhere(users: &[(&str, u32)], sessions: &[(u8, u32)]) -> Elsewhere {
    Elsewhere {
        users: users.iter().map(|(s, n)| (s.to_string(), *n)).collect(),
        sessions: sessions.iter().map(|(i, n)| (id(*i), *n)).collect(),
        viewers: HashMap::new(),
    }
}

#[test]
fn the_other_gateways_terminals_count_against_the_limits_while_fresh() {
    let t = Terminals::new(4, 3);
    let fresh = Instant::now() + std::time::Duration::from_secs(60);
    t.learn_elsewhere(elsewhere(&[("alice", 3)], &[(1, 2)]), fresh);
    let a = t.admit(id(1), &who("alice"), None, fp(0)).unwrap();
    assert_eq!(
        t.admit(id(2), &who("alice"), None, fp(0)).err(),
        Some(LimitHit::User),
        "3 elsewhere + 1 here"
    );
    assert_eq!(
        t.admit(id(1), &who("bob"), None, fp(0)).err(),
        Some(LimitHit::Session),
        "2 elsewhere + 1 here"
    );
    assert!(t.admit(id(2), &who("bob"), None, fp(0)).is_ok());
    // One closed elsewhere: the next answer lets one more in.
    t.learn_elsewhere(elsewhere(&[("alice", 2)], &[(1, 2)]), fresh);
    let b = t.admit(id(2), &who("alice"), None, fp(0)).unwrap();
    assert_eq!(t.elsewhere_totals(), Some((2, 0)));
    // Stale counts (control silent) no longer count: this gateway's own do.
    t.learn_elsewhere(elsewhere(&[("alice", 8)], &[(1, 8)]), Instant::now());
    assert_eq!(t.elsewhere_totals(), None);
    let c = t.admit(id(3), &who("alice"), None, fp(0)).unwrap();
    let d = t.admit(id(1), &who("alice"), None, fp(0)).unwrap();
    assert_eq!(
        t.admit(id(4), &who("alice"), None, fp(0)).err(),
        Some(LimitHit::User),
        "four here"
    );
    drop((a, b, c, d));
    assert_eq!(t.per_user().get("alice"), None);
}

#[test]
fn every_slot_taken_or_freed_moves_the_change_count() {
    let t = Terminals::new(1, 1);
    let before = t.changes();
    let a = t.admit(id(1), &who("alice"), None, fp(0)).unwrap();
    let refused = t.admit(id(1), &who("alice"), None, fp(0));
    assert!(refused.is_err());
    let after_admit = t.changes();
    assert_eq!(after_admit, before + 1, "a refusal changes nothing");
    drop(a);
    assert_eq!(t.changes(), after_admit + 1);
}

#[test]
fn viewers_elsewhere_count_against_max_viewers() {
    let t = Terminals::new(8, 8);
    let fresh = Instant::now() + std::time::Duration::from_secs(60);
    let mut e = Elsewhere::default();
    e.viewers.insert((id(1), "s1".into()), 1);
    t.learn_elsewhere(e, fresh);
    assert_eq!(
        t.admit_viewer(&viewer("s1", Some(1), None)).err(),
        Some(LimitHit::Viewers)
    );
    let other_link = t.admit_viewer(&viewer("s2", Some(1), None)).unwrap();
    t.learn_elsewhere(Elsewhere::default(), fresh);
    let v = t.admit_viewer(&viewer("s1", Some(1), None)).unwrap();
    drop((v, other_link));
}

#[test]
fn controls_answer_reads_into_counts() {
    let s1 = id(1).to_string();
    let json = format!(
        r#"{{"users":[{{"sub":"alice","open":2}}],"sessions":[{{"session":"{s1}","open":1}}],"viewers":[{{"session":"{s1}","share":"x","open":3}}]}}"#
    );
    let e: Elsewhere = serde_json::from_str::<policy::reports::Elsewhere>(&json)
        .unwrap()
        .into();
    assert_eq!(e.users.get("alice"), Some(&2));
    assert_eq!(e.sessions.get(&id(1)), Some(&1));
    assert_eq!(e.viewers.get(&(id(1), "x".to_owned())), Some(&3));
    assert_eq!(e.totals(), (2, 3));
}

#[test]
fn closing_shuts_the_upstream_socket_without_traffic() {
    let t = Terminals::new(8, 8);
    let (ours, mut peer) = UnixStream::pair().unwrap();
    let ticket = t.admit(id(1), &who("alice"), None, fp(0)).unwrap();
    ticket.attach_upstream(ours.as_raw_fd()).unwrap();
    assert_eq!(t.close_session(&id(1)), 1);
    let mut buf = [0u8; 1];
    assert_eq!(peer.read(&mut buf).unwrap(), 0, "peer must see EOF");
    assert_eq!(ticket.closed(), Some(CloseReason::RouteRemoved));
}

/// Whether `wake` holds a wake-up now.
fn woken(wake: &Notify) -> bool {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
        tokio::time::timeout(std::time::Duration::from_millis(50), wake.notified())
            .await
            .is_ok()
    })
}

#[test]
fn a_tunnel_terminal_is_woken_to_close_and_nothing_is_written_on_its_sockets() {
    let t = Terminals::new(8, 8);
    let wake = Arc::new(Notify::new());
    let ticket = t.admit(id(1), &who("alice"), None, fp(0)).unwrap();
    // Sockets known to the registry as well: enforcement must still leave them to the
    // tunnel, their one writer (a close frame written here could land inside a frame).
    let (up_ours, mut up_peer) = UnixStream::pair().unwrap();
    let (down_ours, mut down_peer) = UnixStream::pair().unwrap();
    ticket.attach_upstream(up_ours.as_raw_fd()).unwrap();
    ticket.attach_downstream(down_ours.as_raw_fd());
    ticket.hand_to_tunnel(Arc::clone(&wake)).unwrap();
    assert!(!woken(&wake), "not woken before anything is revoked");
    assert_eq!(t.close_user("alice"), 1);
    assert!(woken(&wake), "the revocation wakes the tunnel");
    for peer in [&mut up_peer, &mut down_peer] {
        peer.set_nonblocking(true).unwrap();
        let mut buf = [0u8; 64];
        match peer.read(&mut buf) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            other => panic!("the registry wrote on or shut a tunnel's socket: {other:?}"),
        }
    }
    assert_eq!(ticket.closed(), Some(CloseReason::UserLocked));
    assert_eq!(t.close_user("alice"), 0);
    assert!(!woken(&wake), "closed once: one wake-up");
    drop(ticket);
    // A terminal revoked before the tunnel took it is woken as soon as it does.
    let wake = Arc::new(Notify::new());
    let ticket = t.admit(id(2), &who("bob"), None, fp(0)).unwrap();
    t.close_user("bob");
    ticket.hand_to_tunnel(Arc::clone(&wake)).unwrap();
    assert!(woken(&wake));
    drop(ticket);
}

#[test]
fn users_and_expiry_are_enforced_selectively() {
    let t = Terminals::new(8, 8);
    let a = t.admit(id(1), &who("alice"), Some(100), fp(0)).unwrap();
    let b = t.admit(id(2), &who("bob"), Some(200), fp(0)).unwrap();
    assert_eq!(t.close_expired(150), 1);
    assert_eq!(
        (a.closed(), b.closed()),
        (Some(CloseReason::TokenExpired), None)
    );
    assert_eq!(t.close_user("bob"), 1);
    assert_eq!(b.closed(), Some(CloseReason::UserLocked));
    assert_eq!(t.close_user("bob"), 0, "already closed");
}

#[test]
fn a_revoked_terminal_tells_the_browser_why_before_the_cut() {
    let t = Terminals::new(8, 8);
    let ticket = t.admit(id(1), &who("alice"), None, fp(0)).unwrap();
    let (browser_side, mut browser) = UnixStream::pair().unwrap();
    browser_side.set_nonblocking(true).unwrap();
    ticket.attach_downstream(browser_side.as_raw_fd());
    t.close_user("alice");
    let mut frame = [0u8; 64];
    let n = browser.read(&mut frame).unwrap();
    let reason = CloseReason::UserLocked.message().as_bytes();
    assert_eq!(&frame[..4], &[0x88, 2 + reason.len() as u8, 0x03, 0xe8]);
    assert_eq!(&frame[4..n], reason);
}

#[test]
fn signing_out_closes_only_the_terminals_of_that_credential() {
    let t = Terminals::new(8, 8);
    let this_browser = t.admit(id(1), &who("alice"), None, fp(11)).unwrap();
    let other_browser = t.admit(id(1), &who("alice"), None, fp(22)).unwrap();
    assert_eq!(t.close_credential(fp(11)), 1);
    assert_eq!(
        (this_browser.closed(), other_browser.closed()),
        (Some(CloseReason::SignedOut), None)
    );
}

fn viewer<'a>(share: &'a str, max: Option<u32>, who: Option<&'a Principal>) -> ViewerRequest<'a> {
    ViewerRequest {
        session: id(1),
        share,
        owner: "alice",
        share_expires_at: 100,
        max_viewers: max,
        viewer: who.map(|p| (p, None)),
        credential: fp(0),
    }
}

#[test]
fn viewers_are_bounded_per_link_and_never_take_the_owners_places() {
    let t = Terminals::new(1, 1);
    let bob = who("bob");
    let v1 = t.admit_viewer(&viewer("s1", Some(2), Some(&bob))).unwrap();
    let v2 = t.admit_viewer(&viewer("s1", Some(2), None)).unwrap();
    assert_eq!(
        t.admit_viewer(&viewer("s1", Some(2), None)).err(),
        Some(LimitHit::Viewers)
    );
    let other_link = t.admit_viewer(&viewer("s2", Some(1), None)).unwrap();
    let owner = t.admit(id(1), &who("alice"), None, fp(0)).unwrap();
    assert_eq!(
        t.per_session().get(&id(1)),
        Some(&1),
        "viewers are not counted"
    );
    let mut seen = t.viewers();
    seen.sort_by(|a, b| a.share.cmp(&b.share));
    assert_eq!(
        (seen[0].open, seen[0].subs.clone()),
        (2, vec!["bob".to_owned()])
    );
    assert_eq!((seen[1].share.as_str(), seen[1].open), ("s2", 1));
    drop(v2);
    assert!(t.admit_viewer(&viewer("s1", Some(2), None)).is_ok());
    drop((v1, other_link, owner));
    assert_eq!(t.open(), 0);
}

#[test]
fn revoke_expiry_and_the_owners_lock_close_viewers() {
    let t = Terminals::new(8, 8);
    let a = t.admit_viewer(&viewer("s1", None, None)).unwrap();
    let b = t.admit_viewer(&viewer("s2", None, None)).unwrap();
    let owner = t.admit(id(1), &who("alice"), None, fp(0)).unwrap();
    assert_eq!(t.close_share(&id(1), "s1"), 1);
    assert_eq!(
        (a.closed(), b.closed()),
        (Some(CloseReason::ShareEnded), None)
    );
    assert_eq!(t.close_expired_views(99), 0);
    assert_eq!(t.close_expired(1000), 0, "token expiry is another thing");
    assert_eq!(t.close_expired_views(100), 1);
    assert_eq!(b.closed(), Some(CloseReason::ShareEnded));
    let c = t.admit_viewer(&viewer("s3", None, None)).unwrap();
    assert_eq!(t.close_user("alice"), 2, "owner and viewer");
    assert_eq!(
        (c.closed(), owner.closed()),
        (Some(CloseReason::ShareEnded), Some(CloseReason::UserLocked)),
        "the owner is locked; the viewer's share ended with it"
    );
}

#[test]
fn a_socket_without_a_registered_slot_is_an_error() {
    let t = Terminals::new(8, 8);
    let ticket = t.admit(id(1), &who("alice"), None, fp(0)).unwrap();
    t.lock().live.clear();
    let (ours, _peer) = UnixStream::pair().unwrap();
    assert!(ticket.attach_upstream(ours.as_raw_fd()).is_err());
}

#[test]
fn a_terminal_revoked_before_connecting_is_shut_on_attach() {
    let t = Terminals::new(8, 8);
    let ticket = t.admit(id(1), &who("alice"), None, fp(0)).unwrap();
    t.close_user("alice");
    let (ours, mut peer) = UnixStream::pair().unwrap();
    ticket.attach_upstream(ours.as_raw_fd()).unwrap();
    let mut buf = [0u8; 1];
    assert_eq!(peer.read(&mut buf).unwrap(), 0);
}

#[test]
fn a_peer_closes_when_dropped_from_the_route_or_expired_and_the_owner_stays() {
    let t = Terminals::new(8, 8);
    let owner = t.admit(id(1), &who("alice"), None, fp(0)).unwrap();
    let bob = t
        .admit_peer(id(1), &who("bob"), None, fp(1), "alice", 100)
        .unwrap();
    let carol = t
        .admit_peer(id(1), &who("carol"), None, fp(2), "alice", 100)
        .unwrap();
    let grant = |sub: &str, expires_at| PeerGrant {
        sub: sub.into(),
        expires_at,
    };
    // Carol's invitation is moved later; bob's is gone.
    assert_eq!(t.sync_peers(&id(1), &[grant("carol", 300)], 10), 1);
    assert_eq!(
        (owner.closed(), bob.closed(), carol.closed()),
        (None, Some(CloseReason::PeerRemoved), None)
    );
    assert_eq!(t.close_expired_peers(299), 0, "the new lifetime holds");
    assert_eq!(t.close_expired_peers(300), 1);
    assert_eq!(carol.closed(), Some(CloseReason::PeerRemoved));
    assert_eq!(owner.closed(), None);
    // Peers count against their own limits; the owner's lock closes them too.
    let dave = t
        .admit_peer(id(1), &who("dave"), None, fp(3), "alice", 500)
        .unwrap();
    assert_eq!(t.per_user().get("dave"), Some(&1));
    assert_eq!(t.close_user("alice"), 2);
    assert_eq!(
        dave.closed(),
        Some(CloseReason::PeerRemoved),
        "as control's /v1/grant says of a locked owner's peer"
    );
}

/// The registry closes, on the events of each shared case's state, what
/// `policy::terminal_access::still_allowed` closes, with the reason it gives.
#[test]
fn the_registry_closes_as_the_shared_table_says() {
    use policy::terminal_access::{by_route, cases, CaseOpened, CASE_SHARE, CASE_TOKEN};
    for case in cases() {
        let p = &case.principal;
        let never_opened = case.opened == CaseOpened::Own
            && case
                .route
                .as_ref()
                .is_some_and(|r| by_route(p.sub.as_str(), p.admin, &p.roles, r).is_none());
        if never_opened {
            // A route's own terminal nobody it admits opened: no event names it.
            continue;
        }
        let t = Terminals::new(8, 8);
        let session = SessionId::from_random([9; 10]);
        let credential = Fingerprint::of(CASE_TOKEN);
        let expires = Some(p.expires_at);
        let ticket = match case.opened {
            CaseOpened::Own => t.admit(session, p, expires, credential),
            CaseOpened::Peer => t.admit_peer(session, p, expires, credential, "alice", 1_000),
            CaseOpened::Viewer => t.admit_viewer(&ViewerRequest {
                session,
                share: CASE_SHARE,
                owner: "alice",
                share_expires_at: 1_000,
                max_viewers: None,
                viewer: Some((p, expires)),
                credential,
            }),
        }
        .unwrap();
        let mut closed = 0;
        if case.signed_out {
            closed += t.close_credential(credential);
        }
        for sub in case.locked {
            closed += t.close_user(sub);
        }
        if case.route.is_none() {
            closed += t.close_session(&session);
        }
        closed += t.close_expired(case.now);
        closed += t.close_expired_views(case.now);
        closed += t.close_expired_peers(case.now);
        assert_eq!(closed == 1, case.still.is_err(), "{}", case.name);
        if let Err(reason) = case.still {
            assert_eq!(ticket.closed(), Some(reason), "{}", case.name);
        }
    }
}
