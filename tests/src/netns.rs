//! Another machine on this one: a network namespace of the test's own, joined to the
//! host's by a veth pair with an address on each end, so that what a part listens on
//! there is reached across a network, not on loopback. Programs run inside it through
//! `nsenter --net`; unix sockets (a filesystem) still cross, as on a host where the
//! pool and dockgate share a directory. Everything goes when it is dropped.

use std::process::Command;

use crate::random_hex;

/// A network namespace with its own address, reachable from the host's.
pub struct Netns {
    /// Its name (`ip netns`).
    pub name: String,
    /// The host's end of the link.
    pub host_addr: String,
    /// Its own address: what its programs listen on.
    pub addr: String,
}

/// Why this machine cannot make one, if it cannot.
pub fn cannot_run() -> Option<String> {
    if let Some(why) = crate::daemon::cannot_run() {
        return Some(why);
    }
    let probe = format!("tgp{}", random_hex(3));
    let made = Command::new("ip")
        .args(["netns", "add", &probe])
        .output()
        .is_ok_and(|o| o.status.success());
    let _ = Command::new("ip").args(["netns", "del", &probe]).output();
    (!made).then(|| "ip netns add is not permitted here".into())
}

fn ip(args: &[&str]) {
    let o = Command::new("ip").args(args).output().expect("ip");
    assert!(
        o.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&o.stderr)
    );
}

impl Netns {
    /// Makes the namespace and its link, a /30 of 10.213.0.0/16 chosen at random
    /// (tests run side by side): `.1` here, `.2` there.
    pub fn create() -> Netns {
        let tag = random_hex(3);
        let byte = |i: usize| u8::from_str_radix(&tag[2 * i..2 * i + 2], 16).expect("hex");
        let (n, m) = (byte(0), (byte(1) & 0x3f) * 4);
        let name = format!("tgh{tag}");
        let (outer, inner) = (format!("tgo{tag}"), format!("tgi{tag}"));
        let ns = Netns {
            name: name.clone(),
            host_addr: format!("10.213.{n}.{}", m + 1),
            addr: format!("10.213.{n}.{}", m + 2),
        };
        ip(&["netns", "add", &name]);
        ip(&[
            "link", "add", &outer, "type", "veth", "peer", "name", &inner,
        ]);
        ip(&["link", "set", &inner, "netns", &name]);
        ip(&[
            "addr",
            "add",
            &format!("{}/30", ns.host_addr),
            "dev",
            &outer,
        ]);
        ip(&["link", "set", &outer, "up"]);
        ns.exec_ok(&[
            "ip",
            "addr",
            "add",
            &format!("{}/30", ns.addr),
            "dev",
            &inner,
        ]);
        ns.exec_ok(&["ip", "link", "set", &inner, "up"]);
        ns.exec_ok(&["ip", "link", "set", "lo", "up"]);
        ns
    }

    /// A command that runs `program` inside the namespace. `nsenter` enters the network
    /// namespace only (`ip netns exec` would also mount a sysfs of its own, hiding the
    /// cgroup hierarchies a dockerd needs) and execs it: the child's pid is the
    /// program's.
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new("nsenter");
        c.arg(format!("--net=/var/run/netns/{}", self.name))
            .args(["--", program]);
        c
    }

    fn exec_ok(&self, args: &[&str]) {
        let o = self
            .command(args[0])
            .args(&args[1..])
            .output()
            .expect("nsenter");
        assert!(
            o.status.success(),
            "{}: {}",
            args.join(" "),
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // The veth pair goes with the namespace.
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}
