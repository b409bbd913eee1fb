//! `aiwg-serve operators`: named operators and their roles (admins only): add one (its token is
//! printed once), list them, revoke one.

use clap::{Subcommand, ValueEnum};
use serde_json::{json, Value};

use super::names::OPERATOR;
use super::output::Output;
use super::{enc, text, Failure};
use aiwg_client::Client;

#[derive(Subcommand, Debug)]
pub enum OperatorsCommand {
    /// Add an operator; prints its token, once (serve keeps only its hash)
    Add {
        name: String,
        #[arg(long, value_enum)]
        role: Role,
    },
    /// List the operators: the configuration's tokens (config-N) and the named ones, revoked ones too
    List,
    /// Revoke an operator: its token acts no more
    Revoke {
        #[arg(add = crate::cli::complete::operators())]
        name: String,
    },
}

/// What an operator may do; each role may do what the ones before it may.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Role {
    /// Reads and follows missions, executors, runtimes, events
    Viewer,
    /// Also dispatches, pauses, resumes, aborts and answers HITL requests
    Operator,
    /// Also removes and drains executors, adds runtimes, compacts the store, manages operators and webhooks
    Admin,
}

pub(super) async fn run(client: &Client, out: &Output, cmd: OperatorsCommand) -> Result<(), Failure> {
    match cmd {
        OperatorsCommand::Add { name, role } => {
            let role = match role {
                Role::Viewer => "viewer",
                Role::Operator => "operator",
                Role::Admin => "admin",
            };
            let added = client.post("/api/v1/operators", &json!({"name": name, "role": role})).await?;
            if out.json {
                return out.json(&added);
            }
            out.line(format!("operator {name} added as {role}; its token (shown once, keep it secret):"))?;
            out.line(text(&added, "token"))
        }
        OperatorsCommand::List => {
            let list = client.get("/api/v1/operators").await?;
            if out.json {
                return out.json(&list);
            }
            let rows = list["operators"].as_array().into_iter().flatten().map(row).collect();
            out.table(&["OPERATOR", "ROLE", "ADDED", "BY", "REVOKED"], rows)
        }
        OperatorsCommand::Revoke { name } => {
            let name = OPERATOR.key(client, &name).await?;
            client.delete(&format!("/api/v1/operators/{}", enc(&name))).await?;
            out.line(format!("operator {name}: revoked"))
        }
    }
}

fn row(o: &Value) -> Vec<String> {
    let added = if o["configured"] == true { "server.operator_tokens".into() } else { text(o, "created_at") };
    vec![text(o, "name"), text(o, "role"), added, text(o, "created_by"), text(o, "revoked_at")]
}
