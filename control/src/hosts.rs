//! The Docker hosts control places sessions on (design §7): each with its own client,
//! ttyd pool, capacity and health, and the placement of a new session among them.
//!
//! A configuration without `[[docker.hosts]]` has one implicit host, `local`, that
//! behaves as the single daemon always did: it is never probed nor marked down, and its
//! routes keep the gateway's own pool.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use config::HostSpec;

use crate::docker::{Docker, DockerError};
use crate::model::{Pools, TtydAddress};

/// One Docker host.
pub struct Host {
    spec: HostSpec,
    pool: Option<TtydAddress>,
    /// Replaced by a freshly negotiated client each time the host comes back; cloned
    /// out (cheap: bollard shares its connection pool) so no lock is held across a call.
    /// `None` until a client could be made (a unix socket that is not there yet).
    client: RwLock<Option<Docker>>,
    /// Bound on every call, for clients made later.
    timeout: Duration,
    up: AtomicBool,
    /// Whether the daemon's seccomp support has been judged acceptable.
    seccomp_checked: AtomicBool,
    /// Whether the reason it cannot be used yet was logged (once, not every probe).
    refusal_logged: AtomicBool,
    /// The OCI runtimes its daemon offers (`None`: not known yet, it has not answered).
    runtimes: RwLock<Option<Vec<String>>>,
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("name", &self.spec.name)
            .field("up", &self.is_up())
            .finish_non_exhaustive()
    }
}

/// What a probe of a host found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    /// It answers (and came back now when `came_back`).
    Up {
        /// It was down before this probe.
        came_back: bool,
    },
    /// It does not answer (and went down now when `went_down`).
    Down {
        /// It was up before this probe.
        went_down: bool,
    },
}

impl Host {
    /// A host with client `client` (`None`: made at its first probe), up or down as its
    /// first contact found it, whose calls are bounded by `timeout`.
    pub fn new(
        spec: HostSpec,
        client: Option<Docker>,
        timeout: Duration,
        up: bool,
        seccomp_checked: bool,
    ) -> Host {
        let pool = (!spec.ttyd_pool.is_empty()).then(|| TtydAddress {
            addrs: spec.ttyd_pool.clone(),
            base_path: String::new(),
        });
        Host {
            spec,
            pool,
            client: RwLock::new(client),
            timeout,
            up: AtomicBool::new(up),
            seccomp_checked: AtomicBool::new(seccomp_checked),
            refusal_logged: AtomicBool::new(false),
            runtimes: RwLock::new(None),
        }
    }

    /// Notes the OCI runtimes its daemon offers.
    pub fn set_runtimes(&self, runtimes: Vec<String>) {
        *self
            .runtimes
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(runtimes);
    }

    /// The OCI runtimes its daemon offers, once it answered.
    pub fn runtimes(&self) -> Option<Vec<String>> {
        self.runtimes
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Whether it can run sessions under `runtime` (`None`: the daemon's default, which
    /// every daemon has); a host that has not answered yet cannot say so.
    pub fn has_runtime(&self, runtime: Option<&str>) -> bool {
        let Some(wanted) = runtime else {
            return true;
        };
        self.runtimes
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .as_ref()
            .is_some_and(|r| r.iter().any(|n| n == wanted))
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// Most sessions it holds at once.
    pub fn capacity(&self) -> u32 {
        self.spec.capacity
    }

    /// Whether its health is watched: false for the implicit `local` host.
    pub fn is_monitored(&self) -> bool {
        !self.spec.implicit
    }

    /// Whether it answered at the last probe (always true for the implicit host).
    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::SeqCst)
    }

    /// Its Docker client; unavailable while none could be made.
    pub fn docker(&self) -> Result<Docker, DockerError> {
        self.client
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
            .ok_or_else(|| {
                DockerError::Unavailable(format!(
                    "Docker host {:?} has not answered yet",
                    self.name()
                ))
            })
    }

    /// A client for its endpoint, not yet negotiated.
    fn new_client(&self) -> Result<Docker, DockerError> {
        let tls = self
            .spec
            .tls
            .as_ref()
            .map(|(ca, cert, key)| (ca.as_path(), cert.as_path(), key.as_path()));
        Docker::unnegotiated(self.spec.endpoint.as_deref(), tls, self.timeout)
    }

    /// Asks the daemon whether it answers. A host coming back gets a newly negotiated
    /// client (the daemon may have been upgraded meanwhile) and, the first time, its
    /// seccomp support is judged: a daemon without it stays down unless
    /// `allow_no_seccomp`.
    pub async fn probe(&self, allow_no_seccomp: bool) -> Probe {
        let was_up = self.is_up();
        let client = match self.docker().or_else(|_| self.new_client()) {
            Ok(c) => c,
            Err(_) => {
                self.up.store(false, Ordering::SeqCst);
                return Probe::Down { went_down: was_up };
            }
        };
        let answered = client.ping().await.is_ok();
        if !answered {
            self.up.store(false, Ordering::SeqCst);
            return Probe::Down { went_down: was_up };
        }
        if was_up {
            return Probe::Up { came_back: false };
        }
        match self.come_back(&client, allow_no_seccomp).await {
            Ok(()) => {
                self.up.store(true, Ordering::SeqCst);
                self.refusal_logged.store(false, Ordering::SeqCst);
                Probe::Up { came_back: true }
            }
            Err(e) => {
                if !self.refusal_logged.swap(true, Ordering::SeqCst) {
                    tracing::error!(host = %self.name(), error = %e, "the Docker host answers but is not used");
                }
                Probe::Down { went_down: false }
            }
        }
    }

    async fn come_back(&self, client: &Docker, allow_no_seccomp: bool) -> Result<(), String> {
        let fresh = client.negotiated().await.map_err(|e| e.to_string())?;
        if !self.seccomp_checked.load(Ordering::SeqCst) {
            match fresh.seccomp_supported().await {
                Ok(true) => {}
                Ok(false) if allow_no_seccomp => {
                    tracing::warn!(host = %self.name(), "the Docker host has no seccomp support: its sessions run without a seccomp filter (control.allow_no_seccomp = true)");
                }
                Ok(false) => {
                    return Err("no seccomp support and control.allow_no_seccomp is false".into())
                }
                Err(e) => return Err(format!("cannot read its security options: {e}")),
            }
            self.seccomp_checked.store(true, Ordering::SeqCst);
        }
        // Read again each time it comes back: a runtime may have been added meanwhile.
        let runtimes = fresh
            .runtimes()
            .await
            .map_err(|e| format!("cannot read its runtimes: {e}"))?;
        self.set_runtimes(runtimes);
        *self
            .client
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(fresh);
        Ok(())
    }
}

/// Every host of the deployment, in configuration order.
#[derive(Debug, Clone)]
pub struct Hosts(Vec<Arc<Host>>);

/// Why the hosts could not be set up at start.
#[derive(Debug, thiserror::Error)]
pub enum HostsError {
    /// A host's endpoint cannot be used at all (named by its key).
    #[error("{key}: {error}")]
    Endpoint {
        /// The configuration key.
        key: String,
        /// What the client said.
        error: DockerError,
    },
}

impl Hosts {
    /// The hosts, already made.
    pub fn new(hosts: Vec<Arc<Host>>) -> Hosts {
        Hosts(hosts)
    }

    /// Makes a client for every configured host and contacts them all at once, each
    /// within the per-call timeout: those that answer start up, the others down (they
    /// are probed again by the reconciler). The implicit host is not made here: its
    /// first contact must succeed, as it always had to.
    pub async fn connect(
        specs: Vec<HostSpec>,
        timeout: Duration,
        allow_no_seccomp: bool,
    ) -> Result<Hosts, HostsError> {
        let mut hosts = Vec::new();
        for (i, spec) in specs.into_iter().enumerate() {
            let host = Host::new(spec, None, timeout, false, false);
            // A socket that is not there yet is a host that is down, not a bad endpoint.
            let client = match host.new_client() {
                Ok(c) => Some(c),
                Err(DockerError::Unavailable(_)) => None,
                Err(error) => {
                    return Err(HostsError::Endpoint {
                        key: format!("docker.hosts[{i}].endpoint"),
                        error,
                    })
                }
            };
            *host
                .client
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = client;
            hosts.push(Arc::new(host));
        }
        // Concurrently: a start never waits one timeout per silent host.
        let probes =
            futures_util::future::join_all(hosts.iter().map(|h| h.probe(allow_no_seccomp))).await;
        for (host, probe) in hosts.iter().zip(probes) {
            match probe {
                Probe::Up { .. } => tracing::info!(host = %host.name(), "Docker host answers"),
                Probe::Down { .. } => {
                    tracing::warn!(host = %host.name(), "Docker host does not answer at start; its sessions are unreachable until it does")
                }
            }
        }
        Ok(Hosts(hosts))
    }

    /// Every host.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Host>> {
        self.0.iter()
    }

    /// The host named `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<Host>> {
        self.0.iter().find(|h| h.name() == name)
    }

    /// The ttyd pool of each host that has its own.
    pub fn pools(&self) -> Pools {
        self.0
            .iter()
            .filter_map(|h| h.pool.clone().map(|p| (h.name().to_owned(), p)))
            .collect()
    }

    /// The read-only ttyd pool (share-link viewers) of each host that has its own.
    pub fn viewer_pools(&self) -> Pools {
        self.0
            .iter()
            .filter(|h| !h.spec.viewer_pool.is_empty())
            .map(|h| {
                let pool = TtydAddress {
                    addrs: h.spec.viewer_pool.clone(),
                    base_path: String::new(),
                };
                (h.name().to_owned(), pool)
            })
            .collect()
    }

    /// Whether share-link viewers of `host`'s sessions have a read-only pool: its own,
    /// or the gateway's for the implicit host.
    pub fn has_viewer_pool(&self, host: &str) -> bool {
        self.get(host)
            .is_some_and(|h| h.spec.implicit || !h.spec.viewer_pool.is_empty())
    }

    /// Where a new session goes: see [`place`]. `allowed` empty: any host; `runtime`
    /// the profile's (`None`: the daemon's default).
    pub fn place(
        &self,
        allowed: &[String],
        runtime: Option<&str>,
        active: &BTreeMap<String, u32>,
    ) -> Result<String, String> {
        place(self.0.iter().map(|h| Candidate {
            name: h.name(),
            up: h.is_up(),
            allowed: allowed.is_empty() || allowed.iter().any(|a| a == h.name()),
            has_runtime: h.has_runtime(runtime),
            capacity: h.capacity(),
            active: active.get(h.name()).copied().unwrap_or(0),
        }))
        .map(str::to_owned)
    }

    /// What refuses a start: a profile whose `runtime` a host it names lacks, or that no
    /// host it may use has, among the hosts that answered (the others are judged when
    /// they do, by placement). Each names the profile's key and the hosts.
    pub fn runtime_problems<'a>(
        &self,
        profiles: impl IntoIterator<Item = (&'a String, &'a config::Profile)>,
    ) -> Vec<String> {
        let mut out = Vec::new();
        for (name, p) in profiles {
            let Some(runtime) = p.runtime.as_deref() else {
                continue;
            };
            let usable = self
                .0
                .iter()
                .filter(|h| p.hosts.is_empty() || p.hosts.iter().any(|a| a == h.name()));
            let known: Vec<(&str, Vec<String>)> = usable
                .filter_map(|h| Some((h.name(), h.runtimes()?)))
                .collect();
            let lacking: Vec<String> = known
                .iter()
                .filter(|(_, r)| !r.iter().any(|n| n == runtime))
                .map(|(host, r)| format!("{host} (has {})", r.join(", ")))
                .collect();
            let named = !p.hosts.is_empty();
            if (named && !lacking.is_empty()) || (!known.is_empty() && lacking.len() == known.len())
            {
                out.push(format!(
                    "profiles.{name}.runtime: Docker host {} has no runtime {runtime:?}; add it to the daemon (daemon.json \"runtimes\") or place the profile elsewhere",
                    lacking.join(", ")
                ));
            }
        }
        out
    }
}

/// One host as placement sees it.
#[derive(Debug, Clone, Copy)]
pub struct Candidate<'a> {
    /// Its name.
    pub name: &'a str,
    /// It answered at the last probe.
    pub up: bool,
    /// The profile allows it.
    pub allowed: bool,
    /// Its daemon offers the profile's runtime.
    pub has_runtime: bool,
    /// Most sessions it holds.
    pub capacity: u32,
    /// Sessions it holds now (any active state, unreachable ones included).
    pub active: u32,
}

/// The host with the most free capacity among those that answer, that the profile
/// allows and that have room; ties go to the first in configuration order. `Err` says
/// why none can take the session.
pub fn place<'a>(candidates: impl IntoIterator<Item = Candidate<'a>>) -> Result<&'a str, String> {
    let mut best: Option<(&str, u32)> = None;
    let (mut allowed, mut answering, mut running) = (0, 0, 0);
    for c in candidates {
        if !c.allowed {
            continue;
        }
        allowed += 1;
        if !c.up {
            continue;
        }
        answering += 1;
        if !c.has_runtime {
            continue;
        }
        running += 1;
        let free = c.capacity.saturating_sub(c.active);
        if free > 0 && best.is_none_or(|(_, f)| free > f) {
            best = Some((c.name, free));
        }
    }
    match best {
        Some((name, _)) => Ok(name),
        None if allowed == 0 => Err("the profile allows no configured host".into()),
        None if answering == 0 => Err("none of the hosts this profile may use answers".into()),
        None if running == 0 => {
            Err("none of the hosts this profile may use that answer has its runtime".into())
        }
        None => Err("every host this profile may use that answers is full".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(name: &str, up: bool, capacity: u32, active: u32) -> Candidate<'_> {
        Candidate {
            name,
            up,
            allowed: true,
            has_runtime: true,
            capacity,
            active,
        }
    }

    #[test]
    fn the_host_with_the_most_free_capacity_wins_and_ties_go_to_the_first() {
        assert_eq!(place([c("a", true, 4, 3), c("b", true, 2, 0)]), Ok("b"));
        assert_eq!(place([c("a", true, 2, 0), c("b", true, 2, 0)]), Ok("a"));
        assert_eq!(place([c("a", true, 10, 5), c("b", true, 3, 0)]), Ok("a"));
    }

    #[test]
    fn hosts_that_do_not_answer_are_skipped_even_when_emptiest() {
        assert_eq!(place([c("a", false, 100, 0), c("b", true, 1, 0)]), Ok("b"));
        let e = place([c("a", false, 1, 0), c("b", false, 1, 0)]).unwrap_err();
        assert!(e.contains("answers"), "{e}");
    }

    #[test]
    fn full_hosts_take_nothing_and_unreachable_sessions_still_count() {
        let e = place([c("a", true, 1, 1), c("b", true, 2, 2)]).unwrap_err();
        assert!(e.contains("full"), "{e}");
        // More active than capacity (capacity lowered in config) is full, not a wrap.
        assert!(place([c("a", true, 1, 5)]).is_err());
    }

    #[test]
    fn only_hosts_the_profile_allows_are_candidates() {
        let mut gpu = c("gpu-1", true, 1, 0);
        let cpu = c("cpu-1", true, 50, 0);
        gpu.allowed = true;
        let mut cpu_disallowed = cpu;
        cpu_disallowed.allowed = false;
        assert_eq!(place([cpu_disallowed, gpu]), Ok("gpu-1"));
        let mut gpu_disallowed = gpu;
        gpu_disallowed.allowed = false;
        let e = place([gpu_disallowed]).unwrap_err();
        assert!(e.contains("allows no"), "{e}");
    }

    #[test]
    fn placement_through_hosts_reads_counts_and_profile_restrictions() {
        let spec = |name: &str, capacity| HostSpec {
            name: name.into(),
            endpoint: Some("tcp://127.0.0.1:9".into()),
            daemon: Some("tcp://127.0.0.1:9".into()),
            tls: None,
            ttyd_pool: vec![format!("unix:/run/{name}.sock")],
            viewer_pool: Vec::new(),
            capacity,
            implicit: false,
        };
        let client = || {
            Docker::unnegotiated(Some("tcp://127.0.0.1:9"), None, Duration::from_secs(1)).unwrap()
        };
        let hosts = Hosts::new(vec![
            Arc::new(Host::new(
                spec("one", 1),
                Some(client()),
                Duration::from_secs(1),
                true,
                true,
            )),
            Arc::new(Host::new(
                spec("two", 1),
                Some(client()),
                Duration::from_secs(1),
                true,
                true,
            )),
        ]);
        let none = BTreeMap::new();
        assert_eq!(hosts.place(&[], None, &none).as_deref(), Ok("one"));
        let one_full = BTreeMap::from([("one".to_owned(), 1)]);
        assert_eq!(hosts.place(&[], None, &one_full).as_deref(), Ok("two"));
        assert!(hosts.place(&["one".into()], None, &one_full).is_err());
        assert_eq!(
            hosts.pools()["two"].addrs,
            vec!["unix:/run/two.sock".to_owned()]
        );

        // A profile's runtime: only a host that offers it takes its sessions, and one
        // that has not said what it offers takes none.
        let e = hosts.place(&[], Some("runsc"), &none).unwrap_err();
        assert!(e.contains("runtime"), "{e}");
        hosts.0[0].set_runtimes(vec!["runc".into()]);
        hosts.0[1].set_runtimes(vec!["runc".into(), "runsc".into()]);
        assert_eq!(hosts.place(&[], Some("runsc"), &none).as_deref(), Ok("two"));
        assert_eq!(hosts.place(&[], None, &none).as_deref(), Ok("one"));
        let e = hosts
            .place(&["one".into()], Some("runsc"), &none)
            .unwrap_err();
        assert!(e.contains("runtime"), "{e}");
        let two_full = BTreeMap::from([("two".to_owned(), 1)]);
        let e = hosts.place(&[], Some("runsc"), &two_full).unwrap_err();
        assert!(e.contains("full"), "{e}");
    }

    #[test]
    fn a_start_is_refused_for_a_runtime_a_named_host_or_every_host_lacks() {
        let spec = |name: &str| HostSpec {
            name: name.into(),
            endpoint: None,
            daemon: None,
            tls: None,
            ttyd_pool: Vec::new(),
            viewer_pool: Vec::new(),
            capacity: 10,
            implicit: false,
        };
        let host = |name: &str, runtimes: Option<&[&str]>| {
            let h = Host::new(spec(name), None, Duration::from_secs(1), true, true);
            if let Some(r) = runtimes {
                h.set_runtimes(r.iter().map(|s| (*s).to_owned()).collect());
            }
            Arc::new(h)
        };
        let profile = |runtime: Option<&str>, on: &[&str]| -> config::Profile {
            let body = serde_json::json!({
                "image": "i",
                "runtime": runtime,
                "hosts": on,
            });
            serde_json::from_value(body).expect("a profile")
        };
        let hosts = Hosts::new(vec![
            host("plain", Some(&["runc"])),
            host("gvisor", Some(&["runc", "runsc"])),
            host("silent", None),
        ]);
        let problems = |p: config::Profile| {
            let name = "p".to_owned();
            hosts.runtime_problems([(&name, &p)])
        };
        assert!(problems(profile(None, &[])).is_empty(), "no runtime asked");
        assert!(
            problems(profile(Some("runsc"), &[])).is_empty(),
            "one host has it"
        );
        assert!(problems(profile(Some("runsc"), &["gvisor"])).is_empty());
        assert!(
            problems(profile(Some("runsc"), &["silent"])).is_empty(),
            "judged when it answers"
        );
        let named = problems(profile(Some("runsc"), &["gvisor", "plain"]));
        assert_eq!(named.len(), 1, "{named:?}");
        assert!(
            named[0].starts_with("profiles.p.runtime: Docker host plain (has runc)"),
            "{named:?}"
        );
        let nowhere = problems(profile(Some("kata"), &[]));
        assert_eq!(nowhere.len(), 1, "{nowhere:?}");
        assert!(
            nowhere[0].contains("plain (has runc), gvisor (has runc, runsc)"),
            "{nowhere:?}"
        );
    }
}
