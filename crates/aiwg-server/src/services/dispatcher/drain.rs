//! Draining the shared queue (`services::queue`): each waiting mission that fits an executor now is
//! assigned and handed out, in arrival order, without head-of-line blocking.

use super::{Dispatcher, RoutingRecord, Turn};
use crate::services::queue::{Queue, Retry};
use crate::store::Change;
use aiwg_contract::clock;
use aiwg_domain::fence::Fenced;
use aiwg_domain::{MissionPatch, MissionState, ServeEvent};

/// Tries every waiting mission in order: one that fits an executor now is assigned and handed out
/// (a new attempt once its time has come, passing over the executors that failed it while another
/// fits).
pub(super) async fn drain(dispatcher: &Dispatcher) {
    let queue = &dispatcher.queue;
    let mut index = 0;
    loop {
        let Some(next) = queue.get(index) else { return };
        if next.retry.as_ref().is_some_and(|r| r.not_before > clock::now()) {
            index += 1;
            continue;
        }
        let Ok((mut attempts, mut record)) = dispatcher.candidates(&next.payload, Turn::Take).await else {
            index += 1;
            continue;
        };
        if let Some(r) = &next.retry {
            if !retry_goes(queue, &next.mission_id, &mut attempts, &mut record, r).await {
                index += 1;
                continue;
            }
        }
        let Some(w) = queue.take(&next.mission_id) else { continue };
        let patch = MissionPatch {
            state: Some(MissionState::Assigned),
            executor_id: attempts.first().cloned(),
            updated_at: Some(clock::now()),
            routing: Some(record.kept(&dispatcher.registry)),
            ..MissionPatch::default()
        };
        if let Err(e) =
            dispatcher.store.commit(vec![Change::PatchMission { mission_id: w.mission_id.clone(), patch }]).await
        {
            tracing::error!(error = %e, mission_id = %w.mission_id, "assigning a queued mission failed");
            queue.requeue(w);
            return;
        }
        let waited = w.since.elapsed();
        let attempt = w.retry.as_ref().map_or(1, |r| r.attempt);
        match dispatcher.handout.hand_out(&w.mission_id, &w.session_id, &w.body, attempt, attempts, record).await {
            // Nobody took it, and its policy retries that: it is back in the queue for its next attempt.
            Ok(d) if d.executor_id.is_none() => {
                tracing::info!(mission_id = %w.mission_id, ?waited, "queued mission refused by all; retrying later")
            }
            Ok(d) => {
                tracing::info!(mission_id = %w.mission_id, executor_id = ?d.executor_id, ?waited, "queued mission assigned");
                if let (Some(r), Some(executor_id)) = (&w.retry, &d.executor_id) {
                    let said = ServeEvent::Assigned { attempt: Some(r.attempt) };
                    let row = said.row(executor_id, Some(w.mission_id.as_str()), clock::now());
                    if let Err(e) = dispatcher.store.commit(vec![Change::AppendEvent(row)]).await {
                        tracing::warn!(error = %e, mission_id = %w.mission_id, "recording a new attempt failed");
                    }
                }
            }
            Err(e) => {
                tracing::warn!(mission_id = %w.mission_id, error = %e, "queued mission could not be handed out")
            }
        }
    }
}

/// Orders a new attempt's candidates (see [`fence_out`] and [`pass_over`]); `false`, with the reason
/// recorded on the waiting mission, when every one is fenced from it.
async fn retry_goes(
    queue: &Queue,
    mission_id: &str,
    candidates: &mut Vec<String>,
    record: &mut RoutingRecord,
    retry: &Retry,
) -> bool {
    if let Err(reason) = fence_out(candidates, record, retry) {
        if let Err(e) = queue.waits_because(mission_id, reason).await {
            tracing::warn!(error = %e, mission_id, "recording why a retry waits failed");
        }
        return false;
    }
    pass_over(candidates, record, &retry.passed_over);
    true
}

/// Leaves out of a new attempt's candidates the executors fenced from it (they have not confirmed that
/// an attempt serve abandoned stopped); `Err` with the reason it waits when that leaves none.
fn fence_out(candidates: &mut Vec<String>, record: &mut RoutingRecord, retry: &Retry) -> Result<(), String> {
    let fenced = |e: &String| retry.fenced.iter().find(|f| &f.executor_id == e);
    let others: Vec<String> = candidates.iter().filter(|e| fenced(e).is_none()).cloned().collect();
    if others.is_empty() {
        let why: Vec<String> = candidates.iter().filter_map(fenced).map(Fenced::why).collect();
        return Err(format!("attempt {} waits: {}", retry.attempt, why.join("; ")));
    }
    for (executor_id, f) in candidates.iter().filter_map(|e| fenced(e).map(|f| (e, f))) {
        record.passed_over(executor_id, &f.why(), others.first().map(String::as_str));
    }
    *candidates = others;
    Ok(())
}

/// Leaves out of a new attempt's candidates the executors that failed the earlier ones, unless no
/// other fits.
fn pass_over(candidates: &mut Vec<String>, record: &mut RoutingRecord, failed: &[String]) {
    let others: Vec<String> = candidates.iter().filter(|e| !failed.contains(e)).cloned().collect();
    if others.is_empty() || others.len() == candidates.len() {
        return;
    }
    for executor_id in candidates.iter().filter(|e| failed.contains(e)) {
        record.passed_over(
            executor_id,
            &"failed an earlier attempt of this mission",
            others.first().map(String::as_str),
        );
    }
    *candidates = others;
}
