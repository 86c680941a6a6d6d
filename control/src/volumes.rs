//! The workspaces' volumes against their records, host by host, and their sizes.
//!
//! On every reconcile interval each answering host's volumes labelled with this
//! deployment are listed and held against the workspace records. Nothing is ever
//! removed here: a workspace or shared volume without a record, one whose labels are
//! not those termgate wrote for its record, and a record whose volume is gone are each
//! said once, as an audit line, when seen on two passes in a row (a create or delete
//! in flight between the two steps is not reported).
//!
//! Sizes come from Docker's disk usage (`GET /system/df`, which dockgate cuts to this
//! deployment's volumes). Docker walks every volume of the host for it, one such walk
//! at a time, and its volume calls slow down meanwhile, so it is asked sparingly:
//! every [`SIZE_INTERVAL`], and soon after a session on a chosen workspace ended or a
//! copy finished ([`Workspaces::measure_workspaces_soon`]), never twice within
//! [`SIZE_GAP`]. A home workspace's size is the sum of its volumes on every host.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use crate::labels::{self, Labels};
use crate::model::{Workspace, WorkspaceOrigin, WorkspaceState};
use crate::service::Workspaces;

/// How often sizes are measured without a reason to (Docker walks every volume).
const SIZE_INTERVAL: Duration = Duration::from_secs(300);
/// How long after an ask the sizes are measured: asks that come together are one.
const SIZE_SETTLE: Duration = Duration::from_millis(200);
/// The least time between two measurements.
const SIZE_GAP: Duration = Duration::from_secs(30);
/// The waits before each try of a host's measurement.
const SIZE_RETRIES: [Duration; 5] = [
    Duration::ZERO,
    Duration::from_millis(250),
    Duration::from_millis(500),
    Duration::from_secs(1),
    Duration::from_secs(2),
];

/// What a pass found wrong with one volume or record.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Finding {
    /// A workspace or shared volume of this deployment that no record names.
    Unrecorded { host: String, volume: String },
    /// A volume whose labels are not the ones termgate wrote for the record naming it.
    Mislabelled { host: String, volume: String },
    /// A ready record whose volume its host no longer has.
    Missing { host: String, volume: String },
}

impl Finding {
    fn say(&self, records: &HashMap<&str, &Workspace>) {
        match self {
            Finding::Unrecorded { host, volume } => {
                tracing::warn!(target: "audit", host = %host, volume = %volume, "workspace volume kept: it carries this deployment's labels but no workspace record names it");
            }
            Finding::Mislabelled { host, volume } => {
                let w = records.get(volume.as_str());
                tracing::warn!(target: "audit", host = %host, volume = %volume, workspace = %w.map(|w| w.id.to_string()).unwrap_or_default(), sub = %w.map(|w| w.owner.as_str()).unwrap_or_default(), "workspace volume kept: its labels and its record disagree");
            }
            Finding::Missing { host, volume } => {
                let w = records.get(volume.as_str());
                tracing::warn!(target: "audit", host = %host, volume = %volume, workspace = %w.map(|w| w.id.to_string()).unwrap_or_default(), sub = %w.map(|w| w.owner.as_str()).unwrap_or_default(), "workspace volume missing: its record says it is on this host");
            }
        }
    }
}

/// The findings of one pass over one host's listing.
fn findings(
    instance: &str,
    host: &str,
    listed: &[(String, Labels)],
    records: &HashMap<&str, &Workspace>,
) -> HashSet<Finding> {
    let mut out = HashSet::new();
    for (volume, l) in listed {
        let managed = l.get(labels::MANAGED).map(String::as_str);
        if !matches!(managed, Some("workspace" | "shared")) {
            continue;
        }
        let finding = || (host.to_owned(), volume.clone());
        match records.get(volume.as_str()) {
            None => {
                let (host, volume) = finding();
                out.insert(Finding::Unrecorded { host, volume });
            }
            Some(w) if !labels_are_for(instance, volume, l, w) => {
                let (host, volume) = finding();
                out.insert(Finding::Mislabelled { host, volume });
            }
            Some(_) => {}
        }
    }
    let present: HashSet<&str> = listed.iter().map(|(v, _)| v.as_str()).collect();
    for w in records.values() {
        let made_here = matches!(w.origin, WorkspaceOrigin::Created | WorkspaceOrigin::Shared)
            && w.state == WorkspaceState::Ready
            && w.host.as_deref() == Some(host);
        if made_here && !present.contains(w.volume.as_str()) {
            out.insert(Finding::Missing {
                host: host.to_owned(),
                volume: w.volume.clone(),
            });
        }
    }
    out
}

/// Whether `labels` on `volume` are exactly the ones termgate writes for record `w`.
fn labels_are_for(instance: &str, volume: &str, l: &Labels, w: &Workspace) -> bool {
    let want = match w.origin {
        WorkspaceOrigin::Created => {
            policy::declared::workspace_volume_labels(instance, &w.owner, &w.id)
        }
        WorkspaceOrigin::Shared => policy::declared::shared_volume_labels(instance, &w.id),
        WorkspaceOrigin::Home | WorkspaceOrigin::Borrowed => return false,
    };
    *l == want && w.volume == volume
}

/// The sizes each record's volumes add up to, from each host's measurement: a record
/// on one host counts that host's figure, a home workspace (one volume on each host
/// its owner's sessions ran on) the sum; `None` when no host measured it.
fn sizes_of(
    records: &[Workspace],
    measured: &HashMap<String, HashMap<String, u64>>,
) -> Vec<(usize, u64)> {
    let mut out = Vec::new();
    for (i, w) in records.iter().enumerate() {
        let figures: Vec<u64> = match &w.host {
            Some(h) => measured
                .get(h)
                .and_then(|m| m.get(&w.volume))
                .copied()
                .into_iter()
                .collect(),
            None => measured
                .values()
                .filter_map(|m| m.get(&w.volume).copied())
                .collect(),
        };
        if !figures.is_empty() {
            out.push((i, figures.iter().sum()));
        }
    }
    out
}

/// Checks the volumes and measures them, until `shutdown` fires.
pub async fn run(workspaces: Workspaces, shutdown: tokio::sync::watch::Receiver<bool>) {
    // Apart, so that a measurement waiting for its turn never holds up a check.
    tokio::join!(
        checks(&workspaces, shutdown.clone()),
        sizes(&workspaces, shutdown)
    );
}

/// The checks, every reconcile interval.
async fn checks(workspaces: &Workspaces, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    let mut check = tokio::time::interval(Duration::from_secs(
        workspaces.config().control.reconcile_interval_seconds,
    ));
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut seen_once: HashSet<Finding> = HashSet::new();
    let mut said: HashSet<Finding> = HashSet::new();
    loop {
        tokio::select! {
            _ = check.tick() => pass(workspaces, &mut seen_once, &mut said).await,
            _ = shutdown.changed() => return,
        }
    }
}

/// The measurements: every [`SIZE_INTERVAL`] and when asked, never within [`SIZE_GAP`]
/// of the last.
async fn sizes(workspaces: &Workspaces, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    use tokio::time::Instant;
    let mut measure = tokio::time::interval_at(Instant::now() + SIZE_INTERVAL, SIZE_INTERVAL);
    measure.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last: Option<Instant> = None;
    loop {
        tokio::select! {
            _ = measure.tick() => {}
            _ = workspaces.sizes_wanted().notified() => {
                let soonest = Instant::now() + SIZE_SETTLE;
                let turn = last.map_or(soonest, |t| (t + SIZE_GAP).max(soonest));
                tokio::select! {
                    _ = tokio::time::sleep_until(turn) => {}
                    _ = shutdown.changed() => return,
                }
            }
            _ = shutdown.changed() => return,
        }
        measure_sizes(workspaces).await;
        last = Some(Instant::now());
    }
}

/// One check of every answering host: a finding is said when seen on two passes in a
/// row, once, and again only after it went away.
async fn pass(
    workspaces: &Workspaces,
    seen_once: &mut HashSet<Finding>,
    said: &mut HashSet<Finding>,
) {
    let Ok(all) = workspaces.store().list_workspaces(None) else {
        return;
    };
    let records: HashMap<&str, &Workspace> = all.iter().map(|w| (w.volume.as_str(), w)).collect();
    let instance = &workspaces.config().instance;
    let mut now: HashSet<Finding> = HashSet::new();
    let mut listed_hosts: HashSet<String> = HashSet::new();
    for host in workspaces.hosts().iter() {
        if !host.is_up() {
            continue;
        }
        let Ok(docker) = host.docker() else { continue };
        match docker.list_volumes(instance).await {
            Ok(listed) => {
                listed_hosts.insert(host.name().to_owned());
                now.extend(findings(instance, host.name(), &listed, &records));
            }
            Err(e) => {
                tracing::debug!(host = %host.name(), error = %e, "volumes: cannot list; the next pass asks again");
            }
        }
    }
    // A host that did not answer keeps what was seen of it.
    let of_listed = |f: &Finding| match f {
        Finding::Unrecorded { host, .. }
        | Finding::Mislabelled { host, .. }
        | Finding::Missing { host, .. } => listed_hosts.contains(host),
    };
    for f in &now {
        if seen_once.contains(f) && said.insert(f.clone()) {
            f.say(&records);
        }
    }
    said.retain(|f| now.contains(f) || !of_listed(f));
    seen_once.retain(|f| !of_listed(f));
    seen_once.extend(now);
}

/// Measures every answering host's volumes and records the sizes that changed.
async fn measure_sizes(workspaces: &Workspaces) {
    let mut measured: HashMap<String, HashMap<String, u64>> = HashMap::new();
    for host in workspaces.hosts().iter() {
        if !host.is_up() {
            continue;
        }
        let Ok(docker) = host.docker() else { continue };
        // Docker runs one disk usage at a time and refuses another meanwhile ("a disk
        // usage operation is already running"): asked again a little later.
        let mut last = None;
        for wait in SIZE_RETRIES {
            tokio::time::sleep(wait).await;
            match docker.volume_sizes().await {
                Ok(m) => {
                    measured.insert(host.name().to_owned(), m);
                    last = None;
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        if let Some(e) = last {
            tracing::warn!(host = %host.name(), error = %e, "volumes: cannot measure; sizes stay as last measured");
        }
    }
    let Ok(records) = workspaces.store().list_workspaces(None) else {
        return;
    };
    for (i, size) in sizes_of(&records, &measured) {
        let w = &records[i];
        if w.size_bytes == Some(size) {
            continue;
        }
        if let Err(e) = workspaces.store().change_workspace(&w.id, |w, _| {
            w.size_bytes = Some(size);
            Ok(())
        }) {
            tracing::debug!(workspace = %w.id, error = %e, "volumes: size not recorded");
        }
    }
}

#[cfg(test)]
mod tests {
    use policy::{SessionId, Sub};

    use super::*;

    fn record(origin: WorkspaceOrigin, host: Option<&str>, volume: &str) -> Workspace {
        let id = SessionId::parse("abcdefghijk234mn").unwrap();
        Workspace {
            id,
            owner: Sub::parse("alice").unwrap(),
            name: "w".into(),
            volume: volume.into(),
            origin,
            host: host.map(str::to_owned),
            state: WorkspaceState::Ready,
            created_at: 0,
            size_bytes: None,
            copied_from: None,
            grants: Vec::new(),
        }
    }

    #[test]
    fn a_volume_and_its_record_agree_only_on_the_labels_termgate_wrote() {
        let w = record(
            WorkspaceOrigin::Created,
            Some("h1"),
            "termgate-ws-i-abcdefghijk234mn",
        );
        let good = policy::declared::workspace_volume_labels("i", &w.owner, &w.id);
        let mut other_owner = good.clone();
        other_owner.insert(labels::OWNER.into(), "bob".into());
        let listed = vec![
            (w.volume.clone(), good.clone()),
            ("termgate-ws-i-zzzzzzzzzzzzzzzz".to_owned(), good.clone()),
            (
                "termgate-home-i-alice".to_owned(),
                Labels::from([(labels::MANAGED.to_owned(), "home".to_owned())]),
            ),
        ];
        let records = HashMap::from([(w.volume.as_str(), &w)]);
        let found = findings("i", "h1", &listed, &records);
        assert_eq!(
            found,
            HashSet::from([Finding::Unrecorded {
                host: "h1".into(),
                volume: "termgate-ws-i-zzzzzzzzzzzzzzzz".into()
            }])
        );
        let listed = vec![(w.volume.clone(), other_owner)];
        assert_eq!(
            findings("i", "h1", &listed, &records),
            HashSet::from([Finding::Mislabelled {
                host: "h1".into(),
                volume: w.volume.clone()
            }])
        );
        // Gone from its host; another host's listing says nothing of it.
        assert_eq!(
            findings("i", "h1", &[], &records),
            HashSet::from([Finding::Missing {
                host: "h1".into(),
                volume: w.volume.clone()
            }])
        );
        assert!(findings("i", "h2", &[], &records).is_empty());
    }

    #[test]
    fn a_home_workspace_counts_its_volume_on_every_host() {
        let home = record(WorkspaceOrigin::Home, None, "home-v");
        let made = record(WorkspaceOrigin::Created, Some("h2"), "ws-v");
        let never = record(WorkspaceOrigin::Created, Some("h1"), "gone-v");
        let measured = HashMap::from([
            (
                "h1".to_owned(),
                HashMap::from([("home-v".to_owned(), 10), ("ws-v".to_owned(), 999)]),
            ),
            (
                "h2".to_owned(),
                HashMap::from([("home-v".to_owned(), 5), ("ws-v".to_owned(), 7)]),
            ),
        ]);
        assert_eq!(
            sizes_of(&[home, made, never], &measured),
            vec![(0, 15), (1, 7)]
        );
    }
}
