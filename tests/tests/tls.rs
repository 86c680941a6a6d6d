//! The TLS listener: its terminals run in the gateway's own tunnel like a plain
//! listener's (typing, the close frame that says why a terminal ended), and a renewed
//! certificate is used by new handshakes without a restart while open terminals stay.
//! Real binaries, real ttyd, real containers, a real TLS client (rustls) that trusts
//! only the certificate the gateway must present.

use std::time::{Duration, Instant};

use e2e::stack::{http, wait_for, GatewayStack};
use e2e::term::{Target, Terminal};
use e2e::tls::{presented, SelfSigned};

const T: Duration = Duration::from_secs(20);

/// Opens `session`'s terminal as `token` at `target`, once the gateway knows the route,
/// and waits until its shell spoke.
fn open(target: &Target, session: &str, token: &str) -> Terminal {
    let bearer = format!("Bearer {token}");
    let t = wait_for("the session's terminal", T, || {
        match Terminal::connect(
            target.clone(),
            &format!("/s/{session}/ws"),
            &[("Authorization", &bearer)],
        ) {
            Ok(t) => Some(t),
            // The gateway learns a new route from control's feed a moment later.
            Err(e) if e.status() == Some(404) => None,
            Err(e) => panic!("open terminal: {e:?}"),
        }
    });
    t.wait_title(T).expect("the shell speaks");
    t
}

/// Types `echo` of a mark and waits for the shell's answer.
fn echo(t: &Terminal, mark: &str) {
    t.send_input(format!("echo {mark}-$((6*7))\r").as_bytes())
        .expect("the terminal takes input");
    t.read_until(&format!("{mark}-42"), T)
        .unwrap_or_else(|e| panic!("the shell answers {mark}: {e}"));
}

#[test]
fn a_tls_terminal_types_and_its_end_closes_it_with_the_reason() {
    let mut stack = GatewayStack::start("");
    let certs = SelfSigned::generate(stack.control.dir.dir.path(), "gateway");
    let n = stack.spawn_tls_gateway(&certs, &[]);
    let token = stack.control.token("alice", false);
    let session = stack.control.create(&token);
    let id = session["id"].as_str().unwrap().to_owned();

    let t = open(&stack.tls_target(n, certs.pin()), &id, &token);
    echo(&t, "tls");
    // Bytes both ways, several times: the tunnel flushes what rustls holds.
    for i in 0..20 {
        echo(&t, &format!("again{i}"));
    }

    let asked = Instant::now();
    let gone = http(
        "DELETE",
        &stack.url(0, &format!("/api/sessions/{id}")),
        Some(&token),
        None,
    )
    .unwrap();
    assert_eq!(gone.status, 204, "{}", gone.text);
    t.wait_closed(T).expect("the terminal closes");
    let took = t.closed_at().unwrap() - asked;
    assert_eq!(
        t.close_reason().as_deref(),
        Some("close frame 1000 \"termgate: this session was ended\""),
        "the page is told why"
    );
    println!("TLS terminal closed with its reason {took:?} after the end");
    assert!(took < Duration::from_secs(2), "closed after {took:?}");

    // The TLS gateway logs the terminal as its own tunnel does: one access line with
    // both byte counts and who closed it.
    let line = wait_for("the terminal's access line", T, || {
        stack.gateways[n]
            .log_text()
            .lines()
            .find(|l| l.contains(" access:") && l.contains("status=101") && l.contains(&id))
            .map(str::to_owned)
    });
    assert!(line.contains("route_removed"), "{line}");
    assert!(!line.contains("bytes_down=0 "), "{line}");
    assert!(!line.contains("bytes_up=0 "), "{line}");
}

#[test]
fn a_renewed_certificate_serves_new_handshakes_and_open_terminals_stay() {
    let mut stack = GatewayStack::start("");
    let dir = stack.control.dir.dir.path().to_owned();
    let certs = SelfSigned::generate(&dir, "gateway");
    let first = certs.der();
    let n = stack.spawn_tls_gateway(&certs, &[]);
    let addr = ([127, 0, 0, 1], stack.gateways[n].port).into();
    assert_eq!(presented(addr).unwrap(), first);
    let token = stack.control.token("alice", false);
    let session = stack.control.create(&token);
    let id = session["id"].as_str().unwrap().to_owned();
    let old = open(&stack.tls_target(n, certs.pin()), &id, &token);
    echo(&old, "before");

    // A renewal as certbot makes it: new files renamed into place.
    certs.renew("gateway-renewed");
    let renewed = certs.der();
    assert_ne!(renewed, first);
    let start = Instant::now();
    wait_for(
        "new handshakes to present the renewed certificate",
        T,
        || (presented(addr).ok()? == renewed).then_some(()),
    );
    println!("renewed certificate in use after {:?}", start.elapsed());
    echo(&old, "after-renewal");
    let new = open(&stack.tls_target(n, certs.pin()), &id, &token);
    echo(&new, "renewed");

    // A renewal that cannot be used (a key of another certificate) keeps the one in use.
    let other = SelfSigned::generate(&dir, "other");
    std::fs::copy(&other.key, &certs.key).unwrap();
    wait_for("the refused renewal in the log", T, || {
        stack.gateways[n]
            .log_text()
            .contains("the renewed TLS certificate could not be loaded")
            .then_some(())
    });
    assert_eq!(presented(addr).unwrap(), renewed);
    echo(&old, "after-bad-renewal");

    // SIGHUP asks for a reload at once (of files that did not change since), and does
    // not end the gateway.
    let refusals = || {
        stack.gateways[n]
            .log_text()
            .matches("the renewed TLS certificate could not be loaded")
            .count()
    };
    let before = refusals();
    stack.gateways[n].signal("HUP");
    wait_for("the SIGHUP reload in the log", T, || {
        (refusals() > before).then_some(())
    });
    assert_eq!(presented(addr).unwrap(), renewed);
    echo(&old, "after-sighup");
    echo(&new, "after-sighup-new");
}

#[test]
fn a_certificate_that_cannot_be_loaded_refuses_the_start_naming_the_key() {
    let mut stack = GatewayStack::start("");
    let dir = stack.control.dir.dir.path().to_owned();
    let certs = SelfSigned::generate(&dir, "gateway");
    let other = SelfSigned::generate(&dir, "other");
    let mismatched = SelfSigned {
        cert: certs.cert.clone(),
        key: other.key.clone(),
    };
    let mut child = std::process::Command::new(e2e::binary("termgate-gateway"))
        .arg("--config")
        .arg(stack.control.dir.config_path())
        .env("TERMGATE__GATEWAY__TLS_CERT_FILE", &mismatched.cert)
        .env("TERMGATE__GATEWAY__TLS_KEY_FILE", &mismatched.key)
        .env("TERMGATE__GATEWAY__LISTEN", "127.0.0.1:0")
        .env("TERMGATE__GATEWAY__ADMIN_LISTEN", "127.0.0.1:0")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // A gateway that wrongly took the key would serve for ever: bounded, then killed.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the gateway started with a key that does not match its certificate");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(!status.success());
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    let err = stderr;
    assert!(err.contains("gateway.tls_key_file"), "{err}");
    // The stack's own gateway is untouched.
    let _ = stack.spawn_gateway(&[]);
}
