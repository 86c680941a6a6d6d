//! Targets: existing ttyds that termgate fronts but does not run (design §7). One check
//! of a target's definition, shared by the configuration (`[[targets]]`) and control's
//! API (`POST /v1/targets`), so both refuse the same things with the same words; and
//! which credential file a target registered through the API may have the gateway read
//! and send ([`credential_file_ok`]).

use crate::feed::{TargetCredential, TtydAddress};
use crate::identity::Sub;

/// One problem with a target's definition, naming the field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetProblem {
    /// The field: `name`, `upstream`, `users[2]`, `credential.header`, …
    pub field: String,
    /// What is wrong.
    pub message: String,
}

/// A target's definition as given (the credential file's existence is the caller's to
/// check: it is I/O).
#[derive(Debug, Clone, Copy)]
pub struct TargetDefinition<'a> {
    /// Unique name.
    pub name: &'a str,
    /// `http://host:port[/base-path]` or `unix:/path`.
    pub upstream: &'a str,
    /// `sub`s allowed.
    pub users: &'a [String],
    /// Token roles allowed.
    pub roles: &'a [String],
    /// What the ttyd expects.
    pub credential: Option<&'a TargetCredential>,
}

/// Longest target name.
pub const MAX_NAME: usize = 64;
/// Most users or roles one target lists.
pub const MAX_LISTED: usize = 1000;

impl TargetDefinition<'_> {
    /// Every problem of the definition; empty when it is valid. Returns the parsed
    /// upstream when that field is valid.
    pub fn check(&self) -> (Option<TtydAddress>, Vec<TargetProblem>) {
        let mut problems = Vec::new();
        let mut problem = |field: String, message: &str| {
            problems.push(TargetProblem {
                field,
                message: message.to_owned(),
            })
        };
        let name_ok = !self.name.is_empty()
            && self.name.len() <= MAX_NAME
            && !self.name.starts_with('-')
            && self
                .name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !name_ok {
            problem(
                "name".into(),
                "must be 1-64 characters of a-z, 0-9 and -, not starting with -",
            );
        }
        let upstream = match TtydAddress::parse_url(self.upstream) {
            Ok(a) => Some(a),
            Err(e) => {
                problem("upstream".into(), e.0);
                None
            }
        };
        if self.users.is_empty() && self.roles.is_empty() {
            problem(
                "users".into(),
                "list at least one user or role: a target nobody may open is a mistake",
            );
        }
        if self.users.len() > MAX_LISTED || self.roles.len() > MAX_LISTED {
            problem("users".into(), "at most 1000 users and 1000 roles");
        }
        for (i, u) in self.users.iter().enumerate() {
            if Sub::parse(u).is_none() {
                problem(
                    format!("users[{i}]"),
                    "must be 1-128 characters of A-Z a-z 0-9 . _ @ -",
                );
            }
        }
        for (i, r) in self.roles.iter().enumerate() {
            if r.is_empty() || r.len() > 128 || r.chars().any(char::is_control) {
                problem(
                    format!("roles[{i}]"),
                    "must be 1-128 characters without control characters",
                );
            }
        }
        if let Some(c) = self.credential {
            if let Err(e) = c.check() {
                let field = match c {
                    TargetCredential::Header { .. } => "credential.header",
                    TargetCredential::BasicFile { .. } => "credential.basic_file",
                };
                problem(field.into(), e.0);
            }
            if let TargetCredential::BasicFile { path } = c {
                if !path.starts_with('/') {
                    problem("credential.basic_file".into(), "must be an absolute path");
                }
            }
        }
        (upstream.filter(|_| problems.is_empty()), problems)
    }
}

/// The kernel's views of processes, devices and the system: nothing under them is a
/// credential, and `/proc/self/environ` holds the gateway's own environment.
const KERNEL_PATHS: &[&str] = &["/proc", "/sys", "/dev"];

/// Whether `dir` may hold the credential files of targets registered through the API
/// (`gateway.target_credentials_dir`, resolved): a clean absolute path, not `/`, not at
/// or under `/proc`, `/sys` or `/dev`.
pub fn credentials_dir_ok(dir: &str) -> Result<(), &'static str> {
    if !clean_absolute(dir) {
        return Err("must be a plain absolute path (no . or .. segments)");
    }
    if dir == "/" {
        return Err("must not be /: every file would be a credential");
    }
    if under_kernel_path(dir) {
        return Err("must not be at or under /proc, /sys or /dev");
    }
    Ok(())
}

/// Whether the gateway may read the credential file of a target registered through
/// the API and send it to the target's upstream, which that admin chose: only a file
/// whose resolved path (symbolic links followed, `realpath`) is inside the resolved
/// `gateway.target_credentials_dir`, never at or under `/proc`, `/sys` or `/dev`.
/// Without that directory, such targets have no `basic_file` at all. (Targets of the
/// configuration are the operator's own, and read as configured.)
pub fn credential_file_ok(resolved: &str, dir: Option<&str>) -> Result<(), &'static str> {
    let Some(dir) = dir else {
        return Err("targets registered through the API may use basic_file only inside gateway.target_credentials_dir, which is not set");
    };
    credentials_dir_ok(dir)
        .map_err(|_| "gateway.target_credentials_dir is not a directory credentials may be in")?;
    if !clean_absolute(resolved) {
        return Err("must resolve to a plain absolute path");
    }
    if under_kernel_path(resolved) {
        return Err("resolves under /proc, /sys or /dev");
    }
    match resolved.strip_prefix(dir.trim_end_matches('/')) {
        Some(rest) if rest.len() > 1 && rest.starts_with('/') => Ok(()),
        _ => Err("resolves outside gateway.target_credentials_dir"),
    }
}

fn clean_absolute(p: &str) -> bool {
    p == "/"
        || (p.starts_with('/')
            && p[1..]
                .trim_end_matches('/')
                .split('/')
                .all(|s| !s.is_empty() && s != "." && s != ".."))
}

fn under_kernel_path(p: &str) -> bool {
    KERNEL_PATHS
        .iter()
        .any(|k| p == *k || p.strip_prefix(k).is_some_and(|rest| rest.starts_with('/')))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runtime_credential_file_is_read_only_inside_the_directory_and_never_from_the_kernel() {
        let dir = Some("/etc/termgate/targets");
        assert_eq!(
            credential_file_ok("/etc/termgate/targets/build.cred", dir),
            Ok(())
        );
        assert_eq!(
            credential_file_ok("/etc/termgate/targets/team/build.cred", dir),
            Ok(())
        );
        assert_eq!(
            credential_file_ok("/etc/termgate/targets/", Some("/etc/termgate/targets/")),
            Err("resolves outside gateway.target_credentials_dir")
        );
        for outside in [
            "/etc/termgate/targets",
            "/etc/termgate/targets-old/build.cred",
            "/etc/termgate/hs256.key",
            "/etc/shadow",
        ] {
            assert_eq!(
                credential_file_ok(outside, dir),
                Err("resolves outside gateway.target_credentials_dir"),
                "{outside}"
            );
        }
        for kernel in ["/proc/self/environ", "/proc", "/sys/kernel/x", "/dev/mem"] {
            assert_eq!(
                credential_file_ok(kernel, dir),
                Err("resolves under /proc, /sys or /dev"),
                "{kernel}"
            );
        }
        assert!(credential_file_ok("/procfs/x", Some("/procfs")).is_ok());
        for unclean in ["relative", "/etc/termgate/targets/../hs256.key", "/a//b"] {
            assert!(credential_file_ok(unclean, dir).is_err(), "{unclean}");
        }
        assert!(credential_file_ok("/etc/termgate/targets/x", None)
            .unwrap_err()
            .contains("gateway.target_credentials_dir"));
        for bad_dir in ["/", "/proc", "/proc/self", "/dev/shm", "rel", "/a/../b"] {
            assert!(credentials_dir_ok(bad_dir).is_err(), "{bad_dir}");
            assert!(
                credential_file_ok(&format!("{bad_dir}/x"), Some(bad_dir)).is_err(),
                "{bad_dir}"
            );
        }
        assert_eq!(credentials_dir_ok("/srv/termgate/targets"), Ok(()));
    }

    fn def<'a>(users: &'a [String], roles: &'a [String]) -> TargetDefinition<'a> {
        TargetDefinition {
            name: "build-box",
            upstream: "http://127.0.0.1:7681",
            users,
            roles,
            credential: None,
        }
    }

    fn fields(d: &TargetDefinition<'_>) -> Vec<String> {
        d.check().1.into_iter().map(|p| p.field).collect()
    }

    #[test]
    fn a_valid_definition_has_no_problem_and_its_address() {
        let users = vec!["alice".to_owned()];
        let (address, problems) = def(&users, &[]).check();
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(address.unwrap().addrs, vec!["127.0.0.1:7681".to_owned()]);
    }

    #[test]
    fn each_problem_names_its_field() {
        let users = vec!["alice".to_owned(), "bad user".to_owned()];
        let roles = vec![String::new()];
        let header = TargetCredential::Header {
            name: "Authorization".into(),
        };
        let d = TargetDefinition {
            name: "Build Box",
            upstream: "ftp://x",
            users: &users,
            roles: &roles,
            credential: Some(&header),
        };
        assert_eq!(
            fields(&d),
            [
                "name",
                "upstream",
                "users[1]",
                "roles[0]",
                "credential.header"
            ]
        );
        assert_eq!(fields(&def(&[], &[])), ["users"]);
        let relative = TargetCredential::BasicFile {
            path: "cred.txt".into(),
        };
        let users = vec!["alice".to_owned()];
        let d = TargetDefinition {
            credential: Some(&relative),
            ..def(&users, &[])
        };
        assert_eq!(fields(&d), ["credential.basic_file"]);
        assert!(
            d.check().0.is_none(),
            "no address for an invalid definition"
        );
    }
}
