//! The dispatch, lifecycle and hitl categories: one mission per check, each dispatched as serve forwards
//! one (the contract's sessions route, upstream's `/dispatch` when that one is 404, the executor's token
//! as the bearer), then followed through the frames the executor sends.

use serde_json::{json, Value};

use super::checks::*;
use super::plane::is_terminal;
use super::scenario::{outcome, Registered, Scenario};
use crate::report::Outcome;
use aiwg_contract::clock;
use aiwg_domain::{AbortedBy, ServeEvent};

/// The session the suite's missions belong to.
const SESSION: &str = "conformance";

/// An executor's answer to a dispatch.
struct DispatchAnswer {
    status: u16,
    body: Value,
    path: String,
}

impl Scenario<'_> {
    pub(super) async fn missions(&mut self, e: &Registered) {
        let refused = self.bad_token_refused(e).await;
        self.record(DISPATCH_TOKEN, outcome(refused));
        match self.dispatch(e, &self.suite.objective.clone()).await {
            Ok((mission, answer)) => {
                self.record(ACCEPTED, outcome(answer));
                let completed = self.completes(&mission).await;
                self.record(COMPLETES, outcome(completed));
            }
            Err(why) => {
                self.record(ACCEPTED, Outcome::Fail(why));
                self.record(COMPLETES, Outcome::Skip("needs an accepted dispatch (dispatch/accepted_202)".into()));
            }
        }
        let failed = self.fails(e).await;
        self.record(FAILS, outcome(failed));
        let aborted = self.aborts(e).await;
        self.record(ABORT, outcome(aborted));
        match e.hitl {
            true => {
                let answered = self.hitl(e).await;
                self.record(HITL, outcome(answered));
            }
            false => self.record(HITL, Outcome::Skip("the executor does not declare hitl".into())),
        }
    }

    fn payload(&self, e: &Registered, mission: &str, objective: &str) -> Value {
        json!({
            "mission_id": mission, "objective": objective, "completion": "the command exits 0",
            "long_running": false, "executor_filter": {"executor_id": e.id, "capabilities": []},
            "metadata": {"session_id": SESSION}, "lease": {"tools": self.suite.lease_tools},
        })
    }

    async fn post(&self, e: &Registered, payload: &Value, token: &str) -> Result<DispatchAnswer, String> {
        let sessions = format!("/api/v1/sessions/{SESSION}/dispatch");
        for path in [sessions.as_str(), "/dispatch"] {
            let sent = self.http.post(format!("{}{path}", e.rest)).bearer_auth(token).json(payload).timeout(self.wait);
            let response = sent.send().await.map_err(|e| format!("POST {path}: {e}"))?;
            let status = response.status().as_u16();
            let bytes = response.bytes().await.map_err(|e| format!("POST {path}: reading the answer: {e}"))?;
            let body = serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
            // Only a 404 from the contract's route means "try upstream's older one", as serve does.
            if status != 404 || path != sessions {
                return Ok(DispatchAnswer { status, body, path: path.to_owned() });
            }
        }
        unreachable!("the loop returns at its last path")
    }

    /// A dispatch with a token the suite never issued is refused (401 or 403).
    async fn bad_token_refused(&mut self, e: &Registered) -> Result<(), String> {
        let mission = new_mission();
        let a = self.post(e, &self.payload(e, &mission, &self.suite.objective), "not-the-token").await?;
        if (200..300).contains(&a.status) {
            // Taken, wrongly: still a mission it was handed, whose events are its to send.
            self.missions.push(mission);
        }
        match a.status {
            401 | 403 => Ok(()),
            status => {
                Err(format!("a dispatch with a wrong bearer token was answered {status} {} at {}", a.body, a.path))
            }
        }
    }

    /// Dispatches `objective`: the mission and the verdict on the answer (202 with a body of the
    /// contract's `dispatch_response` for this mission) when the executor took it, `Err` when it did not.
    pub(super) async fn dispatch(
        &mut self,
        e: &Registered,
        objective: &str,
    ) -> Result<(String, Result<(), String>), String> {
        let mission = new_mission();
        let token = self.plane.token(&e.id).unwrap_or_default();
        let a = self.post(e, &self.payload(e, &mission, objective), &token).await?;
        if !(200..300).contains(&a.status) {
            return Err(format!(
                "the executor refused the dispatch of {objective:?}: {} {} at {}",
                a.status, a.body, a.path
            ));
        }
        self.missions.push(mission.clone());
        let verdict = match (a.status, self.schema.validate("dispatch_response", &a.body)) {
            (202, Ok(())) if a.body["mission_id"] == mission.as_str() => Ok(()),
            (202, Ok(())) => Err(format!("the answer names mission {} instead of {mission}", a.body["mission_id"])),
            (202, Err(d)) => Err(format!("the 202's body is not a dispatch_response ({:?}): {}", d.first(), a.body)),
            (status, _) => Err(format!("the dispatch was answered {status}, not 202: {} at {}", a.body, a.path)),
        };
        Ok((mission, verdict))
    }

    /// Waits for the mission's terminal event from frame `from` on.
    async fn ending(&self, from: usize, mission: &str) -> Result<(usize, Value), String> {
        let what = format!("terminal event for mission {mission}");
        self.plane.wait(&what, self.wait, |j| j.ending(from, mission)).await
    }

    /// Waits for `event` about the mission, or its end if that comes first (then `Err` says so).
    pub(super) async fn reached(&self, event: &str, mission: &str) -> Result<(usize, Value), String> {
        let found = self
            .plane
            .wait(&format!("{event} for mission {mission}"), self.wait, |j| {
                j.find(0, |_, v| v["mission_id"] == mission && (v["event"] == event || is_terminal(v)))
            })
            .await?;
        match found.1["event"] == event {
            true => Ok(found),
            false => Err(format!("mission {mission} ended before {event}: {}", found.1)),
        }
    }

    /// assigned, then started, then completed with exit code 0 (when it reports one).
    async fn completes(&self, mission: &str) -> Result<(), String> {
        let (end, last) = self.ending(0, mission).await?;
        let seen = |event: &str| self.plane.read(|j| j.event(0, event, mission)).is_some_and(|(i, _)| i < end);
        if !seen("mission.assigned") || !seen("mission.started") {
            return Err(format!("mission {mission} ended without mission.assigned and mission.started before {last}"));
        }
        let code = last["data"]["exit_code"].as_i64().unwrap_or(0);
        match last["event"] == "mission.completed" && code == 0 {
            true => Ok(()),
            false => Err(format!("the mission that exits 0 ended with {last}")),
        }
    }

    /// The failing objective ends in `mission.failed` with its exit code.
    async fn fails(&mut self, e: &Registered) -> Result<(), String> {
        let (mission, _) = self.dispatch(e, &self.suite.failing_objective.clone()).await?;
        let (_, last) = self.ending(0, &mission).await?;
        let code = self.suite.failing_exit_code;
        // The schema makes the exit code optional; one that is reported must be the command's.
        let reported = &last["data"]["exit_code"];
        match last["event"] == "mission.failed" && (reported.is_null() || *reported == code) {
            true => Ok(()),
            false => Err(format!("the mission that exits {code} ended with {last}")),
        }
    }

    /// A running mission aborted by serve's frame ends in `mission.aborted`.
    async fn aborts(&mut self, e: &Registered) -> Result<(), String> {
        let (mission, _) = self.dispatch(e, &self.suite.long_objective.clone()).await?;
        self.reached("mission.started", &mission).await?;
        let abort = ServeEvent::Aborted { by: AbortedBy::Operator, reason: "operator_request" };
        let from = self.say(&e.id, &mission, &abort)?;
        let (_, last) = self.ending(from, &mission).await.map_err(|e| {
            format!("{e} after serve's mission.aborted on the socket (how aiwg serve forwards an abort)")
        })?;
        match last["event"] == "mission.aborted" {
            true => Ok(()),
            false => Err(format!(
                "after serve's mission.aborted on the socket (how aiwg serve forwards an abort), the mission ended \
                 with {last}"
            )),
        }
    }

    /// `mission.hitl_required`, the answer sent as serve sends it, then the mission completes.
    async fn hitl(&mut self, e: &Registered) -> Result<(), String> {
        let (mission, _) = self.dispatch(e, &self.suite.hitl_objective.clone()).await?;
        let (_, asked) = self.reached("mission.hitl_required", &mission).await?;
        let Some(hitl_id) = asked["data"]["hitl_id"].as_str() else {
            return Err(format!("mission.hitl_required without a hitl_id: {asked}"));
        };
        let answer = ServeEvent::HitlResponded {
            hitl_id: hitl_id.to_owned(),
            response: self.suite.hitl_answer.clone(),
            responded_at: Some(clock::now()),
        };
        let from = self.say(&e.id, &mission, &answer)?;
        let (_, last) = self.ending(from, &mission).await?;
        match last["event"] == "mission.completed" {
            true => Ok(()),
            false => Err(format!("after the answer {:?}, the mission ended with {last}", self.suite.hitl_answer)),
        }
    }

    /// Sends serve's event about a mission on the current socket, as serve frames it; the frame number
    /// from which the executor's answer is looked for.
    pub(super) fn say(&self, executor: &str, mission: &str, event: &ServeEvent) -> Result<usize, String> {
        let from = self.plane.read(|j| j.frames.len());
        match self.plane.send(self.socket, event.frame(executor, mission, clock::now())) {
            true => Ok(from),
            false => Err(format!("the executor's socket closed before serve's {}", event.event_type().as_str())),
        }
    }
}

fn new_mission() -> String {
    format!("m-{}", uuid::Uuid::new_v4().simple())
}
