//! `aiwg-serve conformance executor`, run as the real binary: the reference executor passes every check
//! at its declared level (started by the suite with `--exec`, so that the restart and stop checks run
//! too), a scripted executor passes, and the same executor with one rule broken is caught by exactly
//! the check meant for that rule.

use std::process::Stdio;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use crate::support::conformant::{Conformant, Flaw};
use crate::support::WAIT;

/// What the suite decided, check by check.
fn outcomes(report: &Value) -> Vec<(String, String)> {
    let results = report["results"].as_array().unwrap();
    results.iter().map(|r| (r["id"].as_str().unwrap().to_owned(), r["outcome"].as_str().unwrap().to_owned())).collect()
}

fn suite(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_aiwg-serve"));
    command.args(["--json", "conformance", "executor"]).args(args).kill_on_drop(true);
    command.stdout(Stdio::piped()).stderr(Stdio::piped()).stdin(Stdio::null());
    command
}

/// Runs the suite for the scripted executor (with `flaw`): its exit code and report.
async fn examine(flaw: Option<Flaw>) -> (Option<i32>, Value) {
    let mut child = suite(&["--wait-s", "5"]).spawn().unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
    let line = tokio::time::timeout(WAIT, stderr.next_line()).await.unwrap().unwrap().unwrap();
    let url = line.rsplit(' ').next().unwrap().to_owned();
    assert!(url.starts_with("http://127.0.0.1:"), "{line}");
    let _executor = Conformant::start(&url, flaw).await;
    let out = tokio::time::timeout(WAIT * 6, child.wait_with_output()).await.unwrap().unwrap();
    let report =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    (out.status.code(), report)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_executor_passes_every_check_of_its_level() {
    let dir = tempfile::tempdir().unwrap();
    let (state, work) = (dir.path().join("state"), dir.path().join("work"));
    std::fs::create_dir_all(&work).unwrap();
    let exec = format!(
        "{} executor --adapter shell --state-dir {} --workdir {}",
        env!("CARGO_BIN_EXE_aiwg-serve"),
        state.display(),
        work.display()
    );
    let junit = dir.path().join("junit.xml");
    let args = ["--exec", exec.as_str(), "--junit", junit.to_str().unwrap(), "--wait-s", "20"];
    let out = tokio::time::timeout(WAIT * 12, suite(&args).output()).await.unwrap().unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(0), "{report:#}\n{}", String::from_utf8_lossy(&out.stderr));
    let results = outcomes(&report);
    assert_eq!(results.len(), 21, "{results:?}");
    assert!(results.iter().all(|(_, o)| o == "pass"), "{results:?}");
    assert!(report["target"].as_str().unwrap().ends_with("(declares HITL and Resumable)"), "{}", report["target"]);
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(xml.contains("tests=\"21\" failures=\"0\" skipped=\"0\""), "{xml}");
}

/// The scripted executor passes; each flaw fails exactly its check, and the suite exits 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_flaw_is_caught_by_exactly_its_check() {
    let (code, report) = examine(None).await;
    let results = outcomes(&report);
    assert_eq!(code, Some(0), "{report:#}");
    assert!(!results.iter().any(|(_, o)| o == "fail"), "{results:?}");
    // Without --exec the suite cannot stop or restart it, and says so.
    let skipped: Vec<&str> = results.iter().filter(|(_, o)| o == "skip").map(|(id, _)| id.as_str()).collect();
    assert_eq!(
        skipped,
        [
            "resumable/suspends_on_shutdown",
            "resumable/resync_after_restart",
            "resumable/reconciled_after_restart",
            "register/deregisters_on_shutdown"
        ]
    );

    let cases = [
        (Flaw::ForeignMission, "events/own_missions_only", "about mission m-never-dispatched"),
        (Flaw::IllegalTransition, "events/legal_transitions", "mission.started while mission"),
        (Flaw::NoToken, "auth/socket_carries_the_token", "without ?token="),
        (Flaw::ForgetfulResync, "resumable/resync_lists_owned_missions", "does not list its mission"),
        (Flaw::WrongDispatchAnswer, "dispatch/accepted_202", "answered 200, not 202"),
    ];
    for (flaw, check, evidence) in cases {
        let (code, report) = examine(Some(flaw)).await;
        let failed: Vec<&Value> =
            report["results"].as_array().unwrap().iter().filter(|r| r["outcome"] == "fail").collect();
        assert_eq!(code, Some(1), "{flaw:?}: {report:#}");
        assert_eq!(failed.len(), 1, "{flaw:?}: {failed:#?}");
        assert_eq!(failed[0]["id"], check, "{flaw:?}");
        assert!(failed[0]["detail"].as_str().unwrap().contains(evidence), "{flaw:?}: {}", failed[0]["detail"]);
    }
}
