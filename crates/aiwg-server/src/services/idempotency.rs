//! Idempotent creation (issue 38): requests sent with an `Idempotency-Key` are carried out once per
//! operator (its id) and key (`aiwg_domain::idempotency` judges; the store keeps the answers 24 hours, across
//! restarts).
//!
//! Requests with one key run one at a time: a second one sent while the first runs waits for its
//! answer rather than carrying the request out beside it, so that ten sent at once make one mission
//! and get one answer ten times. Only the leading serve answers requests (followers relay them), so a
//! lock in its memory is the whole of it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::OwnedMutexGuard;

use crate::error::Result;
use crate::store::{Change, Store};
use aiwg_contract::clock;
use aiwg_domain::idempotency::{judge, worth_keeping, Answered, Judged};

type Key = (String, String);

pub struct Idempotency {
    store: Store,
    /// One lock per key while a request with it runs or waits.
    running: Mutex<HashMap<Key, Arc<tokio::sync::Mutex<()>>>>,
}

/// A keyed request under way: its answer is kept by [`Idempotency::finish`].
pub struct Running {
    key: Key,
    fingerprint: [u8; 32],
    lock: Arc<tokio::sync::Mutex<()>>,
    _turn: OwnedMutexGuard<()>,
}

/// What a keyed request gets.
pub enum Begun {
    Replay(Answered),
    Conflict,
    Go(Running),
}

impl Idempotency {
    pub(crate) fn new(store: Store) -> Idempotency {
        Idempotency { store, running: Mutex::default() }
    }

    /// Waits for the key's turn, then judges the request by what the key holds (`operator`: the
    /// caller's id).
    pub async fn begin(&self, operator: &str, key: &str, fingerprint: [u8; 32]) -> Result<Begun> {
        let key = (operator.to_owned(), key.to_owned());
        let lock = self.running.lock().expect("idempotency lock").entry(key.clone()).or_default().clone();
        let turn = lock.clone().lock_owned().await;
        let kept = match self.store.idempotent(&key.0, &key.1).await {
            Ok(kept) => kept,
            Err(e) => {
                drop(turn);
                self.release(&key, lock);
                return Err(e.into());
            }
        };
        let begun = match judge(kept, &fingerprint, clock::now()) {
            Judged::Fresh => return Ok(Begun::Go(Running { key, fingerprint, lock, _turn: turn })),
            Judged::Replay(answered) => Begun::Replay(answered),
            Judged::Conflict => Begun::Conflict,
        };
        drop(turn);
        self.release(&key, lock);
        Ok(begun)
    }

    /// Keeps the answer when it is a success (a refused request created nothing, and its correction
    /// comes with the same key), then lets the next request with the key go.
    pub async fn finish(&self, running: Running, status: u16, body: &[u8]) {
        if worth_keeping(status) {
            let answered = Answered {
                operator: running.key.0.clone(),
                key: running.key.1.clone(),
                fingerprint: running.fingerprint,
                status,
                body: String::from_utf8_lossy(body).into_owned(),
                created_at: clock::now(),
            };
            if let Err(e) = self.store.commit(vec![Change::PutIdempotent(Box::new(answered))]).await {
                // The request was carried out; its key will not answer it again.
                tracing::error!(error = %e, key = %running.key.1, "the answer to a keyed request could not be kept");
            }
        }
        let Running { key, lock, _turn: turn, .. } = running;
        drop(turn);
        self.release(&key, lock);
    }

    /// Forgets the key's lock once nobody holds or waits for it.
    fn release(&self, key: &Key, lock: Arc<tokio::sync::Mutex<()>>) {
        let mut running = self.running.lock().expect("idempotency lock");
        drop(lock);
        if running.get(key).is_some_and(|l| Arc::strong_count(l) == 1) {
            running.remove(key);
        }
    }
}
