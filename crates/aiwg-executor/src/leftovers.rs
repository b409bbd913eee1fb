//! The agents' process groups, recorded with `--state-dir` (`agents.json`: run id to process group) for
//! as long as they run. Their guards stop them when the executor dies; what survives even that (a guard
//! killed with its executor, as `kill -9` of a whole process tree does) is killed by the executor's next
//! run before it registers or listens. Only a recorded group whose processes still carry the run's
//! `AIWG_MISSION_ID` is killed: a group id the system has given out again since is never touched.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use super::state::{self, StateDir};

/// The process groups of the agents running now, and where they are recorded.
pub(crate) struct Agents {
    file: Option<PathBuf>,
    groups: Arc<Mutex<BTreeMap<String, u32>>>,
}

impl Agents {
    /// Kills what the previous run recorded and left alive, and starts a new record. Reads /proc and a
    /// file: call it off the async runtime's threads.
    pub(crate) fn open(state: Option<&StateDir>) -> Agents {
        let file = state.map(|s| s.path().join("agents.json"));
        let previous: BTreeMap<String, u32> = file.as_deref().and_then(state::read).unwrap_or_default();
        for (run_id, pgid) in &previous {
            if carries(*pgid, run_id) {
                tracing::warn!(run_id, pgid, "killing what an agent of the previous run left running");
                // SAFETY: killpg only reads its integer arguments.
                unsafe { libc::killpg(*pgid as libc::pid_t, libc::SIGKILL) };
            }
        }
        let agents = Agents { file, groups: Arc::default() };
        if let (Some(file), false) = (&agents.file, previous.is_empty()) {
            if let Err(e) = state::write(file, &BTreeMap::<String, u32>::new()) {
                tracing::error!(error = %e, "cannot reset the record of the agents' process groups");
            }
        }
        agents
    }

    /// The run's agent has started as process group `pgid`.
    pub(crate) async fn started(&self, run_id: &str, pgid: u32) {
        let run_id = run_id.to_owned();
        self.change(move |groups| groups.insert(run_id, pgid).map(|_| ())).await;
    }

    /// The run's agent has ended, its process group with it.
    pub(crate) async fn ended(&self, run_id: &str) {
        let run_id = run_id.to_owned();
        self.change(move |groups| groups.remove(&run_id).map(|_| ())).await;
    }

    /// Applies `change`; with a state dir, writes the record on the blocking pool under the lock, so
    /// that the file always ends as the newest record. A failure is logged: the agent runs on, only a
    /// crash of executor and guard together would leave it behind.
    async fn change(&self, change: impl FnOnce(&mut BTreeMap<String, u32>) -> Option<()> + Send + 'static) {
        let groups = Arc::clone(&self.groups);
        let Some(file) = self.file.clone() else {
            change(&mut groups.lock().expect("agents lock"));
            return;
        };
        let written = tokio::task::spawn_blocking(move || {
            let mut groups = groups.lock().expect("agents lock");
            change(&mut groups);
            state::write(&file, &*groups)
        });
        match written.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::error!(error = %e, "cannot record the agents' process groups"),
            Err(e) => tracing::error!(error = %e, "cannot record the agents' process groups"),
        }
    }
}

/// Whether a process of group `pgid` still carries `AIWG_MISSION_ID=<run_id>` in its environment.
fn carries(pgid: u32, run_id: &str) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else { return false };
    let mark = format!("AIWG_MISSION_ID={run_id}");
    entries.flatten().filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok()).any(|pid| {
        group_of(pid) == Some(pgid)
            && std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|&b| b == 0).any(|var| var == mark.as_bytes()))
    })
}

/// The process group of `pid`, from /proc (`pid (comm) state ppid pgrp ...`; comm may hold spaces).
fn group_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.split_whitespace().nth(2)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_is_ours_only_while_a_process_in_it_carries_the_runs_id() {
        use std::os::unix::process::CommandExt;
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .env("AIWG_MISSION_ID", "run-under-test")
            .process_group(0)
            .spawn()
            .unwrap();
        // `spawn` returns after the fork; until the exec is done, /proc/PID/environ is the parent's copy
        // (or, mid-exec, unreadable). Its command line is `sleep`'s once its own memory is in place.
        let exec_done = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while std::fs::read(format!("/proc/{}/cmdline", child.id())).unwrap_or_default() != b"sleep\x0030\x00" {
            assert!(std::time::Instant::now() < exec_done, "sleep never exec'd");
            std::thread::yield_now();
        }
        let pgid = child.id();
        assert_eq!(group_of(pgid), Some(pgid));
        assert!(carries(pgid, "run-under-test"));
        assert!(!carries(pgid, "another-run"), "another run's id");
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!carries(pgid, "run-under-test"), "an empty group carries nothing");
    }
}
