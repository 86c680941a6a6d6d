//! Role [`Role::Control`]: the calls control makes, as bollard sends them, and no
//! others.

use super::*;
use crate::sandbox::Rule;

#[test]
fn every_call_control_makes_passes_as_bollard_sends_it() {
    let list_filters = form(r#"{"label":["termgate.managed=session","termgate.instance=prod"]}"#);
    let event_filters = form(
        r#"{"type":["container"],"label":["termgate.instance=prod"],"event":["die","destroy","oom"]}"#,
    );
    let cases = [
        ("GET", "/version".to_owned(), Verdict::Pass),
        ("GET", "/_ping".to_owned(), Verdict::Pass),
        ("GET", "/info".to_owned(), Verdict::Pass),
        (
            "POST",
            format!("/containers/{ID}/start"),
            labelled(ObjectKind::Container, ID),
        ),
        (
            "POST",
            format!("/containers/{ID}/kill?signal=SIGHUP"),
            labelled(ObjectKind::Container, ID),
        ),
        (
            "DELETE",
            "/containers/termgate-abcdefghijk234mn?v=true&force=true&link=false".to_owned(),
            labelled(ObjectKind::Container, "termgate-abcdefghijk234mn"),
        ),
        (
            "GET",
            format!("/containers/{ID}/json"),
            labelled(ObjectKind::Container, ID),
        ),
        (
            "GET",
            "/containers/termgate-abcdefghijk234mn/json".to_owned(),
            labelled(ObjectKind::Container, "termgate-abcdefghijk234mn"),
        ),
        (
            "POST",
            "/containers/termgate-abcdefghijk234mn/resize?h=24&w=79".to_owned(),
            labelled(ObjectKind::Container, "termgate-abcdefghijk234mn"),
        ),
        (
            "GET",
            format!("/containers/json?all=true&size=false&filters={list_filters}"),
            Verdict::PassFiltered {
                instance: "prod".into(),
            },
        ),
        (
            "GET",
            format!("/events?since=1700000000.123456789&filters={event_filters}"),
            Verdict::PassFiltered {
                instance: "prod".into(),
            },
        ),
        (
            "GET",
            "/volumes/termgate-home-alice".to_owned(),
            labelled(ObjectKind::Volume, "termgate-home-alice"),
        ),
        (
            "DELETE",
            "/volumes/termgate-ws-prod-abcdefghijk234mn?force=false".to_owned(),
            labelled(ObjectKind::Volume, "termgate-ws-prod-abcdefghijk234mn"),
        ),
        (
            "GET",
            format!(
                "/volumes?filters={}",
                form(r#"{"label":["termgate.instance=prod"]}"#)
            ),
            Verdict::PassFiltered {
                instance: "prod".into(),
            },
        ),
        (
            "GET",
            "/system/df?type=volume".to_owned(),
            Verdict::PassVolumeUsage,
        ),
        ("GET", "/system/df".to_owned(), Verdict::PassVolumeUsage),
    ];
    for (m, t, want) in cases {
        assert_eq!(verdict(Role::Control, m, &t), want, "{m} {t}");
        let versioned = format!("/v1.41{t}");
        assert_eq!(
            verdict(Role::Control, m, &versioned),
            want,
            "{m} {versioned}"
        );
    }
}

/// The bytes bollard-stubs 1.53.1-rc.29.3.1 writes for control's create (body.rs's
/// fields; labels cut to two), `list_managed` and `events_since`.
const BOLLARD_CREATE: &str = r#"{"User":"1000:1000","AttachStdin":false,"AttachStdout":false,"AttachStderr":false,"Tty":true,"OpenStdin":true,"StdinOnce":false,"Env":["SESSION_SHELL=sh"],"Image":"termgate/session:dev","Labels":{"termgate.instance":"prod","termgate.managed":"session"},"HostConfig":{"Memory":134217728,"MemorySwap":134217728,"NanoCpus":500000000,"Init":true,"PidsLimit":64,"NetworkMode":"none","AutoRemove":false,"Mounts":[{"Target":"/data","Source":"/srv/data","Type":"bind","ReadOnly":true},{"Target":"/home/user","Source":"termgate-home-alice","Type":"volume","ReadOnly":false}],"CapAdd":[],"CapDrop":["ALL"],"CgroupnsMode":"private","IpcMode":"private","PidMode":"private","Privileged":false,"ReadonlyRootfs":true,"SecurityOpt":["no-new-privileges:true"],"Tmpfs":{"/tmp":"rw,nosuid,nodev,size=16m"},"UTSMode":"","UsernsMode":""}}"#;
const BOLLARD_LIST: &str = "/containers/json?all=true&size=false&filters=%7B%22label%22%3A%5B%22termgate.managed%3Dsession%22%2C%22termgate.instance%3Dprod%22%5D%7D";
const BOLLARD_EVENTS: &str = "/events?since=1700000000.000000001&filters=%7B%22label%22%3A%5B%22termgate.instance%3Dprod%22%5D%2C%22type%22%3A%5B%22container%22%5D%7D";

#[test]
fn the_exact_bytes_bollard_sends_for_control_pass() {
    let create = create_with(
        "/containers/create?name=termgate-x&platform=",
        BOLLARD_CREATE.as_bytes(),
    );
    assert_eq!(create, session_create_passes());
    let prod = Verdict::PassFiltered {
        instance: "prod".into(),
    };
    assert_eq!(verdict(Role::Control, "GET", BOLLARD_LIST), prod);
    assert_eq!(verdict(Role::Control, "GET", BOLLARD_EVENTS), prod);
}

#[test]
fn create_takes_only_the_name_and_an_empty_platform() {
    let body = control_body().to_string();
    for (t, code) in [
        ("/containers/create?name=x&foo=1", "query_not_allowed"),
        (
            "/containers/create?name=x&platform=linux/arm64",
            "query_not_allowed",
        ),
        ("/containers/create?name=../x", "query_not_allowed"),
    ] {
        assert_eq!(refused(create_with(t, body.as_bytes())), code, "{t}");
    }
    assert_eq!(
        create_with("/containers/create", body.as_bytes()),
        session_create_passes()
    );
}

#[test]
fn listings_and_events_must_be_confined_to_one_instance() {
    let list = |filters: &str| {
        verdict(
            Role::Control,
            "GET",
            &format!("/containers/json?all=true&filters={}", form(filters)),
        )
    };
    for f in [
        r#"{"label":["termgate.managed=session"]}"#,
        r#"{"label":["termgate.instance=prod"]}"#,
        r#"{"label":["termgate.managed=session","termgate.instance="]}"#,
        r#"{"label":["termgate.managed=session","termgate.instance"]}"#,
        r#"{"label":["termgate.managed=session","termgate.instance=a","termgate.instance=b"]}"#,
        r#"{}"#,
    ] {
        assert_eq!(refused(list(f)), "filter_required", "{f}");
    }
    for f in [
        r#"{"label":{"termgate.instance=prod":true,"termgate.managed=session":true}}"#,
        r#"{"label":["termgate.managed=session","termgate.instance=prod"],"label":[]}"#,
        r#"["termgate.instance=prod"]"#,
    ] {
        assert_eq!(refused(list(f)), "bad_query", "{f}");
    }
    assert_eq!(
        refused(list(
            r#"{"label":["termgate.managed=session","termgate.instance=prod"],"status":["running"]}"#
        )),
        "query_not_allowed"
    );
    assert_eq!(
        refused(verdict(Role::Control, "GET", "/containers/json?all=true")),
        "filter_required"
    );
    assert_eq!(
        refused(verdict(Role::Control, "GET", "/events")),
        "filter_required"
    );
    let events = form(r#"{"type":["container"]}"#);
    assert_eq!(
        refused(verdict(
            Role::Control,
            "GET",
            &format!("/events?filters={events}")
        )),
        "filter_required"
    );
}

#[test]
fn volume_listings_are_confined_to_one_instance_and_usage_to_volumes() {
    let list = |filters: &str| {
        verdict(
            Role::Control,
            "GET",
            &format!("/volumes?filters={}", form(filters)),
        )
    };
    for f in [
        r#"{"label":["termgate.managed=workspace"]}"#,
        r#"{"label":["termgate.instance=a","termgate.instance=b"]}"#,
        r#"{"label":["termgate.instance="]}"#,
        r#"{}"#,
    ] {
        assert_eq!(refused(list(f)), "filter_required", "{f}");
    }
    for f in [
        r#"{"label":["termgate.instance=prod"],"dangling":["true"]}"#,
        r#"{"label":["termgate.instance=prod"],"name":["x"]}"#,
    ] {
        assert_eq!(refused(list(f)), "query_not_allowed", "{f}");
    }
    assert_eq!(
        refused(verdict(Role::Control, "GET", "/volumes")),
        "filter_required"
    );
    for t in [
        "/system/df?type=image",
        "/system/df?type=container",
        "/system/df?type=build-cache",
        "/system/df?type=volume&all=1",
    ] {
        assert_eq!(
            refused(verdict(Role::Control, "GET", t)),
            "query_not_allowed",
            "{t}"
        );
    }
    for (m, t) in [
        ("POST", "/volumes/prune"),
        ("POST", "/system/df"),
        ("GET", "/system/events"),
    ] {
        assert_eq!(
            refused(verdict(Role::Control, m, t)),
            "endpoint_not_allowed",
            "{m} {t}"
        );
    }
    for t in ["/system/df", "/volumes?filters=%7B%7D"] {
        assert_eq!(
            refused(verdict(Role::Attach, "GET", t)),
            "endpoint_not_allowed",
            "{t}"
        );
    }
}

#[test]
fn control_calls_take_only_their_own_query_and_no_body() {
    for (m, t) in [
        ("POST", format!("/containers/{ID}/start?checkpoint=c1")),
        ("POST", format!("/containers/{ID}/kill?signal=SIG%20HUP")),
        ("DELETE", format!("/containers/{ID}?force=true&link=true")),
        ("GET", "/volumes/termgate-home-alice?x=1".to_owned()),
        ("GET", "/info?x=1".to_owned()),
    ] {
        assert_eq!(
            refused(verdict(Role::Control, m, &t)),
            "query_not_allowed",
            "{m} {t}"
        );
    }
    let a = asked("POST", &format!("/containers/{ID}/start"));
    assert_eq!(
        refused(decide(Role::Control, &a, BodyInfo::length(2))),
        "body_not_allowed"
    );
    assert_eq!(
        refused(decide(Role::Control, &a, BodyInfo::chunked())),
        "body_not_allowed"
    );
    for id in ["-x", ".x", "a b", "a:b", "a%b"] {
        let t = format!("/containers/{}/start", form(id));
        assert_eq!(
            refused(verdict(Role::Control, "POST", &t)),
            "bad_reference",
            "{id}"
        );
    }
    assert_eq!(
        refused(verdict(Role::Control, "GET", "/volumes/.x")),
        "bad_reference"
    );
}

#[test]
fn control_may_not_call_what_it_never_calls() {
    for (m, t) in [
        ("POST", format!("/containers/{ID}/exec")),
        ("POST", "/exec/abc/start".to_owned()),
        ("POST", format!("/containers/{ID}/stop")),
        ("POST", format!("/containers/{ID}/wait")),
        ("POST", format!("/containers/{ID}/attach")),
        ("GET", format!("/containers/{ID}/logs")),
        ("POST", format!("/containers/{ID}/restart")),
        ("POST", format!("/containers/{ID}/update")),
        ("POST", format!("/containers/{ID}/rename?name=x")),
        ("PUT", format!("/containers/{ID}/archive?path=/")),
        ("GET", format!("/containers/{ID}/archive?path=/")),
        ("GET", format!("/containers/{ID}/export")),
        ("POST", "/commit?container=x".to_owned()),
        (
            "POST",
            "/images/create?fromImage=alpine&tag=latest".to_owned(),
        ),
        ("POST", "/images/load".to_owned()),
        ("POST", "/build".to_owned()),
        ("POST", "/containers/prune".to_owned()),
        ("POST", "/volumes/prune".to_owned()),
        ("PUT", "/volumes/termgate-home-alice".to_owned()),
        ("POST", "/networks/create".to_owned()),
        ("POST", "/networks/none/connect".to_owned()),
        ("POST", "/swarm/init".to_owned()),
        ("POST", "/plugins/pull?remote=x".to_owned()),
        ("POST", "/secrets/create".to_owned()),
        ("POST", "/configs/create".to_owned()),
        ("POST", "/services/create".to_owned()),
        ("GET", "/system/info".to_owned()),
        ("POST", "/auth".to_owned()),
        ("POST", "/session".to_owned()),
        ("GET", "/containers/create".to_owned()),
    ] {
        assert_eq!(
            refused(verdict(Role::Control, m, &t)),
            "endpoint_not_allowed",
            "{m} {t}"
        );
    }
    // A volume in use is never removed by force.
    for force in ["true", "1", "TRUE", "yes"] {
        let t = format!("/volumes/termgate-home-alice?force={force}");
        assert_eq!(
            refused(verdict(Role::Control, "DELETE", &t)),
            "query_not_allowed",
            "{t}"
        );
    }
    assert_eq!(
        refused(verdict(
            Role::Attach,
            "DELETE",
            "/volumes/termgate-home-alice"
        )),
        "endpoint_not_allowed"
    );
}

#[test]
fn a_refusal_renders_as_the_contract_error_shape() {
    let Verdict::Refuse(d) = verdict(Role::Attach, "POST", &format!("/containers/{ID}/exec"))
    else {
        panic!("exec passed");
    };
    assert_eq!(Denied::STATUS, 403);
    let v: Value = serde_json::from_slice(&d.error_body().to_json()).unwrap();
    assert_eq!(v["error"]["code"], "endpoint_not_allowed");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("exec"),
        "{v}"
    );
    assert_eq!(
        Reason::Sandbox(Rule::NotPrivileged).code(),
        "not_privileged"
    );
}
