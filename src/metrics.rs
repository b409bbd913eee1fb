//! Counters and histograms for `GET /metrics` (Prometheus text format). Lock-free on the hot paths:
//! atomics for counters and histogram buckets; labelled counters take a short lock.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// Upper bounds, in seconds, for latency histograms: 100 µs to 5 s.
pub const LATENCY_BOUNDS: &[f64] =
    &[0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0];
/// Upper bounds for batch sizes (units per commit).
pub const SIZE_BOUNDS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0];

#[derive(Default)]
pub struct Counter(AtomicU64);

impl Counter {
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

#[derive(Default)]
pub struct Gauge(AtomicI64);

impl Gauge {
    pub fn add(&self, n: i64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    pub fn get(&self) -> i64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Counters keyed by a label value (an error code).
#[derive(Default)]
pub struct Labelled(Mutex<BTreeMap<&'static str, u64>>);

impl Labelled {
    pub fn add(&self, label: &'static str) {
        *self.0.lock().expect("metrics lock").entry(label).or_default() += 1;
    }

    pub fn snapshot(&self) -> BTreeMap<&'static str, u64> {
        self.0.lock().expect("metrics lock").clone()
    }
}

/// A cumulative histogram with fixed bounds; the sum is kept in millionths to stay an integer.
pub struct Histogram {
    bounds: &'static [f64],
    buckets: Vec<AtomicU64>,
    count: AtomicU64,
    sum_micro: AtomicU64,
}

impl Histogram {
    pub fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            buckets: bounds.iter().map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            sum_micro: AtomicU64::new(0),
        }
    }

    pub fn observe(&self, value: f64) {
        if let Some(i) = self.bounds.iter().position(|b| value <= *b) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_micro.fetch_add((value * 1e6) as u64, Ordering::Relaxed);
    }

    pub fn observe_duration(&self, d: Duration) {
        self.observe(d.as_secs_f64());
    }

    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut cumulative = 0;
        for (bound, bucket) in self.bounds.iter().zip(&self.buckets) {
            cumulative += bucket.load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {cumulative}");
        }
        let count = self.count();
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}");
        let _ = writeln!(out, "{name}_sum {}", self.sum_micro.load(Ordering::Relaxed) as f64 / 1e6);
        let _ = writeln!(out, "{name}_count {count}");
    }
}

/// Everything the server counts, apart from what it reads at scrape time.
pub struct Metrics {
    pub events_ingested: Counter,
    pub frames_rejected: Labelled,
    pub forward_failures: Labelled,
    pub dispatch_latency: Histogram,
    pub commit_batch_units: Histogram,
    pub commit_latency: Histogram,
    pub executor_sockets: Gauge,
    pub executor_reconnects: Counter,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics {
            events_ingested: Counter::default(),
            frames_rejected: Labelled::default(),
            forward_failures: Labelled::default(),
            dispatch_latency: Histogram::new(LATENCY_BOUNDS),
            commit_batch_units: Histogram::new(SIZE_BOUNDS),
            commit_latency: Histogram::new(LATENCY_BOUNDS),
            executor_sockets: Gauge::default(),
            executor_reconnects: Counter::default(),
        }
    }
}

/// Values read at scrape time.
pub struct Snapshot {
    pub executors_registered: usize,
    pub executors_connected: usize,
    pub missions_by_state: Vec<(&'static str, i64)>,
    pub queue_depth: usize,
    pub queue_oldest_age_s: f64,
}

impl Metrics {
    pub fn render(&self, s: &Snapshot) -> String {
        let mut out = String::new();
        let gauge = |out: &mut String, name: &str, help: &str, value: String| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}");
        };
        let counter = |out: &mut String, name: &str, help: &str, value: u64| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}");
        };
        let labelled = |out: &mut String, name: &str, help: &str, label: &str, values: BTreeMap<&'static str, u64>| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            for (k, v) in values {
                let _ = writeln!(out, "{name}{{{label}=\"{k}\"}} {v}");
            }
        };
        gauge(
            &mut out,
            "aiwg_executors_registered",
            "Executors registered and not deregistered.",
            s.executors_registered.to_string(),
        );
        gauge(
            &mut out,
            "aiwg_executors_connected",
            "Executors with at least one live WebSocket.",
            s.executors_connected.to_string(),
        );
        let _ = writeln!(out, "# HELP aiwg_missions Missions by state.\n# TYPE aiwg_missions gauge");
        for (state, n) in &s.missions_by_state {
            let _ = writeln!(out, "aiwg_missions{{state=\"{state}\"}} {n}");
        }
        gauge(&mut out, "aiwg_queue_depth", "Missions waiting for an executor.", s.queue_depth.to_string());
        gauge(
            &mut out,
            "aiwg_queue_oldest_age_seconds",
            "Age of the oldest queued mission.",
            s.queue_oldest_age_s.to_string(),
        );
        counter(&mut out, "aiwg_events_ingested_total", "Executor events committed.", self.events_ingested.get());
        labelled(
            &mut out,
            "aiwg_frames_rejected_total",
            "Executor frames refused, by error code.",
            "code",
            self.frames_rejected.snapshot(),
        );
        self.commit_batch_units.render(&mut out, "aiwg_commit_batch_units", "Units of changes per committed batch.");
        self.commit_latency.render(&mut out, "aiwg_commit_latency_seconds", "Time to commit one batch.");
        self.dispatch_latency.render(
            &mut out,
            "aiwg_dispatch_latency_seconds",
            "Dispatch request to executor acceptance.",
        );
        labelled(
            &mut out,
            "aiwg_forward_failures_total",
            "Dispatch forwards an executor did not take, by code.",
            "code",
            self.forward_failures.snapshot(),
        );
        gauge(&mut out, "aiwg_executor_sockets", "Open executor WebSockets.", self.executor_sockets.get().to_string());
        counter(
            &mut out,
            "aiwg_executor_reconnects_total",
            "Executor sockets opened by an executor that had one before.",
            self.executor_reconnects.get(),
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_are_cumulative() {
        let h = Histogram::new(&[1.0, 10.0]);
        for v in [0.5, 2.0, 3.0, 50.0] {
            h.observe(v);
        }
        let mut out = String::new();
        h.render(&mut out, "x", "help");
        assert!(out.contains("x_bucket{le=\"1\"} 1\n"), "{out}");
        assert!(out.contains("x_bucket{le=\"10\"} 3\n"), "{out}");
        assert!(out.contains("x_bucket{le=\"+Inf\"} 4\n"), "{out}");
        assert!(out.contains("x_sum 55.5\n") && out.contains("x_count 4\n"), "{out}");
    }
}
