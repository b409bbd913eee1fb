//! `aiwg-serve conformance server`, run as the real binary: our server passes every check of both
//! profiles, and a server that is not one fails the handshake with the evidence and exit 1.

use serde_json::Value;

use crate::cli::{cli, stderr, stdout};
use crate::support::runtime::ScriptedRuntime;
use crate::support::TestServer;

fn outcomes(report: &Value) -> Vec<(String, String)> {
    report["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["id"].as_str().unwrap().to_owned(), r["outcome"].as_str().unwrap().to_owned()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_server_passes_both_profiles() {
    let server = TestServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let junit = dir.path().join("conformance.xml");
    let args = ["--json", "conformance", "server", "--profile", "strict", "--junit", junit.to_str().unwrap()];
    let out = cli(&server.base, &args, &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}{}", stdout(&out), stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let results = outcomes(&report);
    assert!(results.len() >= 20, "{results:?}");
    assert!(results.iter().any(|(id, _)| id == "fixtures/resumable-suspend-resume"), "{results:?}");
    assert!(results.iter().all(|(_, o)| o == "pass"), "{results:?}");
    assert!(report["results"].as_array().unwrap().iter().all(|r| !r["section"].as_str().unwrap().is_empty()));
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(xml.contains(&format!("tests=\"{}\" failures=\"0\" skipped=\"0\"", results.len())), "{xml}");
    // It leaves no executor behind, and its missions carry the session it names (issue 36: 3 ghost
    // executors and 8 unmarked missions after a run).
    assert_eq!(server.executors().await["executors"], serde_json::json!([]), "every executor deregistered");
    let said = stderr(&out);
    let session = said.split("missions are under session ").nth(1).and_then(|s| s.split(' ').next()).unwrap();
    assert!(session.starts_with("aiwg-conformance-"), "{said}");
    let mine = server.client.get(&format!("/api/v1/missions?session_id={session}&limit=100")).await;
    assert!(mine.body["missions"].as_array().unwrap().len() >= 3, "{}", mine.body);

    // The contract profile skips the strict checks, saying why, and still passes.
    let out = cli(&server.base, &["conformance", "server"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let table = stdout(&out);
    assert!(table.contains("skip  strict/honest_controls"), "{table}");
    assert!(table.contains("the contract profile (run with --profile strict)"), "{table}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_is_not_one_fails_with_the_evidence() {
    // An HTTP server that answers the register route with 404: nothing of the contract is there.
    let not_a_server = ScriptedRuntime::start().await;
    let out = cli(&not_a_server.url(), &["--json", "conformance", "server"], &[]).await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let results = outcomes(&report);
    assert!(results.contains(&("register/handshake".into(), "fail".into())), "{results:?}");
    assert!(results.iter().filter(|(_, o)| o == "skip").count() >= 8, "{results:?}");
    let handshake = report["results"].as_array().unwrap().iter().find(|r| r["id"] == "register/handshake").unwrap();
    assert!(handshake["detail"].as_str().unwrap().contains("answered 404"), "{handshake}");
}

/// A check that cannot fail is a defect: against a server that breaks exactly one rule, the check meant
/// for that rule fails (and the same server without the flaw passes everything).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_check_fails_against_the_fault_it_is_for() {
    use crate::support::lax_server::{start, Flaw};
    // The live checks only: the fixtures' replays are seen failing in conformance_replay.
    let strict = ["--json", "conformance", "server", "--profile", "strict", "--skip-fixtures"];
    let clean = cli(&start(Flaw::None).await, &strict, &[]).await;
    let report: Value = serde_json::from_slice(&clean.stdout).unwrap();
    assert!(outcomes(&report).iter().all(|(_, o)| o == "pass"), "{report}");
    let cases = [
        (Flaw::AcceptsAnyMajor, "register/unknown_major_refused"),
        (Flaw::RenamesOnReregister, "register/identity_kept"),
        (Flaw::OpensSocketsWithoutToken, "auth/socket_needs_the_token"),
        (Flaw::ForwardsNothing, "dispatch/forwarded_to_the_executor"),
        (Flaw::AssignsWhatNobodyFits, "dispatch/no_executor_fits"),
        (Flaw::NeverLeavesAssigned, "lifecycle/assigned_to_done"),
        (Flaw::DropsHitlAnswers, "hitl/round_trip"),
        (Flaw::KeepsDeregistered, "register/deregister"),
        (Flaw::LetsAnyoneEndMissions, "strict/foreign_mission_refused"),
        (Flaw::ReopensEndedMissions, "strict/terminal_state_final"),
        (Flaw::RefusesUndeclaredPause, "controls/pause_then_resume"),
        (Flaw::PretendsToPause, "strict/honest_controls"),
    ];
    let runs = cases.iter().map(|(flaw, check)| async move {
        let out = cli(&start(*flaw).await, &strict, &[]).await;
        (flaw, check, out)
    });
    for (flaw, check, out) in futures_util::future::join_all(runs).await {
        assert_eq!(out.status.code(), Some(1), "{flaw:?}: {}", stdout(&out));
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        let got = outcomes(&report).into_iter().find(|(id, _)| id == check).map(|(_, o)| o);
        assert_eq!(got.as_deref(), Some("fail"), "{flaw:?} must fail {check}: {report}");
    }
}
