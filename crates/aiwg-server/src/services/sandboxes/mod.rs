//! The legacy sandbox registry of the contract's compatibility notes: `POST /api/sandboxes/register`,
//! `DELETE /api/sandboxes/{id}`, `GET /ws/sandbox/{id}?token=`. The agentic-sandbox executor registers
//! here before anything else, retries every 5 s until it gets `{sandbox_id, token}`, and tears everything
//! down if its sandbox socket is refused or closed, so serve accepts it leniently and keeps it open.
//! Its `SandboxEvent` frames (`{"type": ...}`) are stored in the event log as `sandbox.<type>`, where
//! operators see them.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;
use tokio::sync::{mpsc, watch};

mod entries;
mod output;

use super::ledger::{Ledger, Verdict};
use super::logs::Logs;
use super::registry::Registry;
use super::Core;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::store::{Change, Store};
use aiwg_contract::clock;
use aiwg_contract::tokens;
use aiwg_contract::EventType;
use aiwg_domain::sandbox_sessions::{sessions_mentioned, Inferred, Question, Tracker, INFERRED};
use aiwg_domain::{
    canonical_id, on_executor_event, Live, MissionState, NewEvent, Origin, Outcome, SandboxRecord, ServeEvent,
};
use entries::{Entry, Inner};
use output::Watcher;

/// The longest `type` of a sandbox frame that is stored; anything else is not a SandboxEvent.
const MAX_TYPE_LEN: usize = 64;

/// A registration stores at most this much of what the sandbox sent (the real client sends ~300 bytes).
pub(crate) const MAX_REGISTRATION_BYTES: usize = 16 * 1024;

/// Relayed HITL questions waiting to be looked at; past this many, one is dropped (and logged).
const QUESTIONS_WAITING: usize = 256;

pub struct Sandboxes {
    inner: Mutex<Inner>,
    /// Held across a registration's or deregistration's commit, so memory applies them in commit order.
    writes: tokio::sync::Mutex<()>,
    store: Store,
    max_sandboxes: usize,
    /// The agent sessions each sandbox's frames told of.
    sessions: Mutex<HashMap<String, Tracker>>,
    /// Mission lifecycle inferred from a session is recorded on the linked executor's missions.
    registry: Arc<Registry>,
    ledger: Arc<Ledger>,
    /// Relayed HITL questions, and their receiver until the service that raises them takes it.
    questions: mpsc::Sender<Question>,
    /// Follows the output of the sessions bound to live missions into their logs.
    output: Arc<Watcher>,
    asked: Mutex<Option<mpsc::Receiver<Question>>>,
}

/// What `GET /api/v1/sandboxes` shows of one sandbox.
#[derive(Debug, Serialize)]
pub struct SandboxStatus {
    pub sandbox_id: String,
    pub name: String,
    pub registered_at: String,
    pub connected: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_event_type: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_event_at: Option<String>,
    pub registration: Value,
}

/// The 201 body of a sandbox registration.
#[derive(Debug, Serialize)]
pub struct SandboxRegistered {
    pub sandbox_id: String,
    pub token: String,
}

impl Sandboxes {
    pub(crate) async fn load(
        core: &Core,
        config: &Config,
        logs: Arc<Logs>,
        shutdown: watch::Receiver<bool>,
    ) -> Result<Sandboxes> {
        let connect_timeout = Duration::from_millis(config.dispatch.forward_timeout_ms);
        let (registry, ledger) = (core.registry.clone(), core.ledger.clone());
        let output = Arc::new(Watcher::new(logs, registry, ledger, connect_timeout, shutdown));
        let mut inner = Inner::default();
        for row in core.store.sandboxes().await? {
            inner.order.push(row.sandbox_id.clone());
            inner.entries.insert(row.sandbox_id.clone(), Entry { row, sockets: 0, last_event: None });
        }
        let (questions, asked) = mpsc::channel(QUESTIONS_WAITING);
        Ok(Sandboxes {
            questions,
            output,
            asked: Mutex::new(Some(asked)),
            inner: Mutex::new(inner),
            writes: Default::default(),
            store: core.store.clone(),
            max_sandboxes: config.server.max_sandboxes,
            sessions: Default::default(),
            registry: core.registry.clone(),
            ledger: core.ledger.clone(),
        })
    }

    /// Registers (or re-registers) a sandbox; every registration issues a new token. Lenient in what
    /// it takes, bounded in what it keeps: at most [`MAX_REGISTRATION_BYTES`] stored, at most
    /// `server.max_sandboxes` live sandboxes, and a known sandbox id only from the address it was
    /// registered from (this registration is unauthenticated: the real client sends no token). Memory
    /// changes once the store has the row.
    pub async fn register(&self, body: Value, peer: IpAddr) -> Result<SandboxRegistered> {
        let Value::Object(fields) = &body else {
            return Err(Error::InvalidJson("a sandbox registration is a JSON object".into()));
        };
        if serde_json::to_vec(&body).map_or(usize::MAX, |b| b.len()) > MAX_REGISTRATION_BYTES {
            return Err(Error::PayloadTooLarge(MAX_REGISTRATION_BYTES));
        }
        let text = |k: &str| fields.get(k).and_then(Value::as_str).filter(|s| !s.is_empty() && s.len() <= 256);
        let sandbox_id = text("instance_id").map(canonical_id).unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        let name = text("name").unwrap_or("sandbox").to_owned();
        let token = tokens::issue();
        let from = peer.to_string();
        let _serial = self.writes.lock().await;
        let (forgotten, registered_at) = {
            let inner = self.inner.lock().expect("sandboxes lock");
            let forgotten = inner.admit(&sandbox_id, &from, self.max_sandboxes)?;
            (forgotten, inner.entries.get(&sandbox_id).map_or_else(clock::now, |e| e.row.registered_at))
        };
        let row = SandboxRecord {
            sandbox_id: sandbox_id.clone(),
            name,
            registration: body.clone(),
            token_hash: tokens::hash(&token),
            registered_at,
            registered_from: Some(from),
            deregistered_at: None,
        };
        let mut changes: Vec<Change> = forgotten.iter().cloned().map(Change::ForgetSandbox).collect();
        changes.push(Change::PutSandbox(Box::new(row.clone())));
        self.store.commit(changes).await?;
        let mut inner = self.inner.lock().expect("sandboxes lock");
        if let Some(id) = &forgotten {
            inner.entries.remove(id);
            inner.order.retain(|o| o != id);
            self.sessions.lock().expect("sandbox sessions lock").remove(id);
        }
        match inner.entries.get_mut(&sandbox_id) {
            Some(e) => e.row = row,
            None => {
                inner.order.push(sandbox_id.clone());
                inner.entries.insert(sandbox_id.clone(), Entry { row, sockets: 0, last_event: None });
            }
        }
        Ok(SandboxRegistered { sandbox_id, token })
    }

    /// Marks a sandbox deregistered: asked from the address it was registered from (the client sends
    /// this, without any token, before every re-registration, and ignores the answer), or by an operator.
    /// Unknown ids are fine.
    pub async fn deregister(&self, sandbox_id: &str, from: IpAddr, operator: bool) -> Result<bool> {
        let _serial = self.writes.lock().await;
        let row = {
            let inner = self.inner.lock().expect("sandboxes lock");
            match inner.entries.get(sandbox_id).filter(|e| e.row.deregistered_at.is_none()) {
                Some(e) if !operator && e.row.registered_from.as_deref() != Some(from.to_string().as_str()) => {
                    return Err(Error::Forbidden(format!(
                        "sandbox {sandbox_id} was registered from another address: only that address, or an \
                         operator's token, deregisters it"
                    )))
                }
                Some(e) => SandboxRecord { deregistered_at: Some(clock::now()), ..e.row.clone() },
                None => return Ok(false),
            }
        };
        self.store.commit(vec![Change::PutSandbox(Box::new(row.clone()))]).await?;
        if let Some(e) = self.inner.lock().expect("sandboxes lock").entries.get_mut(sandbox_id) {
            e.row = row;
        }
        Ok(true)
    }

    pub fn authenticate(&self, sandbox_id: &str, token: Option<&str>) -> Result<()> {
        let token = token.ok_or(Error::Unauthorized("a sandbox token is required"))?;
        let inner = self.inner.lock().expect("sandboxes lock");
        match inner.entries.get(sandbox_id) {
            Some(e)
                if e.row.deregistered_at.is_none() && tokens::hashes_equal(&tokens::hash(token), &e.row.token_hash) =>
            {
                Ok(())
            }
            _ => Err(Error::TokenInvalid("the token is not valid for this sandbox: register it again")),
        }
    }

    pub fn socket(&self, sandbox_id: &str, open: bool) {
        let mut inner = self.inner.lock().expect("sandboxes lock");
        if let Some(e) = inner.entries.get_mut(sandbox_id) {
            e.sockets = if open { e.sockets + 1 } else { e.sockets.saturating_sub(1) };
        }
    }

    /// Stores one frame of a sandbox socket, if it is a SandboxEvent; returns whether it was.
    pub async fn frame(&self, sandbox_id: &str, text: &str) -> bool {
        let Ok(frame) = serde_json::from_str::<Value>(text) else { return false };
        let Some(kind) = frame_type(&frame) else { return false };
        let now = clock::now();
        let row = NewEvent {
            event: format!("sandbox.{kind}").into(),
            executor_id: sandbox_id.to_owned(),
            mission_id: None,
            ts: clock::format(now),
            data: frame.clone(),
            raw: None,
            origin: Origin::Executor,
        };
        if let Err(e) = self.store.commit(vec![Change::AppendEvent(row)]).await {
            tracing::error!(error = %e, sandbox_id, "storing a sandbox event failed");
            return false;
        }
        let registered_from = {
            let mut inner = self.inner.lock().expect("sandboxes lock");
            inner.entries.get_mut(sandbox_id).and_then(|e| {
                e.last_event = Some((kind.to_owned(), clock::format(now)));
                e.row.registered_from.clone()
            })
        };
        self.infer(sandbox_id, registered_from.as_deref(), &frame).await;
        if kind == "hitl_input_required" && registered_from.is_some_and(|from| self.speaks_for(sandbox_id, &from)) {
            if let Err(e) = self.questions.try_send(Question::of(sandbox_id, frame)) {
                tracing::warn!(sandbox_id, error = %e, "a relayed HITL question was not looked at: too many waiting");
            }
        }
        true
    }

    /// The relayed HITL questions, once (to the service that raises them).
    pub(crate) fn questions(&self) -> Option<mpsc::Receiver<Question>> {
        self.asked.lock().expect("questions lock").take()
    }

    /// The live missions of `executor_id` bound to sessions its sandbox said run on `agent_id`.
    pub(crate) fn agent_missions(&self, executor_id: &str, agent_id: &str) -> Vec<String> {
        let sessions =
            self.sessions.lock().expect("sandbox sessions lock").get(executor_id).map(|t| t.sessions_of(agent_id));
        let mut missions: Vec<String> =
            sessions.into_iter().flatten().filter_map(|s| self.ledger.bound_to(executor_id, &s)).collect();
        missions.dedup();
        missions
    }

    /// One page of live sandboxes in first-registration order from position `from`, and where the next
    /// page starts.
    pub fn page(&self, from: usize, limit: usize) -> (Vec<SandboxStatus>, Option<usize>) {
        let inner = self.inner.lock().expect("sandboxes lock");
        let mut out = Vec::new();
        for (pos, id) in inner.order.iter().enumerate().skip(from) {
            let Some(e) = inner.entries.get(id).filter(|e| e.row.deregistered_at.is_none()) else { continue };
            if out.len() == limit {
                return (out, Some(pos));
            }
            out.push(SandboxStatus {
                sandbox_id: e.row.sandbox_id.clone(),
                name: e.row.name.clone(),
                registered_at: clock::format(e.row.registered_at),
                connected: e.sockets > 0,
                last_event_type: e.last_event.as_ref().map(|(t, _)| t.clone()),
                last_event_at: e.last_event.as_ref().map(|(_, at)| at.clone()),
                registration: e.row.registration.clone(),
            });
        }
        (out, None)
    }

    /// Whether an executor is an agentic-sandbox executor: a sandbox of its id was registered (it may
    /// have deregistered since: the client deletes its sandbox before every re-registration) from the
    /// address the executor registered from. The client registers both, with one id, on one connection.
    pub fn linked(&self, executor_id: &str) -> bool {
        let from = self
            .inner
            .lock()
            .expect("sandboxes lock")
            .entries
            .get(executor_id)
            .and_then(|e| e.row.registered_from.clone());
        from.is_some_and(|from| self.speaks_for(executor_id, &from))
    }

    /// Whether a sandbox registered from `from` speaks for the executor of its id.
    fn speaks_for(&self, sandbox_id: &str, from: &str) -> bool {
        self.registry.reach(sandbox_id).is_some_and(|r| r.registered_from.as_deref() == Some(from))
    }

    /// Records what a sandbox frame made known about the missions of the executor it is linked to.
    async fn infer(&self, sandbox_id: &str, sandbox_from: Option<&str>, frame: &Value) {
        let inferred = {
            let bound = |session_id: &str| self.ledger.bound_to(sandbox_id, session_id).is_some();
            let mut sessions = self.sessions.lock().expect("sandbox sessions lock");
            sessions.entry(sandbox_id.to_owned()).or_default().observe(frame, bound)
        };
        let mentioned = sessions_mentioned(frame);
        if inferred.is_empty() && mentioned.is_empty() {
            return;
        }
        if !sandbox_from.is_some_and(|from| self.speaks_for(sandbox_id, from)) {
            tracing::debug!(sandbox_id, "sandbox session events for no executor of the same machine");
            return;
        }
        let executor_id = sandbox_id;
        let mut moved = HashSet::new();
        for fact in inferred {
            match fact {
                Inferred::AgentLost { agent_id, session_ids } => {
                    moved.extend(self.agent_lost(executor_id, &agent_id, &session_ids).await)
                }
                fact => moved.extend(self.record_inferred(executor_id, fact).await),
            }
        }
        // Whatever else the frame says of a mission's session is a sign of its agent's life: an operator
        // sees when a mission last showed one (its `updated_at`); and its output is followed again (after
        // a restart of serve, from then on).
        for session_id in mentioned {
            if let Some(mission_id) = self.ledger.bound_to(executor_id, &session_id).filter(|m| !moved.contains(m)) {
                self.output.watch(executor_id, &session_id, &mission_id, false);
                self.ledger.touch(&mission_id).await;
            }
        }
    }

    /// Records a fact inferred from the executor's sandbox session on the live mission it is about;
    /// that mission, if it moved.
    async fn record_inferred(&self, executor_id: &str, fact: Inferred) -> Option<String> {
        let (prefix, session_id) = match &fact {
            Inferred::Started { prefix, session_id } | Inferred::Ended { prefix, session_id, .. } => {
                (prefix, session_id)
            }
            Inferred::AgentLost { .. } => return None,
        };
        let mission_id = match prefix {
            Some(prefix) => self.ledger.session_mission(executor_id, session_id, prefix.as_bytes()),
            None => self.ledger.bound_to(executor_id, session_id),
        };
        let Some(mission_id) = mission_id else {
            tracing::debug!(sandbox_id = executor_id, %session_id, ?prefix, "sandbox session matches no live mission");
            return None;
        };
        let said = match fact {
            Inferred::Started { ref session_id, .. } => ServeEvent::Started { pty_session_id: session_id.clone() },
            Inferred::Ended { ref session_id, exit_code: 0, .. } => ServeEvent::Completed {
                exit_code: 0,
                summary: format!("{INFERRED} {session_id}: it ended with exit code 0"),
            },
            Inferred::Ended { ref session_id, exit_code, .. } => ServeEvent::Failed {
                reason: "agent_exit",
                error: Some(format!("{INFERRED} {session_id}: it ended with exit code {exit_code}")),
                exit_code: Some(exit_code),
            },
            Inferred::AgentLost { .. } => return None,
        };
        let event = said.event_type();
        let recorded = self
            .ledger
            .transition_as_serve(executor_id, &mission_id, |live| {
                let Outcome::Move(to) = on_executor_event(live.state(), event) else { return None };
                // A start only moves a mission still waiting for one.
                let applies = event != EventType::MissionStarted || live.state() == MissionState::Assigned;
                applies.then(|| Verdict::new(said, to))
            })
            .await
            .map(|moved| moved.to);
        let state = recorded?;
        tracing::info!(%mission_id, %session_id, %state, "mission lifecycle inferred from the sandbox session");
        if state == MissionState::Running {
            self.output.watch(executor_id, session_id, &mission_id, true);
        }
        Some(mission_id)
    }

    /// The sandbox lost an agent: it cleaned up the agent's sessions and will say no more of them, so
    /// the live missions bound to them fail (`agent_disconnected`); those it failed.
    async fn agent_lost(&self, executor_id: &str, agent_id: &str, session_ids: &[String]) -> Vec<String> {
        let mut failed = Vec::new();
        for session_id in session_ids {
            let Some(mission_id) = self.ledger.bound_to(executor_id, session_id) else { continue };
            let error = format!(
                "{INFERRED} {session_id}: its agent {agent_id} disconnected (sandbox.agent_disconnected) and the \
                 sandbox cleaned up its sessions"
            );
            let said = ServeEvent::Failed { reason: "agent_disconnected", error: Some(error), exit_code: None };
            let judge = |live: &Live| (!live.state().is_terminal()).then(|| Verdict::new(said, MissionState::Failed));
            if self.ledger.transition_as_serve(executor_id, &mission_id, judge).await.is_some() {
                tracing::info!(%mission_id, %session_id, agent_id, "mission failed: its sandbox agent disconnected");
                failed.push(mission_id);
            }
        }
        failed
    }
}

/// The `type` of a SandboxEvent frame, if the frame is one.
pub(crate) fn frame_type(frame: &Value) -> Option<&str> {
    frame
        .get("type")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty() && t.len() <= MAX_TYPE_LEN && t.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'))
}
