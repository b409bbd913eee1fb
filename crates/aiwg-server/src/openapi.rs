//! The REST API as an OpenAPI 3.1 document, served at `GET /api/v1/openapi.json`.
//!
//! Written by hand in `schemas/openapi.json`, whose request and response schemas `$ref` the definitions
//! of `schemas/executor-v1.json` (the schema the server validates with), so that a body is described in
//! one place. Served bundled: every definition copied under `components/schemas` and every reference
//! pointed there, so that the document stands alone. `tests/api/openapi.rs` keeps it in step with the
//! router (every route documented with its methods, every documented path answered).

use std::sync::OnceLock;

use aiwg_domain::operators::Role;
use serde_json::Value;

const SOURCE: &str = include_str!("../../../schemas/openapi.json");

/// The bundled document as JSON text, built once.
pub fn document() -> &'static str {
    static DOCUMENT: OnceLock<String> = OnceLock::new();
    DOCUMENT.get_or_init(|| bundle(SOURCE, aiwg_contract::Schema::source()).to_string())
}

/// An operation of the document that names the role it needs (`x-aiwg-role`): an operator route.
struct Guarded {
    method: String,
    route: String,
    role: Role,
}

/// Every operator operation, read once from the document: the one list of who may call what.
fn guarded() -> &'static [Guarded] {
    static GUARDED: OnceLock<Vec<Guarded>> = OnceLock::new();
    GUARDED.get_or_init(|| {
        let document: Value = serde_json::from_str(SOURCE).expect("schemas/openapi.json is JSON");
        let paths = document["paths"].as_object().cloned().unwrap_or_default();
        let operations = paths.into_iter().flat_map(|(path, operations)| {
            let operations = operations.as_object().cloned().unwrap_or_default();
            operations.into_iter().map(move |(method, op)| (method.to_ascii_uppercase(), path.clone(), op))
        });
        let role = |op: &Value| op["x-aiwg-role"].as_str().and_then(Role::parse);
        operations.filter_map(|(method, route, op)| Some(Guarded { method, route, role: role(&op)? })).collect()
    })
}

/// The role an operator route needs (its `x-aiwg-role`), by method and route as the router names it;
/// `None` for a route of executors, sandboxes or anyone. The edge asks it where it must judge a call
/// before the route's own extractors run.
pub(crate) fn role_of(method: &str, route: &str) -> Option<Role> {
    guarded().iter().find(|g| g.method == method && g.route == route).map(|g| g.role)
}

/// The operator operations `role` may call, as `METHOD /route` the document names them: what a client
/// (the dashboard) offers a caller, from the same list the server judges calls by.
pub(crate) fn allowed(role: Role) -> Vec<String> {
    guarded().iter().filter(|g| role.allows(g.role)).map(|g| format!("{} {}", g.method, g.route)).collect()
}

/// `openapi` with the `$defs` of `schema` under `components/schemas`, and every reference to them
/// (`executor-v1.json#/$defs/X` in the document, `#/$defs/X` inside the schema) as
/// `#/components/schemas/X`.
pub fn bundle(openapi: &str, schema: &str) -> Value {
    let mut document: Value = serde_json::from_str(openapi).expect("schemas/openapi.json is JSON");
    let schema: Value = serde_json::from_str(schema).expect("schemas/executor-v1.json is JSON");
    let mut defs = schema["$defs"].as_object().cloned().unwrap_or_default();
    if !document["components"].is_object() {
        document["components"] = Value::Object(Default::default());
    }
    let components = document["components"].as_object_mut().expect("components is an object");
    let schemas = components.entry("schemas").or_insert_with(|| Value::Object(Default::default()));
    if let Some(schemas) = schemas.as_object_mut() {
        schemas.append(&mut defs);
    }
    repoint(&mut document);
    document
}

fn repoint(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, v) in map.iter_mut() {
                match (key.as_str(), v) {
                    ("$ref", Value::String(target)) => {
                        if let Some(name) =
                            target.strip_prefix("executor-v1.json#/$defs/").or_else(|| target.strip_prefix("#/$defs/"))
                        {
                            *target = format!("#/components/schemas/{name}");
                        }
                    }
                    (_, v) => repoint(v),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(repoint),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bundle_stands_alone() {
        let document: Value = serde_json::from_str(document()).unwrap();
        assert_eq!(document["openapi"], "3.1.0");
        let mut refs = Vec::new();
        collect_refs(&document, &mut refs);
        assert!(!refs.is_empty());
        for target in refs {
            let pointer = target.strip_prefix('#').unwrap_or_else(|| panic!("{target} is not local"));
            assert!(document.pointer(pointer).is_some(), "{target} points nowhere");
        }
    }

    fn collect_refs(value: &Value, out: &mut Vec<String>) {
        match value {
            Value::Object(map) => {
                for (k, v) in map {
                    match (k.as_str(), v) {
                        ("$ref", Value::String(s)) => out.push(s.clone()),
                        _ => collect_refs(v, out),
                    }
                }
            }
            Value::Array(items) => items.iter().for_each(|i| collect_refs(i, out)),
            _ => {}
        }
    }
}
