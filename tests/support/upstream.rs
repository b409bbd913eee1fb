//! Upstream's JSON Schema of the contract (`fixtures/upstream/executor-v1.upstream.json`), compiled per
//! `$defs` entry: what an executor or client written for upstream holds serve's answers to.

use std::path::Path;

use serde_json::Value;

pub struct Upstream(jsonschema::ValidatorMap);

impl Upstream {
    pub fn load() -> Upstream {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/upstream/executor-v1.upstream.json");
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let mut doc: Value = serde_json::from_str(&text).unwrap();
        // Its `$schema` misspells the 2020-12 meta-schema URI; drop it and say which draft it means.
        doc.as_object_mut().unwrap().remove("$schema");
        Upstream(
            jsonschema::options()
                .with_draft(jsonschema::Draft::Draft202012)
                .should_validate_formats(true)
                .build_map(&doc)
                .expect("upstream schema compiles"),
        )
    }

    /// What upstream's `$defs/{def}` finds wrong with `value` (nothing: it validates).
    pub fn errors(&self, def: &str, value: &Value) -> Vec<String> {
        let v = self.0.get(&format!("#/$defs/{def}")).unwrap_or_else(|| panic!("upstream has no {def}"));
        v.iter_errors(value).map(|e| format!("{} at {}", e, e.instance_path())).collect()
    }
}
