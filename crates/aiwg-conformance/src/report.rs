//! What a conformance run found: one result per check, each naming the contract section it enforces,
//! and the three ways to read it (a table for people, JSON for scripts, JUnit XML for CI systems). A
//! run passes when every required check passed; a skip says why it did not run.

use serde::Serialize;

/// The contract's conformance levels (section "Conformance levels"), and our `strict` profile beyond
/// them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Core,
    Hitl,
    Resumable,
    /// What `aiwg-serve` promises beyond the contract (ownership, legal transitions, honest controls).
    Strict,
}

/// One check: where it belongs and what it enforces.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Check {
    /// `category/name`, e.g. `register/handshake`.
    pub id: &'static str,
    /// The contract section it enforces, as titled in the contract.
    pub section: &'static str,
    pub level: Level,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "outcome", content = "detail", rename_all = "lowercase")]
pub enum Outcome {
    Pass,
    /// The evidence that failed: what was sent, what came back.
    Fail(String),
    /// Why it did not run.
    Skip(String),
}

#[derive(Clone, Debug, Serialize)]
pub struct Result {
    #[serde(flatten)]
    pub check: Check,
    #[serde(flatten)]
    pub outcome: Outcome,
    /// What the check could not cover although it ran (a fixture's steps a loopback run cannot
    /// reproduce, say).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

#[derive(Debug, Default)]
pub struct Report {
    pub target: String,
    pub results: Vec<Result>,
}

/// How many checks passed, failed and were skipped.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Counts {
    pub passed: usize,
    pub failed: usize,
    pub skipped: usize,
}

/// As JSON: the target, the counts (for scripts that want the verdict without walking the results) and
/// every result.
impl Serialize for Report {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let counts = self.counts();
        let mut s = serializer.serialize_struct("Report", 5)?;
        s.serialize_field("target", &self.target)?;
        s.serialize_field("passed", &counts.passed)?;
        s.serialize_field("failed", &counts.failed)?;
        s.serialize_field("skipped", &counts.skipped)?;
        s.serialize_field("results", &self.results)?;
        s.end()
    }
}

impl Report {
    pub fn record(&mut self, check: Check, outcome: Outcome) {
        self.record_noted(check, outcome, None);
    }

    pub fn record_noted(&mut self, check: Check, outcome: Outcome, note: Option<String>) {
        self.results.push(Result { check, outcome, note });
    }

    pub fn counts(&self) -> Counts {
        let count = |p: fn(&Outcome) -> bool| self.results.iter().filter(|r| p(&r.outcome)).count();
        Counts {
            passed: count(|o| *o == Outcome::Pass),
            failed: count(|o| matches!(o, Outcome::Fail(_))),
            skipped: count(|o| matches!(o, Outcome::Skip(_))),
        }
    }

    /// Every check that ran at or below `up_to` passed (skips are not failures; they say why).
    pub fn passed(&self, up_to: Level) -> bool {
        self.results.iter().all(|r| r.check.level > up_to || !matches!(r.outcome, Outcome::Fail(_)))
    }

    /// A table: category, check, level, outcome, section; failures and skips with their detail below
    /// their row.
    pub fn table(&self) -> String {
        let mut out = format!("conformance of {}\n", self.target);
        let width = self.results.iter().map(|r| r.check.id.len()).max().unwrap_or(0);
        for r in &self.results {
            let (word, detail) = match &r.outcome {
                Outcome::Pass => ("pass", None),
                Outcome::Fail(why) => ("FAIL", Some(why)),
                Outcome::Skip(why) => ("skip", Some(why)),
            };
            let level = format!("{:?}", r.check.level).to_lowercase();
            out.push_str(&format!("{word}  {:width$}  {level:9}  {}\n", r.check.id, r.check.section));
            for line in detail.into_iter().chain(r.note.as_ref()) {
                out.push_str(&format!("      {line}\n"));
            }
        }
        let Counts { passed, failed, skipped } = self.counts();
        out.push_str(&format!("{passed} passed, {failed} failed, {skipped} skipped\n"));
        out
    }

    /// JUnit XML: one test suite, a test case per check (class name its category), a failure or a
    /// skip with the detail.
    pub fn junit(&self) -> String {
        let Counts { failed: failures, skipped, .. } = self.counts();
        let mut out = format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuite name=\"{}\" tests=\"{}\" failures=\"{failures}\" \
             skipped=\"{skipped}\">\n",
            xml(&format!("conformance of {}", self.target)),
            self.results.len()
        );
        for r in &self.results {
            let (class, name) = r.check.id.split_once('/').unwrap_or(("conformance", r.check.id));
            out.push_str(&format!("  <testcase classname=\"{}\" name=\"{}\">", xml(class), xml(name)));
            match &r.outcome {
                Outcome::Pass => {}
                Outcome::Fail(why) => {
                    out.push_str(&format!("<failure message=\"{}\">{}</failure>", xml(r.check.section), xml(why)))
                }
                Outcome::Skip(why) => out.push_str(&format!("<skipped message=\"{}\"/>", xml(why))),
            }
            if let Some(note) = &r.note {
                out.push_str(&format!("<system-out>{}</system-out>", xml(note)));
            }
            out.push_str("</testcase>\n");
        }
        out.push_str("</testsuite>\n");
        out
    }
}

/// Text for an XML attribute or element: the five predefined entities, and control characters (which
/// XML 1.0 cannot carry) as `?`.
fn xml(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            '&' => "&amp;".to_owned(),
            '<' => "&lt;".to_owned(),
            '>' => "&gt;".to_owned(),
            '"' => "&quot;".to_owned(),
            '\'' => "&apos;".to_owned(),
            c if c.is_control() && !matches!(c, '\n' | '\t') => "?".to_owned(),
            c => c.to_string(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> Report {
        let mut r = Report { target: "http://x".into(), results: Vec::new() };
        let check = |id, level| Check { id, section: "REST routes", level };
        r.record(check("register/handshake", Level::Core), Outcome::Pass);
        r.record(check("hitl/round_trip", Level::Hitl), Outcome::Fail("got <none> & \"x\"".into()));
        r.record(check("strict/ownership", Level::Strict), Outcome::Skip("profile contract".into()));
        r
    }

    #[test]
    fn a_failure_counts_only_at_its_level_and_above() {
        let r = report();
        assert!(r.passed(Level::Core));
        assert!(!r.passed(Level::Hitl));
        assert!(!r.passed(Level::Strict));
    }

    #[test]
    fn the_table_names_every_check_its_section_and_why() {
        let t = report().table();
        assert!(t.contains("pass  register/handshake  core       REST routes\n"), "{t}");
        assert!(t.contains("FAIL  hitl/round_trip     hitl       REST routes\n      got <none> & \"x\"\n"), "{t}");
        assert!(t.ends_with("1 passed, 1 failed, 1 skipped\n"), "{t}");
    }

    #[test]
    fn junit_escapes_and_counts() {
        let x = report().junit();
        assert!(x.contains("tests=\"3\" failures=\"1\" skipped=\"1\""), "{x}");
        assert!(x.contains("<testcase classname=\"hitl\" name=\"round_trip\"><failure message=\"REST routes\">got &lt;none&gt; &amp; &quot;x&quot;</failure></testcase>"), "{x}");
        assert!(x.contains("<skipped message=\"profile contract\"/>"), "{x}");
        assert_eq!(xml("a\u{1}b"), "a?b");
    }

    #[test]
    fn a_note_follows_its_row_in_every_form() {
        let mut r = report();
        r.record_noted(Check { id: "fixtures/x", section: "S", level: Level::Core }, Outcome::Pass, Some("n<".into()));
        assert!(r.table().contains("pass  fixtures/x          core       S\n      n<\n"), "{}", r.table());
        assert!(r.junit().contains("name=\"x\"><system-out>n&lt;</system-out></testcase>"), "{}", r.junit());
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!((v["results"][3]["note"].as_str(), v["results"][0].get("note")), (Some("n<"), None));
    }

    #[test]
    fn json_carries_the_outcome_and_its_detail() {
        let v = serde_json::to_value(report()).unwrap();
        assert_eq!(v["results"][1]["outcome"], "fail");
        assert_eq!(v["results"][1]["detail"], "got <none> & \"x\"");
        assert_eq!(v["results"][1]["id"], "hitl/round_trip");
        assert_eq!(v["results"][0]["level"], "core");
        assert_eq!((v["passed"].as_u64(), v["failed"].as_u64(), v["skipped"].as_u64()), (Some(1), Some(1), Some(1)));
    }
}
