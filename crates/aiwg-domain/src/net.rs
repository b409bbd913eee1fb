//! Addresses: what counts as the operator's own host (executors registering from it may reclaim an
//! identity; serve trusts it where the operator's host is trusted).

use std::net::IpAddr;

/// A loopback address, IPv4-mapped IPv6 included (`::ffff:127.0.0.1` is how a dual-stack listener sees
/// an IPv4 loopback peer).
pub fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()),
    }
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
}
