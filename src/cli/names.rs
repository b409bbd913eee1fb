//! What an operator types to name something: a name, an id, or a unique start of either
//! (`dispatch --executor builder-c`, `webhooks deliveries wh_eb29`). Executors and missions are
//! resolved by serve (its routes take a reference: one rule, also for the dashboard and scripts);
//! webhooks, operators and runtimes are resolved here, from their listing: an exact id, else an exact
//! name, else a unique start of either.

use serde_json::Value;

use super::{enc, text, Exit, Failure};
use aiwg_client::Client;
use aiwg_domain::{LISTED, MIN_PREFIX};

/// Something the CLI can name, and how its listing shows it.
pub(super) struct Kind {
    /// In sentences: `webhook`.
    what: &'static str,
    /// Its listing, and the array in it.
    list: &'static str,
    array: &'static str,
    /// The fields that name one: its key (its id, or an operator's name, which is its key), and its
    /// name when it has one beside its id.
    id: &'static str,
    name: Option<&'static str>,
}

pub(super) const WEBHOOK: Kind =
    Kind { what: "webhook", list: "/api/v1/webhooks", array: "webhooks", id: "id", name: None };
pub(super) const OPERATOR: Kind =
    Kind { what: "operator", list: "/api/v1/operators", array: "operators", id: "name", name: None };
pub(super) const RUNTIME: Kind =
    Kind { what: "runtime", list: "/api/v1/runtimes", array: "runtimes", id: "executor_id", name: Some("name") };

impl Kind {
    /// The key its routes take (a runtime's and an operator's name, a webhook's id) of the one
    /// `reference` names. A reference that names none is passed on as written: serve's answer (404,
    /// in its words) is the one every client gets. A revoked operator is passed over (its name may
    /// have been given again).
    pub(super) async fn key(&self, client: &Client, reference: &str) -> Result<String, Failure> {
        let listed = client.get(self.list).await?;
        let rows: Vec<&Value> = listed[self.array]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|row| row.get("revoked_at").is_none_or(Value::is_null))
            .collect();
        let keys: Vec<(String, String)> =
            rows.iter().map(|row| (text(row, self.id), self.name.map(|n| text(row, n)).unwrap_or_default())).collect();
        match pick(reference, &keys) {
            Ok(i) => Ok(text(rows[i], self.name.unwrap_or(self.id))),
            Err(several) if several.is_empty() => Ok(reference.to_owned()),
            Err(several) => {
                let listed: Vec<String> = several.iter().map(|&i| label(&keys[i])).collect();
                let what = self.what;
                let message =
                    format!("'{reference}' names more than one {what}: {}; give more of it", listed.join(", "));
                Err(Failure::Exit(Exit::Refused, message))
            }
        }
    }
}

fn label((id, name): &(String, String)) -> String {
    match name.is_empty() {
        true => id.clone(),
        false => format!("{name} ({id})"),
    }
}

/// Which of `(id, name)` pairs `reference` names: an exact id, else an exact name, else a unique start
/// of an id or a name (at least [`MIN_PREFIX`] characters; an id's in any case). `Err` lists the
/// candidates (none, or several: at most [`LISTED`]).
pub(super) fn pick(reference: &str, keys: &[(String, String)]) -> Result<usize, Vec<usize>> {
    let all = |fits: &dyn Fn(&(String, String)) -> bool| -> Vec<usize> {
        keys.iter().enumerate().filter(|(_, k)| fits(k)).map(|(i, _)| i).collect()
    };
    let lower = reference.to_ascii_lowercase();
    let long_enough = reference.chars().count() >= MIN_PREFIX;
    let tiers = [
        all(&|(id, _)| id == reference),
        all(&|(_, name)| !name.is_empty() && name == reference),
        all(&|(id, name)| long_enough && (id.to_ascii_lowercase().starts_with(&lower) || name.starts_with(reference))),
    ];
    for tier in tiers {
        match tier.as_slice() {
            [] => continue,
            [one] => return Ok(*one),
            several => return Err(several.iter().take(LISTED).copied().collect()),
        }
    }
    Err(Vec::new())
}

/// The id of the mission `reference` names (its id or a unique start of it), as serve resolves it.
/// `lenient`: a reference serve knows no mission by is taken as written (the audit trail outlives the
/// missions retention removes).
pub(super) async fn mission_id(client: &Client, reference: &str, lenient: bool) -> Result<String, Failure> {
    match client.get(&format!("/api/v1/missions/{}", enc(reference))).await {
        Ok(found) => Ok(text(&found, "mission_id")),
        Err(aiwg_client::CallError::Refused { status: 404, .. }) if lenient => Ok(reference.to_owned()),
        Err(e) => Err(e.into()),
    }
}

/// The id of the executor `reference` names, as serve resolves it (`GET /api/v1/executors/{ref}`: an
/// id, a name, a unique start of an id; several are 409 `ambiguous`, listed). A UUID is taken as is:
/// serve judges a pin to an id it does not know at the dispatch, as it always has.
pub(super) async fn executor_id(client: &Client, reference: &str) -> Result<String, Failure> {
    if uuid::Uuid::try_parse(reference).is_ok() {
        return Ok(reference.to_owned());
    }
    let found = client.get(&format!("/api/v1/executors/{}", enc(reference))).await?;
    Ok(text(&found, "executor_id"))
}

#[cfg(test)]
mod tests {
    use super::pick;

    fn keys(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(i, n)| (i.to_string(), n.to_string())).collect()
    }

    #[test]
    fn an_id_then_a_name_then_a_unique_start_names_one() {
        let k = keys(&[("wh_eb29aa", ""), ("wh_eb31bb", ""), ("op_1234", "builder-c"), ("op_5678", "builder-d")]);
        assert_eq!(pick("wh_eb29aa", &k), Ok(0), "an exact id");
        assert_eq!(pick("WH_EB29", &k), Ok(0), "a start of an id, any case");
        assert_eq!(pick("builder-c", &k), Ok(2), "an exact name");
        assert_eq!(pick("wh_eb", &k), Err(vec![0, 1]), "several fit: listed");
        assert_eq!(pick("build", &k), Err(vec![2, 3]));
        assert_eq!(pick("wh_", &k), Err(vec![]), "too short to be a start");
        assert_eq!(pick("nope-nope", &k), Err(vec![]));
    }

    #[test]
    fn an_exact_name_wins_over_a_longer_name_it_starts() {
        let k = keys(&[("a1", "builder"), ("a2", "builder-2")]);
        assert_eq!(pick("builder", &k), Ok(0));
    }
}
