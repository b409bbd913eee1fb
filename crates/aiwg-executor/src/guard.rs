//! No agent outlives its executor (Linux). Each agent runs under a small guard, the executor's own binary
//! run as `aiwg-serve __agent-guard GRACE_MS BINARY ARGS...`:
//!
//! - The executor starts the guard in a process group of its own, with a parent-death signal (SIGTERM),
//!   and one end of a socket pair as the guard's fd 3; it keeps the other end while the agent runs.
//! - The guard makes itself a child subreaper (an agent's descendants whose parent died become its
//!   children, not init's), starts the agent in a new process group with a parent-death signal of
//!   SIGKILL, and writes the agent's pid (its process group's id) on fd 3. Pause, resume and abort signal
//!   that group, which the guard is not in: a paused agent never pauses its guard.
//! - When the executor's end of the socket closes (the executor ended, `kill -9` included, or it let the
//!   agent go), or the agent exits, the guard sweeps: SIGTERM (and SIGCONT) to the agent's group and to
//!   every descendant it reaped, SIGKILL to what is left after the grace, then exits as the agent did.
//!
//! The parent-death signal follows the thread that spawned a process, not the process: the guard takes
//! a SIGTERM for its executor's death only once its parent is gone (the socket says so in any case).
//! What survives even this (the guard killed with its executor) is left to the restarted executor
//! (`leftovers`).

use std::ffi::{OsStr, OsString};
use std::io::{Error, ErrorKind, Write};
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;
use tokio::process::Child;

/// The hidden command the executor runs its agents under.
pub(crate) const COMMAND: &str = "__agent-guard";
/// The guard's end of the socket to its executor.
const CONTROL_FD: RawFd = 3;
/// How long the guard goes on sending SIGKILL to what is left before it gives up.
const KILL_ROUNDS: u32 = 200;
const ROUND: Duration = Duration::from_millis(10);

/// Starts `binary args...` under a guard (`command` is the guard's command, with the agent's
/// environment, directory and stdio set): the guard (which exits as the agent did, once the agent's
/// group is gone), the agent's process group, and the executor's end of the socket (dropping it makes
/// the guard stop the agent). The error is the agent's own when it could not start.
pub(crate) async fn spawn(
    mut command: tokio::process::Command,
    binary: &str,
    args: &[String],
    grace: Duration,
) -> std::io::Result<(Child, u32, tokio::net::UnixStream)> {
    let (ours, theirs) = UnixStream::pair()?;
    let theirs = above_stdio(theirs)?;
    let (fd, executor) = (theirs.as_raw_fd(), std::process::id() as libc::pid_t);
    command.arg(COMMAND).arg(grace.as_millis().to_string()).arg(binary).args(args);
    // SAFETY: `hand_over` makes only async-signal-safe calls (dup2, fcntl, prctl, getppid).
    unsafe { command.pre_exec(move || hand_over(fd, executor)) };
    let mut child = command.process_group(0).kill_on_drop(false).spawn()?;
    drop(theirs);
    ours.set_nonblocking(true)?;
    let mut control = tokio::net::UnixStream::from_std(ours)?;
    match report(&mut control).await {
        Ok(pgid) => Ok((child, pgid, control)),
        Err(e) => {
            let _ = child.wait().await;
            Err(e)
        }
    }
}

/// The socket on a descriptor of 3 or more: one below (an executor started with its stdio closed) would
/// be replaced by the guard's stdio before `hand_over` moves it.
fn above_stdio(socket: UnixStream) -> std::io::Result<UnixStream> {
    if socket.as_raw_fd() >= CONTROL_FD {
        return Ok(socket);
    }
    // SAFETY: fcntl duplicates a descriptor we own; the duplicate is owned by the returned stream alone.
    let moved = unsafe { libc::fcntl(socket.as_raw_fd(), libc::F_DUPFD_CLOEXEC, CONTROL_FD) };
    match moved {
        fd if fd < 0 => Err(Error::last_os_error()),
        // SAFETY: as above.
        fd => Ok(unsafe { UnixStream::from_raw_fd(fd) }),
    }
}

/// In the guard's process before it runs: the socket as fd 3, and SIGTERM when the executor dies.
fn hand_over(fd: RawFd, executor: libc::pid_t) -> std::io::Result<()> {
    // SAFETY: plain system calls on integers; `dup2` onto fd 3 clears close-on-exec, `fcntl` does when
    // the socket is fd 3 already.
    unsafe {
        let moved = if fd == CONTROL_FD { libc::fcntl(fd, libc::F_SETFD, 0) } else { libc::dup2(fd, CONTROL_FD) };
        if moved < 0 || libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
            return Err(Error::last_os_error());
        }
        if libc::getppid() != executor {
            return Err(Error::from_raw_os_error(libc::ESRCH));
        }
    }
    Ok(())
}

/// The guard's first line: the agent's pid, or `E<errno>` when it could not start.
async fn report(control: &mut tokio::net::UnixStream) -> std::io::Result<u32> {
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while line.len() < 32 {
        match control.read(&mut byte).await? {
            0 => break,
            _ if byte[0] == b'\n' => break,
            _ => line.push(byte[0]),
        }
    }
    let line = String::from_utf8_lossy(&line);
    if let Some(errno) = line.strip_prefix('E').and_then(|e| e.parse().ok()) {
        return Err(Error::from_raw_os_error(errno));
    }
    line.parse().map_err(|_| Error::other("the agent's guard ended before it started the agent"))
}

/// Runs the guard when the command line is the guard's, and never returns then.
pub(crate) fn run_if_asked() {
    let mut args = std::env::args_os().skip(1);
    if args.next().as_deref() != Some(OsStr::new(COMMAND)) {
        return;
    }
    let grace = args.next().and_then(|g| g.to_str()?.parse().ok()).map(Duration::from_millis);
    let (Some(grace), Some(binary)) = (grace, args.next()) else {
        eprintln!("usage: aiwg-serve {COMMAND} GRACE_MS BINARY [ARGS...] (run by the executor, not by hand)");
        std::process::exit(2);
    };
    let args: Vec<OsString> = args.collect();
    guard(grace, &binary, &args)
}

/// Written by the signal handler, read by the guard's loop.
static WAKE: AtomicI32 = AtomicI32::new(-1);
static TERMINATED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(signal: libc::c_int) {
    if signal == libc::SIGTERM {
        TERMINATED.store(true, Ordering::SeqCst);
    }
    // SAFETY: write(2) is async-signal-safe; the pipe is non-blocking, a full one is awake already.
    unsafe { libc::write(WAKE.load(Ordering::SeqCst), [1u8].as_ptr().cast(), 1) };
}

fn guard(grace: Duration, binary: &OsStr, args: &[OsString]) -> ! {
    // SAFETY: getppid has no arguments. Plain system calls after it; the handler only stores an atomic
    // and writes to a pipe.
    let executor = unsafe { libc::getppid() };
    let wake = unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
        // The agent must not inherit the socket (it could speak to the executor as its guard).
        libc::fcntl(CONTROL_FD, libc::F_SETFD, libc::FD_CLOEXEC);
        let mut pipe = [0; 2];
        libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK);
        WAKE.store(pipe[1], Ordering::SeqCst);
        for signal in [libc::SIGCHLD, libc::SIGTERM] {
            libc::signal(signal, on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t);
        }
        pipe[0]
    };
    // SAFETY: fd 3 is the socket the executor handed over, owned by the guard alone from here.
    let mut control = unsafe { UnixStream::from_raw_fd(CONTROL_FD) };
    let agent = match start_agent(binary, args) {
        Ok(pid) => pid,
        Err(e) => {
            let _ = writeln!(control, "E{}", e.raw_os_error().unwrap_or(libc::EIO));
            std::process::exit(if e.kind() == ErrorKind::NotFound { 127 } else { 126 });
        }
    };
    let _ = writeln!(control, "{agent}");
    quiet_stdio();
    let status = watch(agent, wake, executor);
    sweep(agent, grace);
    exit_as(status)
}

/// The agent in a new process group of its own, killed by the kernel if the guard dies.
fn start_agent(binary: &OsStr, args: &[OsString]) -> std::io::Result<libc::pid_t> {
    let guard = std::process::id() as libc::pid_t;
    let mut command = std::process::Command::new(binary);
    command.args(args).process_group(0);
    // SAFETY: prctl and getppid are async-signal-safe.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(Error::last_os_error());
            }
            match libc::getppid() == guard {
                true => Ok(()),
                false => Err(Error::from_raw_os_error(libc::ESRCH)),
            }
        })
    };
    Ok(command.spawn()?.id() as libc::pid_t)
}

/// Only the agent holds its stdio from now on: the executor reads to the end of what the agent's
/// processes write, not to the guard's exit.
fn quiet_stdio() {
    if let Ok(null) = std::fs::OpenOptions::new().read(true).write(true).open("/dev/null") {
        for fd in 0..3 {
            // SAFETY: dup2 onto the standard descriptors, which the guard no longer uses.
            unsafe { libc::dup2(null.as_raw_fd(), fd) };
        }
    }
}

/// Until the agent exits (its wait status) or the executor is gone (`None`).
fn watch(agent: libc::pid_t, wake: RawFd, executor: libc::pid_t) -> Option<libc::c_int> {
    let mut fds = [
        libc::pollfd { fd: CONTROL_FD, events: libc::POLLIN, revents: 0 },
        libc::pollfd { fd: wake, events: libc::POLLIN, revents: 0 },
    ];
    loop {
        // SAFETY: getppid has no arguments.
        if TERMINATED.swap(false, Ordering::SeqCst) && unsafe { libc::getppid() } != executor {
            return None;
        }
        if let (Some(status), _) = reap(Some(agent)) {
            return Some(status);
        }
        // SAFETY: two valid pollfds; EINTR (a signal) just goes round again.
        if unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) } < 0 {
            continue;
        }
        if fds[0].revents != 0 && executor_gone() {
            return None;
        }
        if fds[1].revents != 0 {
            let mut drained = [0u8; 64];
            // SAFETY: reading into a local buffer from the non-blocking wake pipe.
            while unsafe { libc::read(wake, drained.as_mut_ptr().cast(), drained.len()) } > 0 {}
        }
    }
}

/// Whether the executor's end of the socket is closed (it never writes: anything else is a close).
fn executor_gone() -> bool {
    let mut byte = [0u8; 1];
    // SAFETY: reading one byte into a local buffer; poll said the socket is readable.
    let n = unsafe { libc::read(CONTROL_FD, byte.as_mut_ptr().cast(), 1) };
    n == 0 || (n < 0 && Error::last_os_error().kind() != ErrorKind::Interrupted)
}

/// Reaps every child that has ended: the agent's wait status if it was among them, and whether any
/// child is left.
fn reap(agent: Option<libc::pid_t>) -> (Option<libc::c_int>, bool) {
    let mut found = None;
    loop {
        let mut status = 0;
        // SAFETY: waitpid writes the status into a local.
        match unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) } {
            0 => return (found, true),
            pid if pid < 0 => return (found, false),
            pid if Some(pid) == agent => found = Some(status),
            _ => {}
        }
    }
}

/// Stops the agent's group and every descendant the guard adopted: SIGTERM, then SIGKILL after the grace.
fn sweep(pgid: libc::pid_t, grace: Duration) {
    signal_all(pgid, libc::SIGTERM);
    signal_all(pgid, libc::SIGCONT);
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if gone(pgid) {
            return;
        }
        std::thread::sleep(ROUND);
    }
    for _ in 0..KILL_ROUNDS {
        signal_all(pgid, libc::SIGKILL);
        if gone(pgid) {
            return;
        }
        std::thread::sleep(ROUND);
    }
}

fn gone(pgid: libc::pid_t) -> bool {
    let (_, children_left) = reap(None);
    // SAFETY: killpg with signal 0 sends nothing.
    !children_left && unsafe { libc::killpg(pgid, 0) } != 0
}

/// `signal` to the agent's group and to the guard's children (descendants that left the group and were
/// adopted once their parent died).
fn signal_all(pgid: libc::pid_t, signal: libc::c_int) {
    // SAFETY: killpg and kill only read their integer arguments.
    unsafe { libc::killpg(pgid, signal) };
    let me = std::process::id();
    let children = std::fs::read_to_string(Path::new(&format!("/proc/{me}/task/{me}/children"))).unwrap_or_default();
    for pid in children.split_whitespace().filter_map(|p| p.parse::<libc::pid_t>().ok()) {
        // SAFETY: as above.
        unsafe { libc::kill(pid, signal) };
    }
}

/// Ends the guard as the agent ended: its exit code, or its signal (raised on the guard itself).
fn exit_as(status: Option<libc::c_int>) -> ! {
    let Some(status) = status else { std::process::exit(128 + libc::SIGTERM) };
    if libc::WIFEXITED(status) {
        std::process::exit(libc::WEXITSTATUS(status));
    }
    let signal = libc::WTERMSIG(status);
    // SAFETY: the default action back, then the signal to ourselves.
    unsafe {
        libc::signal(signal, libc::SIG_DFL);
        libc::kill(libc::getpid(), signal);
    }
    std::process::exit(128 + signal)
}

/// The guard's own program: this very binary (`/proc/self/exe` still names it after an upgrade replaced
/// the file).
pub(crate) const PROGRAM: &str = "/proc/self/exe";
