//! What a mission produced: `aiwg-serve missions logs`, its log as its agents wrote it, whole or its
//! last lines, and followed to the mission's end across restarts of serve; `aiwg-serve missions
//! artifacts`, its files, listed or downloaded.

use std::path::PathBuf;

use aiwg_client::{Client, LogStart};

use super::super::output::Output;
use super::super::{enc, lost, text, Exit, Failure};

/// What to print of which log.
pub(super) struct LogsArgs {
    pub(super) mission_id: String,
    pub(super) follow: bool,
    pub(super) stream: Option<&'static str>,
    pub(super) tail: Option<u64>,
}

const OCTETS: &str = "application/octet-stream";

/// Prints the log's bytes as received (a terminal shows the agent's colours); following, until the
/// mission ends or Ctrl-C.
pub(super) async fn logs(client: &Client, out: &Output, args: LogsArgs) -> Result<(), Failure> {
    // The log's route takes a prefix too, but a follower that reconnects must name one mission for good.
    let mission = client.get(&format!("/api/v1/missions/{}", enc(&args.mission_id))).await?;
    let mission_id = text(&mission, "mission_id");
    if !args.follow {
        let mut query = vec![];
        query.extend(args.stream.map(|s| format!("stream={s}")));
        query.extend(args.tail.map(|n| format!("tail={n}")));
        let path = format!("/api/v1/missions/{}/log?{}", enc(&mission_id), query.join("&"));
        let bytes = client.get_bytes(&path, OCTETS).await?;
        return out.bytes(&bytes);
    }
    let start = args.tail.map_or(LogStart::Offset(0), LogStart::Tail);
    let mut follower = client.follow_log(&mission_id, args.stream, start);
    let follow = async {
        while let Some(bytes) = follower.next().await.map_err(|e| lost(e.into(), &mission_id, None))? {
            out.bytes(&bytes)?;
        }
        Ok(())
    };
    tokio::select! {
        done = follow => done,
        _ = tokio::signal::ctrl_c() => Err(Failure::Exit(Exit::Interrupted, "\nstopped following".into())),
    }
}

/// Lists a mission's artifacts, or downloads one (`get`) to `to` (`-`: stdout; default: its name, in
/// the current directory).
pub(super) async fn artifacts(
    client: &Client,
    out: &Output,
    mission_id: &str,
    get: Option<String>,
    to: Option<PathBuf>,
) -> Result<(), Failure> {
    let base = format!("/api/v1/missions/{}/artifacts", enc(mission_id));
    let Some(name) = get else {
        let listed = client.get(&base).await?;
        if out.json {
            return out.json(&listed);
        }
        let rows = listed["artifacts"].as_array().into_iter().flatten().map(|a| {
            vec![
                text(a, "name"),
                a["size_bytes"].to_string(),
                text(a, "mime"),
                text(a, "digest"),
                text(a, "created_at"),
            ]
        });
        return out.table(&["NAME", "BYTES", "TYPE", "DIGEST", "CREATED"], rows.collect());
    };
    let bytes = client.get_bytes(&format!("{base}/{}", enc(&name)), "*/*").await?;
    match to.unwrap_or_else(|| PathBuf::from(&name)) {
        path if path.as_os_str() == "-" => out.bytes(&bytes),
        path => {
            std::fs::write(&path, &bytes)
                .map_err(|e| Failure::Exit(Exit::Failed, format!("cannot write {}: {e}", path.display())))?;
            eprintln!("{} bytes written to {}", bytes.len(), path.display());
            Ok(())
        }
    }
}
