//! A profile's workspace and secrets keys: refused at load, naming the key.

use config::{load_from_str, ConfigErrors};
use policy::declared::WorkspaceMode;

const EXAMPLE: &str = include_str!("../termgate.example.toml");

fn load_text(text: &str) -> Result<config::Config, ConfigErrors> {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("secrets")).unwrap();
    std::fs::write(dir.path().join("secrets/hs256.key"), "k".repeat(48) + "\n").unwrap();
    std::fs::write(dir.path().join("secrets/service.token"), "s".repeat(32)).unwrap();
    load_from_str(text, dir.path(), Vec::new())
}

/// The example with `[docker]` given `docker` and a profile `p` with `profile`.
fn with(docker: &str, profile: &str) -> String {
    let text = EXAMPLE.replacen("[docker]\n", &format!("[docker]\n{docker}\n"), 1);
    format!("{text}\n[profiles.p]\nimage = \"termgate/session:dev\"\n{profile}\n")
}

#[test]
fn the_workspace_mode_reads_and_defaults_to_home_with_a_mount_point() {
    let c = load_text(&with("", "home = \"/home/user\"")).unwrap();
    assert_eq!(c.profiles["p"].workspace_mode(), WorkspaceMode::Home);
    assert_eq!(
        c.profiles["default"].workspace_mode(),
        WorkspaceMode::Choose
    );
    let c = load_text(&with("", "")).unwrap();
    assert_eq!(c.profiles["p"].workspace_mode(), WorkspaceMode::None);
    let c = load_text(&with("", "home = \"/w\"\nworkspace = \"none\"")).unwrap();
    assert_eq!(c.profiles["p"].workspace_mode(), WorkspaceMode::None);
    assert_eq!(c.profiles["p"].declared().workspace, WorkspaceMode::None);
}

#[test]
fn a_workspace_mode_that_cannot_be_is_refused_naming_the_key() {
    for (profile, why) in [
        ("home = \"/w\"\nworkspace = \"Choose\"", "is not one of"),
        ("home = \"/w\"\nworkspace = \"\"", "is not one of"),
        ("workspace = \"choose\"", "needs home"),
        ("workspace = \"home\"", "needs home"),
    ] {
        let e = load_text(&with("", profile)).unwrap_err();
        assert!(e.mentions("profiles.p.workspace", why), "{profile}: {e}");
    }
}

#[test]
fn secrets_are_files_under_the_secrets_directory() {
    let dir = "secrets_dir = \"/srv/termgate-secrets\"";
    let c = load_text(&with(
        dir,
        "[profiles.p.secrets]\ngh = \"/srv/termgate-secrets/gh\"",
    ))
    .unwrap();
    let mounts = &c.profiles["p"].declared().spec.mounts;
    let m = mounts
        .iter()
        .find(|m| m.target == "/run/secrets/gh")
        .expect("mounted");
    assert!(m.read_only);
    assert_eq!(m.source, "/srv/termgate-secrets/gh");
    for (docker, file, name, why) in [
        (
            "",
            "/srv/termgate-secrets/gh",
            "gh",
            "needs docker.secrets_dir",
        ),
        (dir, "/etc/shadow", "gh", "under docker.secrets_dir"),
        (
            dir,
            "/srv/termgate-secrets/../../etc/shadow",
            "gh",
            "under docker.secrets_dir",
        ),
        (
            dir,
            "/srv/termgate-secrets",
            "gh",
            "under docker.secrets_dir",
        ),
        (dir, "gh", "gh", "under docker.secrets_dir"),
        (
            dir,
            "/srv/termgate-secrets-other/gh",
            "gh",
            "under docker.secrets_dir",
        ),
        (dir, "/srv/termgate-secrets/gh", "../gh", "secret names"),
        (dir, "/srv/termgate-secrets/gh", ".hidden", "secret names"),
    ] {
        let e = load_text(&with(
            docker,
            &format!("[profiles.p.secrets]\n\"{name}\" = \"{file}\""),
        ))
        .unwrap_err();
        assert!(
            e.mentions(&format!("profiles.p.secrets.{name}"), why),
            "{file} {name}: {e}"
        );
    }
    let e = load_text(&with("secrets_dir = \"relative\"", "")).unwrap_err();
    assert!(e.mentions("docker.secrets_dir", "absolute"), "{e}");
}
