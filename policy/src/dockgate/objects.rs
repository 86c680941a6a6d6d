//! The objects termgate labels: the labels themselves, whose labels pass, which
//! volumes are plain, what a volume create may carry and which instance a listing's
//! filters confine it to.

use std::collections::BTreeMap;

use serde_json::Value;

use super::denied::{deny, Denied, Reason};
use super::json::{check_fields, strict_json, Field, Fields};
use super::target::{is_plain_ref, Asked};

/// The label naming what termgate made an object as (`session`, `copy`, `home`,
/// `workspace`).
pub const MANAGED_LABEL: &str = "termgate.managed";
/// The label naming the deployment (`instance`) an object belongs to.
pub const INSTANCE_LABEL: &str = "termgate.instance";

/// A label set, as Docker reports it and as create bodies carry it.
pub type Labels = BTreeMap<String, String>;

/// The kinds of Docker object termgate labels (control uses no networks).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ObjectKind {
    /// A session container (`termgate.managed=session`) or a workspace copy's job
    /// (`copy`).
    Container,
    /// A home volume (`termgate.managed=home`), a workspace's (`workspace`) or a
    /// shared workspace's (`shared`).
    Volume,
}

impl ObjectKind {
    /// The values of [`MANAGED_LABEL`] termgate writes on this kind.
    pub fn managed_values(self) -> &'static [&'static str] {
        match self {
            ObjectKind::Container => &["session", "copy"],
            ObjectKind::Volume => &["home", "workspace", "shared"],
        }
    }

    fn managed(self, labels: &Labels) -> bool {
        labels
            .get(MANAGED_LABEL)
            .is_some_and(|m| self.managed_values().contains(&m.as_str()))
    }
}

const VOLUME_FIELDS: &[(&str, Field)] = &[
    ("Name", Field::Read),
    ("Labels", Field::Read),
    ("Driver", Field::Read),
    ("DriverOpts", Field::Read),
    ("ClusterVolumeSpec", Field::DefaultOnly),
];

/// The non-empty instance of labels that mark an object of `kind` as termgate's.
pub(super) fn termgate_instance(labels: &Labels, kind: ObjectKind) -> Result<String, Denied> {
    let instance = labels.get(INSTANCE_LABEL).filter(|i| !i.is_empty());
    match instance {
        Some(i) if kind.managed(labels) => Ok(i.clone()),
        _ => Err(deny(
            Reason::LabelsRequired,
            format!(
                "Labels must carry {MANAGED_LABEL}={} and a non-empty {INSTANCE_LABEL}",
                kind.managed_values().join("|")
            ),
        )),
    }
}

/// Whether a volume's driver and options (from its creation or its inspection) make it
/// a plain local volume: the `local` driver without options. `type=none,o=bind,
/// device=/…` would make it a host path, `device=/dev/…` a host disk, another driver
/// anything at all.
pub fn volume_ok(driver: &str, options: &BTreeMap<String, String>) -> Result<(), Denied> {
    if !(driver.is_empty() || driver == "local") {
        return Err(deny(
            Reason::VolumeDriver,
            format!("volume driver {driver:?} is not allowed, only local"),
        ));
    }
    if !options.is_empty() {
        let keys: Vec<&str> = options.keys().map(String::as_str).collect();
        return Err(deny(
            Reason::VolumeDriver,
            format!("volume driver options {keys:?} are not allowed (o=bind or device make a host path a volume)"),
        ));
    }
    Ok(())
}

/// Reads a volume create body; returns the instance of its labels.
pub(super) fn volume_create(body: &Value) -> Result<String, Denied> {
    let obj = body
        .as_object()
        .ok_or_else(|| deny(Reason::InvalidBody, "the body must be a JSON object"))?;
    check_fields(obj, VOLUME_FIELDS, "", Reason::VolumeDriver)?;
    let f = Fields { obj, at: "" };
    match f.text("Name")? {
        Some(name) if is_plain_ref(name) => {}
        other => {
            return Err(deny(
                Reason::BadReference,
                format!("volume Name {other:?} is not a plain name"),
            ))
        }
    }
    volume_ok(
        f.text("Driver")?.unwrap_or_default(),
        &f.string_map("DriverOpts")?,
    )?;
    termgate_instance(&f.string_map("Labels")?, ObjectKind::Volume)
}

/// Whether an object's labels (from the binary's inspection after a
/// `Verdict::PassIfLabelled`) mark it as termgate's `kind` of deployment `instance`.
pub fn labels_pass(kind: ObjectKind, labels: &Labels, instance: &str) -> bool {
    !instance.is_empty()
        && kind.managed(labels)
        && labels.get(INSTANCE_LABEL).map(String::as_str) == Some(instance)
}

/// The instance a list's or event stream's `filters` confine it to. Only bollard's
/// form (`{"key":["value",…]}`), only keys in `allowed`; `label` must name exactly one
/// non-empty `termgate.instance` (and `termgate.managed=session` when `need_session`).
pub(super) fn filtered_instance(
    asked: &Asked,
    allowed: &[&str],
    need_session: bool,
) -> Result<String, Denied> {
    let required = || {
        let mut m = format!(
            "{} needs a filters query with label {INSTANCE_LABEL}=<instance>",
            asked.path()
        );
        if need_session {
            m.push_str(&format!(" and {MANAGED_LABEL}=session"));
        }
        deny(Reason::FilterRequired, m)
    };
    let raw = asked.query_value("filters").ok_or_else(required)?;
    let value = strict_json(raw.as_bytes())
        .map_err(|e| deny(Reason::BadQuery, format!("filters: {}", e.message)))?;
    let Value::Object(filters) = value else {
        return Err(deny(Reason::BadQuery, "filters must be a JSON object"));
    };
    let mut instances: Vec<&str> = Vec::new();
    let mut session = false;
    for (key, values) in &filters {
        if !allowed.contains(&key.as_str()) {
            return Err(deny(
                Reason::QueryNotAllowed,
                format!("filter {key:?} is not allowed here"),
            ));
        }
        let Some(values) = values.as_array() else {
            return Err(deny(
                Reason::BadQuery,
                format!("filter {key:?} must be an array of strings"),
            ));
        };
        for v in values {
            let Some(v) = v.as_str() else {
                return Err(deny(
                    Reason::BadQuery,
                    format!("filter {key:?} must be an array of strings"),
                ));
            };
            if key != "label" {
                continue;
            }
            if let Some(i) = v
                .strip_prefix(INSTANCE_LABEL)
                .and_then(|r| r.strip_prefix('='))
            {
                if !i.is_empty() && !instances.contains(&i) {
                    instances.push(i);
                }
            }
            if v.strip_prefix(MANAGED_LABEL)
                .and_then(|r| r.strip_prefix('='))
                == Some("session")
            {
                session = true;
            }
        }
    }
    match instances.as_slice() {
        [one] if session || !need_session => Ok((*one).to_owned()),
        _ => Err(required()),
    }
}
