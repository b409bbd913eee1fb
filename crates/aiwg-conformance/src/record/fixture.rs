//! The fixture a recording writes, built without any I/O: steps made from what crossed the wire, token
//! values redacted, and the file's JSON. Upstream's fixture format (`test/conformance/executor-v1/fixtures`):
//! an HTTP exchange is `request` + `response`, an event is its envelope as sent, with `_direction` for
//! who sent what.

use std::collections::BTreeSet;

use serde_json::{json, Map, Value};

/// What every token value becomes in a fixture.
pub(crate) const REDACTED: &str = "exec_tk_REDACTED";

/// Who sent a frame or made a call, as upstream's fixtures write it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Direction {
    ToExecutor,
    ToServe,
}

impl Direction {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Direction::ToExecutor => "aiwg_serve → executor",
            Direction::ToServe => "executor → aiwg_serve",
        }
    }
}

/// An HTTP exchange as it crossed the wire (tokens and all).
#[derive(Debug, Default)]
pub(crate) struct Exchange<'a> {
    pub(crate) method: &'a str,
    /// The path with its query.
    pub(crate) path: &'a str,
    pub(crate) authorization: Option<&'a str>,
    pub(crate) content_type: Option<&'a str>,
    pub(crate) request_body: &'a [u8],
    pub(crate) status: u16,
    pub(crate) response_body: &'a [u8],
    /// `Some(ToExecutor)` for a call serve made to an executor; operators' and executors' calls to serve
    /// carry no direction, as in upstream's fixtures.
    pub(crate) direction: Option<Direction>,
}

/// A body as a fixture holds it: JSON, or the text as a JSON string; an empty body is no body.
pub(crate) fn body(bytes: &[u8]) -> Option<Value> {
    if bytes.is_empty() {
        return None;
    }
    Some(serde_json::from_slice(bytes).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(bytes).into())))
}

/// The step for an HTTP exchange (not yet redacted: [`Fixture::fill`] does that).
pub(crate) fn exchange_step(x: &Exchange) -> Value {
    let mut headers = Map::new();
    if let Some(a) = x.authorization {
        headers.insert("Authorization".into(), a.into());
    }
    if let Some(c) = x.content_type {
        headers.insert("Content-Type".into(), c.into());
    }
    let mut request = json!({"method": x.method, "path": x.path});
    if !headers.is_empty() {
        request["headers"] = Value::Object(headers);
    }
    if let Some(b) = body(x.request_body) {
        request["body"] = b;
    }
    let mut response = json!({"status": x.status});
    if let Some(b) = body(x.response_body) {
        response["body"] = b;
    }
    let mut step = json!({"request": request, "response": response});
    if let Some(d) = x.direction {
        step["_direction"] = d.label().into();
    }
    step
}

/// The step for a WebSocket text frame: an event envelope as sent, anything else (an ack, an error, text
/// that is not JSON) under `_frame`.
pub(crate) fn frame_step(direction: Direction, text: &str) -> Value {
    let frame = body(text.as_bytes()).unwrap_or_else(|| Value::String(String::new()));
    match frame {
        Value::Object(mut envelope) if envelope.contains_key("event") => {
            envelope.insert("_direction".into(), direction.label().into());
            Value::Object(envelope)
        }
        other => json!({"_direction": direction.label(), "_frame": other}),
    }
}

/// The step for the end of an executor's socket, with the close code either side sent.
pub(crate) fn disconnect_step(code: u16) -> Value {
    json!({"ws_disconnect": {"_description": format!("the executor's socket closed (code {code})")}})
}

/// A recording: the header, and one slot per step in the order the recorder saw them. An HTTP exchange
/// takes its slot when the request arrives and is filled when the answer does, so a dispatch comes before
/// the call serve makes to the executor for it.
#[derive(Debug)]
pub(crate) struct Fixture {
    head: Map<String, Value>,
    slots: Vec<Option<Value>>,
    /// Every token value seen so far, to scrub wherever else it turns up (an error message echoing one).
    secrets: BTreeSet<String>,
}

/// Tokens shorter than this are redacted where they belong but not searched for in other text, where
/// they would garble words that merely contain them.
const SCRUBBED_MIN_LEN: usize = 8;

impl Fixture {
    pub(crate) fn new(name: &str, server: &str, recorded_at: &str) -> Fixture {
        let head = json!({
            "_fixture": name,
            "_description": format!("Recorded by aiwg-serve conformance record between the executors and {server}"),
            "_recorded_by": concat!("aiwg-serve ", env!("CARGO_PKG_VERSION")),
            "_recorded_at": recorded_at,
        });
        let Value::Object(head) = head else { unreachable!("a JSON object literal") };
        Fixture { head, slots: Vec::new(), secrets: BTreeSet::new() }
    }

    /// The next step's place.
    pub(crate) fn reserve(&mut self) -> usize {
        self.slots.push(None);
        self.slots.len() - 1
    }

    /// Puts `step` in its place, its tokens redacted.
    pub(crate) fn fill(&mut self, slot: usize, mut step: Value) {
        redact(&mut step, &mut self.secrets);
        self.slots[slot] = Some(step);
    }

    pub(crate) fn push(&mut self, step: Value) {
        let slot = self.reserve();
        self.fill(slot, step);
    }

    /// The file: the steps filled so far, numbered from 1 (an exchange still waiting for its answer is
    /// left out, so the file is a complete fixture at every moment).
    pub(crate) fn to_json(&self) -> Value {
        let steps: Vec<Value> = self
            .slots
            .iter()
            .flatten()
            .zip(1..)
            .map(|(step, n)| {
                let mut step = step.clone();
                scrub(&mut step, &self.secrets);
                step["_step"] = json!(n);
                step
            })
            .collect();
        let mut file = self.head.clone();
        file.insert("steps".into(), Value::Array(steps));
        Value::Object(file)
    }
}

/// Replaces the token values a step carries where the contract puts them (a bearer header, the `token`
/// query parameter of the socket's path, the `token` of a register answer) and remembers them.
fn redact(step: &mut Value, secrets: &mut BTreeSet<String>) {
    if let Some(Value::String(auth)) = step.pointer_mut("/request/headers/Authorization") {
        let (scheme, credential) = match auth.split_once(' ') {
            Some((scheme, credential)) if scheme.eq_ignore_ascii_case("bearer") => (format!("{scheme} "), credential),
            _ => (String::new(), auth.as_str()),
        };
        secrets.insert(credential.to_owned());
        *auth = format!("{scheme}{REDACTED}");
    }
    if let Some(Value::String(path)) = step.pointer_mut("/request/path") {
        *path = redact_query_token(path, secrets);
    }
    if let Some(Value::String(token)) = step.pointer_mut("/response/body/token") {
        secrets.insert(std::mem::replace(token, REDACTED.into()));
    }
}

/// `path?a=1&token=T` → `path?a=1&token=exec_tk_REDACTED`, remembering `T`.
fn redact_query_token(path: &str, secrets: &mut BTreeSet<String>) -> String {
    let Some((route, query)) = path.split_once('?') else { return path.to_owned() };
    let pairs: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some(("token", value)) => {
                secrets.insert(value.to_owned());
                format!("token={REDACTED}")
            }
            _ => pair.to_owned(),
        })
        .collect();
    format!("{route}?{}", pairs.join("&"))
}

/// Replaces every known token value inside any string of `value`.
fn scrub(value: &mut Value, secrets: &BTreeSet<String>) {
    match value {
        Value::String(s) => {
            for secret in secrets.iter().filter(|t| t.len() >= SCRUBBED_MIN_LEN) {
                if s.contains(secret.as_str()) {
                    *s = s.replace(secret.as_str(), REDACTED);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| scrub(v, secrets)),
        Value::Object(map) => map.values_mut().for_each(|v| scrub(v, secrets)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "exec_tk_8Hy3mNpQvRsT2uWx";

    fn recorded(steps: &[Value]) -> Value {
        let mut f = Fixture::new("hitl-roundtrip", "http://127.0.0.1:7337", "2026-05-08T19:30:00.000Z");
        steps.iter().for_each(|s| f.push(s.clone()));
        f.to_json()
    }

    #[test]
    fn a_register_exchange_keeps_the_payload_and_hides_the_token() {
        let answer = format!(r#"{{"executor_id":"e-1","token":"{TOKEN}"}}"#);
        let register = Exchange {
            method: "POST",
            path: "/api/v1/executors/register",
            content_type: Some("application/json"),
            request_body: br#"{"executor_id":"e-1","transport_endpoints":{"rest":"http://127.0.0.1:8122"}}"#,
            status: 201,
            response_body: answer.as_bytes(),
            ..Exchange::default()
        };
        let file = recorded(&[exchange_step(&register)]);
        assert_eq!(
            file,
            json!({
                "_fixture": "hitl-roundtrip",
                "_description": "Recorded by aiwg-serve conformance record between the executors and http://127.0.0.1:7337",
                "_recorded_by": concat!("aiwg-serve ", env!("CARGO_PKG_VERSION")),
                "_recorded_at": "2026-05-08T19:30:00.000Z",
                "steps": [{
                    "_step": 1,
                    "request": {"method": "POST", "path": "/api/v1/executors/register",
                                "headers": {"Content-Type": "application/json"},
                                "body": {"executor_id": "e-1", "transport_endpoints": {"rest": "http://127.0.0.1:8122"}}},
                    "response": {"status": 201, "body": {"executor_id": "e-1", "token": "exec_tk_REDACTED"}}
                }]
            })
        );
    }

    #[test]
    fn a_forwarded_dispatch_has_its_direction_and_a_redacted_bearer() {
        let bearer = format!("Bearer {TOKEN}");
        let forwarded = Exchange {
            method: "POST",
            path: "/api/v1/sessions/s/dispatch",
            authorization: Some(&bearer),
            request_body: br#"{"mission_id":"m-1"}"#,
            status: 202,
            response_body: b"accepted",
            direction: Some(Direction::ToExecutor),
            ..Exchange::default()
        };
        let step = &recorded(&[exchange_step(&forwarded)])["steps"][0];
        assert_eq!(step["_direction"], "aiwg_serve → executor");
        assert_eq!(step["request"]["headers"], json!({"Authorization": "Bearer exec_tk_REDACTED"}));
        assert_eq!(step["response"], json!({"status": 202, "body": "accepted"}), "text is kept as a string");
    }

    #[test]
    fn the_socket_path_token_is_redacted_and_scrubbed_wherever_it_shows_again() {
        let path = format!("/ws/executors/e-1?v=1&token={TOKEN}");
        let upgrade = Exchange { method: "GET", path: &path, status: 101, ..Exchange::default() };
        let echo = frame_step(Direction::ToExecutor, &format!(r#"{{"error":"bad token {TOKEN}"}}"#));
        let file = recorded(&[exchange_step(&upgrade), echo]);
        assert_eq!(file["steps"][0]["request"]["path"], "/ws/executors/e-1?v=1&token=exec_tk_REDACTED");
        let request = file["steps"][0]["request"].as_object().unwrap();
        assert!(!request.contains_key("body") && !request.contains_key("headers"), "none, no field: {request:?}");
        assert_eq!(file["steps"][1]["_frame"], json!({"error": "bad token exec_tk_REDACTED"}));
        assert!(!file.to_string().contains(TOKEN));
    }

    #[test]
    fn frames_are_envelopes_with_a_direction_or_raw_frames() {
        let event = r#"{"event":"mission.started","executor_id":"e-1","mission_id":"m-1","ts":"2026-05-08T19:30:05.100Z","data":{}}"#;
        let file = recorded(&[
            frame_step(Direction::ToServe, event),
            frame_step(Direction::ToExecutor, r#"{"ack":true,"seq":7}"#),
            frame_step(Direction::ToServe, "not json"),
            disconnect_step(1000),
        ]);
        let steps = file["steps"].as_array().unwrap();
        assert_eq!(
            steps[0],
            json!({"_step": 1, "_direction": "executor → aiwg_serve", "event": "mission.started", "executor_id": "e-1",
                   "mission_id": "m-1", "ts": "2026-05-08T19:30:05.100Z", "data": {}})
        );
        assert_eq!(
            steps[1],
            json!({"_step": 2, "_direction": "aiwg_serve → executor", "_frame": {"ack": true, "seq": 7}})
        );
        assert_eq!(steps[2]["_frame"], "not json");
        assert_eq!(
            steps[3],
            json!({"_step": 4, "ws_disconnect": {"_description": "the executor's socket closed (code 1000)"}})
        );
    }

    #[test]
    fn an_exchange_keeps_the_place_of_its_request_and_is_left_out_until_answered() {
        let mut f = Fixture::new("f", "http://s", "t");
        let dispatch = f.reserve();
        f.push(disconnect_step(1005));
        assert_eq!(f.to_json()["steps"].as_array().unwrap().len(), 1, "the pending exchange is not in the file");
        assert_eq!(f.to_json()["steps"][0]["_step"], 1);
        f.fill(dispatch, exchange_step(&Exchange { method: "POST", path: "/d", status: 202, ..Exchange::default() }));
        let steps = f.to_json()["steps"].clone();
        assert_eq!((steps[0]["_step"].clone(), steps[0]["request"]["path"].clone()), (json!(1), json!("/d")));
        assert_eq!(steps[1]["_step"], 2);
    }

    #[test]
    fn a_non_bearer_authorization_is_redacted_whole() {
        let basic = Exchange {
            method: "GET",
            path: "/",
            authorization: Some("Basic dXNlcjpwYXNz"),
            status: 200,
            ..Exchange::default()
        };
        let step = &recorded(&[exchange_step(&basic)])["steps"][0];
        assert_eq!(step["request"]["headers"]["Authorization"], REDACTED);
    }
}
