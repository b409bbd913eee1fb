//! Missions' logs (`aiwg_domain::log`): the chunks executors send (`x-log`, binary frames on their
//! socket), the output serve writes itself for the executors it drives or watches, and reading them
//! back (`read`).
//!
//! A chunk is judged as an event is: whose mission it is, under a lock, and its rows queued to the
//! store in the same critical section, so that two chunks racing on two sockets of one executor are
//! numbered in the order they were queued. The projection of each log being written (a
//! [`LogCursor`]) is kept in memory and loaded from the store on first use; a failed commit drops it,
//! so that the next chunk reloads what the store holds. An executor's chunks reach serve in the order
//! it sent them on one socket, and the writer commits units in the order they were queued: a chunk
//! sent before a mission's end event is committed before it, so a mission's log is complete once its
//! end is stored.

mod read;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::broadcast;

pub(crate) use read::{LogRead, Start};

use super::ledger::{Decided, Ledger};
use super::links::FrameRef;
use super::registry::Registry;
use super::Core;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::store::{Change, Output, Pending, Store};
use aiwg_contract::log::{self as wire, Stream};
use aiwg_domain::log::{LogCursor, LogRow, LogState, Segment, Verdict, MAX_ROW_BYTES};

/// Cursors of logs not written to for this long, whose mission is not live, are let go.
const IDLE: Duration = Duration::from_secs(60);
/// Rows of a log's tail read at once to load its cursor: a tail is at most its cap, in rows of at least
/// a byte, but in practice a few hundred.
const TAIL_ROWS: u32 = 1_000_000;

/// What serve answers to a chunk.
#[derive(Debug)]
pub(crate) enum ChunkAnswer {
    /// Stored (or held already: `duplicate`); the attempt's bytes serve holds.
    Ack { reference: FrameRef, log_offset: u64, duplicate: bool },
    /// Refused; with the attempt's bytes serve holds when that is what the executor needs to know.
    Refused { reference: FrameRef, error: Error, log_offset: Option<u64> },
}

/// An accepted chunk whose rows are being committed.
pub(crate) struct PendingChunk {
    commit: Pending,
    reference: FrameRef,
    log_offset: u64,
}

/// The logs being written, their cursors, and the bell readers following them wait on.
pub(crate) struct Logs {
    store: Store,
    ledger: Arc<Ledger>,
    registry: Arc<Registry>,
    cap: u64,
    /// How long after its end a mission still takes its executor's chunks.
    grace: chrono::Duration,
    cursors: Mutex<Cursors>,
    /// Rung with a mission's id each time rows of its log commit.
    grew: broadcast::Sender<Arc<str>>,
}

#[derive(Default)]
struct Cursors {
    by_mission: HashMap<String, Cached>,
    swept: Option<Instant>,
}

struct Cached {
    cursor: LogCursor,
    /// The ledger's entry of the mission when it was loaded (`None`: it had ended): a mission handed out
    /// again for a new attempt is a new entry, whose attempt the store tells.
    generation: Option<u64>,
    /// The mission's current attempt when loaded.
    attempt: u32,
    used: Instant,
}

/// Whether a mission takes an executor's chunks: live (its entry in the ledger), or ended within the
/// grace.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Standing {
    generation: Option<u64>,
}

impl Logs {
    pub(crate) fn new(core: &Core, config: &Config) -> Logs {
        let (grew, _) = broadcast::channel(1024);
        let grace = Duration::from_secs(config.artifacts.upload_grace_s);
        Logs {
            store: core.store.clone(),
            ledger: core.ledger.clone(),
            registry: core.registry.clone(),
            cap: config.logs.max_bytes_per_mission,
            grace: chrono::Duration::from_std(grace).unwrap_or(chrono::Duration::MAX),
            cursors: Mutex::new(Cursors::default()),
            grew,
        }
    }

    /// Judges an executor's chunk frame and queues what it stores: `Err` is the answer at once (a
    /// refusal, or a duplicate's ack), `Ok` the commit to await with [`Logs::finish`].
    pub(crate) async fn chunk(
        &self,
        executor_id: &str,
        frame: &[u8],
    ) -> std::result::Result<PendingChunk, ChunkAnswer> {
        let (header, bytes) = match wire::decode(frame) {
            Ok(chunk) => chunk,
            Err(e) => {
                tracing::debug!(executor_id, error = %e, "a binary frame that is not a log chunk");
                let error = Error::InvalidFrame(NOT_A_CHUNK);
                return Err(ChunkAnswer::Refused { reference: FrameRef::default(), error, log_offset: None });
            }
        };
        let reference = FrameRef { event: Some(wire::REF_EVENT.into()), mission_id: Some(header.mission_id.clone()) };
        let refused = |error: Error, log_offset: Option<u64>| ChunkAnswer::Refused {
            reference: reference.clone(),
            error,
            log_offset,
        };
        if !self.registry.has_capability(executor_id, wire::CAPABILITY) {
            return Err(refused(Error::InvalidFrame(NOT_DECLARED), None));
        }
        let mission_id = header.mission_id.as_str();
        let standing = self.standing(executor_id, mission_id).await.map_err(|e| refused(e, None))?;
        self.load(mission_id, standing).await.map_err(|e| refused(e, None))?;
        let slot = self.store.reserve().await.map_err(|e| refused(e.into(), None))?;
        let mut cursors = self.cursors.lock().expect("log cursors");
        let Some(cached) = cursors.by_mission.get_mut(mission_id) else {
            // Dropped by a failed commit since it was loaded: the executor sends it again.
            return Err(refused(Error::StorageUnavailable(RELOADING.into()), None));
        };
        cached.used = Instant::now();
        let attempt = header.attempt.unwrap_or(cached.attempt);
        match cached.cursor.accept(attempt, cached.attempt, header.stream, header.offset, bytes, self.cap) {
            Verdict::Duplicate { log_offset } => Err(ChunkAnswer::Ack { reference, log_offset, duplicate: true }),
            Verdict::OutOfOrder { log_offset } => {
                let why = format!("the chunk starts at offset {}, past the {log_offset} bytes serve holds of this attempt: send again from {log_offset}", header.offset);
                Err(refused(Error::LogOutOfOrder(why), Some(log_offset)))
            }
            Verdict::OtherAttempt { current } => {
                let why = format!("the chunk is of attempt {attempt}; the mission is on attempt {current}");
                Err(refused(Error::Conflict(why), None))
            }
            Verdict::Append { row, drops, log_offset } => {
                let changes = changes(row, drops, &cached.cursor.state);
                Ok(PendingChunk { commit: slot.submit(changes), reference, log_offset })
            }
        }
    }

    /// A queued chunk's answer once its commit is known.
    pub(crate) async fn finish(&self, p: PendingChunk) -> ChunkAnswer {
        let mission_id = p.reference.mission_id.clone().unwrap_or_default();
        match self.settle(&mission_id, p.commit).await {
            Ok(()) => ChunkAnswer::Ack { reference: p.reference, log_offset: p.log_offset, duplicate: false },
            Err(error) => ChunkAnswer::Refused { reference: p.reference, error, log_offset: None },
        }
    }

    /// Waits for a log's rows to commit: readers following it are rung, or, when the commit failed, its
    /// cursor goes (the store is what the next write is judged against).
    async fn settle(&self, mission_id: &str, commit: Pending) -> Result<()> {
        match commit.await {
            Ok(Ok(_)) => {
                let _ = self.grew.send(Arc::from(mission_id));
                Ok(())
            }
            failed => {
                self.forget(mission_id);
                Err(match failed {
                    Ok(Err(e)) => e.into(),
                    _ => Error::StorageUnavailable("the store is shutting down".into()),
                })
            }
        }
    }

    /// Appends output serve received for a mission itself (a sandbox's, a runtime's), in rows of at
    /// most [`MAX_ROW_BYTES`], and waits for its commit.
    pub(crate) async fn append(&self, mission_id: &str, stream: Stream, bytes: &[u8]) -> Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        self.load(mission_id, Standing { generation: None }).await?;
        let slot = self.store.reserve().await?;
        let pending = {
            let mut cursors = self.cursors.lock().expect("log cursors");
            let Some(cached) = cursors.by_mission.get_mut(mission_id) else {
                return Err(Error::StorageUnavailable(RELOADING.into()));
            };
            cached.used = Instant::now();
            let mut changes = Vec::new();
            for part in bytes.chunks(MAX_ROW_BYTES as usize) {
                let (row, drops) = cached.cursor.append(stream, part, self.cap);
                changes.extend(self::changes(row, drops, &cached.cursor.state));
            }
            slot.submit(changes)
        };
        self.settle(mission_id, pending).await
    }

    /// Whether `executor_id` may still write what the mission produced (its log, its artifacts): its own
    /// mission, live or ended within the upload grace.
    pub(crate) async fn may_write(&self, executor_id: &str, mission_id: &str) -> Result<()> {
        self.standing(executor_id, mission_id).await.map(|_| ())
    }

    /// Whether `executor_id` may write to the mission's log now.
    async fn standing(&self, executor_id: &str, mission_id: &str) -> Result<Standing> {
        let owner = self.ledger.decide(mission_id, |live| ((live.executor_id() == executor_id, live.admitted()), None));
        match owner {
            Decided::Done(((true, generation), _)) => return Ok(Standing { generation: Some(generation) }),
            Decided::Done(((false, _), _)) => return Err(Error::Forbidden(not_yours(mission_id))),
            Decided::Rebuilding => return Err(Error::StorageUnavailable(RELOADING.into())),
            Decided::NotLive => {}
        }
        let Some(mission) = self.store.mission(mission_id).await? else {
            return Err(Error::NotFound(format!("no mission {mission_id}")));
        };
        if mission.executor_id.as_deref() != Some(executor_id) {
            return Err(Error::Forbidden(not_yours(mission_id)));
        }
        let ended = mission.completed_at.filter(|_| mission.state.is_terminal());
        match ended {
            Some(at) if chrono::Utc::now() - at <= self.grace => Ok(Standing { generation: None }),
            Some(at) => Err(Error::MissionEnded(format!(
                "mission {mission_id} ended at {} and its upload grace (artifacts.upload_grace_s) has passed",
                aiwg_contract::clock::format(at)
            ))),
            None => Err(Error::Forbidden(not_yours(mission_id))),
        }
    }

    /// Makes sure the mission's cursor is cached and of its current entry in the ledger.
    async fn load(&self, mission_id: &str, standing: Standing) -> Result<()> {
        {
            let mut cursors = self.cursors.lock().expect("log cursors");
            cursors.sweep(&self.ledger);
            let fresh = cursors
                .by_mission
                .get(mission_id)
                .is_some_and(|c| standing.generation.is_none() || c.generation == standing.generation);
            if fresh {
                return Ok(());
            }
        }
        let attempt = self.store.mission(mission_id).await?.map_or(1, |m| m.attempt);
        let state = self.store.log_state(mission_id).await?.unwrap_or_else(|| LogState::new(mission_id));
        let tail = match LogCursor::tail_rows_from(&state) {
            Some(from) => self.store.log_meta(mission_id, None, from, false, TAIL_ROWS).await?,
            None => Vec::new(),
        };
        let cursor = LogCursor::loaded(state, tail.iter().map(|m| (m.pos, m.len, m.lines)), self.cap);
        let cached = Cached { cursor, generation: standing.generation, attempt, used: Instant::now() };
        self.cursors.lock().expect("log cursors").by_mission.insert(mission_id.to_owned(), cached);
        Ok(())
    }

    /// Lets a cursor go after a failed commit: the store is what the next chunk is judged against.
    fn forget(&self, mission_id: &str) {
        self.cursors.lock().expect("log cursors").by_mission.remove(mission_id);
    }

    /// A bell rung with a mission's id whenever its log grows (readers that follow it).
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<Arc<str>> {
        self.grew.subscribe()
    }

    pub(crate) fn store(&self) -> &Store {
        &self.store
    }
}

impl Cursors {
    /// Every `IDLE`, the cursors of missions no longer live and not written to meanwhile go: an ended
    /// mission's cursor is reloaded if its executor still sends within the grace.
    fn sweep(&mut self, ledger: &Ledger) {
        if self.swept.is_some_and(|t| t.elapsed() < IDLE) {
            return;
        }
        self.swept = Some(Instant::now());
        self.by_mission.retain(|id, c| c.used.elapsed() < IDLE || ledger.contains(id));
    }
}

/// The unit a stored chunk commits: its row, the segments the cap drops, the log's state.
fn changes(row: LogRow, drops: Vec<Segment>, state: &LogState) -> Vec<Change> {
    let mission_id = row.mission_id.clone();
    let mut changes = vec![Output::AppendLog(Box::new(row)).into()];
    let dropped =
        drops.into_iter().map(|d| Output::DropLog { mission_id: mission_id.clone(), from: d.start, to: d.end });
    changes.extend(dropped.map(Change::from));
    changes.push(Change::PutLogState(Box::new(state.clone())));
    changes
}

fn not_yours(mission_id: &str) -> String {
    format!("mission {mission_id} is not this executor's (or no longer: a retry gave it to another)")
}

const NOT_A_CHUNK: &str = "a binary frame is a log chunk (x-log): a JSON header line {\"mission_id\", \"stream\", \
                           \"offset\"}, a newline, then the bytes";
const NOT_DECLARED: &str = "log chunks are taken from executors that declare the capability x-log";
const RELOADING: &str = "the mission's log is being re-read from the store after a storage failure; send the chunk \
                         again from the last offset acknowledged";
