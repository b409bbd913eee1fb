//! `aiwg-serve hitl`: the questions agents wait on, across missions: list them (oldest first, how long
//! each has waited), and answer one by its mission, with words of one's own or `--approve` / `--reject`.

use clap::{Args, Subcommand};
use serde_json::Value;

use super::missions::{human, respond};
use super::output::Output;
use super::{enc, shortened, text, Exit, Failure};
use aiwg_client::Client;

#[derive(Subcommand, Debug)]
pub enum HitlCommand {
    /// The requests waiting for an answer, oldest first (--state for answered, expired or withdrawn ones)
    List {
        #[arg(long, default_value = "pending")]
        state: String,
        /// Only the requests of this executor's missions (id, name or id prefix)
        #[arg(long, add = crate::cli::complete::executors())]
        executor: Option<String>,
        #[arg(long, default_value_t = 50)]
        limit: u32,
    },
    /// Answer the pending request of a mission (its id or a unique start of it)
    Answer(AnswerArgs),
}

#[derive(Args, Debug)]
pub struct AnswerArgs {
    #[arg(add = crate::cli::complete::missions())]
    mission: String,
    /// The answer
    #[arg(required_unless_present_any = ["approve", "reject"], conflicts_with_all = ["approve", "reject"])]
    text: Option<String>,
    /// Say yes: the first of the words the prompt offers, as in "Deploy? (ship/hold)", else "yes"
    #[arg(long, conflicts_with = "reject")]
    approve: bool,
    /// Say no: the second of the words the prompt offers, else "no"
    #[arg(long)]
    reject: bool,
}

pub(super) async fn run(client: &Client, out: &Output, cmd: HitlCommand) -> Result<(), Failure> {
    match cmd {
        HitlCommand::List { state, executor, limit } => {
            let mut query = format!("/api/v1/hitl?state={}&limit={limit}", enc(&state));
            if let Some(executor) = executor {
                query.push_str(&format!("&executor_id={}", enc(&executor)));
            }
            let page = client.get(&query).await?;
            if out.json {
                return out.json(&page);
            }
            let rows = page["requests"].as_array().into_iter().flatten().map(row).collect();
            out.table(&["MISSION", "EXECUTOR", "ASKED", "WAITED", "ANSWERED BY", "PROMPT"], rows)
        }
        HitlCommand::Answer(args) => {
            let mission = client.get(&format!("/api/v1/missions/{}", enc(&args.mission))).await?;
            let mission_id = text(&mission, "mission_id");
            let Some(pending) = mission.get("hitl").filter(|h| h.is_object()) else {
                let why =
                    format!("mission {mission_id} has no pending HITL request (it is {})", text(&mission, "state"));
                return Err(Failure::Exit(Exit::Refused, why));
            };
            let (yes, no) = offered(&text(pending, "prompt"));
            let answer = match (args.text, args.approve) {
                (Some(words), _) => words,
                (None, true) => yes,
                (None, false) => no,
            };
            respond(client, out, &mission_id, &text(pending, "hitl_id"), answer).await
        }
    }
}

fn row(r: &Value) -> Vec<String> {
    let executor = r["executor_name"].as_str().or(r["executor_id"].as_str()).unwrap_or("-");
    let waited = r["waited_s"].as_i64().map_or("-".into(), human);
    vec![
        text(r, "mission_id"),
        executor.to_owned(),
        text(r, "requested_at"),
        waited,
        text(r, "answered_by"),
        shortened(&text(r, "prompt"), PROMPT_CHARS),
    ]
}

/// How much of a prompt a row shows.
const PROMPT_CHARS: usize = 60;

/// The words a prompt offers for yes and no, as in "Deploy to prod? (ship/hold)" or "[y/n]" at its
/// end; otherwise "yes" and "no".
fn offered(prompt: &str) -> (String, String) {
    let trimmed = prompt.trim_end();
    let inner = [('(', ')'), ('[', ']')].into_iter().find_map(|(open, close)| {
        let body = trimmed.strip_suffix(close)?;
        Some(&body[body.rfind(open)? + 1..])
    });
    let words = inner.and_then(|w| w.split_once('/')).map(|(a, b)| (a.trim(), b.trim()));
    match words {
        Some((yes, no)) if !yes.is_empty() && !no.is_empty() && !no.contains('/') => (yes.into(), no.into()),
        _ => ("yes".into(), "no".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::offered;

    #[test]
    fn the_words_a_prompt_offers() {
        let pair = |p: &str| offered(p);
        assert_eq!(pair("Deploy to prod? (ship/hold)"), ("ship".into(), "hold".into()));
        assert_eq!(pair("Overwrite? [y/n]  "), ("y".into(), "n".into()));
        assert_eq!(pair("Proceed? ( approve / deny )"), ("approve".into(), "deny".into()));
        for plain in ["Deploy?", "Pick one (a/b/c)", "(/)", "a (b) c", "x/y"] {
            assert_eq!(pair(plain), ("yes".into(), "no".into()), "{plain}");
        }
    }
}
