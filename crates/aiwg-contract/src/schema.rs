//! Our JSON Schema for the contract, embedded in the binary and compiled once at start.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use serde::Serialize;
use serde_json::{Map, Value};

use super::EventType;

const SCHEMA_JSON: &str = include_str!("../../../schemas/executor-v1.json");

/// Schema errors reported back to a caller, capped so a hostile body cannot make a huge answer.
const MAX_DETAILS: usize = 20;
const MAX_DETAIL_MESSAGE: usize = 240;
/// How much of the value a sentence of `x-expected` quotes: with the longest sentence (192 bytes), a
/// detail stays within [`MAX_DETAIL_MESSAGE`].
const EXPECTED_VALUE_MAX: usize = 40;

/// One failing check: where in the instance, which keyword, and a sentence.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct SchemaDetail {
    pub instance_path: String,
    pub keyword: String,
    pub message: String,
}

/// What the server emits for an event's `data`: the keys our schema declares for that event type, `state`
/// set to the state the event type means, and declared defaults filled in. Derived from the schema so
/// the two cannot drift apart.
#[derive(Debug)]
struct DataShape {
    keys: Vec<String>,
    canonical_state: Option<String>,
    defaults: Vec<(String, Value)>,
}

/// `$defs` entries validated on every request or frame: compiled at start. Others (what tests check
/// the server's answers against) are compiled on first use, which keeps about 9 MiB of compiled
/// validators for the whole document out of an idle server.
const HOT_DEFS: &[&str] = &["event_envelope", "register_payload", "dispatch_payload", "hitl_response_payload"];

pub struct Schema {
    doc: Value,
    validators: RwLock<HashMap<String, Arc<jsonschema::Validator>>>,
    shapes: HashMap<EventType, DataShape>,
}

impl Schema {
    /// The schema document as embedded (served to tests and tools).
    pub fn source() -> &'static str {
        SCHEMA_JSON
    }

    /// Compiles the embedded schema. It is part of the binary and covered by tests, so failure here is a
    /// build defect, reported as an error rather than a panic so `serve` exits with a message.
    pub fn load() -> Result<Schema, String> {
        let doc: Value = serde_json::from_str(SCHEMA_JSON).map_err(|e| format!("embedded schema is not JSON: {e}"))?;
        let defs = doc.get("$defs").and_then(Value::as_object).ok_or("embedded schema has no $defs")?;
        let mut shapes = HashMap::new();
        for event in EventType::ALL {
            let def = defs
                .get(&event.data_def())
                .and_then(|d| d.get("properties"))
                .and_then(Value::as_object)
                .ok_or_else(|| format!("embedded schema lacks {}", event.data_def()))?;
            shapes.insert(event, DataShape::from_properties(def));
        }
        let schema = Schema { doc, validators: RwLock::new(HashMap::new()), shapes };
        for def in HOT_DEFS {
            schema.validator(def)?;
        }
        Ok(schema)
    }

    /// The compiled validator of `#/$defs/<def>`, compiling it on first use.
    fn validator(&self, def: &str) -> Result<Arc<jsonschema::Validator>, String> {
        if let Some(v) = self.validators.read().expect("schema lock").get(def) {
            return Ok(v.clone());
        }
        if self.doc["$defs"].get(def).is_none() {
            return Err(format!("the schema has no $defs/{def}"));
        }
        let mut root = self.doc.clone();
        root["$ref"] = Value::String(format!("#/$defs/{def}"));
        let compiled = jsonschema::options()
            .should_validate_formats(true)
            .build(&root)
            .map_err(|e| format!("embedded schema does not compile ({def}): {e}"))?;
        let compiled = Arc::new(compiled);
        self.validators.write().expect("schema lock").insert(def.to_owned(), compiled.clone());
        Ok(compiled)
    }

    /// Whether the schema defines `#/$defs/<def>` (what [`Schema::validate`] needs).
    pub fn has_def(&self, def: &str) -> bool {
        self.doc["$defs"].get(def).is_some()
    }

    /// Validates `value` against `#/$defs/<def>`. A string (or key) holding U+0000 is refused whatever
    /// the definition says: PostgreSQL cannot store it in text, and no field of the contract means it,
    /// so both stores refuse it alike instead of one storing what the other fails on.
    pub fn validate(&self, def: &str, value: &Value) -> Result<(), Vec<SchemaDetail>> {
        refuse_nul(value)?;
        let validator = self.validator(def).unwrap_or_else(|e| panic!("{e}: a programming error"));
        // The common case, a valid document, stops at the first check instead of building every error.
        if validator.is_valid(value) {
            return Ok(());
        }
        let details: Vec<SchemaDetail> = validator
            .iter_errors(value)
            .take(MAX_DETAILS)
            .map(|e| {
                let mut message = self.expected(&e).unwrap_or_else(|| e.to_string());
                if message.len() > MAX_DETAIL_MESSAGE {
                    let cut = (0..=MAX_DETAIL_MESSAGE).rev().find(|i| message.is_char_boundary(*i)).unwrap_or(0);
                    message.truncate(cut);
                    message.push('…');
                }
                SchemaDetail {
                    instance_path: e.instance_path().to_string(),
                    keyword: e.kind().keyword().to_string(),
                    message,
                }
            })
            .collect();
        if details.is_empty() {
            Ok(())
        } else {
            Err(details)
        }
    }

    /// A failed `anyOf` or `oneOf` said as its definition's `x-expected` says what is valid (`"gpu:a100"
    /// is not a capability: ...`), where the validator's sentence would only name the keyword. The
    /// failing keyword's location is canonical (no `$ref` in it), so its parent is the definition.
    fn expected(&self, e: &jsonschema::ValidationError<'_>) -> Option<String> {
        let path = e.schema_path().as_str();
        let parent = path.strip_suffix("/anyOf").or_else(|| path.strip_suffix("/oneOf"))?;
        let expected = self.doc.pointer(parent)?.get("x-expected")?.as_str()?;
        // The value as written, cut so that the sentence after it fits in a detail.
        let mut value = e.instance().to_string();
        if value.len() > EXPECTED_VALUE_MAX {
            let cut = (0..=EXPECTED_VALUE_MAX).rev().find(|i| value.is_char_boundary(*i)).unwrap_or(0);
            value.truncate(cut);
            value.push('…');
        }
        Some(format!("{value} {expected}"))
    }

    /// The `data` the server stores and emits for an event: tolerant input reduced to the declared shape.
    pub fn canonical_data(&self, event: EventType, data: Option<&Value>) -> Value {
        let shape = &self.shapes[&event];
        let mut out = Map::new();
        if let Some(Value::Object(input)) = data {
            for key in &shape.keys {
                if let Some(v) = input.get(key) {
                    out.insert(key.clone(), v.clone());
                }
            }
        }
        if let Some(state) = &shape.canonical_state {
            out.insert("state".into(), Value::String(state.clone()));
        }
        for (key, default) in &shape.defaults {
            out.entry(key.clone()).or_insert_with(|| default.clone());
        }
        Value::Object(out)
    }
}

impl DataShape {
    fn from_properties(properties: &Map<String, Value>) -> DataShape {
        let canonical_state =
            properties.get("state").and_then(|s| s.get("x-canonical")).and_then(Value::as_str).map(str::to_owned);
        let defaults =
            properties.iter().filter_map(|(k, p)| p.get("default").map(|d| (k.clone(), d.clone()))).collect();
        DataShape { keys: properties.keys().cloned().collect(), canonical_state, defaults }
    }
}

/// The JSON pointer of the first string or key holding U+0000, if any.
/// Refuses a value with a string (or key) holding U+0000, where it is (what [`Schema::validate`] does
/// first; also for bodies no definition describes, as a sandbox's registration).
pub fn refuse_nul(value: &Value) -> Result<(), Vec<SchemaDetail>> {
    match nul_at(value) {
        Some(instance_path) => Err(vec![SchemaDetail {
            instance_path,
            keyword: "nul".into(),
            message: "a string may not contain U+0000 (NUL)".into(),
        }]),
        None => Ok(()),
    }
}

fn nul_at(value: &Value) -> Option<String> {
    match value {
        Value::String(s) if s.contains('\0') => Some(String::new()),
        Value::Array(items) => items.iter().enumerate().find_map(|(i, v)| nul_at(v).map(|path| format!("/{i}{path}"))),
        Value::Object(fields) => fields.iter().find_map(|(k, v)| {
            // The key is escaped only on the way out: this runs on every frame, and almost never finds one.
            let escaped = || k.replace('~', "~0").replace('/', "~1");
            match k.contains('\0') {
                true => Some(format!("/{}", escaped())),
                false => nul_at(v).map(|path| format!("/{}{path}", escaped())),
            }
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn canonical_form_drops_unknown_keys_and_fixes_state() {
        let schema = Schema::load().unwrap();
        let raw = json!({"state": "failed_preserved", "reason": "mission_quarantined", "failure_count": 3});
        assert_eq!(
            schema.canonical_data(EventType::MissionFailed, Some(&raw)),
            json!({"state": "failed", "reason": "mission_quarantined"})
        );
        assert_eq!(
            schema.canonical_data(EventType::MissionFailed, None),
            json!({"state": "failed", "reason": "unspecified"})
        );
        assert_eq!(schema.canonical_data(EventType::MissionProgress, None), json!({}));
        assert_eq!(
            schema.canonical_data(EventType::MissionStarted, Some(&json!({"pty_session_id": "p1", "x": 1}))),
            json!({"state": "running", "pty_session_id": "p1"})
        );
    }

    #[test]
    fn a_failed_alternative_says_what_is_valid() {
        let schema = Schema::load().unwrap();
        let body = json!({"mission_id": "m", "objective": "o", "completion": "c",
            "executor_filter": {"capabilities": ["gpu:a100"], "executor_id": "builder-c"}});
        let err = schema.validate("dispatch_payload", &body).unwrap_err();
        let at = |path: &str| err.iter().find(|d| d.instance_path == path).map(|d| d.message.as_str());
        let capability = at("/executor_filter/capabilities/0").unwrap_or_default();
        assert!(capability.starts_with("\"gpu:a100\" is not a capability: the valid forms are isolation:"), "{err:?}");
        assert!(capability.ends_with("x-<name> (e.g. x-gpu:a100)"), "whole: {err:?}");
        let executor = at("/executor_filter/executor_id").unwrap_or_default();
        assert!(executor.starts_with("\"builder-c\" is not an executor id"), "{err:?}");
    }

    #[test]
    fn details_name_path_and_keyword() {
        let schema = Schema::load().unwrap();
        let err = schema.validate("hitl_response_payload", &json!({"hitl_id": 5})).unwrap_err();
        assert!(err.iter().any(|d| d.keyword == "required"), "{err:?}");
        assert!(err.iter().any(|d| d.instance_path == "/hitl_id" && d.keyword == "type"), "{err:?}");
    }

    #[test]
    fn a_nul_is_located_by_an_escaped_json_pointer() {
        assert_eq!(nul_at(&json!({"a/b": {"c~d": ["ok", "x\0y"]}})).as_deref(), Some("/a~1b/c~0d/1"));
        assert_eq!(nul_at(&json!({"ok": 1, "k\0": 2})).as_deref(), Some("/k\0"));
        assert_eq!(nul_at(&json!({"a/b": {"c~d": ["ok"]}, "n": null})), None);
    }
}
