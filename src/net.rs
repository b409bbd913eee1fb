//! Addresses: what counts as the operator's own host, and what URL serve will call.

use std::net::IpAddr;

/// A loopback address, IPv4-mapped IPv6 included (`::ffff:127.0.0.1` is how a dual-stack listener sees
/// an IPv4 loopback peer).
pub(crate) fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()),
    }
}

/// A URL serve may call (an executor's REST endpoint, a runtime's base URL): http or https, with a host.
/// `Err` says what is wrong, naming the URL.
pub(crate) fn http_url(s: &str) -> Result<reqwest::Url, String> {
    let url = reqwest::Url::parse(s).map_err(|e| format!("{s:?} is not a URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!("{s:?}: only http:// and https:// endpoints are called"));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(format!("{s:?} names no host"));
    }
    Ok(url)
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
