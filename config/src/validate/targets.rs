//! The rules for `[[targets]]`: each target's definition, its unique name and its
//! credential.

use std::path::Path;

use super::common::check_readable;
use crate::model::Config;

/// Checks `[[targets]]`.
pub(super) fn check(c: &Config, err: &mut impl FnMut(&str, String)) {
    let mut names = std::collections::HashSet::new();
    for (i, t) in c.targets.iter().enumerate() {
        let credential = match c.target_credential(t) {
            Ok(credential) => credential,
            Err(message) => {
                err(&format!("targets[{i}].credential"), message.into());
                None
            }
        };
        let definition = policy::target::TargetDefinition {
            name: &t.name,
            upstream: &t.upstream,
            users: &t.users,
            roles: &t.roles,
            credential: credential.as_ref(),
        };
        for p in definition.check().1 {
            err(&format!("targets[{i}].{}", p.field), p.message);
        }
        if !names.insert(t.name.as_str()) {
            err(
                &format!("targets[{i}].name"),
                format!("{:?} is used twice", t.name),
            );
        }
        if let Some(policy::feed::TargetCredential::BasicFile { path }) = &credential {
            check_readable(
                c,
                Path::new(path),
                &format!("targets[{i}].credential.basic_file"),
                err,
            );
        }
    }
}
