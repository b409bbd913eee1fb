//! Recorded fixtures as scenarios to replay, and the rules an answer is held to. Pure: no I/O.
//!
//! Two shapes are read. Upstream's fixtures (`fixtures/upstream/*.json`) name their steps with keys
//! (`dispatch`, `event_sequence`, `phase_2_suspend`, ...) nested in document order; `conformance record`
//! writes one `steps` array. Both are walked in document order (objects keep their entries' order here,
//! which `serde_json::Value` does not) and each object is classified:
//! - `request` + `response`: an HTTP exchange; a register call is [`Step::Register`], a socket upgrade
//!   (`GET /ws/executors/..` answered 101, as the recorder writes it) [`Step::Connect`], one marked
//!   `_direction: "aiwg_serve → executor"` is a call serve made to the executor (a forwarded dispatch);
//! - a string `event` and `executor_id`: an event envelope, sent by the executor ([`Step::Send`]) or,
//!   marked `aiwg_serve → executor`, expected from serve ([`Step::Expect`]);
//! - `ws_disconnect`: the executor's socket closes;
//! - anything else is a container of steps; keys starting with `_` are annotations, `assertions` prose,
//!   `preconditions` the setup (`executor_registered`, `mission_running`).
//!
//! Identities are the fixture's own: every executor id and mission id it names is replaced, wherever it
//! occurs in a string (paths, bodies, envelopes), by a fresh one per run ([`Identities`]), and the
//! credentials it recorded by the live ones (the replay decides which).
//!
//! An answer is held to the fixture by these rules ([`compare`]):
//! - the status exactly ([`status_held`]), but for a route the contract gives no status
//!   (`hitl_response`), where any success holds to a recorded success;
//! - a body or object annotated `_validates_as: "#/$defs/x"` must satisfy that schema definition;
//! - the scalars of `executor_id`, `mission_id`, `status`, `state`, `exit_code`, `connected` and
//!   `hitl_id` must be equal (after the identity mapping);
//! - volatile values (`token`, `ts`, `estimated_start`, `*_at`) must be present with the same JSON type;
//! - every other key must be present; objects are held to the same rules key by key, and each object in
//!   an expected array must match some element of the answer's (listings hold other entries too).
//!
//! Sent envelopes are restamped ([`restamp`]): `ts` is now and the other timestamps move with it.
//!
//! What a loopback run cannot reproduce becomes [`Step::Skip`] saying why: a register from a
//! non-loopback `_remote_addr` is replayed from loopback (identity kept), its token rotation is not,
//! and a call made with the token that rotation replaced is skipped.

use std::fmt;

use chrono::{DateTime, TimeDelta, Utc};
use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{json, Map, Value};

use super::report::Level;
use aiwg_contract::Schema;

pub(crate) const REGISTER_PATH: &str = "/api/v1/executors/register";
const TO_EXECUTOR: &str = "aiwg_serve → executor";
const EXACT: &[&str] = &["executor_id", "mission_id", "status", "state", "exit_code", "connected", "hitl_id"];

/// A replayable fixture.
#[derive(Clone, Debug, PartialEq)]
pub struct Scenario {
    pub name: String,
    /// The executor's capabilities: from `preconditions.executor_registered`, else its first register.
    pub capabilities: Vec<String>,
    /// The dispatch payload of a mission the steps take as running from the start (annotations removed).
    pub running_mission: Option<Value>,
    pub steps: Vec<Labeled>,
}

/// A step and where in the fixture it was found (`event_sequence[2]`).
#[derive(Clone, Debug, PartialEq)]
pub struct Labeled {
    pub at: String,
    pub step: Step,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    Register(Exchange),
    Http {
        exchange: Exchange,
        to_executor: bool,
    },
    /// An envelope the executor sends (annotations removed).
    Send(Value),
    /// An envelope serve must send the executor (annotations kept for [`compare`]).
    Expect(Value),
    /// The executor opens its socket (the recorder writes the upgrade as a `GET /ws/executors/..`
    /// answered 101).
    Connect,
    Disconnect,
    Skip(String),
}

/// One HTTP call and the answer the fixture recorded. Bodies keep their annotations: strip them with
/// [`plain`] to send one.
#[derive(Clone, Debug, PartialEq)]
pub struct Exchange {
    pub method: String,
    pub path: String,
    /// Whether the fixture sent a bearer token (which one is the replay's business).
    pub token: Option<String>,
    pub body: Option<Value>,
    pub status: u16,
    pub expected: Option<Value>,
}

impl Scenario {
    /// Parses fixture text (either shape); `Err` says what is wrong with it.
    pub fn parse(text: &str) -> Result<Scenario, String> {
        let root: Node = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        if !matches!(root, Node::Object(_)) {
            return Err("not a JSON object".into());
        }
        let name = root.get("_fixture").map(Node::value).and_then(|v| v.as_str().map(str::to_owned));
        let mut walk = Walk { steps: Vec::new(), rotated: Vec::new(), issued: Vec::new() };
        walk.object(&root, "");
        let mut steps = walk.steps;
        if root.get("steps").is_none() {
            // Keys are names, not times: upstream's register-happy lists `deregister` before
            // `list_after_register`, which expects the executor listed. Its life ends last.
            steps.sort_by_key(|s| matches!(&s.step, Step::Http { exchange: x, .. } if x.method == "DELETE" && x.path.starts_with("/api/v1/executors/")));
        }
        if steps.is_empty() {
            return Err("no steps: no HTTP exchange, event envelope or ws_disconnect in it".into());
        }
        let pre = root.get("preconditions").map(Node::value).unwrap_or(Value::Null);
        let capabilities = capabilities(&pre, &steps);
        let running_mission = running_mission(&pre, &steps, name.as_deref().unwrap_or("fixture"));
        Ok(Scenario { name: name.unwrap_or_else(|| "fixture".into()), capabilities, running_mission, steps })
    }

    /// This scenario with every id of the fixture's replaced as `ids` says.
    /// The conformance level the fixture is evidence for, by what it exercises: a resync, suspension
    /// or reconnection is Resumable, an HITL request HITL, anything else Core.
    pub fn level(&self) -> Level {
        let events: Vec<&str> = self
            .steps
            .iter()
            .filter_map(|l| match &l.step {
                Step::Send(v) | Step::Expect(v) => v["event"].as_str(),
                _ => None,
            })
            .collect();
        let has = |names: &[&str]| events.iter().any(|e| names.contains(e));
        if has(&["executor.resync", "mission.suspended", "mission.reconnected"]) {
            Level::Resumable
        } else if has(&["mission.hitl_required", "mission.hitl_responded"]) {
            Level::Hitl
        } else {
            Level::Core
        }
    }

    pub fn mapped(&self, ids: &Identities) -> Scenario {
        let map = |v: &Value| ids.map(v);
        let steps = self.steps.iter().map(|l| Labeled { at: l.at.clone(), step: l.step.mapped(&map) }).collect();
        Scenario { steps, running_mission: self.running_mission.as_ref().map(map), ..self.clone() }
    }

    /// Every string value of an `executor_id` or a `mission_id` key anywhere in the scenario.
    fn ids(&self, key: &str) -> Vec<String> {
        let mut found = Vec::new();
        let mut values: Vec<&Value> = self.running_mission.iter().collect();
        for l in &self.steps {
            match &l.step {
                Step::Register(x) | Step::Http { exchange: x, .. } => {
                    values.extend(x.body.iter().chain(x.expected.iter()))
                }
                Step::Send(v) | Step::Expect(v) => values.push(v),
                Step::Connect | Step::Disconnect | Step::Skip(_) => {}
            }
        }
        for v in values {
            collect(v, key, &mut found);
        }
        found
    }
}

fn collect(v: &Value, key: &str, found: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                match x.as_str() {
                    Some(s) if k == key && !found.iter().any(|f| f == s) => found.push(s.to_owned()),
                    _ => collect(x, key, found),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| collect(x, key, found)),
        _ => {}
    }
}

impl Step {
    fn mapped(&self, map: &impl Fn(&Value) -> Value) -> Step {
        let exchange = |x: &Exchange| Exchange {
            path: map(&Value::String(x.path.clone())).as_str().unwrap_or_default().to_owned(),
            body: x.body.as_ref().map(map),
            expected: x.expected.as_ref().map(map),
            ..x.clone()
        };
        match self {
            Step::Register(x) => Step::Register(exchange(x)),
            Step::Http { exchange: x, to_executor } => Step::Http { exchange: exchange(x), to_executor: *to_executor },
            Step::Send(v) => Step::Send(map(v)),
            Step::Expect(v) => Step::Expect(map(v)),
            other => other.clone(),
        }
    }
}

/// The fixture's ids and the fresh ones a run uses instead.
#[derive(Debug)]
pub struct Identities {
    /// (fixture's, fresh), longest first so that no id is replaced inside a longer one.
    pairs: Vec<(String, String)>,
    executor: String,
}

impl Identities {
    /// A fresh UUID for each executor the scenario names (the first is the replay's executor, or a new
    /// one if it names none) and a fresh `m-<uuid>` for each mission.
    pub fn fresh(scenario: &Scenario) -> Identities {
        let executors = scenario.ids("executor_id");
        let missions = scenario.ids("mission_id");
        let mut pairs: Vec<(String, String)> = executors
            .into_iter()
            .map(|e| (e, uuid::Uuid::new_v4().to_string()))
            .chain(missions.into_iter().map(|m| (m, format!("m-{}", uuid::Uuid::new_v4().simple()))))
            .collect();
        let executor = pairs.first().map(|p| p.1.clone()).unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        pairs.sort_by_key(|p| std::cmp::Reverse(p.0.len()));
        Identities { pairs, executor }
    }

    /// The executor the replay plays.
    pub fn executor(&self) -> &str {
        &self.executor
    }

    /// The fresh id of a fixture's id.
    pub fn get(&self, fixture_id: &str) -> Option<&str> {
        self.pairs.iter().find(|p| p.0 == fixture_id).map(|p| p.1.as_str())
    }

    fn map(&self, v: &Value) -> Value {
        match v {
            Value::String(s) => {
                Value::String(self.pairs.iter().fold(s.clone(), |s, (from, to)| s.replace(from.as_str(), to)))
            }
            Value::Array(a) => Value::Array(a.iter().map(|x| self.map(x)).collect()),
            Value::Object(m) => Value::Object(m.iter().map(|(k, x)| (k.clone(), self.map(x))).collect()),
            other => other.clone(),
        }
    }
}

/// `value` without its annotations (keys starting with `_`), as it goes on the wire.
pub fn plain(value: &Value) -> Value {
    match value {
        Value::Object(m) => {
            Value::Object(m.iter().filter(|(k, _)| !k.starts_with('_')).map(|(k, v)| (k.clone(), plain(v))).collect())
        }
        Value::Array(a) => Value::Array(a.iter().map(plain).collect()),
        other => other.clone(),
    }
}

/// `envelope` as sent `now`: `ts` is now, and every other timestamp in it (a volatile key) moves by as
/// much, so that the durations the fixture recorded hold (a HITL request's `expires_at` stays in the
/// future).
pub fn restamp(envelope: &Value, now: DateTime<Utc>) -> Value {
    let recorded = envelope["ts"].as_str().and_then(|t| DateTime::parse_from_rfc3339(t).ok());
    let shift = recorded.map_or(TimeDelta::zero(), |t| now - t.with_timezone(&Utc));
    let mut out = shifted(envelope, shift);
    out["ts"] = Value::String(aiwg_contract::clock::format(now));
    out
}

fn shifted(v: &Value, shift: TimeDelta) -> Value {
    let moved = |key: &str, x: &Value| match x.as_str().and_then(|t| DateTime::parse_from_rfc3339(t).ok()) {
        Some(t) if volatile(key) => Value::String(aiwg_contract::clock::format(t.with_timezone(&Utc) + shift)),
        _ => shifted(x, shift),
    };
    match v {
        Value::Object(m) => Value::Object(m.iter().map(|(k, x)| (k.clone(), moved(k, x))).collect()),
        Value::Array(a) => Value::Array(a.iter().map(|x| shifted(x, shift)).collect()),
        other => other.clone(),
    }
}

/// The walk over the fixture, in document order, with what a loopback run needs to know of tokens.
struct Walk {
    steps: Vec<Labeled>,
    /// Tokens issued before a register from a non-loopback address (which rotates them upstream).
    rotated: Vec<String>,
    /// Tokens the registers so far were answered with.
    issued: Vec<String>,
}

impl Walk {
    fn push(&mut self, at: &str, step: Step) {
        self.steps.push(Labeled { at: at.trim_start_matches('.').to_owned(), step });
    }

    fn node(&mut self, node: &Node, at: &str) {
        match node {
            Node::Object(_) => self.object(node, at),
            Node::Array(items) => items.iter().enumerate().for_each(|(i, n)| self.node(n, &format!("{at}[{i}]"))),
            Node::Scalar(_) => {}
        }
    }

    fn object(&mut self, node: &Node, at: &str) {
        let Node::Object(entries) = node else { return };
        let is_str = |k| node.get(k).is_some_and(|n| matches!(n, Node::Scalar(Value::String(_))));
        let to_executor = node.get("_direction").map(Node::value).is_some_and(|d| d == TO_EXECUTOR);
        if is_str("event") && is_str("executor_id") {
            let envelope = node.value();
            return self.push(at, if to_executor { Step::Expect(envelope) } else { Step::Send(plain(&envelope)) });
        }
        let exchange = node.get("request").is_some() && node.get("response").is_some();
        for (key, child) in entries {
            let here = format!("{at}.{key}");
            match key.as_str() {
                k if k.starts_with('_') || k == "assertions" || k == "preconditions" => {}
                "response" if exchange => {}
                "request" if exchange => self.exchange(node, at, to_executor),
                "ws_disconnect" => self.push(&here, Step::Disconnect),
                _ => self.node(child, &here),
            }
        }
    }

    fn exchange(&mut self, node: &Node, at: &str, to_executor: bool) {
        let request = node.get("request").map(Node::value).unwrap_or_default();
        let response = node.get("response").map(Node::value).unwrap_or_default();
        let header = request["headers"]["Authorization"].as_str().or(request["headers"]["authorization"].as_str());
        let exchange = Exchange {
            method: request["method"].as_str().unwrap_or("GET").to_ascii_uppercase(),
            path: request["path"].as_str().unwrap_or("/").to_owned(),
            token: header.map(|h| h.trim_start_matches("Bearer ").to_owned()),
            body: request.get("body").cloned(),
            status: response["status"].as_u64().and_then(|s| u16::try_from(s).ok()).unwrap_or(0),
            expected: response.get("body").cloned(),
        };
        let at = if at.is_empty() { "request" } else { at };
        if let Some(token) = exchange.token.as_ref().filter(|t| self.rotated.contains(t)) {
            let why = format!(
                "it calls with {token}, the token a non-loopback register rotated away; a loopback run rotates none"
            );
            return self.push(at, Step::Skip(why));
        }
        if exchange.method == "GET" && exchange.path.starts_with("/ws/executors/") && exchange.status == 101 {
            self.push(at, Step::Connect);
        } else if exchange.method == "POST" && exchange.path == REGISTER_PATH && !to_executor {
            self.register(exchange, &request, at);
        } else {
            self.push(at, Step::Http { exchange, to_executor });
        }
    }

    fn register(&mut self, exchange: Exchange, request: &Value, at: &str) {
        let remote = request["_remote_addr"].as_str().and_then(|a| a.parse::<std::net::IpAddr>().ok());
        if remote.is_some_and(|ip| !aiwg_domain::net::is_loopback(ip)) {
            self.rotated.append(&mut self.issued);
            let why = format!(
                "the token rotation of a first register from {} (a new token, X-AIWG-Warning) needs a non-loopback \
                 source address; the register itself is replayed from loopback (identity kept)",
                request["_remote_addr"].as_str().unwrap_or_default()
            );
            self.push(at, Step::Skip(why));
        }
        if let Some(token) = exchange.expected.as_ref().and_then(|b| b["token"].as_str()) {
            self.issued.push(token.to_owned());
        }
        self.push(at, Step::Register(exchange));
    }
}

fn capabilities(pre: &Value, steps: &[Labeled]) -> Vec<String> {
    let first_register = steps.iter().find_map(|l| match &l.step {
        Step::Register(x) => x.body.as_ref().map(|b| b["capabilities"].clone()),
        _ => None,
    });
    let listed = pre["executor_registered"].get("capabilities").cloned().or(first_register).unwrap_or_default();
    listed.as_array().into_iter().flatten().filter_map(|c| c.as_str().map(str::to_owned)).collect()
}

/// The mission the steps take as running: `preconditions.mission_running` (its payload, or one made up
/// for it when the fixture recorded none), or a mission the executor's events name that no step
/// dispatches (upstream's paused-event records a lone envelope).
fn running_mission(pre: &Value, steps: &[Labeled], fixture: &str) -> Option<Value> {
    let running = &pre["mission_running"];
    if let Some(payload) = running.get("dispatch_payload") {
        return Some(plain(payload));
    }
    let implied = || {
        let dispatched = |id: &str| {
            steps.iter().any(|l| matches!(&l.step, Step::Http { exchange: x, .. } if x.body.as_ref().is_some_and(|b| b["mission_id"] == id)))
        };
        steps.iter().find_map(|l| match &l.step {
            Step::Send(v) => v["mission_id"].as_str().filter(|id| !dispatched(id)).map(str::to_owned),
            _ => None,
        })
    };
    let id = running["mission_id"].as_str().map(str::to_owned).or_else(implied)?;
    Some(json!({
        "mission_id": id,
        "objective": format!("conformance replay of {fixture}"),
        "completion": "the fixture's steps replay",
        "executor_filter": {"executor_id": null, "capabilities": []},
    }))
}

/// Holds `actual` to `expected` by the module's rules; `Err` names the first difference.
/// Whether an answer's status holds to the recorded one: the same, or any success where the contract
/// names no status for the route (`hitl_response`: upstream answers 200, we answer 202, a fixture
/// recorded either).
pub fn status_held(path: &str, recorded: u16, got: u16) -> bool {
    let success = |s: u16| (200..300).contains(&s);
    got == recorded || (path.ends_with("/hitl_response") && success(recorded) && success(got))
}

pub fn compare(expected: &Value, actual: &Value, schema: &Schema) -> Result<(), String> {
    compare_at("", expected, actual, schema)
}

fn compare_at(at: &str, expected: &Value, actual: &Value, schema: &Schema) -> Result<(), String> {
    match expected {
        Value::Object(want) => compare_object(at, want, actual, schema),
        Value::Array(want) if want.iter().any(Value::is_object) => compare_array(at, want, actual, schema),
        _ => Ok(()),
    }
}

fn compare_object(at: &str, want: &Map<String, Value>, actual: &Value, schema: &Schema) -> Result<(), String> {
    let Some(got) = actual.as_object() else { return Err(format!("{} is {actual}, not an object", name(at))) };
    if let Some(def) = want.get("_validates_as").and_then(Value::as_str) {
        let def = def.rsplit('/').next().unwrap_or(def);
        if !schema.has_def(def) {
            return Err(format!("{} names _validates_as {def}, which the contract's schema does not define", name(at)));
        }
        schema.validate(def, actual).map_err(|details| {
            let why: Vec<String> = details.iter().map(|d| format!("{}: {}", d.instance_path, d.message)).collect();
            format!("{} is not a valid {def}: {}", name(at), why.join("; "))
        })?;
    }
    for (key, w) in want.iter().filter(|(k, _)| !k.starts_with('_')) {
        let here = format!("{at}.{key}");
        let Some(g) = got.get(key) else { return Err(format!("{here} is missing")) };
        let scalar = !w.is_object() && !w.is_array();
        if scalar && EXACT.contains(&key.as_str()) && w != g {
            return Err(format!("{here} is {g}, expected {w}"));
        }
        if scalar && volatile(key) && kind(w) != kind(g) {
            return Err(format!("{here} is {g}, expected a {} like {w}", kind(w)));
        }
        compare_at(&here, w, g, schema)?;
    }
    Ok(())
}

/// Each expected object matches some element; the error shown is the one against the element of the
/// same identity, when there is one.
fn compare_array(at: &str, want: &[Value], actual: &Value, schema: &Schema) -> Result<(), String> {
    let Some(got) = actual.as_array() else { return Err(format!("{} is {actual}, not an array", name(at))) };
    for w in want {
        if got.iter().any(|g| compare_at(at, w, g, schema).is_ok()) {
            continue;
        }
        let same = |g: &&Value| {
            ["executor_id", "mission_id"].iter().any(|k| w.get(*k).is_some_and(|id| g.get(*k) == Some(id)))
        };
        return match got.iter().find(same) {
            Some(g) => compare_at(&format!("{at}[]"), w, g, schema),
            None => Err(format!("{} has no element like {}", name(at), plain(w))),
        };
    }
    Ok(())
}

fn name(at: &str) -> &str {
    if at.is_empty() {
        "the body"
    } else {
        at
    }
}

fn volatile(key: &str) -> bool {
    matches!(key, "token" | "ts" | "estimated_start") || key.ends_with("_at")
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// A JSON document whose objects keep their entries in document order.
#[derive(Debug)]
enum Node {
    Scalar(Value),
    Array(Vec<Node>),
    Object(Vec<(String, Node)>),
}

impl Node {
    fn get(&self, key: &str) -> Option<&Node> {
        match self {
            Node::Object(entries) => entries.iter().find(|(k, _)| k == key).map(|(_, n)| n),
            _ => None,
        }
    }

    fn value(&self) -> Value {
        match self {
            Node::Scalar(v) => v.clone(),
            Node::Array(items) => Value::Array(items.iter().map(Node::value).collect()),
            Node::Object(entries) => Value::Object(entries.iter().map(|(k, n)| (k.clone(), n.value())).collect()),
        }
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Node, D::Error> {
        d.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Node, E> {
        Ok(Node::Scalar(Value::Bool(v)))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Node, E> {
        Ok(Node::Scalar(Value::from(v)))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Node, E> {
        Ok(Node::Scalar(Value::from(v)))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Node, E> {
        Ok(Node::Scalar(Value::from(v)))
    }

    fn visit_str<E>(self, v: &str) -> Result<Node, E> {
        Ok(Node::Scalar(Value::String(v.to_owned())))
    }

    fn visit_unit<E>(self) -> Result<Node, E> {
        Ok(Node::Scalar(Value::Null))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(n) = seq.next_element()? {
            items.push(n);
        }
        Ok(Node::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut entries = Vec::new();
        while let Some((k, v)) = map.next_entry::<String, Node>()? {
            entries.push((k, v));
        }
        Ok(Node::Object(entries))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    macro_rules! upstream {
        ($name:literal) => {
            Scenario::parse(include_str!(concat!("../../../fixtures/upstream/", $name, ".json"))).unwrap()
        };
    }

    /// Each step in a word or two: what it does and to what.
    fn sequence(s: &Scenario) -> Vec<String> {
        s.steps
            .iter()
            .map(|l| match &l.step {
                Step::Register(_) => "register".to_owned(),
                Step::Http { exchange: x, to_executor } => {
                    format!("{}{} {}", if *to_executor { "serve calls " } else { "" }, x.method, x.path)
                }
                Step::Send(v) => format!("send {}", v["event"].as_str().unwrap()),
                Step::Expect(v) => format!("expect {}", v["event"].as_str().unwrap()),
                Step::Connect => "connect".to_owned(),
                Step::Disconnect => "disconnect".to_owned(),
                Step::Skip(_) => "skip".to_owned(),
            })
            .collect()
    }

    const EXECUTOR: &str = "a1b2c3d4-e5f6-7890-abcd-ef1234567890";

    #[test]
    fn register_happy_lists_before_it_deregisters() {
        let s = upstream!("register-happy");
        let executor = format!("DELETE /api/v1/executors/{EXECUTOR}");
        assert_eq!(sequence(&s), ["register", "GET /api/v1/executors", executor.as_str()]);
        assert_eq!(s.capabilities, ["isolation:vm", "runtime:claude-code", "platform:linux/x64", "resumable", "hitl"]);
        assert_eq!(s.running_mission, None);
        let Step::Http { exchange, .. } = &s.steps[2].step else { panic!() };
        assert_eq!(
            (exchange.status, exchange.token.as_deref()),
            (204, Some("exec_tk_8Hy3mNpQvRsT2uWxYzA4bCdEfGhJkLo"))
        );
    }

    #[test]
    fn auth_token_rotation_skips_what_needs_a_second_address() {
        let s = upstream!("auth-token-rotation");
        assert_eq!(sequence(&s), ["register", "skip", "register", "skip", "GET /api/v1/executors"]);
        let at: Vec<&str> = s.steps.iter().map(|l| l.at.as_str()).collect();
        assert_eq!(
            at[1..4],
            ["phase_2_non_loopback_register", "phase_2_non_loopback_register", "phase_3_old_token_rejected"]
        );
        let Step::Skip(why) = &s.steps[3].step else { panic!() };
        assert!(why.contains("exec_tk_INITIAL_LoopbackToken1234"), "{why}");
    }

    #[test]
    fn dispatch_fixtures_dispatch_then_report_then_read_the_mission() {
        let events = |s: &Scenario| sequence(s)[1..sequence(s).len() - 1].to_vec();
        let happy = upstream!("dispatch-happy");
        let dispatch = "POST /api/v1/sessions/ws-2026-05-08/dispatch";
        assert_eq!(sequence(&happy)[0], dispatch);
        assert_eq!(sequence(&happy)[6], "GET /api/v1/missions/m-abc123");
        let lifecycle =
            ["assigned", "started", "progress", "progress", "completed"].map(|e| format!("send mission.{e}"));
        assert_eq!(events(&happy), lifecycle);
        let failed = upstream!("dispatch-failed");
        assert_eq!(events(&failed), ["assigned", "started", "progress", "failed"].map(|e| format!("send mission.{e}")));
        let aborted = upstream!("dispatch-aborted");
        assert_eq!(
            sequence(&aborted)[1..],
            [
                "send mission.assigned",
                "send mission.started",
                "send mission.progress",
                "POST /api/v1/missions/m-ghi789/abort",
                "send mission.aborted",
                "GET /api/v1/missions/m-ghi789",
            ]
        );
        assert!(happy.running_mission.is_none() && aborted.capabilities.len() == 3);
    }

    #[test]
    fn hitl_roundtrip_expects_the_answer_from_serve_on_a_running_mission() {
        let s = upstream!("hitl-roundtrip");
        let want = [
            "send mission.hitl_required",
            "POST /api/v1/missions/m-hitl001/hitl_response",
            "expect mission.hitl_responded",
            "send mission.progress",
            "send mission.completed",
        ];
        assert_eq!(sequence(&s), want);
        let running = s.running_mission.unwrap();
        assert_eq!(running["mission_id"], "m-hitl001");
        assert!(running["objective"].as_str().unwrap().contains("hitl-roundtrip"));
        let Step::Expect(e) = &s.steps[2].step else { panic!() };
        assert_eq!(e["_validates_as"], "#/$defs/event_envelope", "expectations keep their annotations");
        let Step::Send(e) = &s.steps[0].step else { panic!() };
        assert!(e.get("_validates_as").is_none() && e.get("_step").is_none(), "{e}");
    }

    #[test]
    fn paused_event_takes_its_lone_mission_as_running() {
        let s = upstream!("paused-event");
        assert_eq!(sequence(&s), ["send mission.paused"]);
        assert_eq!(s.running_mission.unwrap()["mission_id"], "m-paused001");
        assert!(s.capabilities.is_empty());
    }

    #[test]
    fn resumable_suspends_disconnects_reregisters_and_is_resumed() {
        let s = upstream!("resumable-suspend-resume");
        let want = [
            "send mission.progress",
            "send mission.suspended",
            "disconnect",
            "register",
            "send executor.resync",
            "expect mission.resumed",
            "send mission.reconnected",
            "send mission.progress",
            "send mission.completed",
        ];
        assert_eq!(sequence(&s), want);
        let running = s.running_mission.unwrap();
        assert_eq!((running["long_running"].clone(), running.get("_validates_as")), (json!(true), None));
        assert_eq!(s.steps[2].at, "phase_2_suspend.ws_disconnect");
    }

    #[test]
    fn the_recorders_shape_is_one_array_of_steps() {
        let text = json!({"_fixture": "recorded", "_recorded_by": "aiwg-serve conformance record", "steps": [
            {"request": {"method": "POST", "path": REGISTER_PATH, "body": {"executor_id": EXECUTOR, "capabilities": ["hitl"]}},
             "response": {"status": 201, "body": {"executor_id": EXECUTOR, "token": "exec_tk_REDACTED"}}},
            {"_direction": TO_EXECUTOR, "request": {"method": "POST", "path": "/api/v1/sessions/s/dispatch",
             "body": {"mission_id": "m-1"}}, "response": {"status": 202}},
            {"event": "mission.started", "executor_id": EXECUTOR, "mission_id": "m-1", "data": {}},
            {"_frame": {"ack": true, "seq": 3}, "_direction": TO_EXECUTOR},
            {"event": "mission.hitl_responded", "executor_id": EXECUTOR, "mission_id": "m-1", "_direction": TO_EXECUTOR},
            {"ws_disconnect": {}},
        ]});
        let s = Scenario::parse(&text.to_string()).unwrap();
        let want = [
            "register",
            "serve calls POST /api/v1/sessions/s/dispatch",
            "send mission.started",
            "expect mission.hitl_responded",
            "disconnect",
        ];
        assert_eq!(sequence(&s), want);
        assert_eq!((s.name.as_str(), s.capabilities.clone()), ("recorded", vec!["hitl".to_owned()]));
        assert_eq!(s.running_mission, None, "m-1 is dispatched by a step");
        assert_eq!(s.steps[4].at, "steps[5].ws_disconnect");
    }

    #[test]
    fn what_is_not_a_fixture_says_why() {
        assert!(Scenario::parse("{not json").unwrap_err().starts_with("not JSON"));
        assert_eq!(Scenario::parse("[]").unwrap_err(), "not a JSON object");
        assert!(Scenario::parse(r#"{"_fixture": "x", "note": "nothing"}"#).unwrap_err().starts_with("no steps"));
    }

    #[test]
    fn identities_are_fresh_wherever_the_fixture_names_them() {
        let s = upstream!("dispatch-aborted");
        let ids = Identities::fresh(&s);
        let mission = ids.get("m-ghi789").unwrap().to_owned();
        assert_eq!(ids.get(EXECUTOR), Some(ids.executor()));
        assert!(uuid::Uuid::parse_str(ids.executor()).is_ok() && mission.starts_with("m-"), "{mission}");
        let mapped = s.mapped(&ids);
        let text = format!("{mapped:?}");
        assert!(!text.contains("m-ghi789") && !text.contains(EXECUTOR), "{text}");
        assert_eq!(sequence(&mapped)[4], format!("POST /api/v1/missions/{mission}/abort"));
        let Step::Send(aborted) = &mapped.steps[5].step else { panic!() };
        assert!(aborted["data"]["reason"].as_str().unwrap().contains(&mission), "inside strings too: {aborted}");
        assert_ne!(Identities::fresh(&s).executor(), ids.executor(), "fresh per run");
    }

    #[test]
    fn sent_envelopes_keep_their_recorded_durations() {
        let envelope = json!({"event": "mission.hitl_required", "ts": "2026-05-08T20:20:00.000Z",
                              "data": {"expires_at": "2026-05-08T20:50:00.000Z", "prompt": "2026-05-08T20:50:00.000Z"}});
        let now = DateTime::parse_from_rfc3339("2030-01-01T00:00:00Z").unwrap().with_timezone(&Utc);
        let sent = restamp(&envelope, now);
        assert_eq!(sent["ts"], "2030-01-01T00:00:00.000Z");
        assert_eq!(sent["data"]["expires_at"], "2030-01-01T00:30:00.000Z");
        assert_eq!(sent["data"]["prompt"], envelope["data"]["prompt"], "only timestamps of volatile keys move");
    }

    fn check(expected: Value, actual: Value) -> Result<(), String> {
        compare(&expected, &actual, &Schema::load().unwrap())
    }

    #[test]
    fn exact_keys_must_be_equal() {
        let want = json!({"mission_id": "m-1", "state": "done", "exit_code": 0, "connected": true});
        assert_eq!(
            check(want.clone(), json!({"mission_id": "m-1", "state": "done", "exit_code": 0, "connected": true})),
            Ok(())
        );
        let got = json!({"mission_id": "m-1", "state": "running", "exit_code": 0, "connected": true});
        assert_eq!(check(want.clone(), got), Err(".state is \"running\", expected \"done\"".into()));
        let got = json!({"mission_id": "m-2", "state": "done", "exit_code": 0, "connected": true});
        assert!(check(want.clone(), got).unwrap_err().starts_with(".mission_id"));
        let got = json!({"mission_id": "m-1", "state": "done", "exit_code": 1, "connected": true});
        assert!(check(want, got).unwrap_err().starts_with(".exit_code"));
    }

    #[test]
    fn volatile_values_need_only_their_type() {
        let want = json!({"token": "exec_tk_x", "registered_at": "2026-05-08T19:30:00.000Z"});
        assert_eq!(check(want.clone(), json!({"token": "other", "registered_at": "2031-01-01T00:00:00Z"})), Ok(()));
        let err = check(want, json!({"token": "other", "registered_at": 17})).unwrap_err();
        assert!(err.starts_with(".registered_at is 17, expected a string"), "{err}");
    }

    #[test]
    fn other_keys_need_only_be_present() {
        let want = json!({"data": {"summary": "recorded words", "tokens_used": 5}});
        assert_eq!(check(want.clone(), json!({"data": {"summary": "other words", "tokens_used": 9}})), Ok(()));
        assert_eq!(check(want, json!({"data": {"summary": "x"}})), Err(".data.tokens_used is missing".into()));
    }

    #[test]
    fn annotated_bodies_must_satisfy_their_schema() {
        let want = json!({"_validates_as": "#/$defs/register_response", "executor_id": "not-a-uuid"});
        let err =
            check(want, json!({"executor_id": "not-a-uuid", "token": "t", "registered_at": "2026-05-08T19:30:00Z"}));
        assert!(err.unwrap_err().starts_with("the body is not a valid register_response"));
        let err = check(json!({"_validates_as": "#/$defs/nothing_like_it"}), json!({})).unwrap_err();
        assert!(err.contains("does not define"), "{err}");
    }

    #[test]
    fn listings_need_each_expected_entry_among_theirs() {
        let want = json!({"executors": [{"executor_id": "e-1", "connected": true}]});
        let others = json!({"executors": [{"executor_id": "e-0", "connected": false}, {"executor_id": "e-1", "connected": true}]});
        assert_eq!(check(want.clone(), others), Ok(()));
        let err = check(want.clone(), json!({"executors": [{"executor_id": "e-1", "connected": false}]})).unwrap_err();
        assert_eq!(err, ".executors[].connected is false, expected true");
        let err = check(want, json!({"executors": [{"executor_id": "e-0", "connected": true}]})).unwrap_err();
        assert!(err.starts_with(".executors has no element like"), "{err}");
    }

    #[test]
    fn a_status_is_exact_but_where_the_contract_names_none() {
        assert!(status_held("/api/v1/missions/m/abort", 202, 202));
        assert!(!status_held("/api/v1/missions/m/abort", 202, 200));
        assert!(status_held("/api/v1/missions/m/hitl_response", 202, 200));
        assert!(!status_held("/api/v1/missions/m/hitl_response", 202, 409));
        assert!(!status_held("/api/v1/missions/m/hitl_response", 404, 200));
    }

    #[test]
    fn a_fixture_is_evidence_for_the_level_it_exercises() {
        let level = |name: &str| {
            let text =
                std::fs::read_to_string(format!("{}/../../fixtures/upstream/{name}.json", env!("CARGO_MANIFEST_DIR")));
            Scenario::parse(&text.unwrap()).unwrap().level()
        };
        assert_eq!(level("dispatch-happy"), Level::Core);
        assert_eq!(level("paused-event"), Level::Core);
        assert_eq!(level("hitl-roundtrip"), Level::Hitl);
        assert_eq!(level("resumable-suspend-resume"), Level::Resumable);
    }
}
