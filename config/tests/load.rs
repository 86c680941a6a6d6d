//! Loading, overriding and refusing configuration.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use config::{load, load_from_str, ConfigErrors, KEYS};

const EXAMPLE: &str = include_str!("../termgate.example.toml");

/// A directory with the secret files the example names.
fn secrets_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("secrets")).unwrap();
    std::fs::write(dir.path().join("secrets/hs256.key"), "k".repeat(48) + "\n").unwrap();
    std::fs::write(dir.path().join("secrets/service.token"), "s".repeat(32)).unwrap();
    dir
}

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn load_text(text: &str, vars: &[(&str, &str)]) -> Result<config::Config, ConfigErrors> {
    let dir = secrets_dir();
    load_from_str(text, dir.path(), env(vars))
}

fn example_with_profile(extra: &str) -> String {
    format!("{EXAMPLE}\n[profiles.evil]\nimage = \"termgate/session:dev\"\n{extra}\n")
}

#[test]
fn the_example_config_loads() {
    let dir = secrets_dir();
    let path = dir.path().join("termgate.toml");
    std::fs::write(&path, EXAMPLE).unwrap();
    let c = load(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.gateway.listen, "127.0.0.1:8080");
    assert_eq!(c.quota.per_user, 3);
    assert_eq!(c.profiles["default"].options["shell"].values, ["sh", "ash"]);
    assert!(c.verifier().is_ok());
    assert!(c.signer().is_some());
    assert_eq!(
        c.secrets().service_token.as_ref().unwrap().expose(),
        "s".repeat(32).as_bytes()
    );
    assert_eq!(
        c.resolve(Path::new("store")),
        std::fs::canonicalize(dir.path()).unwrap().join("store")
    );
}

#[test]
fn env_overrides_every_level_with_the_existing_type() {
    let c = load_text(
        EXAMPLE,
        &[
            ("TERMGATE__GATEWAY__LISTEN", "127.0.0.1:18080"),
            ("TERMGATE__QUOTA__PER_USER", "7"),
            ("TERMGATE__GATEWAY__CLOSE_ON_TOKEN_EXPIRY", "false"),
            (
                "TERMGATE__GATEWAY__ALLOWED_ORIGINS",
                "[\"https://t.example.com\"]",
            ),
            ("TERMGATE__PROFILES__DEFAULT__MEMORY_MB", "128"),
            ("TERMGATE__PROFILES__DEFAULT__CPUS", "0.25"),
            ("TERMGATE__CONTROL__DOCKER_HOST", "unix:///run/docker.sock"),
            ("TERMGATE__INSTANCE", "ci-1"),
            ("UNRELATED", "ignored"),
        ],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.gateway.listen, "127.0.0.1:18080");
    assert_eq!(c.quota.per_user, 7);
    assert!(!c.gateway.close_on_token_expiry);
    assert_eq!(c.gateway.allowed_origins, ["https://t.example.com"]);
    assert_eq!(c.profiles["default"].memory_mb, 128);
    assert_eq!(c.profiles["default"].cpus, 0.25);
    assert_eq!(
        c.control.docker_host.as_deref(),
        Some("unix:///run/docker.sock")
    );
    assert_eq!(c.instance, "ci-1");
}

#[test]
fn a_bad_env_override_names_the_key_and_the_variable() {
    let e = load_text(EXAMPLE, &[("TERMGATE__QUOTA__PER_USER", "lots")]).unwrap_err();
    assert!(
        e.mentions("quota.per_user", "TERMGATE__QUOTA__PER_USER"),
        "{e}"
    );
    let e = load_text(EXAMPLE, &[("TERMGATE__GATEWAY__LISEN", "127.0.0.1:1")]).unwrap_err();
    assert!(e.mentions("gateway.lisen", "unknown key"), "{e}");
    assert!(
        e.mentions("gateway.lisen", "TERMGATE__GATEWAY__LISEN"),
        "{e}"
    );
}

#[test]
fn a_sign_in_url_that_could_send_elsewhere_is_refused_naming_the_key() {
    for bad in [
        "//evil.example/",
        "sign-in",
        "/?x=1",
        "/a b",
        "javascript:alert(1)",
    ] {
        let e = load_text(EXAMPLE, &[("TERMGATE__CONTROL__AUTHZ_SIGN_IN_URL", bad)]).unwrap_err();
        assert!(
            e.mentions("control.authz_sign_in_url", "must be"),
            "{bad}: {e}"
        );
    }
    for good in ["/", "/login", "https://term.example.com/"] {
        load_text(EXAMPLE, &[("TERMGATE__CONTROL__AUTHZ_SIGN_IN_URL", good)])
            .unwrap_or_else(|e| panic!("{good}: {e}"));
    }
}

#[test]
fn unknown_keys_are_refused_by_name_and_reported_together() {
    let text = EXAMPLE
        .replace("[quota]\n", "[quota]\nper_usr = 3\n")
        .replace("[store]\n", "[store]\npth = \"x\"\n")
        .replace("leeway_seconds = 30", "leeway_seconds = \"thirty\"");
    let e = load_text(&text, &[]).unwrap_err();
    assert!(e.mentions("quota.per_usr", "unknown key"), "{e}");
    assert!(e.mentions("store.pth", "unknown key"), "{e}");
    assert!(e.mentions("auth.leeway_seconds", "invalid type"), "{e}");
}

#[test]
fn semantic_mistakes_are_reported_together_naming_keys() {
    let text = EXAMPLE
        .replace("listen = \"127.0.0.1:8080\"", "listen = \"localhost-ish\"")
        .replace("per_user = 3", "per_user = 0")
        .replace(
            "\"http://localhost:8080\"",
            "\"http://localhost:8080/path\"",
        )
        .replace("default = \"sh\"", "default = \"zsh\"");
    let e = load_text(&text, &[]).unwrap_err();
    assert!(e.mentions("gateway.listen", "not an address"), "{e}");
    assert!(e.mentions("quota.per_user", "positive"), "{e}");
    assert!(e.mentions("gateway.allowed_origins[1]", "malformed"), "{e}");
    assert!(
        e.mentions(
            "profiles.default.options.shell.default",
            "not one of values"
        ),
        "{e}"
    );
    assert!(e.0.len() >= 4);
}

#[test]
fn missing_secret_file_names_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let e = load_from_str(EXAMPLE, dir.path(), Vec::new()).unwrap_err();
    assert!(e.mentions("auth.hs256_secret_file", "cannot read"), "{e}");
    assert!(
        e.mentions("control.service_token_file", "cannot read"),
        "{e}"
    );
}

#[test]
fn short_hs256_secret_is_refused() {
    let dir = secrets_dir();
    std::fs::write(dir.path().join("secrets/hs256.key"), "short").unwrap();
    let e = load_from_str(EXAMPLE, dir.path(), Vec::new()).unwrap_err();
    assert!(e.mentions("auth.hs256_secret_file", "at least 32"), "{e}");
}

#[test]
fn two_key_sources_are_refused() {
    let text = EXAMPLE.replace(
        "# jwks_file = \"secrets/jwks.json\"",
        "jwks_file = \"secrets/jwks.json\"",
    );
    let e = load_text(&text, &[]).unwrap_err();
    assert!(e.mentions("auth", "exclusive"), "{e}");
}

#[test]
fn a_privileged_profile_is_refused_naming_profile_and_rule() {
    let e = load_text(&example_with_profile("privileged = true"), &[]).unwrap_err();
    assert!(
        e.mentions(
            "profiles.evil",
            "profile \"evil\" breaks red line `not_privileged`"
        ),
        "{e}"
    );
}

#[test]
fn a_docker_socket_mount_is_refused_naming_profile_and_rule() {
    let extra = "[[profiles.evil.mounts]]\nsource = \"/var/run/docker.sock\"\ntarget = \"/var/run/docker.sock\"";
    let e = load_text(&example_with_profile(extra), &[]).unwrap_err();
    assert!(
        e.mentions("profiles.evil", "breaks red line `no_daemon_socket`"),
        "{e}"
    );
    // The dockerd-side path is checked too, not only the path control sees.
    let extra = "[[profiles.evil.mounts]]\nsource = \"/srv/harmless\"\nhost_source = \"/run/docker.sock\"\ntarget = \"/d\"";
    let e = load_text(&example_with_profile(extra), &[]).unwrap_err();
    assert!(
        e.mentions("profiles.evil", "breaks red line `no_daemon_socket`"),
        "{e}"
    );
}

#[test]
fn seccomp_unconfined_is_refused_naming_profile_and_rule() {
    let e = load_text(
        &example_with_profile("security_opt = [\"seccomp=unconfined\"]"),
        &[],
    )
    .unwrap_err();
    assert!(
        e.mentions("profiles.evil", "breaks red line `no_unconfined_profiles`"),
        "{e}"
    );
}

#[test]
fn other_weakenings_are_refused_by_rule() {
    for (extra, rule) in [
        ("cap_add = [\"SYS_ADMIN\"]", "cap_drop_all"),
        ("network = \"host\"", "no_host_namespaces"),
        ("pid_mode = \"host\"", "no_host_namespaces"),
        ("user = \"root\"", "non_root_user"),
        ("readonly_rootfs = false", "readonly_rootfs"),
        ("devices = [\"/dev/kvm\"]", "no_devices"),
    ] {
        let e = load_text(&example_with_profile(extra), &[]).unwrap_err();
        assert!(
            e.mentions("profiles.evil", &format!("`{rule}`")),
            "{extra}: {e}"
        );
    }
}

#[test]
fn namespace_modes_outside_the_known_ones_are_refused_naming_the_key() {
    for (extra, key) in [
        ("ipc_mode = \"shareable\"", "profiles.evil.ipc_mode"),
        ("pid_mode = \"container:abc\"", "profiles.evil.pid_mode"),
    ] {
        let e = load_text(&example_with_profile(extra), &[]).unwrap_err();
        assert!(e.mentions(key, "unknown namespace mode"), "{extra}: {e}");
    }
    let e = load_text(&example_with_profile("cgroupns_mode = \"host\""), &[]).unwrap_err();
    assert!(
        e.mentions("profiles.evil.cgroupns_mode", "unknown key"),
        "{e}"
    );
    let c = load_text(
        &example_with_profile("pid_mode = \"private\"\nuts_mode = \"\""),
        &[],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let spec = c.profiles["evil"].sandbox_spec(None);
    assert_eq!(
        spec.namespace_modes,
        std::collections::BTreeMap::from([
            (policy::Namespace::Pid, policy::NamespaceMode::Private),
            (policy::Namespace::Uts, policy::NamespaceMode::Default),
            // Always, whatever the profile says.
            (policy::Namespace::Cgroup, policy::NamespaceMode::Private),
        ])
    );
}

#[test]
fn a_profile_breaking_several_rules_reports_each() {
    let e = load_text(
        &example_with_profile(
            "privileged = true\nsecurity_opt = [\"apparmor=unconfined\"]\nuser = \"0\"",
        ),
        &[],
    )
    .unwrap_err();
    for rule in ["not_privileged", "no_unconfined_profiles", "non_root_user"] {
        assert!(e.mentions("profiles.evil", rule), "{rule}: {e}");
    }
}

#[test]
fn missing_required_keys_are_named() {
    let e = load_text(
        &example_with_profile("").replace("image = \"termgate/session:dev\"\n\n", "\n"),
        &[],
    )
    .unwrap_err();
    assert!(e.mentions("profiles.evil.image", "missing"), "{e}");
    let e = load_text("[gateway]\n", &[]).unwrap_err();
    assert!(e.mentions("auth", "missing"), "{e}");
}

#[test]
fn invalid_toml_says_where() {
    let e = load_text("[auth\nissuer = 1", &[]).unwrap_err();
    assert!(e.mentions("<file>", "line 1"), "{e}");
}

#[test]
fn debug_output_never_contains_secrets() {
    let dir = secrets_dir();
    std::fs::write(dir.path().join("secrets/hs256.key"), "TOPSECRET-".repeat(5)).unwrap();
    std::fs::write(
        dir.path().join("secrets/service.token"),
        "SERVICETOKEN-".repeat(3),
    )
    .unwrap();
    let c = load_from_str(EXAMPLE, dir.path(), Vec::new()).unwrap();
    let dbg = format!("{c:?}");
    assert!(
        !dbg.contains("TOPSECRET") && !dbg.contains("SERVICETOKEN"),
        "{dbg}"
    );
    assert!(dbg.contains("redacted"));
}

#[test]
fn default_origins_follow_the_listener() {
    let text = EXAMPLE.replace(
        "allowed_origins = [\"http://127.0.0.1:8080\", \"http://localhost:8080\"]\n",
        "",
    );
    let c = load_text(&text, &[("TERMGATE__GATEWAY__LISTEN", "127.0.0.1:18080")]).unwrap();
    let o: Vec<String> = c.gateway_origins().iter().map(|o| o.to_string()).collect();
    assert_eq!(o, ["http://127.0.0.1:18080", "http://localhost:18080"]);
}

/// Every key path a TOML text defines, as segments: tables, their keys, and the keys
/// of tables inside arrays (`[[auth.public_keys]]`). `None` when it is not TOML.
fn key_paths(text: &str) -> Option<BTreeSet<Vec<String>>> {
    fn walk(prefix: &mut Vec<String>, table: &toml::Table, out: &mut BTreeSet<Vec<String>>) {
        for (key, value) in table {
            prefix.push(key.clone());
            out.insert(prefix.clone());
            match value {
                toml::Value::Table(t) => walk(prefix, t, out),
                toml::Value::Array(items) => {
                    for item in items {
                        if let toml::Value::Table(t) = item {
                            walk(prefix, t, out);
                        }
                    }
                }
                _ => {}
            }
            prefix.pop();
        }
    }
    let table: toml::Table = text.parse().ok()?;
    let mut out = BTreeSet::new();
    walk(&mut Vec::new(), &table, &mut out);
    Some(out)
}

/// The key paths the example shows commented out: those a reader gets by uncommenting
/// one comment line where it stands. Prose comments are not TOML and add nothing; a
/// commented key in the wrong section adds the path it would really have there.
fn commented_key_paths(text: &str) -> BTreeSet<Vec<String>> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = BTreeSet::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(body) = line.trim_start().strip_prefix('#') else {
            continue;
        };
        let mut uncommented = lines.clone();
        uncommented[i] = body.trim_start();
        if let Some(paths) = key_paths(&uncommented.join("\n")) {
            out.extend(paths);
        }
    }
    out
}

/// Whether `path` is the reference key `key`, where `<name>` stands for any profile.
fn is_key(path: &[String], key: &str) -> bool {
    let key: Vec<&str> = key.split('.').collect();
    path.len() == key.len() && path.iter().zip(&key).all(|(p, k)| *k == "<name>" || p == k)
}

#[test]
fn every_key_of_the_reference_is_in_the_example_or_documented_as_optional() {
    // The example is the complete single-host config: every key appears in it at its
    // real place, set or (when optional) commented out; `profiles.<name>.*` keys in at
    // least one profile. Parsed, not searched: a leaf name also matches prose and keys
    // of other sections (`description`, `listen`, `max_body_bytes`).
    let set = key_paths(EXAMPLE).expect("the example is TOML");
    let commented = commented_key_paths(EXAMPLE);
    for (key, _) in KEYS {
        assert!(
            set.iter().any(|p| is_key(p, key)) || commented.iter().any(|p| is_key(p, key)),
            "{key} is neither set nor shown commented out at its place in termgate.example.toml"
        );
    }
}

#[test]
fn commented_keys_are_found_only_where_they_would_take_effect() {
    let text = "[a]\nx = 1\n# y = 2\n# Prose: z = 3, not a key.\n[b]\n";
    assert!(key_paths(text).unwrap().iter().all(|p| !is_key(p, "a.y")));
    let commented = commented_key_paths(text);
    assert!(commented.iter().any(|p| is_key(p, "a.y")));
    assert!(!commented.iter().any(|p| is_key(p, "b.y")));
    assert!(!commented.iter().any(|p| p.last().is_some_and(|k| k == "z")));
    assert!(is_key(
        &["profiles".into(), "p".into(), "cpus".into()],
        "profiles.<name>.cpus"
    ));
    assert!(!is_key(
        &["store".into(), "cpus".into()],
        "profiles.<name>.cpus"
    ));
}

#[test]
fn the_reference_page_lists_every_key_with_its_default() {
    let reference = include_str!("../../docs/reference.md");
    for (key, default) in KEYS {
        let default = if default.is_empty() {
            "—".to_owned()
        } else {
            format!("`{default}`")
        };
        let row = format!("| `{key}` | {default} |");
        assert!(
            reference.contains(&row),
            "docs/reference.md lacks the row {row}"
        );
    }
    let rows = reference.lines().filter(|l| l.starts_with("| `")).count();
    assert_eq!(
        rows,
        KEYS.len(),
        "docs/reference.md has rows for keys the config does not have"
    );
}

#[test]
fn the_documented_defaults_are_the_real_defaults() {
    // `[auth.oidc]` with only its required keys, so its defaults are checked too.
    let minimal =
        "[auth]\naudience = \"a\"\nhs256_secret_file = \"secrets/hs256.key\"\n[auth.oidc]\nissuer = \"https://idp.example\"\nclient_id = \"c\"\nredirect_url = \"https://t.example/auth/callback\"\n[profiles.p]\nimage = \"i\"\n";
    let dir = secrets_dir();
    let base = format!(
        "{:?}",
        load_from_str(minimal, dir.path(), Vec::new()).unwrap()
    );
    for (key, default) in KEYS {
        if default.is_empty() {
            continue;
        }
        let mut table: toml::Table = minimal.parse().unwrap();
        let path: Vec<&str> = key
            .split('.')
            .map(|s| if s == "<name>" { "p" } else { s })
            .collect();
        let value: toml::Value = format!("v = {default}")
            .parse::<toml::Table>()
            .unwrap()
            .remove("v")
            .unwrap();
        let mut node = &mut table;
        for seg in &path[..path.len() - 1] {
            node = node
                .entry(seg.to_string())
                .or_insert_with(|| toml::Value::Table(Default::default()))
                .as_table_mut()
                .unwrap();
        }
        node.insert(path[path.len() - 1].to_string(), value);
        let explicit = load_from_str(&toml::to_string(&table).unwrap(), dir.path(), Vec::new())
            .unwrap_or_else(|e| panic!("{key} = {default}: {e}"));
        assert_eq!(
            format!("{explicit:?}"),
            base,
            "documented default of {key} is not the real one"
        );
    }
}

#[test]
fn an_audience_is_required_unless_any_audience_is_allowed_explicitly() {
    let dir = secrets_dir();
    let without =
        "[auth]\nhs256_secret_file = \"secrets/hs256.key\"\n[profiles.p]\nimage = \"i\"\n";
    let e = load_from_str(without, dir.path(), Vec::new()).unwrap_err();
    assert!(format!("{e}").contains("auth.audience: required"), "{e}");
    let allowed = without.replace("[auth]\n", "[auth]\nallow_any_audience = true\n");
    load_from_str(&allowed, dir.path(), Vec::new()).expect("explicitly allowed");
    let both = without.replace(
        "[auth]\n",
        "[auth]\naudience = \"a\"\nallow_any_audience = true\n",
    );
    let e = load_from_str(&both, dir.path(), Vec::new()).unwrap_err();
    assert!(format!("{e}").contains("auth.allow_any_audience"), "{e}");
    let long = without.replace(
        "[auth]\n",
        "[auth]\naudience = \"a\"\ntoken_ttl_seconds = 90000\n",
    );
    let e = load_from_str(&long, dir.path(), Vec::new()).unwrap_err();
    assert!(format!("{e}").contains("auth.token_ttl_seconds"), "{e}");
}

#[test]
fn a_profile_on_a_service_network_is_refused_naming_profile_and_rule() {
    let dir = secrets_dir();
    let base = "[auth]\naudience = \"a\"\nhs256_secret_file = \"secrets/hs256.key\"\n[control]\nservice_networks = [\"termgate_internal\"]\n[profiles.p]\nimage = \"i\"\n";
    load_from_str(base, dir.path(), Vec::new()).expect("network none is fine");
    let own = format!("{base}network = \"termgate_internal\"\n");
    let e = load_from_str(&own, dir.path(), Vec::new()).unwrap_err();
    let text = format!("{e}");
    assert!(
        text.contains("profiles.p.network") && text.contains("isolated_network"),
        "{text}"
    );
    let other = format!("{base}network = \"sessions_only\"\n");
    load_from_str(&other, dir.path(), Vec::new()).expect("another named network is fine");
}

#[test]
fn targets_load_with_their_credential_resolved_and_mistakes_name_the_key() {
    let dir = secrets_dir();
    std::fs::write(dir.path().join("secrets/ttyd.cred"), "user:pw\n").unwrap();
    let base = "[auth]\naudience = \"a\"\nhs256_secret_file = \"secrets/hs256.key\"\n[profiles.p]\nimage = \"i\"\n";
    let good = format!(
        "{base}[[targets]]\nname = \"build-box\"\nupstream = \"http://10.0.0.5:7681/shell\"\nusers = [\"alice\"]\ncredential = {{ basic_file = \"secrets/ttyd.cred\" }}\n\
         [[targets]]\nname = \"ops\"\nupstream = \"unix:/run/ttyd.sock\"\nroles = [\"ops\"]\ncredential = {{ header = \"X-Remote-User\" }}\n"
    );
    let c = load_from_str(&good, dir.path(), Vec::new()).expect("valid targets");
    assert_eq!(c.targets.len(), 2);
    match c.target_credential(&c.targets[0]).unwrap() {
        Some(policy::feed::TargetCredential::BasicFile { path }) => {
            assert_eq!(
                std::path::Path::new(&path),
                dir.path().join("secrets/ttyd.cred")
            )
        }
        other => panic!("{other:?}"),
    }
    let bad = format!(
        "{base}[[targets]]\nname = \"Build Box\"\nupstream = \"ftp://x\"\nusers = [\"a b\"]\ncredential = {{ basic_file = \"secrets/missing\" }}\n\
         [[targets]]\nname = \"two\"\nupstream = \"http://h:1\"\ncredential = {{ basic_file = \"f\", header = \"H\" }}\n\
         [[targets]]\nname = \"two\"\nupstream = \"http://h:1\"\nusers = [\"alice\"]\n"
    );
    let text = load_from_str(&bad, dir.path(), Vec::new())
        .unwrap_err()
        .to_string();
    for key in [
        "targets[0].name",
        "targets[0].upstream",
        "targets[0].users[0]",
        "targets[0].credential.basic_file",
        "targets[1].credential",
        "targets[1].users",
        "targets[2].name",
    ] {
        assert!(text.contains(key), "{key} is not named in:\n{text}");
    }
}

const TWO_HOSTS: &str = r#"
[[docker.hosts]]
name = "main"
endpoint = "unix:///var/run/docker.sock"
ttyd_pool = ["unix:/run/termgate/main.sock"]
capacity = 10

[[docker.hosts]]
name = "gpu-1"
endpoint = "tcp://10.0.0.5:2375"
allow_plain_tcp = true
ttyd_pool = ["127.0.0.5:7681", "127.0.0.6:7681"]
capacity = 2
"#;

#[test]
fn without_docker_hosts_there_is_one_implicit_local_host_at_control_docker_host() {
    let c = load_text(
        EXAMPLE,
        &[("TERMGATE__CONTROL__DOCKER_HOST", "unix:///run/d.sock")],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let hosts = c.docker_hosts();
    assert_eq!(hosts.len(), 1);
    assert_eq!(hosts[0].name, "local");
    assert_eq!(hosts[0].endpoint.as_deref(), Some("unix:///run/d.sock"));
    assert!(hosts[0].implicit && hosts[0].ttyd_pool.is_empty());
}

#[test]
fn docker_hosts_load_in_order_with_their_pools_and_capacities() {
    let c = load_text(&format!("{EXAMPLE}\n{TWO_HOSTS}"), &[]).unwrap_or_else(|e| panic!("{e}"));
    let hosts = c.docker_hosts();
    let names: Vec<&str> = hosts.iter().map(|h| h.name.as_str()).collect();
    assert_eq!(names, ["main", "gpu-1"]);
    assert_eq!(hosts[1].ttyd_pool, ["127.0.0.5:7681", "127.0.0.6:7681"]);
    assert_eq!(hosts[1].capacity, 2);
    assert!(!hosts[0].implicit && hosts[1].tls.is_none());
}

#[test]
fn bad_docker_hosts_are_refused_naming_each_key() {
    let text = format!(
        "{EXAMPLE}\n{TWO_HOSTS}\n{}",
        r#"
[[docker.hosts]]
name = "main"
endpoint = "ssh://x"
ttyd_pool = ["unix:relative", "nope"]
capacity = 0

[[docker.hosts]]
name = "Bad_Name"
endpoint = "unix:///x.sock"
tls_ca_file = "secrets/hs256.key"
ttyd_pool = []
capacity = 1
"#
    );
    let e = load_text(&text, &[("TERMGATE__CONTROL__DOCKER_HOST", "unix:///x")]).unwrap_err();
    assert!(e.mentions("docker.hosts[2].name", "unique"), "{e}");
    assert!(
        e.mentions("docker.hosts[2].endpoint", "unix:// or tcp://"),
        "{e}"
    );
    assert!(
        e.mentions("docker.hosts[2].ttyd_pool[0]", "absolute"),
        "{e}"
    );
    assert!(
        e.mentions("docker.hosts[2].ttyd_pool[1]", "host:port"),
        "{e}"
    );
    assert!(e.mentions("docker.hosts[2].capacity", "positive"), "{e}");
    assert!(e.mentions("docker.hosts[3].name", "a-z"), "{e}");
    assert!(e.mentions("docker.hosts[3].endpoint", "tcp://"), "{e}");
    assert!(
        e.mentions("docker.hosts[3].tls_cert_file", "required"),
        "{e}"
    );
    assert!(
        e.mentions("docker.hosts[3].tls_key_file", "required"),
        "{e}"
    );
    assert!(
        e.mentions("docker.hosts[3].ttyd_pool", "at least one"),
        "{e}"
    );
    assert!(e.mentions("control.docker_host", "docker.hosts"), "{e}");
}

#[test]
fn a_tcp_host_without_tls_is_refused_unless_plain_tcp_is_allowed() {
    let host = |extra: &str| {
        format!(
            "{EXAMPLE}\n[[docker.hosts]]\nname = \"far\"\nendpoint = \"tcp://10.0.0.9:2375\"\n\
             {extra}ttyd_pool = [\"127.0.0.9:7681\"]\ncapacity = 1\n"
        )
    };
    let e = load_text(&host(""), &[]).unwrap_err();
    assert!(e.mentions("docker.hosts[0].endpoint", "tls_ca_file"), "{e}");
    assert!(
        e.mentions("docker.hosts[0].endpoint", "allow_plain_tcp"),
        "{e}"
    );
    let c = load_text(&host("allow_plain_tcp = true\n"), &[]).unwrap_or_else(|e| panic!("{e}"));
    assert!(c.docker_hosts()[0].tls.is_none());
    let unix = format!(
        "{EXAMPLE}\n[[docker.hosts]]\nname = \"near\"\nendpoint = \"unix:///x.sock\"\n\
         allow_plain_tcp = true\nttyd_pool = [\"unix:/p.sock\"]\ncapacity = 1\n"
    );
    let e = load_text(&unix, &[]).unwrap_err();
    assert!(
        e.mentions("docker.hosts[0].allow_plain_tcp", "tcp://"),
        "{e}"
    );
}

#[test]
fn tls_files_of_a_tcp_host_must_all_be_readable() {
    let text = format!(
        "{EXAMPLE}\n{}",
        r#"
[[docker.hosts]]
name = "remote"
endpoint = "tcp://10.0.0.9:2376"
tls_ca_file = "secrets/hs256.key"
tls_cert_file = "secrets/service.token"
tls_key_file = "secrets/missing.pem"
ttyd_pool = ["127.0.0.9:7681"]
capacity = 4
"#
    );
    let e = load_text(&text, &[]).unwrap_err();
    assert_eq!(e.0.len(), 1, "{e}");
    assert!(
        e.mentions("docker.hosts[0].tls_key_file", "cannot read"),
        "{e}"
    );
}

#[test]
fn a_profile_may_name_only_hosts_the_configuration_has() {
    let ok = load_text(
        &example_with_profile(&format!("hosts = [\"gpu-1\"]\n{TWO_HOSTS}")),
        &[],
    );
    assert!(ok.is_ok(), "{:?}", ok.err());
    let e = load_text(
        &example_with_profile(&format!("hosts = [\"gpu-1\", \"gpu-9\"]\n{TWO_HOSTS}")),
        &[],
    )
    .unwrap_err();
    assert!(e.mentions("profiles.evil.hosts[1]", "gpu-9"), "{e}");
    // Without [[docker.hosts]] the one host is `local`.
    assert!(load_text(&example_with_profile("hosts = [\"local\"]"), &[]).is_ok());
    let e = load_text(&example_with_profile("hosts = [\"gpu-1\"]"), &[]).unwrap_err();
    assert!(
        e.mentions("profiles.evil.hosts[0]", "not a Docker host"),
        "{e}"
    );
}

#[test]
fn idle_timeout_and_max_lifetime_out_of_range_are_refused_naming_the_key() {
    for (extra, key) in [
        (
            "idle_timeout_seconds = 0",
            "profiles.evil.idle_timeout_seconds",
        ),
        (
            "max_lifetime_seconds = 0",
            "profiles.evil.max_lifetime_seconds",
        ),
        (
            "max_lifetime_seconds = 999999999999",
            "profiles.evil.max_lifetime_seconds",
        ),
    ] {
        let e = load_text(&example_with_profile(extra), &[]).unwrap_err();
        assert!(e.mentions(key, "must be between 1 and"), "{extra}: {e}");
    }
    for (extra, key) in [
        (
            "idle_timeout_seconds = -5",
            "profiles.evil.idle_timeout_seconds",
        ),
        (
            "max_lifetime_seconds = \"1h\"",
            "profiles.evil.max_lifetime_seconds",
        ),
    ] {
        let e = load_text(&example_with_profile(extra), &[]).unwrap_err();
        assert!(
            e.to_string().contains(key.rsplit('.').next().unwrap()),
            "{extra}: {e}"
        );
    }
    let e = load_text(EXAMPLE, &[("TERMGATE__GATEWAY__ACTIVITY_REPORT_MS", "10")]).unwrap_err();
    assert!(
        e.mentions("gateway.activity_report_ms", "between 100 and 60000"),
        "{e}"
    );
    let e = load_text(EXAMPLE, &[("TERMGATE__GATEWAY__TERMINAL_REPORT_MS", "0")]).unwrap_err();
    assert!(
        e.mentions("gateway.terminal_report_ms", "between 50 and 60000"),
        "{e}"
    );
}

#[test]
fn idle_timeout_and_max_lifetime_are_optional_and_read_as_limits() {
    let c = load_text(
        &example_with_profile("idle_timeout_seconds = 600\nmax_lifetime_seconds = 7200"),
        &[],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let l = c.profiles["evil"].lifetime_limits();
    assert_eq!((l.idle_timeout, l.max_lifetime), (Some(600), Some(7200)));
    assert!(!c.profiles["default"].lifetime_limits().is_limited());
    assert_eq!(c.gateway.activity_report_ms, 5000);
    assert_eq!(c.gateway.terminal_report_ms, 250);
}

#[test]
fn a_stop_grace_out_of_range_is_refused_naming_the_key() {
    let e = load_text(&example_with_profile("stop_grace_seconds = 301"), &[]).unwrap_err();
    assert!(
        e.mentions(
            "profiles.evil.stop_grace_seconds",
            "must be between 0 and 300"
        ),
        "{e}"
    );
    let e = load_text(&example_with_profile("stop_grace_seconds = -1"), &[]).unwrap_err();
    assert!(e.to_string().contains("stop_grace_seconds"), "{e}");
    let e = load_text(
        EXAMPLE,
        &[("TERMGATE__PROFILES__DEFAULT__STOP_GRACE_SECONDS", "900")],
    )
    .unwrap_err();
    assert!(
        e.mentions("profiles.default.stop_grace_seconds", "between 0 and 300"),
        "{e}"
    );
}

#[test]
fn the_stop_grace_defaults_to_two_seconds_and_zero_is_allowed() {
    let c = load_text(&example_with_profile("stop_grace_seconds = 0"), &[])
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.profiles["evil"].stop_grace(), Duration::ZERO);
    assert_eq!(c.profiles["default"].stop_grace(), Duration::from_secs(2));
}

#[test]
fn the_retired_stop_timeout_still_loads_and_changes_nothing() {
    let c = load_text(
        EXAMPLE,
        &[("TERMGATE__CONTROL__STOP_TIMEOUT_SECONDS", "30")],
    )
    .unwrap_or_else(|e| panic!("an older file must still load: {e}"));
    assert_eq!(c.control.stop_timeout_seconds, Some(30));
    assert_eq!(c.profiles["default"].stop_grace(), Duration::from_secs(2));
}

#[test]
fn oidc_mistakes_are_refused_naming_their_keys() {
    let dir = secrets_dir();
    let base = "[auth]\naudience = \"a\"\nhs256_secret_file = \"secrets/hs256.key\"\n[profiles.p]\nimage = \"i\"\n";
    let good = "[auth.oidc]\nissuer = \"https://idp.example\"\nclient_id = \"c\"\nredirect_url = \"https://t.example/auth/callback\"\n";
    load_from_str(&format!("{base}{good}"), dir.path(), Vec::new()).expect("a good [auth.oidc]");
    let local = good.replace("https://idp.example", "http://127.0.0.1:9400");
    load_from_str(&format!("{base}{local}"), dir.path(), Vec::new())
        .expect("plain http to a loopback provider");
    for (change, key) in [
        (
            ("https://idp.example", "http://idp.example"),
            "auth.oidc.issuer",
        ),
        (
            (
                "https://t.example/auth/callback",
                "https://t.example/callback",
            ),
            "auth.oidc.redirect_url",
        ),
        (
            ("client_id = \"c\"", "client_id = \"\""),
            "auth.oidc.client_id",
        ),
        (
            (
                "client_id = \"c\"",
                "client_id = \"c\"\nscopes = [\"email\"]",
            ),
            "auth.oidc.scopes",
        ),
        (
            (
                "client_id = \"c\"",
                "client_id = \"c\"\nadmin_claim = \"groups\"",
            ),
            "auth.oidc.admin_values",
        ),
        (
            (
                "client_id = \"c\"",
                "client_id = \"c\"\nadmin_values = [\"ops\"]",
            ),
            "auth.oidc.admin_claim",
        ),
        (
            (
                "client_id = \"c\"",
                "client_id = \"c\"\ntoken_endpoint_auth_method = \"none\"",
            ),
            "auth.oidc.token_endpoint_auth_method",
        ),
        (
            (
                "client_id = \"c\"",
                "client_id = \"c\"\nsession_max_seconds = 90000",
            ),
            "auth.oidc.session_max_seconds",
        ),
        (
            (
                "client_id = \"c\"",
                "client_id = \"c\"\nallowed_email_domains = [\"@example.com\"]",
            ),
            "auth.oidc.allowed_email_domains",
        ),
        (
            (
                "client_id = \"c\"",
                "client_id = \"c\"\nclient_secret_file = \"secrets/missing\"",
            ),
            "auth.oidc.client_secret_file",
        ),
        (
            (
                "client_id = \"c\"",
                "client_id = \"c\"\nclient_scret_file = \"x\"",
            ),
            "auth.oidc.client_scret_file",
        ),
        (
            (
                "client_id = \"c\"",
                "client_id = \"c\"\nca_file = \"secrets/hs256.key\"",
            ),
            "auth.oidc.ca_file",
        ),
    ] {
        let text = format!("{base}{}", good.replace(change.0, change.1));
        let e = load_from_str(&text, dir.path(), Vec::new()).unwrap_err();
        assert!(format!("{e}").contains(&format!("{key}:")), "{key}: {e}");
    }
    // A claim the user or the provider's admins can change is the user name only by
    // an explicit opt-in; `sub`, the default, needs none.
    let mutable = good.replace(
        "client_id = \"c\"",
        "client_id = \"c\"\nsub_claim = \"preferred_username\"",
    );
    let e = load_from_str(&format!("{base}{mutable}"), dir.path(), Vec::new()).unwrap_err();
    assert!(
        format!("{e}").contains("auth.oidc.sub_claim:")
            && format!("{e}").contains("auth.oidc.allow_mutable_sub_claim"),
        "{e}"
    );
    let opted_in = mutable.replace("sub_claim", "allow_mutable_sub_claim = true\nsub_claim");
    let c = load_from_str(&format!("{base}{opted_in}"), dir.path(), Vec::new())
        .expect("a mutable claim with the opt-in");
    let o = c.auth.oidc.as_ref().unwrap();
    assert_eq!(o.sub_claim, "preferred_username");
    let plain = good.replace(
        "client_id = \"c\"",
        "client_id = \"c\"\nsub_claim = \"sub\"",
    );
    load_from_str(&format!("{base}{plain}"), dir.path(), Vec::new()).expect("sub needs no opt-in");
    // Sessions need a key the gateway signs with: public keys alone are not one.
    std::fs::write(
        dir.path().join("secrets/pub.pem"),
        include_str!("../../policy/tests/fixtures/rsa.pub"),
    )
    .unwrap();
    let public = format!(
        "[auth]\naudience = \"a\"\npublic_keys = [{{ file = \"secrets/pub.pem\" }}]\n[profiles.p]\nimage = \"i\"\n{good}"
    );
    let e = load_from_str(&public, dir.path(), Vec::new()).unwrap_err();
    assert!(
        format!("{e}").contains("auth.oidc: the gateway signs"),
        "{e}"
    );
}

#[test]
fn the_target_credentials_dir_is_an_existing_directory_outside_the_kernels_views() {
    let dir = secrets_dir();
    std::fs::create_dir(dir.path().join("creds")).unwrap();
    std::os::unix::fs::symlink("/proc/self", dir.path().join("kernel")).unwrap();
    let base = "[auth]\naudience = \"a\"\nhs256_secret_file = \"secrets/hs256.key\"\n[profiles.p]\nimage = \"i\"\n";
    let with = |d: &str| {
        load_from_str(
            base,
            dir.path(),
            env(&[("TERMGATE__GATEWAY__TARGET_CREDENTIALS_DIR", d)]),
        )
    };
    let c = with("creds").expect("a directory beside the configuration");
    assert_eq!(c.target_credentials_dir(), Some(dir.path().join("creds")));
    for bad in [
        "/",
        "/proc/self",
        "/dev/shm",
        "missing",
        "secrets/hs256.key",
        "kernel",
    ] {
        let e = with(bad).unwrap_err();
        assert!(
            format!("{e}").contains("gateway.target_credentials_dir:"),
            "{bad}: {e}"
        );
    }
}

#[test]
fn recording_keys_are_checked_by_name() {
    let e = load_text(
        EXAMPLE,
        &[
            ("TERMGATE__PROFILES__DEFAULT__RECORD_INPUT", "true"),
            ("TERMGATE__GATEWAY__RECORDING_QUEUE", "1"),
            ("TERMGATE__CONTROL__MAX_RECORDING_BYTES", "10"),
        ],
    )
    .unwrap_err();
    assert!(
        e.mentions("profiles.default.record_input", "record = true"),
        "{e}"
    );
    assert!(e.mentions("gateway.recording_queue", "between 4"), "{e}");
    assert!(
        e.mentions("control.max_recording_bytes", "at least 4096"),
        "{e}"
    );
    let c = load_text(
        EXAMPLE,
        &[
            ("TERMGATE__PROFILES__DEFAULT__RECORD", "true"),
            ("TERMGATE__PROFILES__DEFAULT__RECORD_INPUT", "true"),
        ],
    )
    .unwrap();
    let p = &c.profiles["default"];
    assert!(p.record && p.record_input);
}

#[test]
fn retention_and_the_player_are_checked_by_name() {
    let e = load_text(
        EXAMPLE,
        &[
            ("TERMGATE__CONTROL__RECORDINGS_PRUNE_MS", "10"),
            ("TERMGATE__GATEWAY__PLAYER_DIR", "/nonexistent/player"),
        ],
    )
    .unwrap_err();
    assert!(
        e.mentions("control.recordings_prune_ms", "between 100"),
        "{e}"
    );
    assert!(
        e.mentions("gateway.player_dir", "asciinema-player.js"),
        "{e}"
    );
    let player = tempfile::tempdir().unwrap();
    for f in ["asciinema-player.js", "asciinema-player.css"] {
        std::fs::write(player.path().join(f), "x").unwrap();
    }
    let c = load_text(
        EXAMPLE,
        &[
            ("TERMGATE__CONTROL__RECORDINGS_KEEP_DAYS", "30"),
            ("TERMGATE__CONTROL__RECORDINGS_MAX_USER_BYTES", "1048576"),
            (
                "TERMGATE__GATEWAY__PLAYER_DIR",
                player.path().to_str().unwrap(),
            ),
        ],
    )
    .unwrap();
    assert_eq!(c.control.recordings_keep_days, 30);
    assert_eq!(c.control.recordings_max_user_bytes, 1 << 20);
    assert_eq!(c.control.recordings_max_total_bytes, 0);
    assert_eq!(c.gateway.player_dir.as_deref(), Some(player.path()));
}

#[test]
fn share_modes_and_viewer_pools_are_checked_naming_the_key() {
    let e = load_text(&example_with_profile("shares = \"everyone\""), &[]).unwrap_err();
    assert!(
        e.mentions(
            "profiles.evil.shares",
            "must be \"anyone\", \"signed-in\" or \"off\""
        ),
        "{e}"
    );
    for mode in ["anyone", "signed-in", "off"] {
        let c = load_text(&example_with_profile(&format!("shares = \"{mode}\"")), &[])
            .unwrap_or_else(|e| panic!("{mode}: {e}"));
        assert_eq!(c.profiles["evil"].shares, mode);
    }
    let e = load_text(
        EXAMPLE,
        &[("TERMGATE__GATEWAY__VIEWER_UPSTREAMS", "[\"ttyd-view\"]")],
    )
    .unwrap_err();
    assert!(
        e.mentions("gateway.viewer_upstreams[0]", "is not an address"),
        "{e}"
    );
}

#[test]
fn with_dockgate_control_dials_each_hosts_dockgate_and_endpoints_must_be_local_sockets() {
    let hosts = format!(
        "{EXAMPLE}\n[[docker.hosts]]\nname = \"near\"\nendpoint = \"unix:///run/docker.sock\"\n\
         ttyd_pool = [\"unix:/p.sock\"]\ncapacity = 1\n"
    );
    let c = load_text(
        &hosts,
        &[("TERMGATE__DOCKER__DOCKGATE_DIR", "/run/tg-dockgate")],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let h = &c.docker_hosts()[0];
    assert_eq!(
        h.endpoint.as_deref(),
        Some("unix:///run/tg-dockgate/near-control.sock")
    );
    assert_eq!(h.daemon.as_deref(), Some("unix:///run/docker.sock"));
    // Without it, control dials the daemon itself.
    let c = load_text(&hosts, &[]).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        c.docker_hosts()[0].endpoint.as_deref(),
        Some("unix:///run/docker.sock")
    );
    // The implicit host too.
    let c = load_text(
        EXAMPLE,
        &[("TERMGATE__DOCKER__DOCKGATE_DIR", "/run/tg-dockgate")],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        c.docker_hosts()[0].endpoint.as_deref(),
        Some("unix:///run/tg-dockgate/local-control.sock")
    );
    // dockgate runs beside its daemon: a tcp endpoint is refused, naming the key.
    let far = format!(
        "{EXAMPLE}\n[[docker.hosts]]\nname = \"far\"\nendpoint = \"tcp://10.0.0.9:2375\"\n\
         allow_plain_tcp = true\nttyd_pool = [\"127.0.0.9:7681\"]\ncapacity = 1\n"
    );
    let e = load_text(
        &far,
        &[("TERMGATE__DOCKER__DOCKGATE_DIR", "/run/tg-dockgate")],
    )
    .unwrap_err();
    assert!(e.mentions("docker.hosts[0].endpoint", "dockgate"), "{e}");
}

#[test]
fn each_part_reads_only_its_own_files() {
    use config::{load_from_str_for, Part};
    // A gateway key file that only the gateway's user may read (here: missing).
    let text = format!("{EXAMPLE}\n",).replace(
        "[gateway]\n",
        "[gateway]\ntls_cert_file = \"secrets/gw.crt\"\ntls_key_file = \"secrets/gw.key\"\n",
    );
    assert!(
        text.contains("tls_key_file = \"secrets/gw.key\""),
        "the example has [gateway]"
    );
    let dir = secrets_dir();
    let all = load_from_str_for(&text, dir.path(), env(&[]), Part::All).unwrap_err();
    assert!(all.to_string().contains("gateway.tls_key_file"), "{all}");
    let gateway = load_from_str_for(&text, dir.path(), env(&[]), Part::Gateway).unwrap_err();
    assert!(
        gateway.to_string().contains("gateway.tls_key_file"),
        "{gateway}"
    );
    // Control never reads the gateway's key: it loads.
    let control = load_from_str_for(&text, dir.path(), env(&[]), Part::Control).unwrap();
    assert!(control.secrets.is_some());
    // dockgate reads no secret at all: without any secret file it loads, with no secrets.
    let empty = tempfile::tempdir().unwrap();
    let dockgate = load_from_str_for(&text, empty.path(), env(&[]), Part::Dockgate).unwrap();
    assert!(dockgate.secrets.is_none());
    assert!(dockgate.profiles.contains_key("default"));
    // Its profiles' mistakes are still refused, naming the key.
    let bad = format!("{text}\n[profiles.evil]\nimage = \"x\"\nprivileged = true\n");
    let e = load_from_str_for(&bad, empty.path(), env(&[]), Part::Dockgate).unwrap_err();
    assert!(e.to_string().contains("profiles.evil"), "{e}");
}
