//! `aiwg-serve conformance`: the contract's conformance suite, live. `conformance server --url URL`
//! plays executors against a control plane (ours, or upstream `aiwg serve`) and checks the server side
//! of the contract's categories; each check names the contract section it enforces. The report is a
//! table, JSON (`--json`) or JUnit XML (`--junit FILE`); the exit code is 0 only when every required
//! check passed. `conformance record --out FILE` stands between executors and a serve and writes what
//! crosses as a fixture in upstream's format.
//!
//! A tool on top of the crate, like `cli` and `reference_executor`: it talks to serve over HTTP and
//! WebSockets only.

mod peer;
mod record;
pub mod report;
mod server;

use std::net::SocketAddr;
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
    match command {
        ConformanceCommand::Server { url, profile, junit } => check_server(global, url, profile, junit).await,
        ConformanceCommand::Record { url, listen, out, name } => {
            record::run(url.as_deref().unwrap_or(&global.server), listen, &out, name).await
        }
    }
}

async fn check_server(global: &Global, url: Option<String>, profile: Profile, junit: Option<PathBuf>) -> ExitCode {
    let target = peer::Target {
        base: url.unwrap_or_else(|| global.server.clone()).trim_end_matches('/').to_owned(),
        operator: global.token.clone(),
        http: reqwest::Client::builder().no_proxy().build().expect("an HTTP client without TLS roots to load builds"),
    };
    let report = server::run(&target, profile == Profile::Strict).await;
    if global.json {
        println!("{}", serde_json::to_string(&report).expect("the report serializes"));
    } else {
        print!("{}", report.table());
    }
    if let Some(path) = junit {
        if let Err(e) = std::fs::write(&path, report.junit()) {
            eprintln!("aiwg-serve conformance: cannot write {}: {e}", path.display());
            return ExitCode::from(2);
        }
    }
    let required = if profile == Profile::Strict { Level::Strict } else { Level::Hitl };
    if report.passed(required) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
