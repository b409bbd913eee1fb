//! `aiwg-serve conformance`: the contract's conformance suite, live. `conformance server --url URL`
//! plays executors against a control plane (ours, or upstream `aiwg serve`) and checks the server side
//! of the contract's categories; each check names the contract section it enforces. The report is a
//! table, JSON (`--json`) or JUnit XML (`--junit FILE`); the exit code is 0 only when every required
//! check passed. It goes on to replay upstream's recorded fixtures (`fixtures/upstream`), one check
//! each. `conformance replay FILE` replays one fixture (upstream's shape, or what `conformance record`
//! writes) and reports its first divergence.
//!
//! A tool on top of the crate, like `cli` and `reference_executor`: it talks to serve over HTTP and
//! WebSockets only.

pub mod executor;
pub mod fixture;
mod peer;
mod replay;
pub mod report;
mod server;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Subcommand, ValueEnum};

use crate::cli::Global;
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
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Profile {
    Contract,
    Strict,
}

pub async fn run(global: &Global, command: ConformanceCommand) -> ExitCode {
    let schema = match crate::contract::Schema::load() {
        Ok(schema) => schema,
        Err(e) => {
            eprintln!("aiwg-serve conformance: {e}");
            return ExitCode::from(2);
        }
    };
    match command {
        ConformanceCommand::Server { url, profile, junit, skip_fixtures } => {
            let target = target(global, url);
            let mut report = server::run(&target, profile == Profile::Strict).await;
            if !skip_fixtures {
                replay::upstream(&target, &schema, &mut report).await;
            }
            let required = if profile == Profile::Strict { Level::Strict } else { Level::Hitl };
            finish(global, &report, junit, required)
        }
        ConformanceCommand::Replay { file, url, junit } => {
            let read = std::fs::read_to_string(&file).map_err(|e| e.to_string());
            let scenario = match read.and_then(|text| fixture::Scenario::parse(&text)) {
                Ok(scenario) => scenario,
                Err(e) => {
                    eprintln!("aiwg-serve conformance replay: {} is not a fixture to replay: {e}", file.display());
                    return ExitCode::from(2);
                }
            };
            let target = target(global, url);
            let report = replay::file(&target, &schema, &scenario, &file).await;
            // Every divergence counts, whatever level the fixture is for.
            finish(global, &report, junit, Level::Strict)
        }
        ConformanceCommand::Executor(suite) => match executor::run(&suite).await {
            // Checks above the executor's declared level were skipped, so every level counts.
            Ok(report) => finish(global, &report, suite.junit.clone(), Level::Strict),
            Err(e) => {
                eprintln!("aiwg-serve conformance: {e}");
                ExitCode::from(2)
            }
        },
    }
}

fn target(global: &Global, url: Option<String>) -> peer::Target {
    peer::Target {
        base: url.unwrap_or_else(|| global.server.clone()).trim_end_matches('/').to_owned(),
        operator: global.token.clone(),
        http: reqwest::Client::builder().no_proxy().build().expect("an HTTP client without TLS roots to load builds"),
    }
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
