//! Which address a request comes from, for limits keyed by client.
//!
//! The peer's address, unless the peer is a configured trusted proxy: then the nearest
//! address in `X-Forwarded-For` that is not itself a trusted proxy. A client that is not
//! behind a trusted proxy cannot choose its address by sending the header.

use std::net::IpAddr;

/// Addresses and networks whose `X-Forwarded-For` is believed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies(Vec<(IpAddr, u8)>);

impl TrustedProxies {
    /// Parses `a.b.c.d`, `a.b.c.d/n`, IPv6 and IPv6 `/n` entries; on failure says which
    /// entry (by index) and why.
    pub fn parse(entries: &[String]) -> Result<TrustedProxies, (usize, String)> {
        let mut nets = Vec::with_capacity(entries.len());
        for (i, e) in entries.iter().enumerate() {
            nets.push(parse_net(e.trim()).map_err(|why| (i, why))?);
        }
        Ok(TrustedProxies(nets))
    }

    /// Whether no proxy is trusted.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `ip` is a trusted proxy.
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.0.iter().any(|(net, len)| in_net(ip, *net, *len))
    }

    /// The client's address: `peer`, or, when `peer` is trusted, the rightmost entry of
    /// the `X-Forwarded-For` values (in header order) that is not trusted. An entry that
    /// does not parse stops the walk at the last trusted hop: a malformed header never
    /// lets a client pick its address.
    pub fn client<'a>(
        &self,
        peer: IpAddr,
        forwarded_for: impl Iterator<Item = &'a [u8]>,
    ) -> IpAddr {
        if !self.contains(peer) {
            return peer;
        }
        let hops: Vec<&[u8]> = forwarded_for
            .flat_map(|v| v.split(|b| *b == b','))
            .collect();
        let mut client = peer;
        for hop in hops.iter().rev() {
            let parsed = std::str::from_utf8(hop)
                .ok()
                .and_then(|s| s.trim().parse::<IpAddr>().ok());
            match parsed {
                Some(ip) => {
                    client = ip;
                    if !self.contains(ip) {
                        return ip;
                    }
                }
                None => return client,
            }
        }
        client
    }
}

fn parse_net(entry: &str) -> Result<(IpAddr, u8), String> {
    let (addr, len) = match entry.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (entry, None),
    };
    let ip: IpAddr = addr
        .parse()
        .map_err(|_| format!("{entry:?} is not an IP address or network"))?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    let len = match len {
        None => max,
        Some(l) => l
            .parse::<u8>()
            .ok()
            .filter(|l| *l <= max)
            .ok_or_else(|| format!("{entry:?}: prefix length must be 0-{max}"))?,
    };
    Ok((ip, len))
}

fn in_net(ip: IpAddr, net: IpAddr, len: u8) -> bool {
    match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => prefix_eq(&a.octets(), &n.octets(), len),
        (IpAddr::V6(a), IpAddr::V6(n)) => prefix_eq(&a.octets(), &n.octets(), len),
        (IpAddr::V6(a), IpAddr::V4(_)) => a
            .to_ipv4_mapped()
            .is_some_and(|a| in_net(IpAddr::V4(a), net, len)),
        (IpAddr::V4(_), IpAddr::V6(_)) => false,
    }
}

/// Whether the first `len` bits of `a` and `b` agree.
fn prefix_eq(a: &[u8], b: &[u8], len: u8) -> bool {
    let full = usize::from(len / 8);
    let rest = len % 8;
    if a.get(..full) != b.get(..full) {
        return false;
    }
    if rest == 0 {
        return true;
    }
    let mask = 0xffu8 << (8 - rest);
    match (a.get(full), b.get(full)) {
        (Some(x), Some(y)) => x & mask == y & mask,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn trusted(list: &[&str]) -> TrustedProxies {
        TrustedProxies::parse(&list.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_it_forwards() {
        let t = trusted(&["10.0.0.0/8"]);
        let xff: [&[u8]; 1] = [b"1.2.3.4"];
        assert_eq!(t.client(ip("192.0.2.7"), xff.into_iter()), ip("192.0.2.7"));
        let none = TrustedProxies::default();
        assert_eq!(none.client(ip("10.0.0.1"), xff.into_iter()), ip("10.0.0.1"));
    }

    #[test]
    fn behind_trusted_proxies_the_nearest_untrusted_hop_is_the_client() {
        let t = trusted(&["10.0.0.0/8", "2001:db8::/32"]);
        // A client's own forged entry on the left is ignored.
        let xff: [&[u8]; 2] = [b"6.6.6.6, 198.51.100.9", b" 10.1.2.3"];
        assert_eq!(
            t.client(ip("10.9.9.9"), xff.into_iter()),
            ip("198.51.100.9")
        );
        let v6: [&[u8]; 1] = [b"2001:db8::5, 2001:db8::6"];
        assert_eq!(
            t.client(ip("2001:db8::1"), v6.into_iter()),
            ip("2001:db8::5")
        );
    }

    #[test]
    fn a_malformed_hop_stops_at_the_last_trusted_one() {
        let t = trusted(&["10.0.0.0/8"]);
        let xff: [&[u8]; 1] = [b"1.2.3.4, junk, 10.0.0.2"];
        assert_eq!(t.client(ip("10.0.0.1"), xff.into_iter()), ip("10.0.0.2"));
        let none: [&[u8]; 0] = [];
        assert_eq!(t.client(ip("10.0.0.1"), none.into_iter()), ip("10.0.0.1"));
    }

    #[test]
    fn networks_match_by_prefix_and_bad_entries_are_named() {
        let t = trusted(&["192.168.4.0/22", "127.0.0.1"]);
        assert!(t.contains(ip("192.168.7.255")));
        assert!(!t.contains(ip("192.168.8.0")));
        assert!(t.contains(ip("127.0.0.1")));
        assert!(!t.contains(ip("127.0.0.2")));
        assert!(t.contains(ip("::ffff:127.0.0.1")), "mapped IPv4 matches");
        for (bad, at) in [
            (vec!["10.0.0.0/33"], 0),
            (vec!["10.0.0.1", "nope"], 1),
            (vec!["::1/129"], 0),
        ] {
            let list: Vec<String> = bad.iter().map(|s| s.to_string()).collect();
            assert_eq!(TrustedProxies::parse(&list).unwrap_err().0, at, "{bad:?}");
        }
    }
}
