//! `aiwg-serve conformance`: the contract's conformance suite, live. `conformance server --url URL`
//! plays executors against a control plane (ours, or upstream `aiwg serve`) and checks the server side
//! of the contract's categories; each check names the contract section it enforces. The report is a
//! table, JSON (`--json`) or JUnit XML (`--junit FILE`); the exit code is 0 only when every required
//! check passed.
//!
//! A tool on top of the crate, like `cli` and `reference_executor`: it talks to serve over HTTP and
//! WebSockets only.

pub mod executor;
mod peer;
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
    match command {
        ConformanceCommand::Server { url, profile, junit } => {
            let target = peer::Target {
                base: url.unwrap_or_else(|| global.server.clone()).trim_end_matches('/').to_owned(),
                operator: global.token.clone(),
                http: reqwest::Client::builder()
                    .no_proxy()
                    .build()
                    .expect("an HTTP client without TLS roots to load builds"),
            };
            let report = server::run(&target, profile == Profile::Strict).await;
            let required = if profile == Profile::Strict { Level::Strict } else { Level::Hitl };
            finish(global, &report, junit.as_deref(), required)
        }
        ConformanceCommand::Executor(suite) => match executor::run(&suite).await {
            // Checks above the executor's declared level were skipped, so every level counts.
            Ok(report) => finish(global, &report, suite.junit.as_deref(), Level::Strict),
            Err(e) => {
                eprintln!("aiwg-serve conformance: {e}");
                ExitCode::from(2)
            }
        },
    }
}

/// Prints the report (a table, or JSON with `--json`), writes the JUnit file if asked, and exits 0 only
/// when every check at or below `required` passed.
fn finish(global: &Global, report: &report::Report, junit: Option<&std::path::Path>, required: Level) -> ExitCode {
    if global.json {
        println!("{}", serde_json::to_string(report).expect("the report serializes"));
    } else {
        print!("{}", report.table());
    }
    if let Some(path) = junit {
        if let Err(e) = std::fs::write(path, report.junit()) {
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
