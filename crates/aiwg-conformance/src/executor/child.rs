//! The executor under test, when the suite starts it (`--exec CMD`): run with `sh -c` in a process group
//! of its own, told where serve is through the variables executors read (`AIWG_EXECUTOR_SERVE` for ours,
//! `AIWG_SERVE_URL` for upstream's), stopped as an operator stops it (SIGTERM, then SIGKILL) so that the
//! suite can watch a graceful shutdown and a restart.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};

pub(super) struct Launched {
    command: String,
    url: String,
    log: Option<PathBuf>,
    child: Option<Child>,
}

impl Launched {
    pub(super) fn new(command: String, url: String, log: Option<PathBuf>) -> Launched {
        Launched { command, url, log, child: None }
    }

    pub(super) fn start(&mut self) -> Result<(), String> {
        let output = || -> std::io::Result<Stdio> {
            match &self.log {
                Some(path) => Ok(std::fs::OpenOptions::new().create(true).append(true).open(path)?.into()),
                None => Ok(Stdio::null()),
            }
        };
        let (stdout, stderr) = output().and_then(|o| Ok((o, output()?))).map_err(|e| format!("--exec-log: {e}"))?;
        let child = Command::new("sh")
            .arg("-c")
            .arg(&self.command)
            .env("AIWG_EXECUTOR_SERVE", &self.url)
            .env("AIWG_SERVE_URL", &self.url)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start `sh -c {}`: {e}", self.command))?;
        self.child = Some(child);
        Ok(())
    }

    /// SIGTERM to the executor's process group: what an operator's stop sends. The suite then watches
    /// what the executor does about it, and `reap`s it.
    pub(super) fn terminate(&self) {
        if let Some(pid) = self.child.as_ref().and_then(Child::id) {
            signal_group(pid, libc::SIGTERM);
        }
    }

    /// Waits up to `grace` for the executor to exit, then SIGKILLs what is left of its group (what the
    /// shell started may outlive it). Whether it exited on its own.
    pub(super) async fn reap(&mut self, grace: Duration) -> bool {
        let Some(mut child) = self.child.take() else { return true };
        let Some(pid) = child.id() else { return true };
        let exited = tokio::time::timeout(grace, child.wait()).await.is_ok();
        signal_group(pid, libc::SIGKILL);
        let _ = child.wait().await;
        exited
    }
}

impl Drop for Launched {
    fn drop(&mut self) {
        if let Some(pid) = self.child.as_ref().and_then(Child::id) {
            signal_group(pid, libc::SIGKILL);
        }
    }
}

fn signal_group(pid: u32, signal: i32) {
    if let Ok(pid) = i32::try_from(pid) {
        // SAFETY: kill(2) with a negative pid signals the process group the child leads; it has no
        // memory effects, and a group that is already gone is only ESRCH.
        unsafe {
            libc::kill(-pid, signal);
        }
    }
}
