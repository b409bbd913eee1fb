//! Draining the shared queue (`services::queue`): each waiting mission that fits an executor now is
//! assigned and handed out, in arrival order, without head-of-line blocking.

use super::{Dispatcher, RoutingRecord, Turn};
use crate::store::Change;
use aiwg_contract::clock;
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
            pass_over(&mut attempts, &mut record, &r.passed_over);
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
        match dispatcher.handout.hand_out(&w.mission_id, &w.session_id, &w.body, attempts, record).await {
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
