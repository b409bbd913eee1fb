//! `aiwg-bench`: the workloads of DESIGN section 7 against a real `aiwg-serve` started as a separate
//! process, with the load generated from this one, each beside its baseline measured in the same run.
//!
//! `aiwg-bench` runs everything at full scale; `--quick` runs small versions in about a minute and
//! fails (exit 1) only on a correctness gate (acknowledged events missing, missions lost or
//! duplicated), never on speed; `--json FILE` writes the rows.

mod histogram;
mod peers;
mod profile;
mod streams;
mod workloads;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use serde::Serialize;

/// The allocator serve uses, so that the baselines run in this process (raw SQLite, the bare servers)
/// and the load generator are not handicapped against it.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "aiwg-bench", about = "Benchmarks of aiwg-serve against this machine's own limits")]
struct Args {
    /// Internal: run the bare WebSocket server of the idle-fleet baseline and print its port
    #[arg(long, hide = true)]
    bare_ws_server: bool,
    /// Small versions of every workload (a CI smoke run); fails only on correctness gates
    #[arg(long)]
    quick: bool,
    /// Also write the results as JSON
    #[arg(long)]
    json: Option<PathBuf>,
    /// Run only workloads whose name contains this
    #[arg(long)]
    only: Option<String>,
    /// Also run ingestion and kill -9 with serve on PostgreSQL (workloads ingest-pg and kill-pg), in
    /// databases the run creates on this server and drops: postgres://user@host:port/db
    #[arg(long)]
    database_url: Option<String>,
    /// Also sample serve with `perf` during the ingestion peak into this file, and report the cost per
    /// event of each stage of the per-frame path
    #[arg(long)]
    profile: Option<PathBuf>,
}

/// How big each workload is.
pub struct Scale {
    pub ingest_executors: usize,
    pub ingest_events_per_executor: usize,
    pub paced_seconds: f64,
    pub baseline_rows: usize,
    pub single_row_rows: usize,
    pub kill_executors: usize,
    pub kill_after: Duration,
    pub dispatch_executors: usize,
    pub dispatches: usize,
    pub open_loop_rate: f64,
    pub open_loop_seconds: f64,
    pub storm_executors: usize,
    pub polling_missions: usize,
    pub polls: usize,
    pub fleet: usize,
    pub idle_seconds: f64,
    pub hitl_load_executors: usize,
    pub hitl_rounds: usize,
    pub runtime_missions: usize,
    pub compaction_fill: usize,
    pub dashboard_missions: usize,
    pub dashboard_loads: usize,
    pub dashboard_executors: usize,
    pub dashboard_stream_seconds: f64,
    /// Log bytes each executor streams (`logs`).
    pub log_bytes_per_executor: usize,
    /// Artifact bytes uploaded and downloaded in all (`artifacts`).
    pub artifact_bytes: usize,
    /// Missions with usage under the sums' reads (`usage-sums`).
    pub usage_missions: usize,
}

impl Scale {
    fn full() -> Scale {
        Scale {
            ingest_executors: 64,
            ingest_events_per_executor: 3000,
            paced_seconds: 5.0,
            baseline_rows: 200_000,
            single_row_rows: 20_000,
            kill_executors: 16,
            kill_after: Duration::from_secs(3),
            dispatch_executors: 1000,
            dispatches: 20_000,
            open_loop_rate: 1000.0,
            open_loop_seconds: 5.0,
            storm_executors: 2000,
            polling_missions: 1_000_000,
            polls: 2000,
            fleet: 10_000,
            idle_seconds: 5.0,
            hitl_load_executors: 16,
            hitl_rounds: 500,
            runtime_missions: 5_000,
            compaction_fill: 1_000_000,
            dashboard_missions: 1_000_000,
            dashboard_loads: 40,
            dashboard_executors: 64,
            dashboard_stream_seconds: 10.0,
            log_bytes_per_executor: 2 << 20,
            artifact_bytes: 100 << 20,
            usage_missions: 1_000_000,
        }
    }

    fn quick() -> Scale {
        Scale {
            ingest_executors: 8,
            ingest_events_per_executor: 500,
            paced_seconds: 1.0,
            baseline_rows: 20_000,
            single_row_rows: 2_000,
            kill_executors: 4,
            kill_after: Duration::from_millis(500),
            dispatch_executors: 50,
            dispatches: 1_000,
            open_loop_rate: 200.0,
            open_loop_seconds: 1.0,
            storm_executors: 50,
            polling_missions: 10_000,
            polls: 200,
            fleet: 300,
            idle_seconds: 1.0,
            hitl_load_executors: 2,
            hitl_rounds: 30,
            runtime_missions: 300,
            compaction_fill: 4_000,
            dashboard_missions: 10_000,
            dashboard_loads: 5,
            dashboard_executors: 8,
            dashboard_stream_seconds: 1.0,
            log_bytes_per_executor: 256 << 10,
            artifact_bytes: 16 << 20,
            usage_missions: 10_000,
        }
    }
}

/// One line of the report.
#[derive(Serialize)]
pub struct Row {
    workload: String,
    figure: f64,
    unit: &'static str,
    baseline_name: Option<String>,
    baseline: Option<f64>,
    ratio: Option<f64>,
    target: Option<String>,
    met: Option<bool>,
    note: Option<String>,
}

impl Row {
    pub fn new(workload: &str, figure: f64, unit: &'static str) -> Row {
        Row {
            workload: workload.into(),
            figure,
            unit,
            baseline_name: None,
            baseline: None,
            ratio: None,
            target: None,
            met: None,
            note: None,
        }
    }

    pub fn baseline(mut self, name: &str, value: f64) -> Row {
        self.baseline_name = Some(name.into());
        self.baseline = Some(value);
        self.ratio = (value > 0.0).then(|| self.figure / value);
        self
    }

    /// Figure / baseline must reach `min`.
    pub fn target_ratio(mut self, min: f64) -> Row {
        self.target = Some(format!(">= {min}x"));
        self.met = self.ratio.map(|r| r >= min);
        self
    }

    /// Figure / baseline must stay below `max` (memory: at most that many times the bare socket).
    pub fn target_ratio_below(mut self, max: f64) -> Row {
        self.target = Some(format!("<= {max}x"));
        self.met = self.ratio.map(|r| r <= max);
        self
    }

    pub fn target_below(mut self, max: f64) -> Row {
        self.target = Some(format!("< {max} {}", self.unit));
        self.met = Some(self.figure < max);
        self
    }

    pub fn target_above(mut self, min: f64) -> Row {
        self.target = Some(format!(">= {min} {}", self.unit));
        self.met = Some(self.figure >= min);
        self
    }

    pub fn note(mut self, note: String) -> Row {
        self.note = Some(note);
        self
    }
}

fn print(rows: &[Row]) {
    println!(
        "{:<46} {:>14} {:<10} {:>28} {:>8} {:>16} {:>7}",
        "workload", "figure", "unit", "baseline", "ratio", "target", "verdict"
    );
    for r in rows {
        let baseline = match (&r.baseline_name, r.baseline) {
            (Some(n), Some(v)) if v < 100.0 => format!("{v:.2} ({n})"),
            (Some(n), Some(v)) => format!("{v:.0} ({n})"),
            _ => "-".into(),
        };
        let ratio = r.ratio.map_or("-".into(), |x| format!("{x:.2}x"));
        let verdict = match r.met {
            Some(true) => "met",
            Some(false) => "MISSED",
            None => "-",
        };
        println!(
            "{:<46} {:>14.2} {:<10} {:>28} {:>8} {:>16} {:>7}{}",
            r.workload,
            r.figure,
            r.unit,
            baseline,
            ratio,
            r.target.clone().unwrap_or_else(|| "-".into()),
            verdict,
            r.note.as_ref().map(|n| format!("  ({n})")).unwrap_or_default()
        );
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    if args.bare_ws_server {
        peers::bare_ws_server().await;
        return ExitCode::SUCCESS;
    }
    let scale = if args.quick { Scale::quick() } else { Scale::full() };
    let dir = ScratchDir::new();
    let mut failures = Vec::new();
    let rows = measure(&args, &scale, dir.path(), &mut failures).await;
    print(&rows);
    if let Some(path) = &args.json {
        let doc = serde_json::json!({"quick": args.quick, "rows": rows, "failures": failures});
        if let Err(e) = std::fs::write(path, serde_json::to_vec_pretty(&doc).expect("json")) {
            eprintln!("aiwg-bench: cannot write {}: {e}", path.display());
        }
    }
    if failures.is_empty() {
        println!("aiwg-bench: every correctness gate held");
        ExitCode::SUCCESS
    } else {
        for f in &failures {
            eprintln!("aiwg-bench: correctness gate failed: {f}");
        }
        ExitCode::FAILURE
    }
}

/// Runs the workloads `--only` picks (those on PostgreSQL only with `--database-url`), in order; their
/// rows, and in `failures` the correctness gates that failed.
async fn measure(args: &Args, scale: &Scale, dir: &Path, failures: &mut Vec<String>) -> Vec<Row> {
    let wanted = |name: &str| args.only.as_deref().is_none_or(|o| name.contains(o));
    let mut rows = Vec::new();
    if wanted("cold") {
        rows.extend(workloads::cold_start(dir).await);
    }
    if wanted("ingest") {
        rows.extend(workloads::ingestion(dir, scale, args.profile.as_deref(), failures).await);
    }
    if wanted("notify") {
        rows.extend(workloads::notifications(dir, scale).await);
    }
    if wanted("answers") {
        rows.extend(workloads::answer_cost(dir, scale).await);
    }
    rows.extend(workloads::usage(dir, scale, &wanted).await);
    if wanted("kill") {
        rows.extend(workloads::kill9(dir, scale, failures).await);
    }
    if wanted("compaction") {
        rows.extend(workloads::compaction(dir, scale, failures).await);
    }
    if let Some(url) = &args.database_url {
        rows.extend(measure_postgres(&wanted, url, scale, dir, failures).await);
    }
    if wanted("dispatch") {
        rows.extend(workloads::dispatch(dir, scale).await);
    }
    if wanted("poll") {
        rows.extend(workloads::polling(dir, scale).await);
    }
    if wanted("fleet") {
        rows.extend(workloads::idle_fleet(dir, scale).await);
    }
    if wanted("hitl") {
        rows.extend(workloads::hitl_round_trip(dir, scale).await);
    }
    if wanted("runtime") {
        rows.extend(workloads::runtime_missions(dir, scale, failures).await);
    }
    if wanted("storm") {
        rows.extend(workloads::reconnect_storm(dir, scale, failures).await);
    }
    if wanted("tls") {
        rows.extend(workloads::tls_cost(dir, scale).await);
    }
    if wanted("dashboard") {
        rows.extend(workloads::dashboard(dir, scale, failures).await);
    }
    if wanted("logs") {
        rows.extend(workloads::logs(dir, scale, failures).await);
    }
    if wanted("artifacts") {
        rows.extend(workloads::artifacts(dir, scale, failures).await);
    }
    rows
}

/// The workloads that need PostgreSQL (`--database-url`).
async fn measure_postgres(
    wanted: &impl Fn(&str) -> bool,
    url: &str,
    scale: &Scale,
    dir: &Path,
    failures: &mut Vec<String>,
) -> Vec<Row> {
    let mut rows = Vec::new();
    if wanted("ingest-pg") {
        rows.extend(workloads::ingestion_pg(dir, scale, url, failures).await);
    }
    if wanted("kill-pg") {
        rows.extend(workloads::kill9_pg(dir, scale, url, failures).await);
    }
    if wanted("dispatch-replicas") {
        rows.extend(workloads::dispatch_replicas(dir, scale, url).await);
    }
    if wanted("storm-replicas") {
        rows.extend(workloads::storm_after_kill9(dir, scale, url, failures).await);
    }
    rows
}

/// A scratch directory for the run's data dirs, removed at the end.
struct ScratchDir(PathBuf);

impl ScratchDir {
    fn new() -> ScratchDir {
        let dir =
            std::env::temp_dir().join(format!("aiwg-bench-{}-{}", std::process::id(), uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).expect("scratch dir");
        ScratchDir(dir)
    }

    fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
