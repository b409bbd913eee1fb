//! The socket tasks: they run on a runtime of their own, and a graceful stop waits for them.
//!
//! A runtime of their own: under an ingestion flood every worker of a shared runtime judged frames, a
//! socket a whole read buffer per turn, and a woken HTTP request (a `/healthz` probe, a dashboard's
//! poll, an operator's HITL answer) waited in tokio's run queue behind every busy socket's turn:
//! `/healthz` answered in a tenth of a second at p99 while its handler takes microseconds. With the sockets on threads
//! of their own, the operating system's scheduler, which preempts, shares the cores between them and the
//! HTTP side, whose threads are idle most of the time and so run as soon as they wake. (Yielding every
//! few frames instead cut the tail by half but cost a sixth of the ingestion throughput.) The sockets'
//! connections stay registered with the main runtime's I/O driver, which the HTTP side leaves free to
//! poll.
//!
//! Waiting: hyper stops tracking a connection once it is upgraded. Without waiting, the store closed
//! under the sockets: frames they had queued committed but were never acknowledged (so executors sent
//! them again, stored twice), sockets got no 1001, and every disconnect logged a failed write.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::runtime::{Handle, Runtime};
use tokio::sync::Notify;

pub struct Sockets {
    running: AtomicUsize,
    idle: Notify,
    /// Taken by [`Sockets::stop`]; a runtime cannot be dropped where blocking is not allowed, so it is
    /// shut down in the background.
    runtime: Mutex<Option<Runtime>>,
    handle: Handle,
}

/// Held by a running task; dropping it marks the task done.
pub struct Running(Arc<Sockets>);

impl Sockets {
    /// Starts the sockets' runtime: as many workers as cores, like the main one.
    pub fn start() -> std::io::Result<Sockets> {
        let runtime = tokio::runtime::Builder::new_multi_thread().thread_name("aiwg-sockets").enable_all().build()?;
        Ok(Sockets {
            running: AtomicUsize::new(0),
            idle: Notify::new(),
            handle: runtime.handle().clone(),
            runtime: Mutex::new(Some(runtime)),
        })
    }

    /// Runs `f` with the sockets' runtime as the current one: what it spawns runs there. The socket
    /// routes call axum's `on_upgrade` in it, whose task, the socket's, is then spawned there from the
    /// start (one task per socket, as before; a task that handed the socket to a second one cost 4 KiB
    /// more per idle socket, measured).
    pub fn within<R>(&self, f: impl FnOnce() -> R) -> R {
        let _runtime = self.handle.enter();
        f()
    }

    /// Held by a socket's task while it runs.
    pub fn enter(self: &Arc<Self>) -> Running {
        self.running.fetch_add(1, Ordering::SeqCst);
        Running(Arc::clone(self))
    }

    /// Waits until no task runs, at most `limit`; returns how many still run.
    pub async fn idle(&self, limit: Duration) -> usize {
        let wait = async {
            loop {
                let notified = self.idle.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if self.running.load(Ordering::SeqCst) == 0 {
                    return;
                }
                notified.await;
            }
        };
        let _ = tokio::time::timeout(limit, wait).await;
        self.running.load(Ordering::SeqCst)
    }

    /// Stops the runtime: what still runs on it (a socket past [`Sockets::idle`]'s limit, a timer a
    /// socket started) is dropped.
    pub fn stop(&self) {
        let runtime = self.runtime.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(runtime) = runtime {
            runtime.shutdown_background();
        }
    }
}

impl Drop for Sockets {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if self.0.running.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn idle_once_every_task_is_done() {
        let sockets = Arc::new(Sockets::start().unwrap());
        assert_eq!(sockets.idle(Duration::from_millis(1)).await, 0);
        let a = sockets.enter();
        let b = sockets.enter();
        assert_eq!(sockets.idle(Duration::from_millis(10)).await, 2, "bounded wait");
        let waiter = tokio::spawn({
            let sockets = sockets.clone();
            async move { sockets.idle(Duration::from_secs(10)).await }
        });
        drop(a);
        drop(b);
        assert_eq!(waiter.await.unwrap(), 0);
    }

    #[tokio::test]
    async fn what_is_spawned_within_runs_on_threads_of_their_own() {
        let sockets = Sockets::start().unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel();
        sockets.within(|| {
            tokio::spawn(async move {
                let _ = tx.send(std::thread::current().name().map(str::to_owned));
            })
        });
        assert_eq!(rx.await.unwrap().as_deref(), Some("aiwg-sockets"));
        sockets.stop();
    }
}
