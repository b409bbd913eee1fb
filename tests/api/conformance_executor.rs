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
async fn examine(flaw: Option<Flaw>, profile: &str) -> (Option<i32>, Value) {
    let mut child = suite(&["--wait-s", "5", "--profile", profile]).spawn().unwrap();
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
    let junit = dir.path().join("junit.xml");
    let (code, report) = reference(|executor, _| executor.to_owned(), "20", Some(&junit)).await;
    assert_eq!(code, Some(0), "{report:#}");
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
    let (code, report) = examine(None, "strict").await;
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
        (Flaw::UnknownMajor, "register/handshake", "spec_version \"2.0.0\" is not of major 1"),
        (Flaw::AnyDispatchToken, "auth/dispatch_needs_the_token", "wrong bearer token was answered 202"),
        (Flaw::NeverStarted, "lifecycle/assigned_started_completed", "without mission.assigned and mission.started"),
        (Flaw::WrongExitCode, "lifecycle/failed_with_exit_code", "the mission that exits 3 ended with"),
        (Flaw::FailsOnAbort, "lifecycle/abort_honoured", "after serve's mission.aborted on the socket"),
        (Flaw::FailsOnAnswer, "hitl/round_trip", "after the answer \"yes\""),
        (Flaw::FailsAfterReconnect, "resumable/goes_on_after_reconnect", "after the reconnect the mission ended"),
        (Flaw::KeepsARefusedToken, "strict/reregisters_after_4001", "no registration after 4001"),
    ];
    // Side by side: each suite waits on its own executor.
    let runs = cases
        .map(|(flaw, check, evidence)| async move { (flaw, check, evidence, examine(Some(flaw), "strict").await) });
    for (flaw, check, evidence, (code, report)) in futures_util::future::join_all(runs).await {
        let failed: Vec<&Value> =
            report["results"].as_array().unwrap().iter().filter(|r| r["outcome"] == "fail").collect();
        assert_eq!(code, Some(1), "{flaw:?}: {report:#}");
        assert_eq!(failed.len(), 1, "{flaw:?}: {failed:#?}");
        assert_eq!(failed[0]["id"], check, "{flaw:?}");
        assert!(failed[0]["detail"].as_str().unwrap().contains(evidence), "{flaw:?}: {}", failed[0]["detail"]);
    }

    // The contract names no 4001: its profile does not provoke one, and says so.
    let (code, report) = examine(Some(Flaw::KeepsARefusedToken), "contract").await;
    assert_eq!(code, Some(0), "{report:#}");
    let skipped: Vec<(String, String)> = outcomes(&report).into_iter().filter(|(_, o)| o == "skip").collect();
    assert!(skipped.contains(&("strict/reregisters_after_4001".into(), "skip".into())), "{report:#}");
    assert!(skipped.contains(&("register/identity_kept".into(), "skip".into())), "{report:#}");
}

/// Runs the suite on the reference executor started by `sh -c` with `command(executor, state dir)`
/// (the executor's own command line and its state directory): exit code and report.
async fn reference(
    command: impl Fn(&str, &str) -> String,
    wait_s: &str,
    junit: Option<&std::path::Path>,
) -> (Option<i32>, Value) {
    let dir = tempfile::tempdir().unwrap();
    let (state, work) = (dir.path().join("state"), dir.path().join("work"));
    std::fs::create_dir_all(&work).unwrap();
    let executor = format!(
        "{} executor --adapter shell --state-dir {} --workdir {}",
        env!("CARGO_BIN_EXE_aiwg-serve"),
        state.display(),
        work.display()
    );
    let exec = command(&executor, state.to_str().unwrap());
    let mut args = vec!["--exec", exec.as_str(), "--wait-s", wait_s, "--profile", "strict"];
    if let Some(junit) = junit {
        args.extend(["--junit", junit.to_str().unwrap()]);
    }
    let out = tokio::time::timeout(WAIT * 12, suite(&args).output()).await.unwrap().unwrap();
    let report =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code(), report)
}

fn failed(report: &Value) -> Vec<String> {
    outcomes(report).into_iter().filter(|(_, o)| o == "fail").map(|(id, _)| id).collect()
}

/// The checks that need the suite to stop and restart the executor, each seen failing: an executor
/// that dies on SIGTERM without a word (its wrapper kills it with SIGKILL, out of the suite's reach in
/// a session of its own) neither suspends its mission nor deregisters; one that loses its mission
/// records on a restart does not resync the suspended mission.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_restart_checks_fail_for_executors_that_break_them() {
    let killed = reference(
        |executor, _| format!("setsid {executor} & pid=$!; trap 'kill -KILL $pid; exit 0' TERM; wait $pid"),
        "5",
        None,
    );
    let forgetful = reference(|executor, state| format!("rm -f {state}/missions.json; exec {executor}"), "5", None);
    let ((killed_code, killed), (forgetful_code, forgetful)) = tokio::join!(killed, forgetful);
    assert_eq!(killed_code, Some(1), "{killed:#}");
    assert_eq!(failed(&killed), ["resumable/suspends_on_shutdown", "register/deregisters_on_shutdown"], "{killed:#}");
    assert_eq!(forgetful_code, Some(1), "{forgetful:#}");
    assert_eq!(failed(&forgetful), ["resumable/resync_after_restart"], "{forgetful:#}");
}
