//! Mission lifecycle from the sandbox socket, for the executor that does not report it.
//!
//! The agentic-sandbox executor sends `mission.assigned` and nothing else for a mission's life: its
//! `mission.started`, `mission.completed` and `mission.failed` are never emitted (its own bugs, see
//! `docs/executors.md`, the agentic-sandbox executor). Its *sandbox* socket does carry the agent session's life:
//! `session_start`, `agent_sessions` (whose `session_name` is `mission-` plus the first 8 bytes of the
//! mission id) and `session_end` with the exit code. Serve reads them as follows.
//!
//! - **Link.** A sandbox and an executor are one machine when the sandbox's id (its `instance_id`) is
//!   the executor's id and both were registered from the same address: the client registers both, with
//!   the same `instance_id`, on one connection. A sandbox registered from elsewhere speaks for nobody.
//! - **Match.** A session belongs to the live mission of that executor bound to it (its
//!   `pty_session_ref`, which the inferred start records); else, named `mission-<prefix>`, to the live
//!   mission whose id starts with `<prefix>` that no session claimed yet, the earliest if several do
//!   (dispatch warns about ids that would collide). Any frame naming a bound session is a sign of life
//!   of its mission (its `updated_at` moves).
//! - **Record.** The session's start records `mission.started` (only from `assigned`); its end records
//!   `mission.completed` (exit 0) or `mission.failed` (reason `agent_exit`, with the exit code), as
//!   serve-originated events whose text says they were inferred from the session. An executor that
//!   reports its own lifecycle gets there first, and these then find nothing to move; its terminal event
//!   after one serve inferred is acknowledged as a duplicate, and a later quarantine
//!   (`failed_preserved`) of a mission that ended this way is refused, not applied.
//!
//! - **Agents.** Each session runs on an agent (`agent_id` of its start and of the listings). When the
//!   sandbox reports an agent lost (`agent_disconnected`), it has cleaned up that agent's sessions and
//!   will say nothing more of them: the missions bound to them fail (reason `agent_disconnected`). A
//!   HITL question the sandbox relays (`hitl_input_required`) is asked by a mission on its agent.
//!
//! Frames can arrive in any order across the two sockets (a `session_start` before the
//! `mission.assigned` of its mission), so each session's facts are gathered until its name is known.

use std::collections::{HashMap, VecDeque};

use serde_json::Value;

/// The words that open the text of every event serve infers from a sandbox session.
pub const INFERRED: &str = "inferred by serve from sandbox session";
/// Sessions remembered per sandbox; the oldest are forgotten first.
const MAX_SESSIONS: usize = 512;

/// What a sandbox's frames say about one agent session.
#[derive(Debug, Default)]
struct Session {
    name: Option<String>,
    /// A live mission is bound to it already (its start was recorded, perhaps before serve restarted and
    /// forgot the session's name): its end needs no name to find its mission.
    bound: bool,
    started: bool,
    exit_code: Option<i64>,
    start_reported: bool,
    end_reported: bool,
}

/// A fact about a mission's session, ready to be matched and recorded: by the mission bound to the
/// session, else by the mission-id prefix its name carries (`None` when only the binding tells). An
/// agent lost speaks of every session the sandbox said ran on it.
#[derive(Debug, PartialEq)]
pub enum Inferred {
    Started { prefix: Option<String>, session_id: String },
    Ended { prefix: Option<String>, session_id: String, exit_code: i64 },
    AgentLost { agent_id: String, session_ids: Vec<String> },
}

/// A HITL question a linked sandbox relayed (`hitl_input_required`): the question its executor's own
/// `mission.hitl_required` asks, which that executor may have lost on the way (after serve restarts,
/// it drops one queued event); serve raises it on the mission when that event does not follow.
#[derive(Clone, Debug, PartialEq)]
pub struct Question {
    pub executor_id: String,
    /// The agent that asks: the mission is the one bound to a session on it.
    pub agent_id: Option<String>,
    /// The frame as the sandbox sent it (`hitl_id`, `prompt`, `context`).
    pub frame: Value,
}

impl Question {
    /// The question in a frame of the sandbox of `executor_id`'s machine.
    pub fn of(executor_id: &str, frame: Value) -> Question {
        let agent_id = frame.get("agent_id").and_then(Value::as_str).map(str::to_owned);
        Question { executor_id: executor_id.to_owned(), agent_id, frame }
    }

    /// Its id, which the answer names (the sandbox matches answers by it alone).
    pub fn hitl_id(&self) -> Option<&str> {
        self.frame.get("hitl_id").and_then(Value::as_str).filter(|s| !s.is_empty())
    }

    /// The `mission.hitl_required` data it asks with: the id, the prompt, the context when given.
    pub fn data(&self) -> Option<Value> {
        let prompt = self.frame.get("prompt").and_then(Value::as_str).filter(|s| !s.is_empty())?;
        let mut data = serde_json::json!({"hitl_id": self.hitl_id()?, "prompt": prompt});
        if let Some(context) = self.frame.get("context").and_then(Value::as_str) {
            data["context"] = context.into();
        }
        Some(data)
    }
}

/// One sandbox's agent sessions as its frames told them. Pure: frames in, inferences out.
#[derive(Debug, Default)]
pub struct Tracker {
    sessions: HashMap<String, Session>,
    order: VecDeque<String>,
    /// The agent each session runs on (from its start, or a listing: after serve restarts, a listing
    /// is all that tells), the oldest forgotten first.
    agents: HashMap<String, String>,
    agents_order: VecDeque<String>,
}

impl Tracker {
    /// Takes one SandboxEvent frame; returns what it makes known, each fact once. `bound` says whether a
    /// live mission is bound to a session (after a restart, the only thing that still ties a running
    /// session to its mission: the sandbox does not list a session again once it has ended).
    pub fn observe(&mut self, frame: &Value, bound: impl Fn(&str) -> bool) -> Vec<Inferred> {
        let text = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_owned);
        let mut touched = Vec::new();
        let agent = text(frame, "agent_id");
        match frame.get("type").and_then(Value::as_str) {
            Some("session_start") => {
                if let Some(id) = text(frame, "session_id") {
                    self.session(&id).started = true;
                    self.runs_on(&id, agent.as_deref());
                    touched.push(id);
                }
            }
            Some("agent_disconnected") => {
                if let Some(agent_id) = agent {
                    let session_ids = self.sessions_of(&agent_id);
                    return vec![Inferred::AgentLost { agent_id, session_ids }];
                }
            }
            Some("session_end") => {
                if let (Some(id), Some(code)) =
                    (text(frame, "session_id"), frame.get("exit_code").and_then(Value::as_i64))
                {
                    self.session(&id).exit_code = Some(code);
                    touched.push(id);
                }
            }
            Some("agent_sessions") => {
                for listed in frame.get("sessions").and_then(Value::as_array).into_iter().flatten() {
                    // Only sessions this sandbox reported itself: a listing alone starts nothing.
                    if let Some(id) = text(listed, "session_id") {
                        self.runs_on(&id, agent.as_deref());
                    }
                    if let (Some(id), Some(name)) = (text(listed, "session_id"), text(listed, "session_name")) {
                        if let Some(session) = self.sessions.get_mut(&id) {
                            session.name = Some(name);
                            touched.push(id);
                        }
                    }
                }
            }
            _ => {}
        }
        for id in &touched {
            if bound(id) {
                if let Some(session) = self.sessions.get_mut(id) {
                    session.bound = true;
                }
            }
        }
        touched.into_iter().flat_map(|id| self.due(&id)).collect()
    }

    /// Session `id` runs on `agent`.
    fn runs_on(&mut self, id: &str, agent: Option<&str>) {
        let Some(agent) = agent else { return };
        if self.agents.insert(id.to_owned(), agent.to_owned()).is_none() {
            if self.agents_order.len() >= MAX_SESSIONS {
                if let Some(oldest) = self.agents_order.pop_front() {
                    self.agents.remove(&oldest);
                }
            }
            self.agents_order.push_back(id.to_owned());
        }
    }

    /// The sessions the sandbox said run on `agent_id`, oldest first.
    pub fn sessions_of(&self, agent_id: &str) -> Vec<String> {
        self.agents_order.iter().filter(|s| self.agents.get(*s).is_some_and(|a| a == agent_id)).cloned().collect()
    }

    fn session(&mut self, id: &str) -> &mut Session {
        if !self.sessions.contains_key(id) {
            if self.order.len() >= MAX_SESSIONS {
                if let Some(oldest) = self.order.pop_front() {
                    self.sessions.remove(&oldest);
                }
            }
            self.order.push_back(id.to_owned());
        }
        self.sessions.entry(id.to_owned()).or_default()
    }

    /// The facts about a session not reported yet, once its name or its binding ties it to a mission.
    fn due(&mut self, id: &str) -> Vec<Inferred> {
        let Some(session) = self.sessions.get_mut(id) else { return Vec::new() };
        let prefix = session.name.as_deref().and_then(|n| n.strip_prefix("mission-")).filter(|p| !p.is_empty());
        let prefix = prefix.map(str::to_owned);
        if prefix.is_none() && !session.bound {
            return Vec::new();
        }
        // A bound session's start is what bound it.
        session.start_reported |= session.bound;
        let mut out = Vec::new();
        if session.started && !session.start_reported && !session.end_reported {
            session.start_reported = true;
            out.push(Inferred::Started { prefix: prefix.clone(), session_id: id.to_owned() });
        }
        if let (Some(exit_code), false) = (session.exit_code, session.end_reported) {
            session.end_reported = true;
            out.push(Inferred::Ended { prefix, session_id: id.to_owned(), exit_code });
        }
        out
    }
}

/// The agent sessions a frame speaks of: a session's start or end, every session of a listing.
pub fn sessions_mentioned(frame: &Value) -> Vec<String> {
    let id = |v: &Value| v.get("session_id").and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_owned);
    match frame.get("type").and_then(Value::as_str) {
        Some("session_start" | "session_end") => id(frame).into_iter().collect(),
        Some("agent_sessions") => {
            frame.get("sessions").and_then(Value::as_array).into_iter().flatten().filter_map(id).collect()
        }
        _ => Vec::new(),
    }
}

/// Whether a terminal event's data is one serve inferred from a sandbox session.
pub(crate) fn is_inferred(data: &Value) -> bool {
    ["summary", "error"].iter().any(|k| data.get(*k).and_then(Value::as_str).is_some_and(|t| t.starts_with(INFERRED)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session_prefix;
    use serde_json::json;

    fn unbound(_: &str) -> bool {
        false
    }

    fn sessions(id: &str, name: &str) -> Value {
        json!({"type": "agent_sessions", "agent_id": "a", "sessions": [{"session_id": id, "session_name": name}]})
    }

    #[test]
    fn the_real_order_start_listing_end() {
        let mut t = Tracker::default();
        assert_eq!(
            t.observe(
                &json!({"type": "session_start", "agent_id": "a", "session_id": "s1", "command": "tmux"}),
                unbound
            ),
            []
        );
        assert_eq!(
            t.observe(&sessions("s1", "mission-m-cb4266"), unbound),
            [Inferred::Started { prefix: Some("m-cb4266".into()), session_id: "s1".into() }]
        );
        assert_eq!(
            t.observe(&json!({"type": "session_end", "agent_id": "a", "session_id": "s1", "exit_code": 3}), unbound),
            [Inferred::Ended { prefix: Some("m-cb4266".into()), session_id: "s1".into(), exit_code: 3 }]
        );
        // The listing that follows the end says nothing new.
        assert_eq!(t.observe(&sessions("s1", "mission-m-cb4266"), unbound), []);
    }

    #[test]
    fn an_end_before_the_name_waits_for_it_and_a_listing_alone_starts_nothing() {
        let mut t = Tracker::default();
        assert_eq!(t.observe(&sessions("s0", "mission-other"), unbound), [], "never reported by a session_start");
        t.observe(&json!({"type": "session_start", "session_id": "s2"}), unbound);
        assert_eq!(t.observe(&json!({"type": "session_end", "session_id": "s2", "exit_code": 0}), unbound), []);
        let facts = t.observe(&sessions("s2", "mission-abc"), unbound);
        let (prefix, session_id) = (Some(String::from("abc")), String::from("s2"));
        let started = Inferred::Started { prefix: prefix.clone(), session_id: session_id.clone() };
        assert_eq!(facts, [started, Inferred::Ended { prefix, session_id, exit_code: 0 }], "both, in order");
        // Sessions that are not missions, and malformed frames, say nothing.
        t.observe(&json!({"type": "session_start", "session_id": "s3"}), unbound);
        assert_eq!(t.observe(&sessions("s3", "operator-shell"), unbound), []);
        assert_eq!(t.observe(&json!({"type": "session_end", "session_id": "s3", "exit_code": "0"}), unbound), []);
        assert_eq!(t.observe(&json!({"type": "agent_sessions", "sessions": "nope"}), unbound), []);
    }

    /// After a restart the tracker knows nothing of a session that started before, and the sandbox never
    /// lists a session again once it has ended: the mission bound to it is what ties its end to it.
    #[test]
    fn the_end_of_a_bound_session_needs_no_name() {
        let mut t = Tracker::default();
        let bound = |id: &str| id == "s1";
        let end = |id: &str| json!({"type": "session_end", "session_id": id, "exit_code": 0});
        assert_eq!(
            t.observe(&end("s1"), bound),
            [Inferred::Ended { prefix: None, session_id: "s1".into(), exit_code: 0 }],
            "no start inferred: the binding is the recorded start"
        );
        assert_eq!(t.observe(&end("s1"), bound), [], "once");
        assert_eq!(t.observe(&end("s2"), bound), [], "an unbound session still waits for its name");
    }

    #[test]
    fn the_sessions_a_frame_speaks_of() {
        let listing = json!({"type": "agent_sessions", "sessions": [{"session_id": "s1"}, {"session_id": ""}, {}, {"session_id": "s2"}]});
        assert_eq!(sessions_mentioned(&listing), ["s1", "s2"]);
        assert_eq!(sessions_mentioned(&json!({"type": "session_end", "session_id": "s3", "exit_code": 0})), ["s3"]);
        assert!(sessions_mentioned(&json!({"type": "agent_ready", "session_id": "s4"})).is_empty());
        assert!(sessions_mentioned(&json!({"type": "agent_sessions", "sessions": "none"})).is_empty());
    }

    /// Sessions are known by their agent, from their start or a listing; the agent's loss names them.
    #[test]
    fn an_agent_lost_names_the_sessions_that_ran_on_it() {
        let mut t = Tracker::default();
        t.observe(&json!({"type": "session_start", "agent_id": "a", "session_id": "s1"}), unbound);
        t.observe(&json!({"type": "session_start", "agent_id": "b", "session_id": "s2"}), unbound);
        t.observe(&sessions("s3", "mission-m-3"), unbound);
        assert_eq!(t.sessions_of("a"), ["s1", "s3"], "a listing tells too (after a restart, it alone does)");
        let lost = t.observe(&json!({"type": "agent_disconnected", "agent_id": "a", "reason": "gone"}), unbound);
        assert_eq!(lost, [Inferred::AgentLost { agent_id: "a".into(), session_ids: vec!["s1".into(), "s3".into()] }]);
        assert_eq!(t.observe(&json!({"type": "agent_disconnected"}), unbound), [], "no agent named");
    }

    #[test]
    fn a_relayed_question_asks_with_its_id_prompt_and_context() {
        let frame = json!({"type": "hitl_input_required", "agent_id": "a", "session_id": "c1", "hitl_id": "h1",
                           "prompt": "Deploy?", "context": "staging"});
        let q = Question::of("e1", frame.clone());
        assert_eq!((q.agent_id.as_deref(), q.hitl_id()), (Some("a"), Some("h1")));
        assert_eq!(q.data(), Some(json!({"hitl_id": "h1", "prompt": "Deploy?", "context": "staging"})));
        let mut bare = frame.clone();
        bare.as_object_mut().unwrap().remove("context");
        assert_eq!(Question::of("e1", bare).data(), Some(json!({"hitl_id": "h1", "prompt": "Deploy?"})));
        let mut unasked = frame;
        unasked["prompt"] = json!("");
        assert_eq!(Question::of("e1", unasked).data(), None, "no prompt, nothing to ask");
    }

    #[test]
    fn memory_is_bounded() {
        let mut t = Tracker::default();
        for i in 0..MAX_SESSIONS + 10 {
            t.observe(&json!({"type": "session_start", "session_id": format!("s{i}")}), unbound);
        }
        assert_eq!(t.sessions.len(), MAX_SESSIONS);
        assert!(!t.sessions.contains_key("s0"));
        for i in 0..MAX_SESSIONS + 10 {
            t.observe(&json!({"type": "session_start", "agent_id": "a", "session_id": format!("s{i}")}), unbound);
        }
        assert_eq!((t.agents.len(), t.agents_order.len()), (MAX_SESSIONS, MAX_SESSIONS));
    }

    #[test]
    fn prefixes_are_bytes() {
        assert_eq!(session_prefix("m-cb4266b88ae3"), b"m-cb4266");
        assert_eq!(session_prefix("m-1"), b"m-1");
    }
}
