//! The executor suite's scenario, in the order its checks need each other: the handshake and the socket
//! first (nothing else can run without them), one mission per lifecycle check, the HITL and resumable
//! categories at the levels the executor declares, a token refusal (4001) and, for an executor the suite
//! started, a restart and the final stop. The `events` checks judge every frame of the run at the end.

use std::time::Duration;

use serde_json::Value;

use super::checks::*;
use super::child::Launched;
use super::judge;
use super::plane::Plane;
use super::ExecutorSuite;
use crate::report::{Check, Outcome, Report};
use aiwg_contract::Schema;

pub(super) fn outcome(r: Result<(), String>) -> Outcome {
    match r {
        Ok(()) => Outcome::Pass,
        Err(evidence) => Outcome::Fail(evidence),
    }
}

/// The executor as it registered.
pub(super) struct Registered {
    pub id: String,
    pub rest: String,
    pub hitl: bool,
    pub resumable: bool,
}

pub(super) struct Scenario<'a> {
    pub suite: &'a ExecutorSuite,
    /// The contract schema the executor's payloads and frames are held to.
    pub schema: &'a Schema,
    pub plane: Plane,
    pub launched: Option<Launched>,
    pub http: reqwest::Client,
    pub wait: Duration,
    report: Report,
    /// The accepted socket the suite talks on.
    pub socket: usize,
    /// Missions the executor accepted: the only ones it may speak of.
    pub missions: Vec<String>,
}

impl<'a> Scenario<'a> {
    pub(super) fn new(
        suite: &'a ExecutorSuite,
        schema: &'a Schema,
        plane: Plane,
        launched: Option<Launched>,
    ) -> Scenario<'a> {
        Scenario {
            suite,
            schema,
            report: Report { target: format!("the executor at {}", plane.url), results: Vec::new() },
            plane,
            launched,
            http: reqwest::Client::builder()
                .no_proxy()
                .build()
                .expect("an HTTP client without TLS roots to load builds"),
            wait: Duration::from_secs(suite.wait_s),
            socket: 0,
            missions: Vec::new(),
        }
    }

    pub(super) async fn run(mut self) -> Report {
        let Some(executor) = self.handshake().await else {
            self.skip_all(&AFTER_SOCKET, "needs a registered executor (register/handshake failed)");
            self.skip_all(&[SOCKET_TOKEN], "needs a registered executor (register/handshake failed)");
            self.stop().await;
            return self.report;
        };
        self.report.target = format!("executor {} ({})", executor.id, self.level(&executor));
        if self.first_socket(&executor).await {
            self.missions(&executor).await;
            self.resumable(&executor).await;
            self.refused_token(&executor).await;
            self.restart(&executor).await;
            self.shutdown(&executor).await;
            self.judge_ownership(&executor);
        } else {
            self.skip_all(&AFTER_SOCKET, "needs the executor's socket (auth/socket_carries_the_token failed)");
            self.stop().await;
        }
        self.judge_events();
        self.report
    }

    /// The frames' ownership and transitions, which need the missions the executor was handed.
    fn judge_ownership(&mut self, e: &Registered) {
        let (own, transitions) = self.plane.read(|j| {
            (judge::own_missions(&j.frames, &e.id, &self.missions), judge::transitions(&j.frames, &self.missions))
        });
        self.record(OWN, outcome(own));
        self.record(TRANSITIONS, outcome(transitions));
    }

    /// The envelope rules over every frame the executor sent.
    fn judge_events(&mut self) {
        if self.plane.read(|j| !j.frames.iter().any(|f| f.inbound)) {
            return self.skip_all(&EVENTS, "the executor sent no frames");
        }
        let (envelopes, snake, timestamps) = self.plane.read(|j| {
            (judge::envelopes(self.schema, &j.frames), judge::snake_case(&j.frames), judge::timestamps(&j.frames))
        });
        self.record(ENVELOPES, outcome(envelopes));
        self.record(SNAKE, outcome(snake));
        self.record(TIMESTAMPS, outcome(timestamps));
    }

    fn level(&self, e: &Registered) -> &'static str {
        match (e.hitl, e.resumable) {
            (_, true) if e.hitl => "declares HITL and Resumable",
            (_, true) => "declares Resumable",
            (true, false) => "declares HITL",
            (false, false) => "declares Core",
        }
    }

    pub(super) fn record(&mut self, check: Check, outcome: Outcome) {
        self.report.record(check, outcome);
    }

    pub(super) fn skip_all(&mut self, checks: &[Check], why: &str) {
        for c in checks {
            self.record(*c, Outcome::Skip(why.to_owned()));
        }
    }

    /// The first register payload: valid against the schema, of spec major 1, with a REST endpoint.
    async fn handshake(&mut self) -> Option<Registered> {
        let found = self.plane.wait("registration", self.wait, |j| j.registrations.first().cloned()).await;
        let payload = match found {
            Ok(p) => p,
            Err(e) => {
                self.record(HANDSHAKE, Outcome::Fail(format!("{e} at {}/api/v1/executors/register", self.plane.url)));
                return None;
            }
        };
        let verdict = match self.schema.validate("register_payload", &payload) {
            Err(d) => Err(format!("the register payload does not validate: {:?}; payload: {payload}", d.first())),
            Ok(()) if !payload["spec_version"].as_str().is_some_and(|v| v.starts_with("1.")) => {
                Err(format!("spec_version {} is not of major 1", payload["spec_version"]))
            }
            Ok(()) => Ok(()),
        };
        self.record(HANDSHAKE, outcome(verdict));
        let capabilities: Vec<&str> =
            payload["capabilities"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        Some(Registered {
            id: payload["executor_id"].as_str()?.to_owned(),
            rest: payload["transport_endpoints"]["rest"].as_str()?.trim_end_matches('/').to_owned(),
            hitl: capabilities.contains(&"hitl"),
            resumable: capabilities.contains(&"resumable"),
        })
    }

    /// The executor's first socket carries the token it was issued. A socket refused here ends the run:
    /// every later check needs one.
    async fn first_socket(&mut self, e: &Registered) -> bool {
        let first = self
            .plane
            .wait("WebSocket to /ws/executors/{id}", self.wait, |j| {
                j.connections.first().map(|c| (c.token.clone(), c.accepted, c.executor_id.clone()))
            })
            .await;
        let verdict = match first {
            Err(why) => Err(format!(
                "{why}: the executor did not dial in (an executor that only serves its socket at \
                 transport_endpoints.ws works with aiwg-serve, which dials it, but this suite checks executors \
                 that dial; upstream's aiwg serve does not dial)"
            )),
            Ok((_, _, id)) if id != e.id => Err(format!("the socket was opened for executor {id}, not {}", e.id)),
            Ok((None, _, _)) => Err("the socket was opened without ?token= (closed with 4001)".to_owned()),
            Ok((Some(_), false, _)) => {
                Err("the socket carried a token other than the one issued (closed with 4001)".to_owned())
            }
            Ok((Some(_), true, _)) => Ok(()),
        };
        let ok = verdict.is_ok();
        self.record(SOCKET_TOKEN, outcome(verdict));
        ok
    }
}
