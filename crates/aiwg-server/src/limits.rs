//! Rate limits for the routes anyone may call (registration): a token bucket per address, an IPv6
//! address counting as its /64 (one host is commonly given a whole /64: per address, it had as many
//! buckets as it cared to use).
//!
//! Loopback is exempt: it is the operator's own host, which the contract trusts, and the benchmarks
//! and local fleets register thousands of executors from it at once.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Instant;

/// Addresses tracked at most; past this, buckets that have refilled are forgotten.
const MAX_TRACKED: usize = 10_000;

pub(crate) struct RateLimiter {
    per_minute: f64,
    buckets: Mutex<HashMap<IpAddr, Bucket>>,
}

#[derive(Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl RateLimiter {
    pub(crate) fn per_minute(n: u32) -> RateLimiter {
        RateLimiter { per_minute: f64::from(n), buckets: Mutex::new(HashMap::new()) }
    }

    /// Takes one token for `ip` at `now`; false when its bucket is empty.
    pub(crate) fn admit(&self, ip: IpAddr, now: Instant) -> bool {
        if aiwg_domain::net::is_loopback(ip) {
            return true;
        }
        let ip = key(ip);
        let mut buckets = self.buckets.lock().expect("rate limiter lock");
        if buckets.len() >= MAX_TRACKED && !buckets.contains_key(&ip) {
            let full = self.per_minute;
            buckets.retain(|_, b| refill(*b, now, full).tokens < full);
        }
        let bucket = buckets.entry(ip).or_insert(Bucket { tokens: self.per_minute, at: now });
        *bucket = refill(*bucket, now, self.per_minute);
        if bucket.tokens < 1.0 {
            return false;
        }
        bucket.tokens -= 1.0;
        true
    }
}

/// The bucket an address draws from: itself (IPv4, and IPv4 mapped into IPv6), or its IPv6 /64.
fn key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(std::net::Ipv6Addr::from(u128::from(v6) & !((1u128 << 64) - 1))),
        },
        v4 => v4,
    }
}

fn refill(b: Bucket, now: Instant, per_minute: f64) -> Bucket {
    let earned = now.saturating_duration_since(b.at).as_secs_f64() * per_minute / 60.0;
    Bucket { tokens: (b.tokens + earned).min(per_minute), at: now }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_burst_then_the_rate() {
        let limiter = RateLimiter::per_minute(60);
        let lan: IpAddr = "192.168.1.42".parse().unwrap();
        let t0 = Instant::now();
        assert_eq!((0..100).filter(|_| limiter.admit(lan, t0)).count(), 60, "the burst is a minute's worth");
        assert!(!limiter.admit(lan, t0 + Duration::from_millis(500)));
        assert!(limiter.admit(lan, t0 + Duration::from_millis(1001)), "one a second after that");
        assert!(!limiter.admit(lan, t0 + Duration::from_millis(1002)));
        let other: IpAddr = "192.168.1.43".parse().unwrap();
        assert!(limiter.admit(other, t0), "per address");
        assert!((0..1000).all(|_| limiter.admit("127.0.0.1".parse().unwrap(), t0)), "loopback is exempt");
    }

    /// Issue 35, finding 11: per address, the limit did nothing against IPv6 (a host has a /64).
    #[test]
    fn an_ipv6_host_is_its_64() {
        let limiter = RateLimiter::per_minute(10);
        let t0 = Instant::now();
        let host = |n: u16| -> IpAddr { format!("2001:db8:1:2::{n:x}").parse().unwrap() };
        assert_eq!((0..100).filter(|n| limiter.admit(host(*n), t0)).count(), 10, "one bucket for the /64");
        assert!(limiter.admit("2001:db8:1:3::1".parse().unwrap(), t0), "another /64, another bucket");
        let mapped: IpAddr = "::ffff:192.0.2.7".parse().unwrap();
        assert_eq!((0..20).filter(|_| limiter.admit(mapped, t0)).count(), 10);
        assert!(!limiter.admit("192.0.2.7".parse().unwrap(), t0), "a mapped address is its IPv4 one");
    }
}
