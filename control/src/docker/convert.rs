//! Docker's answers (bollard models) as termgate's own types.

use std::collections::{BTreeMap, HashMap};

use bollard::models::{
    ContainerInspectResponse, ContainerSummary, EventMessage, EventMessageTypeEnum,
};

use super::types::{ContainerEvent, ContainerState, ContainerStatus, EventAction};

fn to_btree(m: Option<HashMap<String, String>>) -> BTreeMap<String, String> {
    m.unwrap_or_default().into_iter().collect()
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Unix seconds of an RFC 3339 timestamp as Docker writes it
/// (`2024-05-07T21:09:36.123456789Z`, or with a `±hh:mm` offset).
fn parse_rfc3339(s: &str) -> Option<i64> {
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let p = s.get(r)?;
        if p.bytes().all(|b| b.is_ascii_digit()) {
            p.parse().ok()
        } else {
            None
        }
    };
    let b = s.as_bytes();
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't' | b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let mut i = 19;
    if b[i] == b'.' {
        i += 1;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
    }
    let offset = match b.get(i)? {
        b'Z' | b'z' if i + 1 == b.len() => 0,
        sign @ (b'+' | b'-') if i + 6 == b.len() && b[i + 3] == b':' => {
            let o = num(i + 1..i + 3)? * 3600 + num(i + 4..i + 6)? * 60;
            if *sign == b'+' {
                o
            } else {
                -o
            }
        }
        _ => return None,
    };
    Some(days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + sec - offset)
}

/// A container of a listing.
pub(super) fn status_from_summary(c: ContainerSummary) -> ContainerStatus {
    ContainerStatus {
        id: c.id.unwrap_or_default(),
        name: c
            .names
            .and_then(|n| n.into_iter().next())
            .map(|n| n.trim_start_matches('/').to_owned())
            .unwrap_or_default(),
        labels: to_btree(c.labels),
        state: c.state.map_or(ContainerState::Unknown, |s| {
            ContainerState::parse(s.as_ref())
        }),
        created: c.created.unwrap_or(0),
        oom_killed: false,
        exit_code: None,
    }
}

/// An inspected container.
pub(super) fn status_from_inspect(c: ContainerInspectResponse) -> ContainerStatus {
    ContainerStatus {
        id: c.id.unwrap_or_default(),
        name: c
            .name
            .map(|n| n.trim_start_matches('/').to_owned())
            .unwrap_or_default(),
        labels: to_btree(c.config.and_then(|cfg| cfg.labels)),
        state: c
            .state
            .as_ref()
            .and_then(|s| s.status)
            .map_or(ContainerState::Unknown, |s| {
                ContainerState::parse(s.as_ref())
            }),
        created: c.created.as_deref().and_then(parse_rfc3339).unwrap_or(0),
        oom_killed: c.state.as_ref().and_then(|s| s.oom_killed).unwrap_or(false),
        exit_code: c
            .state
            .as_ref()
            .filter(|s| !matches!(s.running, Some(true)))
            .and_then(|s| s.exit_code),
    }
}

/// A container event of one of the [`EventAction::WATCHED`] kinds; `None` for any
/// other message.
pub(super) fn event_from_message(m: EventMessage) -> Option<ContainerEvent> {
    if m.typ != Some(EventMessageTypeEnum::CONTAINER) {
        return None;
    }
    let action = EventAction::parse(m.action.as_deref()?);
    if !EventAction::WATCHED.contains(&action) {
        return None;
    }
    let actor = m.actor?;
    Some(ContainerEvent {
        id: actor.id?,
        action,
        labels: to_btree(actor.attributes),
    })
}

#[cfg(test)]
mod tests {
    use bollard::models::EventActor;

    use super::*;

    #[test]
    fn rfc3339_timestamps_parse_to_unix_seconds() {
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            parse_rfc3339("2024-05-07T21:09:36.123456789Z"),
            Some(1_715_116_176)
        );
        assert_eq!(
            parse_rfc3339("2024-05-07T23:09:36+02:00"),
            Some(1_715_116_176)
        );
        assert_eq!(parse_rfc3339("2000-02-29T12:00:00.5Z"), Some(951_825_600));
        assert_eq!(parse_rfc3339("0001-01-01T00:00:00Z"), Some(-62_135_596_800));
        for bad in [
            "",
            "2024-05-07",
            "2024-13-01T00:00:00Z",
            "2024-05-07T21:09:36",
            "x024-05-07T21:09:36Z",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }

    fn message(typ: EventMessageTypeEnum, action: &str) -> EventMessage {
        EventMessage {
            typ: Some(typ),
            action: Some(action.to_owned()),
            actor: Some(EventActor {
                id: Some("c1".into()),
                attributes: Some(HashMap::from([(
                    "termgate.instance".to_owned(),
                    "prod".to_owned(),
                )])),
            }),
            ..Default::default()
        }
    }

    #[test]
    fn only_watched_container_events_are_reported() {
        let e = event_from_message(message(EventMessageTypeEnum::CONTAINER, "oom"))
            .expect("an oom event");
        assert_eq!(e.id, "c1");
        assert_eq!(e.action, EventAction::Oom);
        assert_eq!(
            e.labels.get("termgate.instance").map(String::as_str),
            Some("prod")
        );
        assert!(event_from_message(message(EventMessageTypeEnum::CONTAINER, "start")).is_none());
        assert!(event_from_message(message(EventMessageTypeEnum::VOLUME, "destroy")).is_none());
    }
}
