//! Addresses: what counts as the operator's own host (executors registering from it may reclaim an
//! identity; serve trusts it where the operator's host is trusted), and what counts as inside a network
//! (a webhook may not be aimed there unless the operator lists it).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A loopback address, IPv4-mapped IPv6 included (`::ffff:127.0.0.1` is how a dual-stack listener sees
/// an IPv4 loopback peer).
pub fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()),
    }
}

/// An address that is not on the public internet: loopback, private (RFC 1918, IPv6 unique local),
/// link-local (169.254.169.254 is the cloud's metadata service), unspecified, shared (carrier-grade
/// NAT), benchmarking, multicast, reserved and broadcast; an IPv6 address that embeds an IPv4 one
/// (mapped, compatible, NAT64) is judged by it.
pub fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_internal_v4(v4),
        IpAddr::V6(v6) => is_internal_v6(v6),
    }
}

fn is_internal_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_multicast()
        || ip.is_broadcast()
        || a == 0 // "this network", 0.0.0.0 among it
        || (a == 100 && (64..128).contains(&b)) // shared address space (carrier-grade NAT)
        || (a == 192 && b == 0 && c == 0) // IETF protocol assignments
        || (a == 198 && (18..20).contains(&b)) // benchmarking
        || a >= 240 // reserved
}

fn is_internal_v6(ip: Ipv6Addr) -> bool {
    let segments = ip.segments();
    if let Some(v4) = ip.to_ipv4_mapped() {
        return is_internal_v4(v4);
    }
    // IPv4-compatible (::a.b.c.d, deprecated) and the well-known NAT64 prefix (64:ff9b::/96).
    let embeds_v4 = segments[..6] == [0; 6] || segments[..6] == [0x64, 0xff9b, 0, 0, 0, 0];
    if embeds_v4 && !ip.is_unspecified() && !ip.is_loopback() {
        let [.., hi, lo] = segments;
        return is_internal_v4(Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo)));
    }
    ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_multicast()
        || (segments[0] & 0xfe00) == 0xfc00 // unique local
        || (segments[0] & 0xffc0) == 0xfe80 // link-local
        || (segments[0] & 0xffc0) == 0xfec0 // site-local (deprecated)
}

/// A host name that names this host whatever DNS says: `localhost` and the names under it (RFC 6761),
/// a trailing dot or not.
pub fn is_local_name(name: &str) -> bool {
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    name == "localhost" || name.ends_with(".localhost")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_addresses() {
        for ip in ["127.0.0.1", "127.8.9.10", "::1", "::ffff:127.0.0.1"] {
            assert!(is_loopback(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["10.0.0.1", "192.168.1.42", "::ffff:10.0.0.1", "fe80::1"] {
            assert!(!is_loopback(ip.parse().unwrap()), "{ip}");
        }
    }

    #[test]
    fn internal_addresses() {
        let internal = [
            "127.0.0.1",
            "127.1.2.3",
            "10.0.0.1",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "0.1.2.3",
            "100.64.0.1",
            "198.18.0.1",
            "224.0.0.1",
            "240.0.0.1",
            "255.255.255.255",
            "192.0.0.8",
            "::1",
            "::",
            "fe80::1",
            "fc00::1",
            "fd12:3456::1",
            "fec0::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:10.1.2.3",
            "::ffff:169.254.169.254",
            "::127.0.0.1",
            "64:ff9b::a9fe:a9fe",
        ];
        for ip in internal {
            assert!(is_internal(ip.parse().unwrap()), "{ip}");
        }
        let public = [
            "8.8.8.8",
            "1.1.1.1",
            "172.32.0.1",
            "100.128.0.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
        ];
        for ip in public {
            assert!(!is_internal(ip.parse().unwrap()), "{ip}");
        }
    }

    #[test]
    fn local_names() {
        for name in ["localhost", "LOCALHOST", "localhost.", "a.localhost", "x.y.localhost."] {
            assert!(is_local_name(name), "{name}");
        }
        for name in ["localhost.example", "mylocalhost", "example.com"] {
            assert!(!is_local_name(name), "{name}");
        }
    }
}
