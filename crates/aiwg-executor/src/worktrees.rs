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
//!
//! A mission's worktree is on a branch of its own (`aiwg/<mission-id>` by default), started where the
//! repository's HEAD was: what the agent commits is on that branch from the first commit, so even an
//! executor that dies keeps it on a branch, never a dangling commit. When the agent is done, what it
//! left uncommitted is committed there too (`keep_work`), and the branch outlives the worktree. A branch
//! that stayed where it started (no work) goes with the worktree.

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
    /// The branch its worktree is on, when it has one.
    branch: Option<Branch>,
}

struct Branch {
    name: String,
    /// The commit the run started from.
    base: String,
    /// It holds work: it stays when the worktree goes.
    kept: bool,
}

/// Where a run's work was kept: its branch, the branch's head, and the commit the run started from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Work {
    pub(crate) branch: String,
    pub(crate) commit: String,
    pub(crate) base: String,
}

/// Who commits what an agent left, when the repository names nobody (`git var` finds no identity).
const IDENTITY: [&str; 4] = ["-c", "user.name=aiwg-executor", "-c", "user.email=aiwg-executor@localhost"];

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

    /// A worktree of `base` named after the run when `base` is in a git repository (replacing a kept one
    /// of the same run): on `branch` (created, or moved, at `base`'s HEAD) when one is asked for and git
    /// takes its name, else detached; outside a repository, `base` itself.
    pub(crate) async fn create(&self, base: &Path, run_id: &str, branch: Option<String>) -> Workdir {
        let outside = Workdir { path: base.to_path_buf(), worktree: false, branch: None };
        if !git(base, &["rev-parse", "--is-inside-work-tree"]).await.is_some_and(|out| out.starts_with("true")) {
            return outside;
        }
        let name: String =
            run_id.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect();
        let target = self.root.join(&name);
        if target.exists() {
            remove(&target, None).await;
            let _ = std::fs::remove_file(self.root.join(format!("{name}{KEPT}")));
        }
        let head = git(base, &["rev-parse", "--verify", "HEAD"]).await.map(|h| h.trim().to_owned());
        let mut branch = branch.zip(head).map(|(name, base)| Branch { name, base, kept: false });
        if let Some(b) = &branch {
            if !add(base, &target, &["-B", &b.name], &b.base).await {
                tracing::warn!(run_id, branch = b.name, "cannot start the run's branch; its worktree is detached");
                branch = None;
            }
        }
        if branch.is_none() && !add(base, &target, &["--detach"], "HEAD").await {
            tracing::warn!(run_id, dir = %base.display(), "git worktree add failed; running in the directory itself");
            return outside;
        }
        let _ = std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o700));
        Workdir { path: target, worktree: true, branch }
    }

    /// The agent is done: what it left uncommitted is committed on the run's branch (unless
    /// `commit_leftovers` is off), and the branch holds the worktree's HEAD. The work, when the branch
    /// moved from where the run started.
    pub(crate) async fn keep_work(&self, dir: &mut Workdir, commit_leftovers: bool, run_id: &str) -> Option<Work> {
        let branch = dir.branch.as_mut()?;
        if commit_leftovers {
            commit_all(&dir.path, &format!("aiwg: what mission {run_id} left uncommitted")).await;
        }
        let head = git(&dir.path, &["rev-parse", "--verify", "HEAD"]).await?.trim().to_owned();
        if head == branch.base {
            return None;
        }
        // The agent may have left the branch (another one checked out, or a detached HEAD): it follows.
        let on = git(&dir.path, &["symbolic-ref", "-q", "HEAD"]).await.unwrap_or_default();
        if on.trim() != format!("refs/heads/{}", branch.name)
            && git(&dir.path, &["branch", "-f", &branch.name, &head]).await.is_none()
        {
            tracing::warn!(run_id, branch = branch.name, "cannot move the run's branch to its work");
            return None;
        }
        branch.kept = true;
        Some(Work { branch: branch.name.clone(), commit: head, base: branch.base.clone() })
    }

    /// The work's changes as a patch (`git diff --binary` from where the run started), if any.
    pub(crate) async fn patch(&self, dir: &Workdir, work: &Work) -> Option<Vec<u8>> {
        let out = Command::new("git")
            .args(["diff", "--binary", &work.base, &work.commit])
            .current_dir(&dir.path)
            .stderr(Stdio::null())
            .output()
            .await
            .ok()?;
        (out.status.success() && !out.stdout.is_empty()).then_some(out.stdout)
    }

    /// The run has ended: its worktree goes, unless it did not succeed and failed ones are kept (then
    /// kept ones past their age go instead).
    pub(crate) async fn release(&self, dir: Workdir, succeeded: bool) {
        if !dir.worktree {
            return;
        }
        let unused = dir.branch.as_ref().filter(|b| !b.kept).map(|b| b.name.as_str());
        match self.keep_failed {
            Some(_) if !succeeded => {
                if let Some(name) = dir.path.file_name() {
                    let marker = self.root.join(format!("{}{KEPT}", name.to_string_lossy()));
                    if let Err(e) = std::fs::write(&marker, b"") {
                        tracing::warn!(error = %e, "cannot mark a failed run's worktree as kept; removing it");
                        remove(&dir.path, unused).await;
                    }
                }
                sweep(&self.root, self.keep_failed, false).await;
            }
            _ => remove(&dir.path, unused).await,
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
            remove(&entry.path(), None).await;
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

/// Deletes a worktree's directory, then the repository's record of it, and `branch` (which held no work).
async fn remove(path: &Path, branch: Option<&str>) {
    let common = git(path, &["rev-parse", "--git-common-dir"]).await.map(|dir| path.join(dir.trim()));
    let doomed = path.to_path_buf();
    let removed = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(doomed)).await;
    if let Ok(Err(e)) = removed {
        tracing::warn!(path = %path.display(), error = %e, "cannot remove a run's worktree");
    }
    let Some(common) = common else { return };
    let prune: &[&str] = &["worktree", "prune"];
    let unused = branch.map(|b| ["branch", "-D", b]);
    for args in std::iter::once(prune).chain(unused.as_ref().map(|a| a.as_slice())) {
        let _ = Command::new("git")
            .arg("--git-dir")
            .arg(&common)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .await;
    }
}

/// `git worktree add <how...> <target> <at>` from `base`: whether it was added.
async fn add(base: &Path, target: &Path, how: &[&str], at: &str) -> bool {
    let added = Command::new("git")
        .args(["worktree", "add"])
        .args(how)
        .arg(target)
        .arg(at)
        .current_dir(base)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .await;
    added.is_ok_and(|s| s.success())
}

/// Commits everything in `dir` that is not ignored, when there is anything: without the repository's
/// hooks or signing (this keeps work, it publishes nothing), as the repository's identity or ours.
async fn commit_all(dir: &Path, message: &str) {
    let staged = git(dir, &["add", "-A"]).await.is_some();
    if !staged || git(dir, &["diff", "--cached", "--quiet"]).await.is_some() {
        return;
    }
    let mut args = vec!["-c", "commit.gpgsign=false"];
    if git(dir, &["var", "GIT_COMMITTER_IDENT"]).await.is_none() {
        args.extend(IDENTITY);
    }
    args.extend(["commit", "-q", "--no-verify", "-m", message]);
    if git(dir, &args).await.is_none() {
        tracing::warn!(dir = %dir.display(), "cannot commit what the agent left; it goes with the worktree");
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
