//! Where serve's CPU goes per ingested event: `perf` samples serve (all its threads, on the `cpu-clock`
//! software event, which every Linux machine has) during the ingestion peak, and each sample's symbol is
//! put in the stage of the per-frame path it belongs to. A stage's share of the samples, times serve's
//! CPU time per event, is that stage's cost per event.
//!
//! Self time only (no call graphs: the release build has no frame pointers), so a function inlined into
//! another counts where it was inlined; the symbol names of generic code keep their crate's path, which is
//! what most rules below match.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::Row;

/// A `perf record` attached to serve.
pub struct Recording {
    child: Child,
    data: PathBuf,
}

impl Recording {
    /// Starts sampling `pid` into `data`; `None` (said on stderr) where `perf` cannot run.
    pub fn start(pid: u32, data: &Path) -> Option<Recording> {
        let child = Command::new("perf")
            .args(["record", "-q", "-e", "cpu-clock", "-F", "1999", "-p", &pid.to_string(), "-o"])
            .arg(data)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        match child {
            Ok(child) => {
                // perf attaches within a few milliseconds; the peak lasts seconds.
                std::thread::sleep(Duration::from_millis(200));
                Some(Recording { child, data: data.to_owned() })
            }
            Err(e) => {
                eprintln!("aiwg-bench: cannot run perf ({e}): no per-stage profile");
                None
            }
        }
    }

    /// Stops sampling; the stages' cost per event, given serve's CPU time per event over the same peak.
    pub fn stages(mut self, cpu_per_event: Duration) -> Vec<Row> {
        // SIGINT: perf writes its file and exits.
        let _ = Command::new("kill").args(["-INT", &self.child.id().to_string()]).status();
        let _ = self.child.wait();
        let report = Command::new("perf")
            .args(["report", "--no-children", "-g", "none", "--sort", "comm,dso,sym", "--stdio", "-t", "\t", "-i"])
            .arg(&self.data)
            .stderr(Stdio::null())
            .output();
        let text = match report {
            Ok(out) => String::from_utf8_lossy(&out.stdout).into_owned(),
            Err(e) => {
                eprintln!("aiwg-bench: perf report failed: {e}");
                return Vec::new();
            }
        };
        let mut shares = vec![0.0; STAGES.len() + 1];
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let fields: Vec<&str> = line.split('\t').map(str::trim).collect();
            let [percent, comm, dso, sym] = fields[..] else { continue };
            let Ok(percent) = percent.trim_end_matches('%').parse::<f64>() else { continue };
            shares[stage(comm, dso, sym)] += percent;
        }
        let total: f64 = shares.iter().sum();
        let ns = cpu_per_event.as_nanos() as f64;
        STAGES
            .iter()
            .map(|(name, _)| *name)
            .chain(["other"])
            .zip(shares)
            .map(|(name, share)| {
                Row::new(&format!("per event: {name}"), ns * share / total.max(1e-9), "ns")
                    .note(format!("{:.1}% of serve's CPU", 100.0 * share / total.max(1e-9)))
            })
            .collect()
    }
}

/// A matching rule: by thread name, by shared object, or by a piece of the symbol's name.
enum Is {
    /// SQLite's own code on the writer's thread, which calls it directly (`store::sqlite::raw`): SQLite is
    /// linked into serve's binary, and its C symbols are the only ones there without a Rust path (`::`),
    /// apart from the allocator's.
    SqliteOn(&'static str),
    Thread(&'static str),
    Kernel,
    Symbol(&'static [&'static str]),
}

/// The stages of the per-frame path, in the order their rules are tried (first match wins).
const STAGES: &[(&str, Is)] = &[
    ("SQLite executes the batch (on the writer's thread)", Is::SqliteOn("aiwg-writer")),
    ("writer: gathering rows, binds, answers, its kernel time", Is::Thread("aiwg-writer")),
    ("kernel: socket reads and writes, wakeups", Is::Kernel),
    ("allocator", Is::Symbol(ALLOCATOR)),
    ("schema validation", Is::Symbol(&["jsonschema", "regex", "nul_at", "Schema::validat"])),
    ("JSON encoding (stored event, ack)", Is::Symbol(&["serde_json::ser", "serialize", "answer_frame", "fmt"])),
    (
        "JSON value trees: parse, build, drop",
        Is::Symbol(&[
            "serde_json::de",
            "serde_json::read",
            "serde_json::value",
            "serde_core::de",
            "ValueVisitor",
            "btree",
        ]),
    ),
    ("WebSocket framing and the socket's loop", Is::Symbol(&["tungstenite", "extract::ws", "hub::", "bytes::"])),
    (
        "judging: ownership, transition, canonical form, projection",
        Is::Symbol(&["services::ingest", "ledger", "domain::", "canonical_data", "registry", "MissionPatch", "Hasher"]),
    ),
    ("runtime: tasks, channels, timers, clock", Is::Symbol(&["tokio", "futures_", "oneshot", "mpsc", "clock_gettime"])),
    ("memory copies and compares", Is::Symbol(&["memmove", "memcpy", "memcmp", "memset"])),
];

/// The allocator's symbols: mimalloc (`mi_`, and `operator delete` of its override), and glibc's.
const ALLOCATOR: &[&str] = &["mi_", "operator", "malloc", "_int_free", "cfree", "realloc", "unlink_chunk"];

fn stage(comm: &str, dso: &str, sym: &str) -> usize {
    STAGES
        .iter()
        .position(|(_, rule)| match rule {
            Is::SqliteOn(prefix) => {
                comm.starts_with(prefix)
                    && dso.starts_with("aiwg-serve")
                    && !sym.contains("::")
                    && !ALLOCATOR.iter().any(|p| sym.contains(p))
            }
            Is::Thread(prefix) => comm.starts_with(prefix),
            Is::Kernel => dso.contains("kernel"),
            Is::Symbol(pieces) => pieces.iter().any(|p| sym.contains(p)),
        })
        .unwrap_or(STAGES.len())
}
