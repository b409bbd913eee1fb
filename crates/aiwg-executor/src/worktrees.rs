//! A git worktree per run when the working directory is a repository, so that concurrent agents never
//! edit one checkout; and removed when the run ends, so that an afternoon of missions leaves nothing in
//! the operator's `git worktree list` nor on disk.
//!
//! The worktrees live under a root private to this user (0700, as everything an agent wrote may hold
//! secrets): `<state-dir>/worktrees` with a state dir, otherwise `$TMPDIR/aiwg-executor-<uid>/<pid>`. A run
//! that did not end `done` keeps its worktree only with `--keep-failed-worktrees HOURS`, marked by a
//! `<name>.kept` file beside it whose age prunes it. What a crashed run left behind goes when the next
//! run starts: with a state dir, every worktree under the root that is not a fresh kept one (no mission of
//! this executor runs yet); without, the same in the roots of processes that no longer exist.
//!
//! A worktree is removed by deleting its directory and then letting git prune its bookkeeping, rather
//! than with `git worktree remove`, which refuses a worktree with changes or untracked files: exactly
//! what an agent leaves behind.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::process::Command;

use super::state::{private_dir, uid};

const KEPT: &str = ".kept";

/// Where this executor's runs get their worktrees.
pub(crate) struct Worktrees {
    root: PathBuf,
    keep_failed: Option<Duration>,
}

/// A run's working directory: its own worktree, or the base directory itself outside a repository.
pub(crate) struct Workdir {
    pub(crate) path: PathBuf,
    worktree: bool,
}

impl Worktrees {
    /// The root (with a state dir, inside it), made private, with what earlier runs left behind removed.
    pub(crate) async fn open(state_dir: Option<&Path>, keep_failed: Option<Duration>) -> std::io::Result<Worktrees> {
        let root = match state_dir {
            Some(dir) => dir.join("worktrees"),
            None => {
                let shared = private_dir(&std::env::temp_dir().join(format!("aiwg-executor-{}", uid())))?;
                sweep_dead_processes(&shared, keep_failed).await;
                shared.join(std::process::id().to_string())
            }
        };
        let worktrees = Worktrees { root: private_dir(&root)?, keep_failed };
        sweep(&worktrees.root, keep_failed, true).await;
        Ok(worktrees)
    }

    /// A detached worktree of `base` named after the run when `base` is in a git repository (replacing a
    /// kept one of the same run); otherwise `base` itself.
    pub(crate) async fn create(&self, base: &Path, run_id: &str) -> Workdir {
        let outside = Workdir { path: base.to_path_buf(), worktree: false };
        if !git(base, &["rev-parse", "--is-inside-work-tree"]).await.is_some_and(|out| out.starts_with("true")) {
            return outside;
        }
        let name: String =
            run_id.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect();
        let target = self.root.join(&name);
        if target.exists() {
            remove(&target).await;
            let _ = std::fs::remove_file(self.root.join(format!("{name}{KEPT}")));
        }
        let added = Command::new("git")
            .args(["worktree", "add", "--detach"])
            .arg(&target)
            .current_dir(base)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .await;
        if !added.is_ok_and(|s| s.success()) {
            tracing::warn!(run_id, dir = %base.display(), "git worktree add failed; running in the directory itself");
            return outside;
        }
        let _ = std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o700));
        Workdir { path: target, worktree: true }
    }

    /// The run has ended: its worktree goes, unless it did not succeed and failed ones are kept (then
    /// kept ones past their age go instead).
    pub(crate) async fn release(&self, dir: Workdir, succeeded: bool) {
        if !dir.worktree {
            return;
        }
        match self.keep_failed {
            Some(_) if !succeeded => {
                if let Some(name) = dir.path.file_name() {
                    let marker = self.root.join(format!("{}{KEPT}", name.to_string_lossy()));
                    if let Err(e) = std::fs::write(&marker, b"") {
                        tracing::warn!(error = %e, "cannot mark a failed run's worktree as kept; removing it");
                        remove(&dir.path).await;
                    }
                }
                sweep(&self.root, self.keep_failed, false).await;
            }
            _ => remove(&dir.path).await,
        }
    }

    /// The executor stops: its root goes when no worktree is left in it (a kept one, or one whose run
    /// has not released it yet, keeps it for the next start to sweep).
    pub(crate) fn close(&self) {
        let _ = std::fs::remove_dir(&self.root);
    }
}

/// Removes the worktrees under `dir` that are neither live nor kept and fresh: `leftovers` says that no
/// run is live (at start), otherwise only expired kept ones go.
async fn sweep(dir: &Path, keep_failed: Option<Duration>, leftovers: bool) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(kept) = name.strip_suffix(KEPT) {
            // A mark whose worktree is gone is dropped.
            if !dir.join(kept).exists() {
                let _ = std::fs::remove_file(entry.path());
            }
            continue;
        }
        let marker = dir.join(format!("{name}{KEPT}"));
        let kept_for = std::fs::metadata(&marker).and_then(|m| m.modified()).ok().and_then(|t| t.elapsed().ok());
        let expired = match (kept_for, keep_failed) {
            (Some(age), Some(keep)) => age > keep,
            // Kept by a run with --keep-failed-worktrees, this one keeps none.
            (Some(_), None) => true,
            (None, _) => leftovers,
        };
        if expired {
            remove(&entry.path()).await;
            let _ = std::fs::remove_file(marker);
        }
    }
}

/// The roots that processes which no longer exist left under `shared`: swept, and dropped once empty.
async fn sweep_dead_processes(shared: &Path, keep_failed: Option<Duration>) {
    let Ok(entries) = std::fs::read_dir(shared) else { return };
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
        if pid as u32 == std::process::id() || alive(pid) {
            continue;
        }
        sweep(&entry.path(), keep_failed, true).await;
        let _ = std::fs::remove_dir(entry.path());
    }
}

/// Deletes a worktree's directory, then the repository's record of it.
async fn remove(path: &Path) {
    let common = git(path, &["rev-parse", "--git-common-dir"]).await.map(|dir| path.join(dir.trim()));
    let doomed = path.to_path_buf();
    let removed = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(doomed)).await;
    if let Ok(Err(e)) = removed {
        tracing::warn!(path = %path.display(), error = %e, "cannot remove a run's worktree");
    }
    if let Some(common) = common {
        let _ = Command::new("git")
            .arg("--git-dir")
            .arg(common)
            .args(["worktree", "prune"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .await;
    }
}

/// `git args...` in `dir`: its stdout when it succeeds.
async fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).current_dir(dir).stderr(Stdio::null()).output().await.ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Whether a process with this pid exists (EPERM: it does, and is someone else's).
fn alive(pid: i32) -> bool {
    // SAFETY: kill with signal 0 sends nothing; it only checks the pid.
    let found = unsafe { libc::kill(pid, 0) } == 0;
    found || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}
