//! Hosts over mutual TLS in the configuration: `tls://` endpoints and pools take the
//! certificates and the CA they need, plain TCP pools stay on loopback, and every
//! certificate file is read and parsed at load, each problem naming its key.

use config::{load_from_str, ConfigErrors};

mod common;

use common::{dir_with_pki, EXAMPLE};

fn load(extra: &str) -> Result<config::Config, ConfigErrors> {
    let dir = dir_with_pki();
    load_from_str(&format!("{EXAMPLE}\n{extra}"), dir.path(), Vec::new())
}

/// The example with `[pki]` replaced by `pki`, and `extra` (hosts) appended.
fn with(pki: &str, control: &str, gateway: &str, hosts: &str) -> String {
    let example = EXAMPLE
        .replace("[pki]\n", &format!("[pki]\n{pki}\n"))
        .replace("[control]\n", &format!("[control]\n{control}\n"))
        .replace("[gateway]\n", &format!("[gateway]\n{gateway}\n"));
    format!("{example}\n{hosts}")
}

fn load_full(text: &str) -> Result<config::Config, ConfigErrors> {
    let dir = dir_with_pki();
    load_from_str(text, dir.path(), Vec::new())
}

const PKI: &str = "ca_file = \"pki/ca.pem\"";
const CONTROL: &str = "tls_cert_file = \"pki/control.pem\"\ntls_key_file = \"pki/control-key.pem\"";
const GATEWAY: &str =
    "client_cert_file = \"pki/gateway.pem\"\nclient_key_file = \"pki/gateway-key.pem\"";
const REMOTE: &str = r#"
[[docker.hosts]]
name = "far"
endpoint = "tls://10.0.0.5:7443"
ttyd_pool = ["tls://10.0.0.5:7681"]
viewer_pool = ["tls://10.0.0.5:7682"]
capacity = 3
"#;

#[test]
fn a_remote_host_over_mutual_tls_loads_with_its_certificates() {
    let c = load_full(&with(PKI, CONTROL, GATEWAY, REMOTE)).unwrap_or_else(|e| panic!("{e}"));
    let far = &c.docker_hosts()[0];
    assert_eq!(far.endpoint.as_deref(), Some("tls://10.0.0.5:7443"));
    let (ca, cert, key) = far.tls.clone().expect("a tls:// host carries its files");
    assert!(ca.ends_with("pki/ca.pem") && cert.ends_with("pki/control.pem"));
    assert!(key.ends_with("pki/control-key.pem"));
    // dockgate_dir set: a tls:// host is still dialled over TLS, not through a local socket.
    let text = with(PKI, CONTROL, GATEWAY, REMOTE).replace(
        "# dockgate_dir = \"dockgate\"",
        "dockgate_dir = \"dockgate\"",
    );
    let c = load_full(&text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        c.docker_hosts()[0].endpoint.as_deref(),
        Some("tls://10.0.0.5:7443")
    );
}

#[test]
fn a_tls_host_without_the_ca_or_controls_certificate_is_refused_naming_each_key() {
    let e = load_full(&with("", "", GATEWAY, REMOTE)).unwrap_err();
    for key in [
        "pki.ca_file",
        "control.tls_cert_file",
        "control.tls_key_file",
    ] {
        assert!(e.mentions(key, "docker.hosts[0].endpoint"), "{key}: {e}");
    }
    let e = load_full(&with(PKI, CONTROL, "", REMOTE)).unwrap_err();
    assert!(
        e.mentions("gateway.client_cert_file", "ttyd_pool[0]"),
        "{e}"
    );
    assert!(
        e.mentions("gateway.client_key_file", "viewer_pool[0]"),
        "{e}"
    );
}

#[test]
fn a_plain_tcp_pool_is_refused_unless_on_loopback() {
    for (addr, refused) in [
        ("10.0.0.5:7681", true),
        ("0.0.0.0:7681", true),
        ("[::]:7681", true),
        ("[fd00::5]:7681", true),
        ("pool.internal:7681", true),
        ("127.0.0.1.nip.io:7681", true),
        ("localhost.:7681", true),
        ("127.0.0.1:7681", false),
        ("127.1.2.3:7681", false),
        ("[::1]:7681", false),
        ("localhost:7681", false),
        ("unix:/run/pool.sock", false),
    ] {
        let host = format!(
            "[[docker.hosts]]\nname = \"h\"\nendpoint = \"unix:///x.sock\"\n\
             ttyd_pool = [\"{addr}\"]\nviewer_pool = [\"{addr}\"]\ncapacity = 1\n"
        );
        match load(&host) {
            Ok(_) => assert!(!refused, "{addr} was accepted"),
            Err(e) => {
                assert!(refused, "{addr}: {e}");
                assert!(e.mentions("docker.hosts[0].ttyd_pool[0]", "TLS"), "{e}");
                assert!(e.mentions("docker.hosts[0].viewer_pool[0]", "TLS"), "{e}");
            }
        }
    }
}

#[test]
fn a_daemons_own_port_takes_dockgate_false_when_dockgate_is_on() {
    let tcp = r#"
[[docker.hosts]]
name = "old"
endpoint = "tcp://10.0.0.6:2375"
allow_plain_tcp = true
ttyd_pool = ["127.0.0.1:7691"]
capacity = 1
"#;
    let on = EXAMPLE.replace(
        "# dockgate_dir = \"dockgate\"",
        "dockgate_dir = \"dockgate\"",
    );
    let e = load_full(&format!("{on}\n{tcp}")).unwrap_err();
    assert!(
        e.mentions("docker.hosts[0].endpoint", "dockgate = false"),
        "{e}"
    );
    let off = tcp.replace("capacity = 1", "capacity = 1\ndockgate = false");
    let c = load_full(&format!("{on}\n{off}")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        c.docker_hosts()[0].endpoint.as_deref(),
        Some("tcp://10.0.0.6:2375")
    );
    // dockgate = false means nothing for a tls:// host, which is a dockgate.
    let e = load_full(&with(
        PKI,
        CONTROL,
        GATEWAY,
        &REMOTE.replace("capacity = 3", "capacity = 3\ndockgate = false"),
    ))
    .unwrap_err();
    assert!(e.mentions("docker.hosts[0].dockgate", "tls://"), "{e}");
}

#[test]
fn certificate_files_are_read_and_parsed_at_load_naming_the_key() {
    let e = load_full(&with(
        "ca_file = \"pki/not-a-cert.pem\"",
        "tls_cert_file = \"pki/control.pem\"",
        "client_cert_file = \"pki/missing.pem\"\nclient_key_file = \"pki/gateway-key.pem\"",
        "",
    ))
    .unwrap_err();
    assert!(e.mentions("pki.ca_file", "no certificate"), "{e}");
    assert!(e.mentions("control.tls_key_file", "required"), "{e}");
    assert!(e.mentions("gateway.client_cert_file", "cannot read"), "{e}");
    // A key that is not the certificate's.
    let e = load_full(&with(
        PKI,
        "tls_cert_file = \"pki/control.pem\"\ntls_key_file = \"pki/gateway-key.pem\"",
        "",
        "",
    ))
    .unwrap_err();
    assert!(e.mentions("control.tls_key_file", ""), "{e}");
    assert_eq!(e.0.len(), 1, "{e}");
}
