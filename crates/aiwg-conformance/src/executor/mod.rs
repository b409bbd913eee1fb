//! `aiwg-serve conformance executor`: plays the control plane for an executor under test. It listens
//! (`--listen`; or starts the executor itself with `--exec CMD`, telling it the URL through
//! `AIWG_EXECUTOR_SERVE` and `AIWG_SERVE_URL`), waits for the executor to register, reads its declared
//! level from its capabilities (`hitl`, `resumable`), and runs the contract's categories against it in
//! one scenario: register, auth, dispatch, lifecycle, hitl, resumable, then `events` over every frame it
//! sent. A check above the declared level is skipped, saying so; a check whose setup failed is skipped,
//! saying which.
//!
//! The missions it dispatches are shell commands by default, which the reference executor's `shell`
//! adapter runs (`aiwg-serve executor --adapter shell`); `--objective` and its siblings replace them for
//! executors that run something else.

mod checks;
mod child;
mod judge;
mod missions;
mod plane;
mod restarts;
mod scenario;

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;

use super::report::Report;
use super::Profile;
use aiwg_contract::Schema;

#[derive(Args, Debug)]
pub struct ExecutorSuite {
    /// Where the suite listens for the executor (port 0: any; the URL is printed on stderr)
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
    /// Start the executor with `sh -c CMD` (AIWG_EXECUTOR_SERVE and AIWG_SERVE_URL set to the suite's
    /// URL); the suite can then stop and restart it (resumable, deregister)
    #[arg(long, value_name = "CMD")]
    pub exec: Option<String>,
    /// Append the started executor's output to FILE (default: discarded)
    #[arg(long, value_name = "FILE", requires = "exec")]
    pub exec_log: Option<PathBuf>,
    /// The mission that should complete (exit 0)
    #[arg(long, default_value = "echo conformance")]
    pub objective: String,
    /// The mission that should fail, with --failing-exit-code
    #[arg(long, default_value = "echo failing >&2; exit 3")]
    pub failing_objective: String,
    #[arg(long, default_value_t = 3)]
    pub failing_exit_code: i64,
    /// A mission that runs until it is aborted or the executor stops
    #[arg(long, default_value = "sleep 120")]
    pub long_objective: String,
    /// A mission that outlives a dropped socket, then completes (resumable)
    #[arg(long, default_value = "sleep 4")]
    pub resumable_objective: String,
    /// A mission that asks for a human answer and completes when given --hitl-answer
    #[arg(long, default_value = "echo '::hitl:: proceed?'; read answer; test \"$answer\" = yes")]
    pub hitl_objective: String,
    #[arg(long, default_value = "yes")]
    pub hitl_answer: String,
    /// The tools the missions' lease allows (the shell adapter runs only with Bash)
    #[arg(long, value_name = "CSV", value_delimiter = ',', default_value = "Bash")]
    pub lease_tools: Vec<String>,
    /// contract: what the contract requires; strict: also what both serves do beyond it (4001 on a
    /// refused token: register again)
    #[arg(long, value_enum, default_value_t = Profile::Contract)]
    pub profile: Profile,
    /// Seconds to wait for any one thing the executor should do
    #[arg(long, default_value_t = 30)]
    pub wait_s: u64,
    /// Also write the report as JUnit XML to FILE
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
}

impl ExecutorSuite {
    fn strict(&self) -> bool {
        self.profile == Profile::Strict
    }
}

/// Runs the suite; `Err` when it could not start (the listener, the executor's command).
pub async fn run(suite: &ExecutorSuite, schema: &Schema) -> Result<Report, String> {
    let plane =
        plane::Plane::start(suite.listen).await.map_err(|e| format!("cannot listen on {}: {e}", suite.listen))?;
    let mut launched =
        suite.exec.clone().map(|cmd| child::Launched::new(cmd, plane.url.clone(), suite.exec_log.clone()));
    match &mut launched {
        Some(l) => {
            eprintln!("conformance: starting the executor against {}", plane.url);
            l.start()?;
        }
        None => eprintln!("conformance: waiting for an executor to register at {}", plane.url),
    }
    Ok(scenario::Scenario::new(suite, schema, plane, launched).run().await)
}
