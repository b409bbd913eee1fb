//! How a follower (of the event stream, of a mission's log) waits out a dropped connection: a restart
//! of serve, a deploy, a proxy's idle timeout.

use std::time::{Duration, Instant};

use super::CallError;

/// Delays before reconnecting a dropped stream, the last repeated. A stream that never opened gives up
/// when every one has been spent (serve is not there: say so at once); one that was open keeps trying
/// for [`RECONNECT_PATIENCE`] without anything coming through.
const RECONNECT_DELAYS_MS: [u64; 6] = [0, 250, 500, 1000, 2000, 5000];
/// Longer than a deploy takes: serve drains for up to `server.drain_timeout_s` (20 s), then the new one
/// starts. An operator's `watch` used to die at every deploy.
const RECONNECT_PATIENCE: Duration = Duration::from_secs(120);

/// A follower's reconnects.
#[derive(Default)]
pub(crate) struct Patience {
    /// Reconnects since the last time something came through.
    failures: usize,
    /// Whether a stream was ever open: then serve exists, and an outage is waited out.
    opened: bool,
    /// When the stream was lost, while it is.
    lost_at: Option<Instant>,
}

impl Patience {
    /// A stream opened; true when it had been lost (the follower may say it is back).
    pub(crate) fn opened(&mut self) -> bool {
        self.opened = true;
        self.lost_at.take().is_some()
    }

    /// Something came through: the next loss starts counting anew.
    pub(crate) fn heard(&mut self) {
        self.failures = 0;
    }

    /// Waits before the next reconnect, or gives up with `error`: when the delays are spent if no stream
    /// ever opened, after [`RECONNECT_PATIENCE`] without anything coming through if one did.
    pub(crate) async fn back_off(&mut self, error: CallError) -> Result<(), CallError> {
        let lost_at = *self.lost_at.get_or_insert_with(Instant::now);
        let spent = self.failures >= RECONNECT_DELAYS_MS.len();
        if (spent && !self.opened) || lost_at.elapsed() > RECONNECT_PATIENCE {
            return Err(error);
        }
        let delay = RECONNECT_DELAYS_MS[self.failures.min(RECONNECT_DELAYS_MS.len() - 1)];
        self.failures += 1;
        tokio::time::sleep(Duration::from_millis(delay)).await;
        Ok(())
    }
}
