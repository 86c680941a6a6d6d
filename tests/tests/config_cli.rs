//! The real binaries refuse bad configuration at start and sign dev tokens.

use std::time::{SystemTime, UNIX_EPOCH};

use e2e::ConfigDir;

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn both_binaries_accept_the_example_config() {
    let dir = ConfigDir::example("");
    assert!(dir.run("termgate-control", &["check"]).status.success());
    let o = dir.run("termgate-gateway", &["--check"]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn a_privileged_profile_stops_both_binaries_naming_profile_and_rule() {
    let dir = ConfigDir::example("[profiles.evil]\nimage = \"x\"\nprivileged = true\n");
    for (bin, check) in [
        ("termgate-control", "check"),
        ("termgate-gateway", "--check"),
    ] {
        let o = dir.run(bin, &[check]);
        assert_eq!(o.status.code(), Some(2), "{bin}");
        let e = stderr(&o);
        assert!(
            e.contains("profiles.evil") && e.contains("not_privileged"),
            "{bin}: {e}"
        );
    }
}

#[test]
fn a_docker_socket_mount_stops_control_naming_profile_and_rule() {
    let extra = "[profiles.sock]\nimage = \"x\"\n[[profiles.sock.mounts]]\nsource = \"/var/run/docker.sock\"\ntarget = \"/var/run/docker.sock\"\n";
    let o = ConfigDir::example(extra).run("termgate-control", &["check"]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(
        e.contains("profiles.sock") && e.contains("no_daemon_socket"),
        "{e}"
    );
}

#[test]
fn seccomp_unconfined_stops_control_naming_profile_and_rule() {
    let o = ConfigDir::example(
        "[profiles.loose]\nimage = \"x\"\nsecurity_opt = [\"seccomp=unconfined\"]\n",
    )
    .run("termgate-control", &["check"]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(
        e.contains("profiles.loose") && e.contains("no_unconfined_profiles"),
        "{e}"
    );
}

#[test]
fn a_misspelled_env_override_stops_the_gateway_naming_key_and_variable() {
    let dir = ConfigDir::example("");
    let o = std::process::Command::new(e2e::binary("termgate-gateway"))
        .arg("--check")
        .arg("--config")
        .arg(dir.config_path())
        .env("TERMGATE__GATEWAY__LISEN", "127.0.0.1:1")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(
        e.contains("gateway.lisen") && e.contains("TERMGATE__GATEWAY__LISEN"),
        "{e}"
    );
}

#[test]
fn token_prints_a_jwt_the_configuration_verifies() {
    let dir = ConfigDir::example("");
    let o = dir.run(
        "termgate-control",
        &["token", "--sub", "alice", "--admin", "--ttl", "120"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let token = String::from_utf8(o.stdout).unwrap();
    let p = dir
        .load()
        .verifier()
        .unwrap()
        .verify(token.trim().as_bytes(), now())
        .unwrap();
    assert_eq!(p.sub.as_str(), "alice");
    assert!(p.admin);
    assert!(p.expires_at <= now() + 120 && p.expires_at + 10 >= now() + 120);
}

#[test]
fn token_refuses_a_bad_sub() {
    let o = ConfigDir::example("").run("termgate-control", &["token", "--sub", "bad sub"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--sub"), "{}", stderr(&o));
}

#[test]
fn token_refuses_a_lifetime_the_gateway_would_refuse() {
    let o = ConfigDir::example("").run(
        "termgate-control",
        &["token", "--sub", "alice", "--ttl", "86401"],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("auth.max_token_lifetime_seconds"),
        "{}",
        stderr(&o)
    );
    assert!(o.stdout.is_empty(), "no token printed");
}

#[test]
fn a_config_without_an_audience_stops_both_binaries_naming_the_key() {
    let dir = ConfigDir::example("");
    let text = std::fs::read_to_string(dir.config_path()).unwrap();
    dir.write_config(&text.replace("audience = \"termgate\"\n", ""));
    for (bin, check) in [
        ("termgate-control", "check"),
        ("termgate-gateway", "--check"),
    ] {
        let o = dir.run(bin, &[check]);
        assert!(
            !o.status.success(),
            "{bin} accepted a config without audience"
        );
        assert!(
            stderr(&o).contains("auth.audience"),
            "{bin}: {}",
            stderr(&o)
        );
    }
}

#[test]
fn token_refuses_clearly_when_only_public_keys_are_configured() {
    let dir = ConfigDir::example("");
    let pem = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../policy/tests/fixtures/ed.pub"
    ))
    .unwrap();
    dir.write("secrets/idp.pub", &pem);
    let text = e2e::EXAMPLE_CONFIG.replace(
        "hs256_secret_file = \"secrets/hs256.key\"",
        "[[auth.public_keys]]\nfile = \"secrets/idp.pub\"\n",
    );
    // Tables must follow plain keys: move the public key entry to the end of [auth].
    let text = text
        .replace("[[auth.public_keys]]\nfile = \"secrets/idp.pub\"\n", "")
        .replace(
            "token_ttl_seconds = 3600\n",
            "token_ttl_seconds = 3600\n[[auth.public_keys]]\nfile = \"secrets/idp.pub\"\n",
        );
    dir.write_config(&text);
    let o = dir.run("termgate-control", &["token", "--sub", "alice"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("no signing key"), "{}", stderr(&o));
}

#[test]
fn oidc_without_a_key_to_sign_sessions_stops_both_binaries_naming_the_key() {
    let dir = ConfigDir::example("");
    let pem = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../policy/tests/fixtures/ed.pub"
    ))
    .unwrap();
    dir.write("secrets/idp.pub", &pem);
    // Verification by a public key alone: the gateway could not sign its sessions.
    let text = e2e::EXAMPLE_CONFIG
        .replace("hs256_secret_file = \"secrets/hs256.key\"\n", "")
        .replace(
            "token_ttl_seconds = 3600\n",
            "token_ttl_seconds = 3600\n[[auth.public_keys]]\nfile = \"secrets/idp.pub\"\n",
        );
    let oidc = "\n[auth.oidc]\nissuer = \"https://idp.example\"\nclient_id = \"termgate\"\nredirect_url = \"http://127.0.0.1:8080/auth/callback\"\n";
    dir.write_config(&format!("{text}{oidc}"));
    for (bin, check) in [
        ("termgate-control", "check"),
        ("termgate-gateway", "--check"),
    ] {
        let o = dir.run(bin, &[check]);
        assert!(
            !o.status.success(),
            "{bin} accepted oidc without a signing key"
        );
        assert!(
            stderr(&o).contains("auth.oidc: the gateway signs"),
            "{bin}: {}",
            stderr(&o)
        );
    }
    // With the HS256 secret the same [auth.oidc] is accepted.
    let dir = ConfigDir::example(oidc);
    for (bin, check) in [
        ("termgate-control", "check"),
        ("termgate-gateway", "--check"),
    ] {
        let o = dir.run(bin, &[check]);
        assert!(o.status.success(), "{bin}: {}", stderr(&o));
    }
}

#[test]
fn a_pool_in_the_clear_off_loopback_stops_control_and_the_gateway_naming_the_key() {
    // Terminals of another machine's pool over plain TCP: anyone on the path opens one.
    let dir = ConfigDir::example(
        "[[docker.hosts]]\nname = \"far\"\nendpoint = \"unix:///var/run/docker.sock\"\n\
         ttyd_pool = [\"10.0.0.5:7681\"]\ncapacity = 2\n",
    );
    for (bin, check) in [
        ("termgate-control", "check"),
        ("termgate-gateway", "--check"),
    ] {
        let o = dir.run(bin, &[check]);
        assert_eq!(o.status.code(), Some(2), "{bin}");
        let e = stderr(&o);
        assert!(
            e.contains("docker.hosts[0].ttyd_pool[0]") && e.contains("tls://10.0.0.5:7681"),
            "{bin}: {e}"
        );
    }
    // The same address over mutual TLS loads for control, which never dials a pool
    // (the gateway's certificate is the gateway's to have).
    let tls = ConfigDir::example(
        "[[docker.hosts]]\nname = \"far\"\nendpoint = \"unix:///var/run/docker.sock\"\n\
         ttyd_pool = [\"tls://10.0.0.5:7681\"]\ncapacity = 2\n",
    );
    let o = tls.run("termgate-control", &["check"]);
    assert!(o.status.success(), "{}", stderr(&o));
}
