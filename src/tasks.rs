//! Tasks a graceful stop must wait for: the socket tasks, which hyper stops tracking once a connection
//! is upgraded. Without waiting, the store closed under them: frames they had queued committed but were
//! never acknowledged (so executors sent them again, stored twice), sockets got no 1001, and every
//! disconnect logged a failed write.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

#[derive(Default)]
pub struct Tasks {
    running: AtomicUsize,
    idle: Notify,
}

/// Held by a running task; dropping it marks the task done.
pub struct Running(Arc<Tasks>);

impl Tasks {
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
        let tasks = Arc::new(Tasks::default());
        assert_eq!(tasks.idle(Duration::from_millis(1)).await, 0);
        let a = tasks.enter();
        let b = tasks.enter();
        assert_eq!(tasks.idle(Duration::from_millis(10)).await, 2, "bounded wait");
        let waiter = tokio::spawn({
            let tasks = tasks.clone();
            async move { tasks.idle(Duration::from_secs(10)).await }
        });
        drop(a);
        drop(b);
        assert_eq!(waiter.await.unwrap(), 0);
    }
}
