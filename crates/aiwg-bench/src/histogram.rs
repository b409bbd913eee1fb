//! A small HDR-style histogram: values (microseconds) land in log-linear buckets with 1/64 relative
//! precision, so percentiles cost constant memory whatever the sample count.

const SUB_BUCKETS: u64 = 64;

#[derive(Clone)]
pub struct Histogram {
    counts: Vec<u64>,
    total: u64,
    max: u64,
}

impl Default for Histogram {
    fn default() -> Histogram {
        Histogram { counts: vec![0; 64 * SUB_BUCKETS as usize], total: 0, max: 0 }
    }
}

/// Values below 64 have their own bucket; above, each power of two is split into 64 buckets.
fn index(v: u64) -> usize {
    if v < SUB_BUCKETS {
        return v as usize;
    }
    let shift = (63 - v.leading_zeros() as u64) - 6;
    (SUB_BUCKETS + shift * SUB_BUCKETS + ((v >> shift) - SUB_BUCKETS)) as usize
}

fn lower_bound(i: usize) -> u64 {
    let i = i as u64;
    if i < SUB_BUCKETS {
        return i;
    }
    let shift = (i - SUB_BUCKETS) / SUB_BUCKETS;
    let mantissa = SUB_BUCKETS + (i - SUB_BUCKETS) % SUB_BUCKETS;
    mantissa << shift
}

impl Histogram {
    pub fn record(&mut self, micros: u64) {
        let i = index(micros).min(self.counts.len() - 1);
        self.counts[i] += 1;
        self.total += 1;
        self.max = self.max.max(micros);
    }

    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.total += other.total;
        self.max = self.max.max(other.max);
    }

    /// The value at quantile `q` (0..=1), in milliseconds (what the report prints).
    pub fn ms(&self, q: f64) -> f64 {
        self.quantile(q) as f64 / 1e3
    }

    /// The value at quantile `q` (0..=1), in microseconds.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let rank = ((q * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return lower_bound(i).min(self.max);
            }
        }
        self.max
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_monotonic_and_precise() {
        let mut last = 0;
        for v in (0..2_000_000u64).step_by(7) {
            let i = index(v);
            assert!(i >= last, "index not monotonic at {v}");
            last = i;
            let low = lower_bound(i);
            assert!(low <= v && v - low <= v / 64 + 1, "bucket of {v} starts at {low}");
        }
    }

    #[test]
    fn quantiles() {
        let mut h = Histogram::default();
        for v in 1..=1000 {
            h.record(v);
        }
        let p50 = h.quantile(0.5);
        let p99 = h.quantile(0.99);
        assert!((490..=500).contains(&p50), "{p50}");
        assert!((970..=990).contains(&p99), "{p99}");
        assert_eq!(h.quantile(1.0), 1000);
    }
}
