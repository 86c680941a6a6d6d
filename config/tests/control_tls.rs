//! Control's API over TLS in the configuration: `control.tls_listen` takes control's
//! certificate, an `https://` `gateway.control_url` takes the CA, and an `http://` one
//! that would send the service token in the clear off loopback refuses the gateway's
//! start unless `gateway.allow_plain_control` accepts it.

use config::{load_from_str_for, ConfigErrors, Part};

mod common;

use common::{dir_with_pki, EXAMPLE};

/// The example loaded as `part` would load it, with `vars` as `TERMGATE__*` overrides.
fn load_as(part: Part, vars: &[(&str, &str)]) -> Result<config::Config, ConfigErrors> {
    let dir = dir_with_pki();
    let vars = vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned()));
    load_from_str_for(EXAMPLE, dir.path(), vars, part)
}

fn load(vars: &[(&str, &str)]) -> Result<config::Config, ConfigErrors> {
    load_as(Part::Gateway, vars)
}

const URL: &str = "TERMGATE__GATEWAY__CONTROL_URL";
const PLAIN_OK: &str = "TERMGATE__GATEWAY__ALLOW_PLAIN_CONTROL";
const CA: &str = "TERMGATE__PKI__CA_FILE";

#[test]
fn a_plain_control_url_off_loopback_is_refused_naming_the_key() {
    for url in [
        "http://10.0.0.1:7070",
        "http://control:7070",
        "http://[fd00::1]:7070",
        // A name that spells a loopback address but resolves wherever its DNS says.
        "http://127.0.0.1.nip.io:7070",
    ] {
        let e = load(&[(URL, url)]).expect_err(url);
        assert!(
            e.mentions("gateway.control_url", "in the clear")
                && e.mentions("gateway.control_url", "allow_plain_control"),
            "{url}: {e}"
        );
        // The gateway's own `--check` loads as every part does: refused there too.
        let e = load_as(Part::All, &[(URL, url)]).expect_err(url);
        assert!(e.mentions("gateway.control_url", "in the clear"), "{e}");
    }
}

#[test]
fn a_plain_control_url_on_loopback_loads() {
    for url in [
        "http://127.0.0.1:7070",
        "http://127.9.9.9:7070",
        "http://localhost:7070",
        "http://[::1]:7070",
    ] {
        let c = load(&[(URL, url)]).unwrap_or_else(|e| panic!("{url}: {e}"));
        assert_eq!(c.control_api(), Some((false, &url["http://".len()..])));
    }
}

#[test]
fn the_opt_in_accepts_a_plain_control_url_off_loopback() {
    for url in ["http://control:7070", "http://10.0.0.1:7070"] {
        let c = load(&[(URL, url), (PLAIN_OK, "true")]).unwrap_or_else(|e| panic!("{url}: {e}"));
        assert!(c.gateway.allow_plain_control);
    }
    // Control never sends the service token to the gateway's control_url: a shared file
    // with that URL loads for control without the opt-in.
    load_as(Part::Control, &[(URL, "http://control:7070")]).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn an_https_control_url_needs_the_ca_naming_pki_ca_file() {
    let url = "https://10.0.0.1:7443";
    let e = load(&[(URL, url)]).unwrap_err();
    assert!(e.mentions("pki.ca_file", "https://"), "{e}");
    assert!(
        !e.0.iter().any(|e| e.key == "gateway.control_url"),
        "TLS off loopback is what the refusal asks for: {e}"
    );
    let c = load(&[(URL, url), (CA, "pki/ca.pem")]).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.control_api(), Some((true, "10.0.0.1:7443")));
    let c = load(&[(URL, "https://control.internal:7443"), (CA, "pki/ca.pem")])
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.control_api(), Some((true, "control.internal:7443")));
}

#[test]
fn a_control_url_that_is_not_a_scheme_host_and_port_is_refused() {
    for url in [
        "ftp://10.0.0.1:7070",
        "https://10.0.0.1",
        "http://127.0.0.1:7070/api",
        "http://user@127.0.0.1:7070",
        "http://:7070",
        "http://127.0.0.1:0",
        "http://::1:7070",
    ] {
        let e = load(&[(URL, url), (CA, "pki/ca.pem")]).expect_err(url);
        assert!(e.mentions("gateway.control_url", "host:port"), "{url}: {e}");
    }
}

#[test]
fn tls_listen_needs_controls_certificate_naming_the_key() {
    let listen = [("TERMGATE__CONTROL__TLS_LISTEN", "127.0.0.1:7443")];
    for part in [Part::Control, Part::All] {
        let e = load_as(part, &listen).unwrap_err();
        assert!(
            e.mentions("control.tls_listen", "control.tls_cert_file"),
            "{e}"
        );
    }
    let with_cert = [
        listen[0],
        ("TERMGATE__CONTROL__TLS_CERT_FILE", "pki/control.pem"),
        ("TERMGATE__CONTROL__TLS_KEY_FILE", "pki/control-key.pem"),
    ];
    let c = load_as(Part::Control, &with_cert).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.control.tls_listen.as_deref(), Some("127.0.0.1:7443"));
    let e = load_as(
        Part::Control,
        &[
            ("TERMGATE__CONTROL__TLS_LISTEN", "control:7443"),
            with_cert[1],
            with_cert[2],
        ],
    )
    .unwrap_err();
    assert!(e.mentions("control.tls_listen", "not an address"), "{e}");
}
