//! The capabilities serve acts on, by name: what an executor declares decides what serve asks of it.

/// The contract's Resumable level: the executor suspends missions and resumes them after a reconnect.
pub(crate) const RESUMABLE: &str = "resumable";
/// An extension (Vagaris): the executor reports its readiness at `GET /api/v1/readiness`; serve asks
/// before it routes an unattended mission, or any mission, to it.
pub(crate) const READINESS: &str = "x-readiness";
/// An extension: the executor pauses and resumes missions on `mission.paused` / `mission.resumed` (the
/// agentic-sandbox executor, for one, has no pause at all).
pub(crate) const PAUSE_RESUME: &str = "x-pause-resume";
/// An extension: the executor stops a mission's agent on `mission.aborted`.
pub(crate) const ABORT: &str = "x-abort";
/// Serve's own mark of an HTTP agent runtime (the WattSwarm protocol), which it drives itself. A
/// mission carrying a `task` asks for it; filters may ask for it too.
pub(crate) const HTTP_RUNTIME: &str = "x-kind:http-runtime";
