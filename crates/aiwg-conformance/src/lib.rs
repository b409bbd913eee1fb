//! `aiwg-serve conformance`: the contract's conformance suite, live. `conformance server --url URL`
//! plays executors against a control plane (ours, or upstream `aiwg serve`) and checks the server side
//! of the contract's categories; each check names the contract section it enforces. The report is a
//! table, JSON (`--json`) or JUnit XML (`--junit FILE`); the exit code is 0 only when every required
//! check passed. It goes on to replay upstream's recorded fixtures (`fixtures/upstream`), one check
//! each. `conformance replay FILE` replays one fixture (upstream's shape, or what `conformance record`
//! writes) and reports its first divergence. `conformance record --out FILE` stands between executors and
//! a serve and writes what crosses as a fixture in upstream's format. `conformance executor` plays the
//! control plane for an executor under test.
//!
//! A tool beside the server, like the command line and the reference executor: it talks to serve over
//! HTTP and WebSockets only, and judges with the contract (`aiwg-contract`) and the domain's transition
//! table (`aiwg-domain`).

pub mod executor;
pub mod fixture;
mod peer;
mod record;
mod replay;
pub mod report;
mod server;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Subcommand, ValueEnum};

use aiwg_client::Global;
use report::Level;

#[derive(Subcommand, Debug)]
pub enum ConformanceCommand {
    /// Check a control plane's side of the contract by playing executors against it
    Server {
        /// The server under test (default: --server, i.e. AIWG_SERVE_URL or http://127.0.0.1:7337)
        #[arg(long)]
        url: Option<String>,
        /// contract: what the contract requires; strict: also what aiwg-serve promises beyond it
        #[arg(long, value_enum, default_value_t = Profile::Contract)]
        profile: Profile,
        /// Also write the report as JUnit XML to FILE
        #[arg(long, value_name = "FILE")]
        junit: Option<PathBuf>,
        /// Only the live checks: do not replay upstream's recorded fixtures
        #[arg(long)]
        skip_fixtures: bool,
    },
    /// Replay a recorded fixture against a control plane and report its first divergence
    Replay {
        /// The fixture: upstream's shape (fixtures/upstream/*.json) or what `conformance record` writes
        file: PathBuf,
        /// The server under test (default: --server, i.e. AIWG_SERVE_URL or http://127.0.0.1:7337)
        #[arg(long)]
        url: Option<String>,
        /// Also write the report as JUnit XML to FILE
        #[arg(long, value_name = "FILE")]
        junit: Option<PathBuf>,
    },
    /// Check an executor by playing the control plane for it
    Executor(Box<executor::ExecutorSuite>),
    /// Stand between executors (and operators) and a serve, and write what crosses as a fixture
    Record {
        /// The serve to record (default: --server, i.e. AIWG_SERVE_URL or http://127.0.0.1:7337)
        #[arg(long)]
        url: Option<String>,
        /// Where executors and operators reach the recorder (port 0: any free port, printed at start)
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: SocketAddr,
        /// The fixture file, rewritten after every step
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
        /// The fixture's `_fixture` name (default: the file's name without its extension)
        #[arg(long)]
        name: Option<String>,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Profile {
    Contract,
    Strict,
}

pub async fn run(global: &Global, command: ConformanceCommand) -> ExitCode {
    let schema = match aiwg_contract::Schema::load() {
        Ok(schema) => schema,
        Err(e) => {
            eprintln!("aiwg-serve conformance: {e}");
            return ExitCode::from(2);
        }
    };
    match command {
        ConformanceCommand::Server { url, profile, junit, skip_fixtures } => {
            let target = match target(global, url) {
                Ok(target) => target,
                Err(e) => return refuse(&e),
            };
            let mut report = server::run(&target, profile == Profile::Strict).await;
            if !skip_fixtures {
                replay::upstream(&target, &schema, &mut report).await;
            }
            let required = if profile == Profile::Strict { Level::Strict } else { Level::Hitl };
            // On stderr, so that stdout stays the report (JSON with --json).
            eprintln!(
                "aiwg-serve conformance: its executors are deregistered; its missions are under session {} \
                 (upstream's fixtures: their own sessions)",
                target.session
            );
            finish(global, &report, junit, required)
        }
        ConformanceCommand::Replay { file, url, junit } => replay_file(global, &schema, &file, url, junit).await,
        ConformanceCommand::Record { url, listen, out, name } => match global.tls() {
            Ok(tls) => record::run(url.as_deref().unwrap_or(&global.server), listen, &out, name, tls).await,
            Err(e) => refuse(&e),
        },
        ConformanceCommand::Executor(suite) => match executor::run(&suite, &schema).await {
            // Checks above the executor's declared level were skipped, so every level counts.
            Ok(report) => finish(global, &report, suite.junit.clone(), Level::Strict),
            Err(e) => {
                eprintln!("aiwg-serve conformance: {e}");
                ExitCode::from(2)
            }
        },
    }
}

/// `conformance replay FILE`: every divergence counts, whatever level the fixture is for.
async fn replay_file(
    global: &Global,
    schema: &aiwg_contract::Schema,
    file: &std::path::Path,
    url: Option<String>,
    junit: Option<PathBuf>,
) -> ExitCode {
    let read = std::fs::read_to_string(file).map_err(|e| e.to_string());
    let scenario = match read.and_then(|text| fixture::Scenario::parse(&text)) {
        Ok(scenario) => scenario,
        Err(e) => {
            eprintln!("aiwg-serve conformance replay: {} is not a fixture to replay: {e}", file.display());
            return ExitCode::from(2);
        }
    };
    let target = match target(global, url) {
        Ok(target) => target,
        Err(e) => return refuse(&e),
    };
    let report = replay::file(&target, schema, &scenario, file).await;
    finish(global, &report, junit, Level::Strict)
}

fn target(global: &Global, url: Option<String>) -> Result<peer::Target, String> {
    let base = url.unwrap_or_else(|| global.server.clone()).trim_end_matches('/').to_owned();
    Ok(peer::Target::new(base, global.token.clone(), global.tls()?))
}

/// A command that cannot start (its `--ca-cert` does not read): the reason, exit 2.
fn refuse(why: &str) -> ExitCode {
    eprintln!("aiwg-serve conformance: {why}");
    ExitCode::from(2)
}

/// Prints the report (and writes its JUnit file); the exit code says whether every check required
/// (at or below `required`) passed.
fn finish(global: &Global, report: &report::Report, junit: Option<PathBuf>, required: Level) -> ExitCode {
    if global.json {
        println!("{}", serde_json::to_string(report).expect("the report serializes"));
    } else {
        print!("{}", report.table());
    }
    if let Some(path) = junit {
        if let Err(e) = std::fs::write(&path, report.junit()) {
            eprintln!("aiwg-serve conformance: cannot write {}: {e}", path.display());
            return ExitCode::from(2);
        }
    }
    if report.passed(required) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
