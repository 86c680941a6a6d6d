//! File + environment → typed `Config`, collecting every problem.

use std::path::Path;

use toml::Value;

use crate::error::{ConfigError, ConfigErrors};
use crate::model::{Config, Part};
use crate::validate;

/// Environment variables starting with this override config keys:
/// `TERMGATE__GATEWAY__LISTEN=127.0.0.1:18080` sets `gateway.listen`.
pub const ENV_PREFIX: &str = "TERMGATE__";

/// Loads, overrides from the process environment, validates and reads secrets.
pub fn load(path: &Path) -> Result<Config, ConfigErrors> {
    load_for(path, Part::All)
}

/// [`load`] for one part: only the files `part` reads are read and checked.
pub fn load_for(path: &Path, part: Part) -> Result<Config, ConfigErrors> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        ConfigErrors(vec![ConfigError::new(
            "<file>",
            format!("cannot read {}: {e}", path.display()),
        )])
    })?;
    let base = path
        .parent()
        .map(|p| {
            if p.as_os_str().is_empty() {
                Path::new(".")
            } else {
                p
            }
        })
        .unwrap_or(Path::new("."));
    let base = std::fs::canonicalize(base).unwrap_or_else(|_| base.to_path_buf());
    load_from_str_for(&text, &base, std::env::vars(), part)
}

/// Like [`load`], from text, with relative paths resolved against `base_dir` and the
/// overrides taken from `env` (only `TERMGATE__*` entries are considered).
pub fn load_from_str(
    text: &str,
    base_dir: &Path,
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<Config, ConfigErrors> {
    load_from_str_for(text, base_dir, env, Part::All)
}

/// [`load_from_str`] for one part (see [`load_for`]).
pub fn load_from_str_for(
    text: &str,
    base_dir: &Path,
    env: impl IntoIterator<Item = (String, String)>,
    part: Part,
) -> Result<Config, ConfigErrors> {
    let mut errors = Vec::new();
    let mut tree: Value = match text.parse::<toml::Table>() {
        Ok(t) => Value::Table(t),
        Err(e) => {
            let msg = e.message().to_owned();
            let at = e
                .span()
                .map(|s| {
                    let line = text[..s.start.min(text.len())].matches('\n').count() + 1;
                    format!(" (line {line})")
                })
                .unwrap_or_default();
            return Err(ConfigErrors(vec![ConfigError::new(
                "<file>",
                format!("not valid TOML{at}: {msg}"),
            )]));
        }
    };
    let mut from_env = Vec::new();
    let mut env: Vec<(String, String)> = env
        .into_iter()
        .filter(|(k, _)| k.starts_with(ENV_PREFIX))
        .collect();
    env.sort();
    for (name, raw) in env {
        match apply_override(&mut tree, &name, &raw) {
            Ok(key) => from_env.push((key, name)),
            Err(e) => errors.push(e),
        }
    }

    let mut config = deserialize_collecting(tree, &from_env, &mut errors);
    if let Some(c) = config.as_mut() {
        c.base_dir = base_dir.to_path_buf();
        c.part = part;
        validate::validate(c, &mut errors);
    }
    match config {
        Some(c) if errors.is_empty() => Ok(c),
        _ => Err(ConfigErrors(errors)),
    }
}

/// Applies one `TERMGATE__A__B=value` to the tree; returns the dotted key it set.
fn apply_override(tree: &mut Value, name: &str, raw: &str) -> Result<String, ConfigError> {
    let rest = &name[ENV_PREFIX.len()..];
    let segments: Vec<&str> = rest.split("__").collect();
    if segments.iter().any(|s| s.is_empty()) {
        return Err(ConfigError::new(
            name,
            "empty key segment in environment override",
        ));
    }
    let Some((last, parents)) = segments.split_last() else {
        return Err(ConfigError::new(name, "empty environment override name"));
    };
    let Value::Table(root) = tree else {
        return Err(ConfigError::new(name, "configuration root is not a table"));
    };
    let mut table: &mut toml::Table = root;
    let mut path = Vec::new();
    for seg in parents {
        let key = existing_key(table, seg);
        path.push(key.clone());
        let entry = table
            .entry(key)
            .or_insert_with(|| Value::Table(toml::Table::new()));
        table = match entry {
            Value::Table(t) => t,
            _ => {
                return Err(ConfigError::new(
                    path.join("."),
                    format!("{name}: not a table, cannot set a key inside it"),
                ))
            }
        };
    }
    let key = existing_key(table, last);
    path.push(key.clone());
    let value = typed_value(table.get(&key), raw)
        .map_err(|m| ConfigError::new(path.join("."), format!("{m} (from {name})")))?;
    table.insert(key, value);
    Ok(path.join("."))
}

/// Keys are matched case-insensitively (environment names are upper case); a new key
/// is written in lower case.
fn existing_key(table: &toml::Table, seg: &str) -> String {
    table
        .keys()
        .find(|k| k.eq_ignore_ascii_case(seg))
        .cloned()
        .unwrap_or_else(|| seg.to_ascii_lowercase())
}

/// Interprets an override with the type of the value it replaces; a new key is read as
/// a TOML value when it parses as one, else as a string.
fn typed_value(existing: Option<&Value>, raw: &str) -> Result<Value, String> {
    let as_toml = || {
        format!("v = {raw}")
            .parse::<toml::Table>()
            .ok()
            .and_then(|mut t| t.remove("v"))
    };
    match existing {
        Some(Value::String(_)) => Ok(Value::String(raw.to_owned())),
        Some(Value::Integer(_)) => raw
            .trim()
            .parse()
            .map(Value::Integer)
            .map_err(|_| format!("expected an integer, got {raw:?}")),
        Some(Value::Float(_)) => raw
            .trim()
            .parse()
            .map(Value::Float)
            .map_err(|_| format!("expected a number, got {raw:?}")),
        Some(Value::Boolean(_)) => match raw.trim() {
            "true" => Ok(Value::Boolean(true)),
            "false" => Ok(Value::Boolean(false)),
            _ => Err(format!("expected true or false, got {raw:?}")),
        },
        Some(Value::Array(_)) => match as_toml() {
            Some(v @ Value::Array(_)) => Ok(v),
            _ => Err(format!(
                "expected a TOML array such as [\"a\", \"b\"], got {raw:?}"
            )),
        },
        Some(Value::Table(_)) => Err("is a table; set its keys one by one".into()),
        Some(Value::Datetime(_)) | None => Ok(match as_toml() {
            Some(
                v @ (Value::Integer(_) | Value::Float(_) | Value::Boolean(_) | Value::Array(_)),
            ) => v,
            _ => Value::String(raw.to_owned()),
        }),
    }
}

/// Deserialises, and on each error records it (naming the key) and removes the
/// offending key before trying again, so that several mistakes are reported at once.
fn deserialize_collecting(
    mut tree: Value,
    from_env: &[(String, String)],
    errors: &mut Vec<ConfigError>,
) -> Option<Config> {
    for _ in 0..64 {
        let result: Result<Config, _> = serde_path_to_error::deserialize(tree.clone());
        let err = match result {
            Ok(c) => return Some(c),
            Err(e) => e,
        };
        let mut key = err.path().to_string();
        if key == "." {
            key.clear();
        }
        // The deserializer appends "in `path`" on later lines; the key is named separately.
        let inner = err
            .inner()
            .to_string()
            .lines()
            .next()
            .unwrap_or_default()
            .to_owned();
        let mut message = inner.clone();
        // What to drop before retrying: the offending key, or for a missing field its parent.
        let mut drop = key.clone();
        // serde reports an unknown field at its parent's path; name the field itself.
        if let Some(field) = inner
            .strip_prefix("unknown field `")
            .and_then(|r| r.split('`').next())
        {
            if key.rsplit('.').next() != Some(field) {
                key = join(&key, field);
            }
            drop = key.clone();
            message = format!("unknown key{}", expected_hint(&inner));
        } else if let Some(field) = inner
            .strip_prefix("missing field `")
            .and_then(|r| r.split('`').next())
        {
            if key.rsplit('.').next() != Some(field) {
                key = join(&key, field);
            } else {
                drop = key
                    .rsplit_once('.')
                    .map(|(p, _)| p.to_owned())
                    .unwrap_or_default();
            }
            message = "required key is missing".into();
        }
        if let Some((_, var)) = from_env.iter().find(|(k, _)| *k == key) {
            message = format!("{message} (from {var})");
        }
        let removable = !drop.is_empty() && remove_key(&mut tree, &drop);
        errors.push(ConfigError::new(key, message));
        if !removable {
            return None;
        }
    }
    None
}

fn join(parent: &str, field: &str) -> String {
    if parent.is_empty() {
        field.to_owned()
    } else {
        format!("{parent}.{field}")
    }
}

fn expected_hint(serde_msg: &str) -> String {
    serde_msg
        .split_once(", expected ")
        .map(|(_, rest)| format!("; expected {rest}"))
        .unwrap_or_default()
}

/// Removes a dotted key (with `[n]` array indices) from the tree.
fn remove_key(tree: &mut Value, key: &str) -> bool {
    let parts: Vec<&str> = key.split('.').collect();
    let Some((last, parents)) = parts.split_last() else {
        return false;
    };
    let mut node = tree;
    for p in parents {
        node = match step(node, p) {
            Some(n) => n,
            None => return false,
        };
    }
    let (name, index) = split_index(last);
    match index {
        None => node.as_table_mut().and_then(|t| t.remove(name)).is_some(),
        Some(i) => match node
            .as_table_mut()
            .and_then(|t| t.get_mut(name))
            .and_then(|v| v.as_array_mut())
        {
            Some(a) if i < a.len() => {
                a.remove(i);
                true
            }
            _ => false,
        },
    }
}

fn split_index(seg: &str) -> (&str, Option<usize>) {
    match seg.split_once('[') {
        Some((name, rest)) => (name, rest.trim_end_matches(']').parse().ok()),
        None => (seg, None),
    }
}

fn step<'a>(node: &'a mut Value, seg: &str) -> Option<&'a mut Value> {
    let (name, index) = split_index(seg);
    let v = node.as_table_mut()?.get_mut(name)?;
    match index {
        None => Some(v),
        Some(i) => v.as_array_mut()?.get_mut(i),
    }
}
