//! `aiwg-serve runtimes`: HTTP agent runtimes (the WattSwarm executor protocol): add one by name and
//! URL, list them, check one now, remove one.

use clap::{Subcommand, ValueEnum};
use serde_json::{json, Value};

use super::names::RUNTIME;
use super::output::Output;
use super::{enc, text, Exit, Failure};
use aiwg_client::Client;

#[derive(Subcommand, Debug)]
pub enum RuntimesCommand {
    /// Add a runtime, or update the one of that name; serve probes it at once and says what it found
    Add {
        name: String,
        /// Its base URL; paths are appended to it, so a path prefix works (http://host:8787/rt)
        url: String,
        #[arg(long, value_enum, default_value_t = Kind::Local)]
        kind: Kind,
    },
    /// List the runtimes: URL, health, profiles, provider and model
    List,
    /// Probe a runtime now as a kernel does (GET /health), and read its /capabilities; exit 1 when it is not healthy
    Check {
        #[arg(add = crate::cli::complete::runtimes())]
        name: String,
    },
    /// Remove a runtime: its live missions fail and the calls in flight are dropped
    Remove {
        #[arg(add = crate::cli::complete::runtimes())]
        name: String,
    },
}

/// WattSwarm registries' label for a runtime; serve calls both kinds over HTTP.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Kind {
    Local,
    Remote,
}

pub(super) async fn run(client: &Client, out: &Output, cmd: RuntimesCommand) -> Result<(), Failure> {
    match cmd {
        RuntimesCommand::Add { name, url, kind } => {
            let kind = match kind {
                Kind::Local => "local",
                Kind::Remote => "remote",
            };
            let body = json!({"name": name, "base_url": url, "kind": kind});
            let answer = client.post("/api/v1/runtimes", &body).await?;
            report(out, &answer, "added")
        }
        RuntimesCommand::List => {
            let list = client.get("/api/v1/runtimes").await?;
            if out.json {
                return out.json(&list);
            }
            let rows = list["runtimes"].as_array().into_iter().flatten().map(row).collect();
            out.table(&["RUNTIME", "URL", "KIND", "HEALTHY", "ACTIVE", "PROFILES", "MODEL"], rows)
        }
        RuntimesCommand::Remove { name } => {
            let name = RUNTIME.key(client, &name).await?;
            client.delete(&format!("/api/v1/runtimes/{}", enc(&name))).await?;
            out.line(format!("runtime {name}: removed"))
        }
        RuntimesCommand::Check { name } => {
            let name = RUNTIME.key(client, &name).await?;
            let answer = client.post(&format!("/api/v1/runtimes/{}/check", enc(&name)), &Value::Null).await?;
            report(out, &answer, "checked")?;
            match answer["healthy"] == true {
                true => Ok(()),
                false => Err(Failure::Exit(Exit::Failed, format!("runtime {name} is not healthy"))),
            }
        }
    }
}

/// One line about a runtime an operator just added or checked, with what its probe found.
fn report(out: &Output, r: &Value, done: &str) -> Result<(), Failure> {
    if out.json {
        return out.json(r);
    }
    let name = text(r, "name");
    let url = text(r, "base_url");
    match (r["healthy"] == true, r["error"].as_str()) {
        (true, _) if r["capabilities_error"].is_string() => out.line(format!(
            "runtime {name} {done}: {url} healthy (GET /health), but its /capabilities cannot be read: {}",
            text(r, "capabilities_error")
        )),
        (true, _) => out.line(format!(
            "runtime {name} {done}: {url} healthy, profiles {}, {}",
            list(&r["capabilities"]["profiles"]),
            model(r)
        )),
        (false, Some(e)) => out.line(format!("runtime {name} {done}: {url} NOT healthy: {e}")),
        (false, None) => out.line(format!("runtime {name} {done}: {url} not healthy")),
    }
}

fn row(r: &Value) -> Vec<String> {
    vec![
        text(r, "name"),
        text(r, "base_url"),
        text(r, "kind"),
        if r["healthy"] == true { "yes".into() } else { "no".into() },
        text(r, "active_mission_count"),
        list(&r["capabilities"]["profiles"]),
        model(r),
    ]
}

fn list(v: &Value) -> String {
    let items: Vec<&str> = v.as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    if items.is_empty() {
        "-".into()
    } else {
        items.join(",")
    }
}

fn model(r: &Value) -> String {
    match (r["capabilities"]["provider_family"].as_str(), r["capabilities"]["model_id"].as_str()) {
        (Some(p), Some(m)) => format!("{p}/{m}"),
        _ => "-".into(),
    }
}
