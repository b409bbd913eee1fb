//! What a batch's units leave for the end of its transaction, gathered unit by unit: the writer's
//! reading of a batch, apart from its queue and its thread.

use std::collections::HashMap;
use std::future::Future;

use super::{Committed, Unit};
use crate::store::script::{Builder, Encoded, Scripts};
use crate::store::{Change, Mission, MissionPatch, NewEvent, Result, StoreError};
use aiwg_domain::usage::Record;

/// How an adapter runs the statements [`Gathered::unit`] meets while reading a unit.
pub(in crate::store) trait Statements<'a> {
    /// The adapter's own error (its committer reads it before it becomes a [`StoreError`]).
    type Error;

    /// Inserts a mission unless its id exists; says whether it did. Its outcome decides the unit's, so
    /// it runs at once.
    fn insert_mission(&mut self, m: &'a Mission) -> impl Future<Output = std::result::Result<bool, Self::Error>>;

    /// Upserts an executor, a sandbox or a HITL request, now or with the rest of the batch.
    fn upsert(&mut self, change: &'a Change) -> impl Future<Output = std::result::Result<(), Self::Error>>;
}

/// What the batch's units leave for the end of the transaction, gathered unit by unit: the upserts run
/// as they come, these are written together after them.
#[derive(Default)]
pub(in crate::store) struct Gathered<'a> {
    /// Each appended event with its sequence number and encoded JSON, in order.
    events: Vec<(i64, &'a NewEvent, &'a Encoded)>,
    /// Where each event is among the units, for the feed (see [`Committed`]).
    positions: Vec<(i64, usize, usize, usize)>,
    /// The patched missions in the order of their first patch, and each one's patches merged.
    patch_order: Vec<&'a str>,
    patches: HashMap<&'a str, MissionPatch>,
    /// Each executor's latest event timestamp.
    seen: HashMap<&'a str, &'a str>,
    /// Compactions: the mission, the events it loses, and whether that ends its compaction.
    compactions: Vec<(Option<&'a str>, &'a [i64], bool)>,
    /// Each log's latest state in the batch (every chunk's unit carries its log's whole state: a log
    /// streaming fast has many in one batch, and only its last is written).
    log_states: HashMap<&'a str, &'a Change>,
    /// Each attempt's usage of a model as the batch leaves it, in the order first met: a report is
    /// cumulative, so of a run of reports on one day (and executor) only the last is written, and the
    /// sums get what the run added in one statement. (Under a flood of reports each batch holds dozens
    /// of each mission's: written one by one they doubled serve's CPU per event.)
    usage: Vec<&'a Record>,
    /// Where each attempt's latest entry of a model is in `usage`.
    usage_at: HashMap<(&'a str, u32, &'a str), usize>,
}

impl<'a> Gathered<'a> {
    /// Reads the units in order, numbering their events from `next_seq` (left at the next free number):
    /// each unit's result, the outer error being a database failure.
    pub(in crate::store) async fn units<S: Statements<'a>>(
        &mut self,
        statements: &mut S,
        units: &[&'a Unit],
        next_seq: &mut i64,
    ) -> std::result::Result<Vec<Result<Vec<i64>>>, S::Error> {
        let mut results = Vec::with_capacity(units.len());
        for (unit_index, unit) in units.iter().enumerate() {
            results.push(self.unit(statements, unit_index, unit, next_seq).await?);
        }
        Ok(results)
    }

    /// Reads one unit's changes in order: an insert or upsert runs (or joins the script), the rest is
    /// gathered. A duplicate mission refuses the unit and ends its reading (the insert comes first in
    /// its unit, so nothing else of it is written).
    async fn unit<S: Statements<'a>>(
        &mut self,
        statements: &mut S,
        unit_index: usize,
        unit: &'a Unit,
        next_seq: &mut i64,
    ) -> std::result::Result<Result<Vec<i64>>, S::Error> {
        let mut seqs = Vec::new();
        let mut encoded = unit.encoded.iter().enumerate();
        for (change_index, change) in unit.changes.iter().enumerate() {
            match change {
                Change::InsertMission(m) => {
                    if !statements.insert_mission(m).await? {
                        return Ok(Err(StoreError::DuplicateMission(m.mission_id.clone())));
                    }
                }
                Change::PutExecutor(_)
                | Change::PutHitl(_)
                | Change::PutSandbox(_)
                | Change::ForgetSandbox(_)
                | Change::PutOperator(_)
                | Change::AppendAudit(_)
                | Change::CountRefusals(_)
                | Change::ForgetAudit { .. }
                | Change::TrimAudit { .. }
                | Change::PutWebhook(_)
                | Change::QueueDelivery(_)
                | Change::NotifiedUpTo(_)
                | Change::PutDelivery(_)
                | Change::ForgetDeliveries { .. }
                | Change::PutIdempotent(_)
                | Change::ForgetIdempotent { .. }
                | Change::Output(_)
                | Change::PutBudget(_)
                | Change::PutStanding(_) => statements.upsert(change).await?,
                Change::Usage(record) => self.spent(record),
                Change::PutLogState(state) => {
                    self.log_states.insert(&state.mission_id, change);
                }
                Change::ExecutorSeen { executor_id, ts } => self.saw(executor_id, ts),
                Change::PatchMission { mission_id, patch } => self.patch(mission_id, patch),
                Change::CompactEvents { mission_id, seqs, done } => {
                    self.compactions.push((mission_id.as_deref(), seqs.as_slice(), *done))
                }
                Change::AppendEvent(ev) => {
                    let (encoding, text) = encoded.next().expect("one encoding per appended event");
                    self.positions.push((*next_seq, unit_index, change_index, encoding));
                    self.events.push((*next_seq, ev, text));
                    seqs.push(*next_seq);
                    *next_seq += 1;
                }
            }
        }
        Ok(Ok(seqs))
    }

    /// An attempt's usage of a model as it now stands: it replaces the batch's entry of the same day and
    /// executor, or follows it.
    fn spent(&mut self, r: &'a Record) {
        let key = (r.mission_id.as_str(), r.attempt, r.kept.model.as_str());
        match self.usage_at.get(&key).map(|i| (*i, self.usage[*i])) {
            Some((i, last)) if last.day == r.day && last.executor_id == r.executor_id => self.usage[i] = r,
            _ => {
                self.usage_at.insert(key, self.usage.len());
                self.usage.push(r);
            }
        }
    }

    /// The latest event time of an executor in the batch: the last one gathered.
    fn saw(&mut self, executor_id: &'a str, ts: &'a str) {
        self.seen.insert(executor_id, ts);
    }

    /// Later patches of a mission in the batch override earlier ones field by field.
    fn patch(&mut self, mission_id: &'a str, patch: &MissionPatch) {
        match self.patches.get_mut(mission_id) {
            Some(p) => p.merge(patch.clone()),
            None => {
                self.patch_order.push(mission_id);
                self.patches.insert(mission_id, patch.clone());
            }
        }
    }

    /// The statements of what was gathered, after the upserts: the event rows, then the coalesced
    /// mission and executor updates, each pushed onto the script `scripts` gives next.
    pub(in crate::store) fn push_rows<'s, S: Scripts<'s>>(&'s self, now: &'s str, scripts: &mut S)
    where
        'a: 's,
    {
        let rows = <S::Builder as Builder>::ROWS;
        // Statements of at most the builder's rows each (PostgreSQL bounds the parameters of one).
        for chunk in self.events.chunks(rows) {
            scripts.next().events(chunk, now);
        }
        // Most patches only say "this mission changed" (progress): one statement for all of them.
        let (touched, patched): (Vec<&str>, Vec<&str>) =
            self.patch_order.iter().copied().partition(|id| self.patches[id].is_touch());
        for ids in touched.chunks(rows) {
            scripts.next().touches(ids, now);
        }
        for id in patched {
            scripts.next().patch(id, &self.patches[id]);
        }
        for state in self.log_states.values() {
            scripts.next().push_upsert(state);
        }
        for r in &self.usage {
            scripts.next().usage_sums(r);
            scripts.next().usage_row(r);
        }
        let seen: Vec<(&str, &str)> = self.seen.iter().map(|(id, ts)| (*id, *ts)).collect();
        for chunk in seen.chunks(rows) {
            scripts.next().seen(chunk);
        }
        for (mission_id, seqs, done) in &self.compactions {
            for chunk in seqs.chunks(rows) {
                scripts.next().delete_events(*mission_id, chunk);
            }
            if let (Some(mission_id), true) = (mission_id, done) {
                scripts.next().compacted(mission_id, now);
            }
        }
        let compacted = self.compactions.iter().flat_map(|(_, seqs, _)| seqs.iter());
        if let Some(horizon) = compacted.clone().max() {
            scripts.next().compaction(*horizon, compacted.count() as i64);
        }
    }

    /// Where the gathered events are among the units, committed at `received_at`.
    pub(in crate::store) fn committed(self, received_at: chrono::DateTime<chrono::Utc>) -> Committed {
        Committed { events: self.positions, received_at }
    }
}
