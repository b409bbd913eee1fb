//! Counters and histograms for `GET /metrics` (Prometheus text format). Lock-free on the hot paths:
//! atomics for counters and histogram buckets; labelled counters take a short lock.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

mod usage;

/// Upper bounds, in seconds, for latency histograms: 100 µs to 5 s.
const LATENCY_BOUNDS: &[f64] =
    &[0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0];
/// Upper bounds for batch sizes (units per commit).
const SIZE_BOUNDS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0];

#[derive(Default)]
pub(crate) struct Counter(AtomicU64);

impl Counter {
    pub(crate) fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

#[derive(Default)]
pub(crate) struct Gauge(AtomicI64);

impl Gauge {
    pub(crate) fn add(&self, n: i64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn get(&self) -> i64 {
        self.0.load(Ordering::Relaxed)
    }

    pub(crate) fn set(&self, n: i64) {
        self.0.store(n, Ordering::Relaxed);
    }
}

/// Counters keyed by a label value (an error code).
#[derive(Default)]
pub(crate) struct Labelled(Mutex<BTreeMap<&'static str, u64>>);

impl Labelled {
    pub(crate) fn add(&self, label: &'static str) {
        *self.0.lock().expect("metrics lock").entry(label).or_default() += 1;
    }

    pub(crate) fn snapshot(&self) -> BTreeMap<&'static str, u64> {
        self.0.lock().expect("metrics lock").clone()
    }
}

/// A cumulative histogram with fixed bounds; the sum is kept in millionths to stay an integer.
pub(crate) struct Histogram {
    bounds: &'static [f64],
    buckets: Vec<AtomicU64>,
    count: AtomicU64,
    sum_micro: AtomicU64,
}

impl Histogram {
    pub(crate) fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            buckets: bounds.iter().map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            sum_micro: AtomicU64::new(0),
        }
    }

    pub(crate) fn observe(&self, value: f64) {
        if let Some(i) = self.bounds.iter().position(|b| value <= *b) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_micro.fetch_add((value * 1e6) as u64, Ordering::Relaxed);
    }

    pub(crate) fn observe_duration(&self, d: Duration) {
        self.observe(d.as_secs_f64());
    }

    pub(crate) fn count(&self) -> u64 {
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
    pub(crate) events_ingested: Counter,
    pub(crate) frames_rejected: Labelled,
    pub(crate) forward_failures: Labelled,
    pub(crate) dispatch_latency: Histogram,
    pub(crate) commit_batch_units: Histogram,
    pub(crate) commit_latency: Histogram,
    pub(crate) executor_sockets: Gauge,
    /// HITL requests whose deadline is watched (at most one per live mission).
    pub(crate) hitl_deadlines: Gauge,
    pub(crate) executor_reconnects: Counter,
    /// Calls to HTTP agent runtimes, by `<endpoint>:<outcome>`.
    pub(crate) runtime_calls: Labelled,
    /// When serve's TLS certificate expires, in seconds since the epoch (0: plain HTTP).
    pub(crate) tls_not_after: Gauge,
    /// Operator calls refused for want of a valid operator token (counted, not recorded one by one).
    pub(crate) audit_unauthenticated: Counter,
    /// What missions spend.
    pub(crate) usage: usage::Usage,
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
            hitl_deadlines: Gauge::default(),
            executor_reconnects: Counter::default(),
            runtime_calls: Labelled::default(),
            tls_not_after: Gauge::default(),
            audit_unauthenticated: Counter::default(),
            usage: usage::Usage::default(),
        }
    }
}

/// Values read at scrape time.
pub(crate) struct Snapshot {
    pub(crate) executors_registered: usize,
    pub(crate) executors_connected: usize,
    pub(crate) missions_by_state: Vec<(&'static str, i64)>,
    pub(crate) queue_depth: usize,
    pub(crate) queue_oldest_age_s: f64,
    /// The store's size and extent (read for the metrics only, not the overview).
    pub(crate) store: Option<StoreStats>,
}

/// The store as retention sees it.
pub(crate) struct StoreStats {
    pub(crate) bytes: i64,
    /// Events kept: every sequence number taken, less those compacted away.
    pub(crate) events: i64,
    /// The oldest event kept (0: none).
    pub(crate) oldest_seq: i64,
    /// The highest sequence number compacted away (0: none); streams resume above it.
    pub(crate) compaction_horizon: i64,
}

impl Metrics {
    /// The Prometheus text of everything: what was read at scrape time, what was counted, the build and
    /// the process.
    pub(crate) fn render(&self, s: &Snapshot) -> String {
        let mut out = String::new();
        render_snapshot(&mut out, s);
        self.render_counted(&mut out);
        render_build_info(&mut out);
        if let Some(process) = ProcessStats::read() {
            process.render(&mut out);
        }
        out
    }

    fn render_counted(&self, out: &mut String) {
        counter(out, "aiwg_events_ingested_total", "Executor events committed.", self.events_ingested.get());
        labelled(
            out,
            "aiwg_frames_rejected_total",
            "Executor frames refused, by error code.",
            "code",
            self.frames_rejected.snapshot(),
        );
        self.commit_batch_units.render(out, "aiwg_commit_batch_units", "Units of changes per committed batch.");
        self.commit_latency.render(out, "aiwg_commit_latency_seconds", "Time to commit one batch.");
        self.dispatch_latency.render(out, "aiwg_dispatch_latency_seconds", "Dispatch request to executor acceptance.");
        labelled(
            out,
            "aiwg_forward_failures_total",
            "Dispatch forwards an executor did not take, by code.",
            "code",
            self.forward_failures.snapshot(),
        );
        gauge(out, "aiwg_executor_sockets", "Open executor WebSockets.", self.executor_sockets.get().to_string());
        gauge(
            out,
            "aiwg_hitl_deadlines_watched",
            "Open HITL requests whose deadline is watched (one per mission at most).",
            self.hitl_deadlines.get().to_string(),
        );
        counter(
            out,
            "aiwg_executor_reconnects_total",
            "Executor sockets opened by an executor that had one before.",
            self.executor_reconnects.get(),
        );
        labelled(
            out,
            "aiwg_runtime_calls_total",
            "Calls to HTTP agent runtimes, by endpoint and outcome (ok, timeout, unreachable, status, invalid).",
            "outcome",
            self.runtime_calls.snapshot(),
        );
        counter(
            out,
            "aiwg_audit_unauthenticated_refusals_total",
            "State-changing operator calls refused for want of a valid operator token; the audit trail counts them, one record per source and minute.",
            self.audit_unauthenticated.get(),
        );
        self.usage.render(out);
        if let n @ 1.. = self.tls_not_after.get() {
            gauge(
                out,
                "aiwg_tls_certificate_not_after_seconds",
                "When the TLS certificate serve presents expires (Unix time): alert well before it.",
                n.to_string(),
            );
        }
    }
}

/// The values read at scrape time: executors, missions by state, the queue.
fn render_snapshot(out: &mut String, s: &Snapshot) {
    gauge(
        out,
        "aiwg_executors_registered",
        "Executors registered and not deregistered.",
        s.executors_registered.to_string(),
    );
    gauge(
        out,
        "aiwg_executors_connected",
        "Executors with at least one live WebSocket, and HTTP runtimes whose latest probe passed.",
        s.executors_connected.to_string(),
    );
    let _ = writeln!(out, "# HELP aiwg_missions Missions by state.\n# TYPE aiwg_missions gauge");
    for (state, n) in &s.missions_by_state {
        let _ = writeln!(out, "aiwg_missions{{state=\"{state}\"}} {n}");
    }
    gauge(out, "aiwg_queue_depth", "Missions waiting for an executor.", s.queue_depth.to_string());
    gauge(out, "aiwg_queue_oldest_age_seconds", "Age of the oldest queued mission.", s.queue_oldest_age_s.to_string());
    if let Some(store) = &s.store {
        gauge(out, "aiwg_store_bytes", "Bytes the store's data takes (SQLite: pages in use).", store.bytes.to_string());
        gauge(out, "aiwg_store_events", "Events kept in the log.", store.events.to_string());
        gauge(out, "aiwg_store_oldest_seq", "Sequence number of the oldest event kept.", store.oldest_seq.to_string());
        gauge(
            out,
            "aiwg_store_compaction_horizon",
            "Highest sequence number compacted away by retention; streams resume above it.",
            store.compaction_horizon.to_string(),
        );
    }
}

fn gauge(out: &mut String, name: &str, help: &str, value: String) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}");
}

fn counter(out: &mut String, name: &str, help: &str, value: u64) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}");
}

/// A counter per label value.
fn labelled(out: &mut String, name: &str, help: &str, label: &str, values: BTreeMap<&'static str, u64>) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
    for (k, v) in values {
        let _ = writeln!(out, "{name}{{{label}=\"{k}\"}} {v}");
    }
}

/// The commit this binary was built from, when the build could tell (see `build.rs`).
pub const GIT_COMMIT: Option<&str> = option_env!("AIWG_BUILD_COMMIT");

/// `aiwg_build_info{version, commit} 1`: which build is running, for joins in queries and dashboards.
fn render_build_info(out: &mut String) {
    let commit = GIT_COMMIT.map(|c| format!(",commit=\"{c}\"")).unwrap_or_default();
    let help = "The running build: version and commit as labels, value 1.";
    let _ = writeln!(out, "# HELP aiwg_build_info {help}\n# TYPE aiwg_build_info gauge");
    let _ = writeln!(out, "aiwg_build_info{{version=\"{}\"{commit}}} 1", env!("CARGO_PKG_VERSION"));
}

/// The standard Prometheus process metrics, read from `/proc/self` at scrape time (Linux only: elsewhere
/// they are left out).
#[derive(Debug, PartialEq)]
struct ProcessStats {
    cpu_seconds: f64,
    resident_bytes: u64,
    virtual_bytes: u64,
    open_fds: u64,
    max_fds: Option<u64>,
    start_time_seconds: f64,
}

impl ProcessStats {
    fn read() -> Option<ProcessStats> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        let boot_time = std::fs::read_to_string("/proc/stat")
            .ok()?
            .lines()
            .find_map(|l| l.strip_prefix("btime ").and_then(|v| v.trim().parse::<u64>().ok()))?;
        // SAFETY: sysconf only reads system configuration.
        let (ticks, page) = unsafe { (libc::sysconf(libc::_SC_CLK_TCK), libc::sysconf(libc::_SC_PAGESIZE)) };
        let open_fds = std::fs::read_dir("/proc/self/fd").ok()?.count() as u64;
        let max_fds = std::fs::read_to_string("/proc/self/limits").ok().and_then(|l| max_open_files(&l));
        let mut stats = ProcessStats::from_stat(&stat, ticks.max(1) as u64, page.max(1) as u64, boot_time)?;
        // One of the counted descriptors is the directory being read.
        stats.open_fds = open_fds.saturating_sub(1);
        stats.max_fds = max_fds;
        Some(stats)
    }

    /// Parses `/proc/<pid>/stat`. The command name (field 2) is in parentheses and may hold spaces and
    /// parentheses itself, so fields are counted from the last `)`.
    fn from_stat(stat: &str, ticks_per_second: u64, page_size: u64, boot_time: u64) -> Option<ProcessStats> {
        let fields: Vec<&str> = stat.get(stat.rfind(')')? + 1..)?.split_whitespace().collect();
        // fields[0] is field 3 (state): field N is fields[N - 3].
        let field = |n: usize| fields.get(n - 3).and_then(|v| v.parse::<u64>().ok());
        let (utime, stime, start, vsize, rss) = (field(14)?, field(15)?, field(22)?, field(23)?, field(24)?);
        let ticks = ticks_per_second as f64;
        Some(ProcessStats {
            cpu_seconds: (utime + stime) as f64 / ticks,
            resident_bytes: rss * page_size,
            virtual_bytes: vsize,
            open_fds: 0,
            max_fds: None,
            start_time_seconds: boot_time as f64 + start as f64 / ticks,
        })
    }

    fn render(&self, out: &mut String) {
        let mut metric = |name: &str, kind: &str, help: &str, value: String| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}");
        };
        metric(
            "process_cpu_seconds_total",
            "counter",
            "User and system CPU time spent, in seconds.",
            self.cpu_seconds.to_string(),
        );
        metric(
            "process_resident_memory_bytes",
            "gauge",
            "Resident memory size, in bytes.",
            self.resident_bytes.to_string(),
        );
        metric(
            "process_virtual_memory_bytes",
            "gauge",
            "Virtual memory size, in bytes.",
            self.virtual_bytes.to_string(),
        );
        metric("process_open_fds", "gauge", "Open file descriptors.", self.open_fds.to_string());
        if let Some(max) = self.max_fds {
            metric("process_max_fds", "gauge", "The limit of open file descriptors.", max.to_string());
        }
        metric(
            "process_start_time_seconds",
            "gauge",
            "Start time of the process since the Unix epoch, in seconds.",
            self.start_time_seconds.to_string(),
        );
    }
}

/// The soft limit in `/proc/self/limits`' "Max open files" line ("unlimited" is left out).
fn max_open_files(limits: &str) -> Option<u64> {
    limits.lines().find_map(|l| l.strip_prefix("Max open files")?.split_whitespace().next()?.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_stat_is_read_from_the_last_parenthesis() {
        // A command name with a space and a parenthesis; utime 250, stime 150 ticks, start 1000 ticks after
        // boot, 8 MiB virtual, 300 resident pages.
        let stat = "4242 (aiwg (x) serve) S 1 4242 4242 0 -1 4194560 500 0 0 0 250 150 0 0 20 0 9 0 1000 \
                    8388608 300 18446744073709551615 1 1 0 0 0 0 0 4096 0 0 0 0 17 1 0 0 0 0 0";
        let stats = ProcessStats::from_stat(stat, 100, 4096, 1_700_000_000).unwrap();
        assert_eq!(
            stats,
            ProcessStats {
                cpu_seconds: 4.0,
                resident_bytes: 300 * 4096,
                virtual_bytes: 8_388_608,
                open_fds: 0,
                max_fds: None,
                start_time_seconds: 1_700_000_010.0,
            }
        );
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max open files            1024                 524288               files\n";
        assert_eq!(max_open_files(limits), Some(1024));
    }

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
