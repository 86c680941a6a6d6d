//! Role [`Role::Attach`]: the ttyd pool.

use proptest::prelude::*;

use super::*;

#[test]
fn the_pool_may_ping_and_read_the_version() {
    for (m, t) in [
        ("GET", "/_ping"),
        ("HEAD", "/_ping"),
        ("GET", "/version"),
        ("GET", "/v1.41/version"),
    ] {
        assert_eq!(verdict(Role::Attach, m, t), Verdict::Pass, "{m} {t}");
    }
}

#[test]
fn the_pool_may_inspect_attach_resize_and_wait_on_labelled_containers_only() {
    let attach = format!(
        "/v1.41/containers/{ID}/attach?stderr=1&stdin=1&stdout=1&stream=1&detachKeys=ctrl-x%2Cctrl-x"
    );
    for (m, t) in [
        ("GET", format!("/containers/{ID}/json")),
        ("GET", format!("/v1.41/containers/{ID}/json?size=1")),
        ("POST", attach),
        (
            "POST",
            format!("/v1.41/containers/{ID}/attach?stdout=1&stderr=1&stream=1&logs=1"),
        ),
        ("POST", format!("/v1.41/containers/{ID}/resize?h=24&w=80")),
        (
            "POST",
            format!("/v1.41/containers/{ID}/wait?condition=next-exit"),
        ),
        ("POST", format!("/v1.41/containers/{ID}/wait")),
    ] {
        assert_eq!(
            verdict(Role::Attach, m, &t),
            labelled(ObjectKind::Container, ID),
            "{m} {t}"
        );
    }
    // An empty declared body is no body (Go's client sends Content-Length: 0).
    let a = asked("POST", &format!("/containers/{ID}/resize?h=1&w=1"));
    assert_eq!(
        decide(Role::Attach, &a, BodyInfo::length(0).with_bytes(b"")),
        labelled(ObjectKind::Container, ID)
    );
}

#[test]
fn an_unlabelled_container_is_only_ever_passed_subject_to_the_label_check() {
    // Whether the container is a session is the binary's inspection: every way of
    // naming one that reaches Docker yields that verdict, never a plain pass.
    for t in [
        format!("/containers/{ID}/json"),
        format!("/v1.41/containers/{ID}/json"),
        format!("/containers/%30{}/json", &ID[1..]),
    ] {
        assert_eq!(
            verdict(Role::Attach, "GET", &t),
            labelled(ObjectKind::Container, ID),
            "{t}"
        );
    }
    for t in [
        format!("/containers/{ID}/../{ID}/json"),
        format!("/v1.41/containers/x%2F..%2F{ID}/json"),
        format!("/v1.41//containers/{ID}/attach"),
    ] {
        assert_eq!(bad_target("POST", t.as_bytes()), "bad_target", "{t}");
    }
}

#[test]
fn the_pool_names_containers_by_full_id_only() {
    for id in [
        "termgate-abc",
        "0123456789ab",
        &ID.to_uppercase(),
        &format!("{ID}0"),
    ] {
        let t = format!("/containers/{id}/attach?stream=1");
        assert_eq!(
            refused(verdict(Role::Attach, "POST", &t)),
            "bad_reference",
            "{id}"
        );
    }
}

#[test]
fn the_pool_sends_no_body_and_no_other_query() {
    let a = asked("POST", &format!("/containers/{ID}/attach?stream=1&stdin=1"));
    for body in [
        BodyInfo::length(5),
        BodyInfo::chunked(),
        BodyInfo::none().with_bytes(b"x"),
    ] {
        assert_eq!(
            refused(decide(Role::Attach, &a, body)),
            "body_not_allowed",
            "{body:?}"
        );
    }
    for q in [
        "stream=1&foo=1",
        "stream=maybe",
        "detachKeys=ctrl-x%20",
        "h=1",
    ] {
        let t = format!("/containers/{ID}/attach?{q}");
        assert_eq!(
            refused(verdict(Role::Attach, "POST", &t)),
            "query_not_allowed",
            "{q}"
        );
    }
    for q in ["h=-1&w=1", "h=1e3&w=1", "h=123456&w=1"] {
        let t = format!("/containers/{ID}/resize?{q}");
        assert_eq!(
            refused(verdict(Role::Attach, "POST", &t)),
            "query_not_allowed",
            "{q}"
        );
    }
    let t = format!("/containers/{ID}/wait?condition=whenever");
    assert_eq!(
        refused(verdict(Role::Attach, "POST", &t)),
        "query_not_allowed"
    );
    assert_eq!(
        refused(verdict(Role::Attach, "GET", "/_ping?x=1")),
        "query_not_allowed"
    );
}

#[test]
fn the_pool_may_not_exec_stop_kill_remove_copy_create_or_touch_anything_else() {
    for (m, t) in [
        ("POST", format!("/containers/{ID}/exec")),
        ("POST", format!("/v1.41/containers/{ID}/exec")),
        ("POST", "/exec/abc/start".to_owned()),
        ("POST", format!("/containers/{ID}/stop")),
        ("POST", format!("/containers/{ID}/kill")),
        ("POST", format!("/containers/{ID}/restart")),
        ("POST", format!("/containers/{ID}/start")),
        ("DELETE", format!("/containers/{ID}")),
        ("GET", format!("/containers/{ID}/archive?path=/")),
        ("PUT", format!("/containers/{ID}/archive?path=/")),
        ("HEAD", format!("/containers/{ID}/archive?path=/")),
        ("GET", format!("/containers/{ID}/logs")),
        ("GET", format!("/containers/{ID}/attach/ws")),
        ("POST", format!("/containers/{ID}/update")),
        ("POST", "/containers/create".to_owned()),
        ("GET", "/containers/json".to_owned()),
        ("GET", "/events".to_owned()),
        ("GET", "/info".to_owned()),
        ("POST", "/images/create?fromImage=alpine".to_owned()),
        ("POST", "/build".to_owned()),
        ("POST", "/commit?container=x".to_owned()),
        ("GET", "/volumes".to_owned()),
        ("POST", "/volumes/create".to_owned()),
        ("GET", "/volumes/termgate-home-alice".to_owned()),
        ("POST", "/networks/create".to_owned()),
        ("POST", "/swarm/init".to_owned()),
        ("GET", "/plugins".to_owned()),
        ("POST", "/secrets/create".to_owned()),
        ("POST", "/configs/create".to_owned()),
        ("POST", "/containers/prune".to_owned()),
        ("GET", "/system/df".to_owned()),
        ("POST", "/session".to_owned()),
    ] {
        assert_eq!(
            refused(verdict(Role::Attach, m, &t)),
            "endpoint_not_allowed",
            "{m} {t}"
        );
    }
}

proptest! {
    #[test]
    fn the_pool_never_passes_a_container_call_without_the_label_check(seg in "[a-z0-9_]{1,12}", id in "[0-9a-f]{64}") {
        let t = format!("/containers/{id}/{seg}");
        for m in ["GET", "POST", "PUT", "DELETE", "HEAD"] {
            let v = verdict(Role::Attach, m, &t);
            prop_assert!(
                matches!(v, Verdict::Refuse(_)) || v == labelled(ObjectKind::Container, &id),
                "{} {} gave {:?}", m, t, v
            );
        }
    }
}
