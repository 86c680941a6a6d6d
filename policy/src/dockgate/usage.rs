//! What control is told of `GET /system/df`: the figures of its deployment's volumes,
//! and of the volumes the configuration lends as shared workspaces, and nothing about
//! any other volume, image, container or cache of the daemon.

use serde_json::{json, Map, Value};

use super::denied::{deny, Denied, Reason};
use super::objects::{labels_pass, Labels, ObjectKind};

/// The most of the daemon's answer dockgate reads before cutting it.
pub const MAX_USAGE_ANSWER: usize = 16 << 20;

/// Cuts the daemon's answer to `GET /system/df` down to the volumes of `instance`
/// (labelled as termgate's) and those named in `lent` that carry no termgate label,
/// each with its `Name`, `Labels` and `UsageData`, in the shape of Docker API 1.52
/// (`{"VolumeUsage":{"Items":[…]}}`) whichever shape the daemon sent: before 1.52 the
/// list is `Volumes`.
pub fn volume_usage(daemon: &[u8], instance: &str, lent: &[String]) -> Result<Vec<u8>, Denied> {
    let answer: Value = serde_json::from_slice(daemon).map_err(|e| {
        deny(
            Reason::InvalidJson,
            format!("the daemon's disk usage is not JSON: {e}"),
        )
    })?;
    let listed = answer
        .pointer("/VolumeUsage/Items")
        .or_else(|| answer.get("Volumes"))
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let items: Vec<Value> = listed
        .iter()
        .filter_map(|v| {
            let name = v.get("Name")?.as_str()?;
            let labels: Labels = v
                .get("Labels")
                .and_then(Value::as_object)
                .map(|m| {
                    m.iter()
                        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                        .collect()
                })
                .unwrap_or_default();
            let ours = labels_pass(ObjectKind::Volume, &labels, instance);
            let lent = lent.iter().any(|l| l == name)
                && !labels.keys().any(|k| k.starts_with("termgate."));
            (ours || lent).then(|| {
                let mut item = Map::new();
                item.insert("Name".into(), json!(name));
                item.insert("Labels".into(), json!(labels));
                if let Some(u) = v.get("UsageData") {
                    item.insert("UsageData".into(), u.clone());
                }
                Value::Object(item)
            })
        })
        .collect();
    Ok(json!({ "VolumeUsage": { "Items": items } })
        .to_string()
        .into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(out: &[u8]) -> Vec<String> {
        let v: Value = serde_json::from_slice(out).unwrap();
        v["VolumeUsage"]["Items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["Name"].as_str().unwrap().to_owned())
            .collect()
    }

    fn volume(name: &str, labels: Value, size: i64) -> Value {
        json!({"Name": name, "Labels": labels, "Mountpoint": "/var/lib/docker/volumes/x",
               "Driver": "local", "UsageData": {"Size": size, "RefCount": 0}})
    }

    fn daemon_answers() -> Vec<Value> {
        let vols = vec![
            volume(
                "ours",
                json!({"termgate.managed": "workspace", "termgate.instance": "i1"}),
                10,
            ),
            volume(
                "home",
                json!({"termgate.managed": "home", "termgate.instance": "i1"}),
                20,
            ),
            volume(
                "theirs",
                json!({"termgate.managed": "workspace", "termgate.instance": "i2"}),
                30,
            ),
            volume("unlabelled", Value::Null, 40),
            volume("team-data", json!({}), 50),
            volume(
                "team-fake",
                json!({"termgate.managed": "workspace", "termgate.instance": "i2"}),
                60,
            ),
            volume(
                "session-of",
                json!({"termgate.managed": "session", "termgate.instance": "i1"}),
                70,
            ),
        ];
        vec![
            // Before API 1.52.
            json!({"LayersSize": 1, "Images": [{"Id": "sha256:x"}], "Containers": [{"Id": "c"}],
                   "Volumes": vols.clone(), "BuildCache": null}),
            // From 1.52 on.
            json!({"ImageUsage": {"Items": [{"Id": "sha256:x"}]},
                   "VolumeUsage": {"TotalSize": 280, "Items": vols}}),
        ]
    }

    #[test]
    fn only_the_deployments_and_the_lent_volumes_are_told_in_either_shape() {
        for answer in daemon_answers() {
            let out = volume_usage(
                answer.to_string().as_bytes(),
                "i1",
                &["team-data".into(), "team-fake".into()],
            )
            .unwrap();
            assert_eq!(names(&out), ["ours", "home", "team-data"], "{answer}");
            let v: Value = serde_json::from_slice(&out).unwrap();
            assert_eq!(v.as_object().unwrap().len(), 1, "{v}");
            assert_eq!(v["VolumeUsage"].as_object().unwrap().len(), 1, "{v}");
            let first = &v["VolumeUsage"]["Items"][0];
            assert_eq!(first["UsageData"]["Size"], 10);
            assert!(first.get("Mountpoint").is_none(), "{first}");
        }
    }

    #[test]
    fn an_empty_instance_is_told_nothing_of_its_own() {
        let answer = daemon_answers().remove(0).to_string();
        assert_eq!(
            names(&volume_usage(answer.as_bytes(), "", &[]).unwrap()),
            Vec::<String>::new()
        );
    }

    #[test]
    fn an_answer_without_volumes_or_not_json_is_handled() {
        let out = volume_usage(br#"{"Volumes":null}"#, "i1", &[]).unwrap();
        assert_eq!(names(&out), Vec::<String>::new());
        let e = volume_usage(b"<html>", "i1", &[]).unwrap_err();
        assert_eq!(e.code(), "invalid_json");
    }
}
