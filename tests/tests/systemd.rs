//! The systemd units in deploy/systemd/: `systemd-analyze verify` accepts them as they
//! would be installed (binaries at /usr/local/bin, here a temporary directory of links
//! to the built ones), and they keep the red lines: only the gateway's user reaches the
//! ttyd socket, only dockgate reaches the Docker socket (control and the pools through
//! its sockets, the gateway through neither), every service restarts on failure and
//! runs without privileges.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const UNITS: [&str; 8] = [
    "termgate-dockgate@.service",
    "termgate-control.service",
    "termgate-ttyd@.service",
    "termgate-ttyd-view@.service",
    "termgate-gateway.service",
    "termgate-host-dockgate@.service",
    "termgate-host-ttyd@.service",
    "termgate-host-ttyd-view@.service",
];

fn units_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/systemd")
}

fn systemd_analyze() -> Option<PathBuf> {
    ["/usr/bin/systemd-analyze", "/bin/systemd-analyze"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
}

/// Every `Key=value` of a unit file, in order, by key (repeated keys keep every value).
fn keys(unit: &str) -> BTreeMap<String, Vec<String>> {
    let text = std::fs::read_to_string(units_dir().join(unit)).expect("unit file");
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') || line.starts_with('[') {
            continue;
        }
        if let Some((k, v)) = line.split_once('=') {
            out.entry(k.trim().to_owned())
                .or_default()
                .push(v.trim().to_owned());
        }
    }
    out
}

fn one<'a>(keys: &'a BTreeMap<String, Vec<String>>, unit: &str, key: &str) -> &'a str {
    let v = keys
        .get(key)
        .unwrap_or_else(|| panic!("{unit} has no {key}="));
    v.last().expect("a value")
}

/// The units with /usr/local/bin/ pointing at `bin`, written into `dir`.
fn render(dir: &Path, bin: &Path) {
    for unit in UNITS {
        let text = std::fs::read_to_string(units_dir().join(unit)).expect("unit file");
        let text = text.replace("/usr/local/bin/", &format!("{}/", bin.display()));
        std::fs::write(dir.join(unit), text).expect("rendered unit");
    }
}

fn verify(analyze: &Path, dir: &Path) -> Output {
    // The pool and dockgate as the instances for this machine's daemon, loaded from
    // their templates.
    Command::new(analyze)
        .current_dir(dir)
        .args([
            "verify",
            "--man=no",
            "./termgate-dockgate@local.service",
            "./termgate-control.service",
            "./termgate-ttyd@local.service",
            "./termgate-ttyd-view@local.service",
            "./termgate-gateway.service",
            "./termgate-host-dockgate@far.service",
            "./termgate-host-ttyd@far.service",
            "./termgate-host-ttyd-view@far.service",
        ])
        .output()
        .expect("systemd-analyze verify")
}

#[test]
fn systemd_units_verify_and_keep_the_red_lines() {
    let Some(analyze) = systemd_analyze() else {
        return e2e::skip_or_fail(
            "systemd-analyze is not installed, the units cannot be verified here",
        );
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).expect("bin dir");
    for (name, target) in [
        ("termgate-control", e2e::binary("termgate-control")),
        ("termgate-gateway", e2e::binary("termgate-gateway")),
        ("termgate-dockgate", e2e::binary("termgate-dockgate")),
        ("ttyd", e2e::ttyd::ttyd_binary()),
        ("termgate-ttyd-attach", e2e::ttyd::attach_wrapper()),
    ] {
        let target =
            std::fs::canonicalize(&target).unwrap_or_else(|e| panic!("{}: {e}", target.display()));
        std::os::unix::fs::symlink(target, bin.join(name)).expect("symlink");
    }
    render(dir.path(), &bin);

    let out = verify(&analyze, dir.path());
    let said =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && said.trim().is_empty(),
        "systemd-analyze verify: {:?}\n{said}",
        out.status
    );

    // Positive control: verify does check what the units start, so the pass above
    // means the ExecStart lines name real executables.
    let ttyd = std::fs::read_link(bin.join("ttyd")).expect("ttyd link");
    std::fs::remove_file(bin.join("ttyd")).expect("remove ttyd link");
    let out = verify(&analyze, dir.path());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && said.contains("ttyd"),
        "verify must refuse a pool whose ttyd is missing: {:?}\n{said}",
        out.status
    );
    std::os::unix::fs::symlink(ttyd, bin.join("ttyd")).expect("symlink");
    // The same for dockgate's unit.
    let dockgate = std::fs::read_link(bin.join("termgate-dockgate")).expect("dockgate link");
    std::fs::remove_file(bin.join("termgate-dockgate")).expect("remove dockgate link");
    let out = verify(&analyze, dir.path());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && said.contains("termgate-dockgate"),
        "verify must refuse a dockgate whose binary is missing: {:?}\n{said}",
        out.status
    );
    std::os::unix::fs::symlink(dockgate, bin.join("termgate-dockgate")).expect("symlink");

    let control = keys("termgate-control.service");
    let pool = keys("termgate-ttyd@.service");
    let gateway = keys("termgate-gateway.service");
    let view = keys("termgate-ttyd-view@.service");
    let dockgate = keys("termgate-dockgate@.service");

    // Every service comes back on its own, and none gives up after a burst of crashes.
    for (unit, k) in [
        ("dockgate", &dockgate),
        ("control", &control),
        ("pool", &pool),
        ("view pool", &view),
        ("gateway", &gateway),
    ] {
        assert_eq!(one(k, unit, "Restart"), "on-failure", "{unit}");
        assert!(!one(k, unit, "RestartSec").is_empty(), "{unit}");
        assert_eq!(one(k, unit, "StartLimitIntervalSec"), "0", "{unit}");
        for (key, want) in [
            ("NoNewPrivileges", "yes"),
            ("ProtectSystem", "strict"),
            ("ProtectHome", "yes"),
            ("PrivateTmp", "yes"),
            ("PrivateDevices", "yes"),
            ("CapabilityBoundingSet", ""),
        ] {
            assert_eq!(one(k, unit, key), want, "{unit} {key}");
        }
        // dockgate speaks to unix sockets only, in a network namespace of its own.
        let families = if unit == "dockgate" {
            assert_eq!(one(k, unit, "PrivateNetwork"), "yes", "{unit}");
            "AF_UNIX"
        } else {
            "AF_UNIX AF_INET AF_INET6"
        };
        assert_eq!(
            one(k, unit, "RestrictAddressFamilies"),
            families,
            "{unit} RestrictAddressFamilies"
        );
        assert_eq!(
            k["SystemCallFilter"][0], "@system-service",
            "{unit} SystemCallFilter"
        );
    }

    // Red line: ttyd is reachable only by the gateway. The pool's socket is in a 0700
    // runtime directory of its user, the gateway runs as that same user and connects
    // to exactly that socket; control is another user.
    let user = one(&pool, "pool", "User");
    assert_eq!(one(&gateway, "gateway", "User"), user);
    assert_ne!(one(&control, "control", "User"), user);
    assert_eq!(one(&pool, "pool", "RuntimeDirectoryMode"), "0700");
    let runtime = one(&pool, "pool", "RuntimeDirectory");
    let exec = one(&pool, "pool", "ExecStart");
    let socket = format!("%t/{runtime}/ttyd.sock");
    assert!(
        exec.contains(&format!("-i {socket} ")),
        "the pool listens on its runtime directory only: {exec}"
    );
    assert!(!exec.contains(" -p "), "no TCP port: {exec}");
    let gateway_env = &gateway["Environment"];
    let wanted = format!(
        "TERMGATE__TTYD__SOCKET=/run/{}/ttyd.sock",
        runtime.replace("%i", "local")
    );
    assert!(
        gateway_env.contains(&wanted),
        "the gateway's socket is the pool's: {gateway_env:?}"
    );
    // The read-only pool of share links: the same rules, and never -W.
    assert_eq!(one(&view, "view pool", "User"), user);
    assert_eq!(one(&view, "view pool", "RuntimeDirectoryMode"), "0700");
    let view_runtime = one(&view, "view pool", "RuntimeDirectory");
    let view_exec = one(&view, "view pool", "ExecStart");
    assert!(
        view_exec.contains(&format!("-i %t/{view_runtime}/ttyd-view.sock ")),
        "{view_exec}"
    );
    assert!(
        !view_exec.split(' ').any(|a| a == "-W" || a == "--writable"),
        "the viewers' pool is read-only: {view_exec}"
    );
    assert!(
        view["Environment"].contains(&"TERMGATE_ATTACH_READ_ONLY=1".to_owned()),
        "viewers attach without stdin: {:?}",
        view["Environment"]
    );
    let wanted = format!(
        "TERMGATE__TTYD__VIEWER_SOCKET=/run/{}/ttyd-view.sock",
        view_runtime.replace("%i", "local")
    );
    assert!(gateway_env.contains(&wanted), "{gateway_env:?}");

    // Red line: only dockgate reaches the Docker socket, through the docker group only
    // its unit adds. Control and the pools have no such group, and their units (the
    // gateway's too) hide the socket whatever groups their users have.
    let groups = |k: &BTreeMap<String, Vec<String>>| -> Vec<String> {
        k.get("SupplementaryGroups")
            .into_iter()
            .flatten()
            .flat_map(|v| v.split_whitespace().map(str::to_owned))
            .collect()
    };
    let dockgate_groups = groups(&dockgate);
    assert!(
        dockgate_groups.iter().any(|g| g == "docker"),
        "dockgate reaches Docker: {dockgate_groups:?}"
    );
    assert!(
        !gateway.contains_key("SupplementaryGroups"),
        "the gateway gets no extra group"
    );
    for (unit, k) in [
        ("control", &control),
        ("pool", &pool),
        ("view pool", &view),
        ("gateway", &gateway),
    ] {
        let g = groups(k);
        assert!(
            !g.iter().any(|g| g == "docker"),
            "{unit} must not reach Docker: {g:?}"
        );
        let hidden = one(k, unit, "InaccessiblePaths");
        // Whole tokens: `-/var/run/docker.sock` must not count for `/run/docker.sock`.
        let tokens: Vec<&str> = hidden
            .split_whitespace()
            .map(|t| t.trim_start_matches('-'))
            .collect();
        for path in ["/run/docker.sock", "/var/run/docker.sock"] {
            assert!(tokens.contains(&path), "{unit} hides {path}: {hidden}");
        }
    }
    let dockgate_user = one(&dockgate, "dockgate", "User");
    for (unit, k) in [
        ("control", &control),
        ("pool", &pool),
        ("gateway", &gateway),
    ] {
        assert_ne!(
            one(k, unit, "User"),
            dockgate_user,
            "{unit} is not dockgate"
        );
    }

    // dockgate's sockets: one directory for every host's dockgate, kept when one stops;
    // the attach socket for the pools' group, the control socket for control's group.
    let dockgate_dir = one(&dockgate, "dockgate", "RuntimeDirectory");
    assert!(
        !dockgate_dir.contains("%i"),
        "one directory: {dockgate_dir}"
    );
    assert_eq!(
        one(&dockgate, "dockgate", "RuntimeDirectoryPreserve"),
        "yes"
    );
    let dockgate_exec: Vec<&str> = one(&dockgate, "dockgate", "ExecStart")
        .split_whitespace()
        .collect();
    let flag = |name: &str| -> &str {
        let at = dockgate_exec
            .iter()
            .position(|a| *a == name)
            .unwrap_or_else(|| panic!("dockgate's ExecStart has no {name}: {dockgate_exec:?}"));
        dockgate_exec[at + 1]
    };
    assert_eq!(flag("--dir"), format!("%t/{dockgate_dir}"));
    assert_eq!(flag("--host"), "%i");
    assert_eq!(flag("--instance"), "${TERMGATE_INSTANCE}");
    // Every create is compared with the configuration's profiles.
    assert_eq!(flag("--config"), "/etc/termgate/termgate.toml");
    assert!(
        dockgate["Environment"].contains(&"TERMGATE_INSTANCE=termgate".to_owned()),
        "{:?}",
        dockgate["Environment"]
    );
    assert!(
        !dockgate_exec.contains(&"--daemon"),
        "the daemon comes from DOCKER_HOST (dockgate-%i.env), by default the local socket"
    );
    let attach_group = flag("--attach-group");
    let control_group = one(&control, "control", "Group");
    assert_eq!(flag("--control-group"), control_group);
    for g in [attach_group, control_group] {
        assert!(
            dockgate_groups.iter().any(|d| d == g),
            "dockgate may give its socket to group {g} only as a member: {dockgate_groups:?}"
        );
    }
    // The attach socket's group is the pools' alone: a group of its own that their
    // units add, not the pools' user's group, which the gateway shares.
    assert_ne!(attach_group, one(&pool, "pool", "Group"));
    for (unit, k) in [("pool", &pool), ("view pool", &view)] {
        assert!(groups(k).iter().any(|g| g == attach_group), "{unit}");
    }
    for (unit, k) in [("control", &control), ("gateway", &gateway)] {
        assert!(!groups(k).iter().any(|g| g == attach_group), "{unit}");
        assert_ne!(one(k, unit, "Group"), attach_group, "{unit}");
    }
    // The pools are not in control's group, so they cannot open its socket.
    for (unit, k) in [("pool", &pool), ("view pool", &view), ("gateway", &gateway)] {
        assert!(!groups(k).iter().any(|g| g == control_group), "{unit}");
        assert_ne!(one(k, unit, "Group"), control_group, "{unit}");
    }
    // Each pool's docker CLI goes to its own host's attach socket, after that host's
    // dockgate; control dials the control sockets in the same directory.
    let attach = format!("DOCKER_HOST=unix:///run/{dockgate_dir}/%i-attach.sock");
    for (unit, k) in [("pool", &pool), ("view pool", &view)] {
        assert!(
            k["Environment"].contains(&attach),
            "{unit}'s DOCKER_HOST is its dockgate's attach socket: {:?}",
            k["Environment"]
        );
        for key in ["After", "Wants"] {
            assert!(
                one(k, unit, key)
                    .split_whitespace()
                    .any(|u| u == "termgate-dockgate@%i.service"),
                "{unit} {key}"
            );
        }
    }
    let dockgate_env = format!("TERMGATE__DOCKER__DOCKGATE_DIR=/run/{dockgate_dir}");
    assert!(
        control["Environment"].contains(&dockgate_env),
        "control reaches Docker through dockgate: {:?}",
        control["Environment"]
    );
    for key in ["After", "Wants"] {
        assert!(
            one(&control, "control", key)
                .split_whitespace()
                .any(|u| u == "termgate-dockgate@local.service"),
            "control {key}"
        );
    }
    // The attach sockets belong to the group the gateway's user shares with the pools:
    // the gateway has the whole directory hidden, and starts after it exists.
    let hidden = one(&gateway, "gateway", "InaccessiblePaths");
    assert!(
        hidden
            .split_whitespace()
            .any(|p| p.trim_start_matches('-') == format!("/run/{dockgate_dir}")),
        "gateway hides /run/{dockgate_dir}: {hidden}"
    );
    assert!(one(&gateway, "gateway", "After")
        .split_whitespace()
        .any(|u| u == "termgate-dockgate@local.service"));
    assert_eq!(one(&dockgate, "dockgate", "Type"), "exec");
    // dockgate chowns its sockets: the filter that drops @privileged must let chown
    // back in, or it kills dockgate at its first socket.
    let filters = &dockgate["SystemCallFilter"];
    let dropped = filters
        .iter()
        .position(|f| f.starts_with('~') && f.contains("@privileged"))
        .expect("dockgate drops @privileged");
    assert!(
        filters[dropped + 1..].iter().any(|f| f == "@chown"),
        "dockgate's SystemCallFilter: {filters:?}"
    );

    assert_eq!(one(&control, "control", "StateDirectory"), "termgate");
    assert_eq!(one(&control, "control", "StateDirectoryMode"), "0700");

    // The gateway starts after, but never with, control and the pool: stopping or
    // restarting them must not stop it (design §1, control is off the byte path).
    for key in ["Requires", "BindsTo", "PartOf", "Requisite"] {
        assert!(!gateway.contains_key(key), "gateway has {key}=");
    }

    // A host elsewhere: dockgate listens only with mutual TLS, its fronts lead to
    // the host's own pools, and only it (group termgate-front) reaches their sockets;
    // the pools reach Docker only through its attach socket, and no network at all.
    let host = keys("termgate-host-dockgate@.service");
    let start = one(&host, "host dockgate", "ExecStart");
    for flag in [
        "--config /etc/termgate/termgate.toml",
        "--tls-listen ${TERMGATE_API_LISTEN}",
        "--tls-cert /etc/termgate/pki/dockgate-%i.pem",
        "--tls-key /etc/termgate/pki/dockgate-%i-key.pem",
        "--tls-ca /etc/termgate/pki/ca.pem",
        "--pool-listen ${TERMGATE_POOL_LISTEN} --pool-socket /run/termgate-host-ttyd-%i/ttyd.sock",
        "--viewer-listen ${TERMGATE_VIEW_LISTEN} --viewer-socket /run/termgate-host-ttyd-view-%i/ttyd.sock",
    ] {
        assert!(start.contains(flag), "host dockgate without {flag}: {start}");
    }
    assert!(one(&host, "host dockgate", "SupplementaryGroups").contains("termgate-front"));
    for (unit, writable) in [
        ("termgate-host-ttyd@.service", true),
        ("termgate-host-ttyd-view@.service", false),
    ] {
        let k = keys(unit);
        let start = one(&k, unit, "ExecStart");
        assert_eq!(start.contains(" -W "), writable, "{unit}: {start}");
        assert_eq!(one(&k, unit, "Group"), "termgate-front", "{unit}");
        assert_eq!(one(&k, unit, "RuntimeDirectoryMode"), "0710", "{unit}");
        assert_eq!(one(&k, unit, "PrivateNetwork"), "yes", "{unit}");
        assert_eq!(
            one(&k, unit, "RestrictAddressFamilies"),
            "AF_UNIX",
            "{unit}"
        );
        assert!(
            one(&k, unit, "InaccessiblePaths").contains("/var/run/docker.sock"),
            "{unit}"
        );
        assert!(
            !one(&k, unit, "SupplementaryGroups").contains("docker"),
            "{unit}"
        );
        assert!(
            k["Environment"]
                .iter()
                .any(|e| e == "DOCKER_HOST=unix:///run/termgate-dockgate/%i-attach.sock"),
            "{unit}"
        );
    }

    // systemd's own exposure score of each unit (0 best, 10 worst), offline.
    let mut scores = Vec::new();
    for unit in [
        "termgate-dockgate@local.service",
        "termgate-control.service",
        "termgate-ttyd@local.service",
        "termgate-ttyd-view@local.service",
        "termgate-gateway.service",
        "termgate-host-dockgate@far.service",
        "termgate-host-ttyd@far.service",
        "termgate-host-ttyd-view@far.service",
    ] {
        let out = Command::new(&analyze)
            .current_dir(dir.path())
            .args([
                "security",
                "--offline=true",
                "--no-pager",
                &format!("./{unit}"),
            ])
            .output()
            .expect("systemd-analyze security");
        let text = String::from_utf8_lossy(&out.stdout);
        let Some(score) = text
            .lines()
            .find_map(|l| {
                l.split_once("Overall exposure level for ")?
                    .1
                    .split_once(": ")
            })
            .and_then(|(_, rest)| rest.split_whitespace().next()?.parse::<f64>().ok())
        else {
            e2e::skip_or_fail(&format!(
                "no exposure score for {unit} from systemd-analyze security (older systemd?):\n{text}"
            ));
            return;
        };
        assert!(score <= 2.5, "{unit}: exposure {score}\n{text}");
        scores.push(format!("{unit} {score}"));
    }
    eprintln!("systemd-analyze security (offline): {}", scores.join(", "));
}
