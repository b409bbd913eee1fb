//! The capabilities serve acts on, by name: what an executor declares decides what serve asks of it,
//! and what serve knows of the executor beyond its word decides what it sends it.

/// The contract's Resumable level: the executor suspends missions and resumes them after a reconnect.
pub const RESUMABLE: &str = "resumable";
/// An extension (Vagaris): the executor reports its readiness at `GET /api/v1/readiness`; serve asks
/// before it routes an unattended mission, or any mission, to it.
pub const READINESS: &str = "x-readiness";
/// An extension: the executor confirms that it pauses and resumes missions on `mission.paused` /
/// `mission.resumed`.
pub const PAUSE_RESUME: &str = "x-pause-resume";
/// An extension: the executor declares that it cannot pause (serve then refuses pause and resume
/// instead of sending frames nothing acts on).
pub(crate) const NO_PAUSE_RESUME: &str = "x-no-pause-resume";
/// An extension: the executor confirms that it stops a mission's agent on `mission.aborted`.
pub const ABORT: &str = "x-abort";
/// An extension: the executor reads serve's answer to each of its frames (`{"ack": true, "seq"}` once
/// committed, or an error frame). Upstream sends executors nothing back, and an executor written for it
/// reads nothing: the agentic-sandbox executor counts every inbound frame against a 64-slot channel whose
/// overflow silently ends its HITL handling. So answers go only to executors that ask for them.
pub const ACKS: &str = "x-acks";
/// An extension: the executor reads the attempt a dispatch carries (`attempt`, which serve adds only
/// for it: an executor written for upstream gets the body it knows) and names it in the `data` of every
/// event it sends about the mission (`attempt`), so that serve never takes a word about an earlier
/// attempt for the current one's.
pub const ATTEMPTS: &str = "x-attempts";
/// An extension: the executor reads a dispatch's `budget` (`crate::budget`), so that its agent can limit
/// itself; serve sends it only to executors declaring this (an executor written for upstream gets the
/// body it knows).
pub const BUDGET: &str = "x-budget";
/// An extension: the executor only listens: serve opens its WebSocket, at the scheme, host and port of
/// `transport_endpoints.ws` and on serve's own path (`/ws/executors/{id}?token=`), once it has had no
/// socket for `hub.dial_after_s`. Serve dials no other executor: registration is open, and a dial
/// carries the executor's token to whatever address the registrant named.
pub const DIAL_IN: &str = "x-dial-in";
/// An extension: the executor runs a mission's `completion_check` command (with `sh -c`, where the agent
/// ran) after the agent exits 0, so a `completion_not_met` failure's exit code is the check's and the
/// agent's was 0 (`Mission::exit_codes`). A mission that carries one goes only to executors declaring this: one
/// that does not would either skip the check or refuse the mission.
pub const COMPLETION_CHECK: &str = "x-completion-check:shell";
/// An extension (Vagaris): the executor never runs a mission whose lease carries no tool list (every
/// Vagaris adapter refuses to run open). Serve routes a mission without one elsewhere.
pub const LEASE_REQUIRED: &str = "x-lease:required";
/// An extension (Vagaris): `x-lease-needs:<tool>`, the lease must list this tool (case ignored: the
/// capability grammar is lower case) or the executor refuses the mission, as the shell adapter does
/// without Bash.
pub const LEASE_NEEDS: &str = "x-lease-needs:";

/// Whether a lease's tool list names `tool`, as both sides of [`LEASE_NEEDS`] read it: serve when it
/// routes, the executor when it runs. One rule, so that serve never sends what the executor refuses.
pub fn lease_lists(listed: &[String], tool: &str) -> bool {
    listed.iter().any(|t| t.eq_ignore_ascii_case(tool))
}
/// Serve's own mark of an HTTP agent runtime (the WattSwarm protocol), which it drives itself. A
/// mission carrying a `task` asks for it; filters may ask for it too.
pub(crate) const HTTP_RUNTIME: &str = "x-kind:http-runtime";

/// Prefixes of the capabilities serve assigns to what it drives itself (HTTP agent runtimes: their
/// kind, name, profiles, task types, provider and model). An executor that registers with one would be
/// handed missions meant for a runtime, prompt included and verification skipped: they are serve's
/// alone, and refused at register.
const SERVE_ASSIGNED: [&str; 7] =
    ["x-kind:", "x-runtime:", "x-runtime-kind:", "x-profile:", "x-task-type:", "x-provider:", "x-model:"];

/// Whether a capability is one only serve may assign (see `SERVE_ASSIGNED`).
pub fn serve_assigned(capability: &str) -> bool {
    SERVE_ASSIGNED.iter().any(|p| capability.starts_with(p))
}

/// Whether an executor acts on a control serve sends it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ability {
    /// It declares it does: serve can say the control was carried out.
    Declared,
    /// It says nothing. The contract says executors handle the control, so serve sends the frame (an
    /// executor written for upstream acts on it) without claiming that it was acted on, and says why.
    Presumed(&'static str),
    /// Serve knows it cannot, and why: it declares so, it is an HTTP runtime serve drives itself, or it
    /// is an agentic-sandbox executor linked to its sandbox (which reads only HITL answers).
    Unable(&'static str),
}

const SANDBOX: &str = "is an agentic-sandbox executor (linked to its sandbox), which acts only on HITL answers";
const RUNTIME: &str = "is an HTTP agent runtime, whose protocol has no pause";
/// Why a control sent to an executor that does not declare `$capability` is not confirmed.
macro_rules! unconfirmed {
    ($capability:literal) => {
        concat!(
            "does not declare ",
            $capability,
            ": the frame was sent as the contract says, but serve cannot confirm that its agent acted on it"
        )
    };
}

/// What serve knows of an executor: its declared capabilities and what it is.
#[derive(Clone, Copy, Debug)]
pub struct Known<'a> {
    pub capabilities: &'a [String],
    /// An HTTP agent runtime an operator added.
    pub http_runtime: bool,
    /// An agentic-sandbox executor: a sandbox of its id was registered from its address.
    pub sandbox_linked: bool,
}

/// What an executor acts on, as far as serve knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Abilities {
    pub pause_resume: Ability,
    pub abort: Ability,
    /// Serve's answers to its frames (acks, error frames) are sent to it.
    pub reads_answers: bool,
    /// It still knows the HITL questions it asked before it last shut down (the agentic-sandbox keeps
    /// them in memory only, and drops an answer to one it forgot).
    pub remembers_questions: bool,
}

impl Abilities {
    /// An executor serve does not know (removed meanwhile): whatever is sent to it is presumed.
    pub const UNREGISTERED: Abilities = Abilities {
        pause_resume: Ability::Presumed("is not registered"),
        abort: Ability::Presumed("is not registered"),
        reads_answers: false,
        remembers_questions: true,
    };
}

impl Known<'_> {
    fn declares(&self, capability: &str) -> bool {
        self.capabilities.iter().any(|c| c == capability)
    }

    pub fn abilities(&self) -> Abilities {
        let pause_resume = if self.sandbox_linked {
            Ability::Unable(SANDBOX)
        } else if self.http_runtime {
            Ability::Unable(RUNTIME)
        } else if self.declares(NO_PAUSE_RESUME) {
            Ability::Unable("declares x-no-pause-resume")
        } else if self.declares(PAUSE_RESUME) {
            Ability::Declared
        } else {
            Ability::Presumed(unconfirmed!("x-pause-resume"))
        };
        let abort = if self.sandbox_linked {
            Ability::Unable(SANDBOX)
        } else if self.http_runtime {
            // A runtime's abort reaches serve's own driver of its missions, which drops the call in
            // flight; whether the runtime's work stops, its protocol cannot say.
            Ability::Presumed(
                "is an HTTP agent runtime: serve dropped its call in flight, but the protocol cannot stop the \
                 runtime's own work",
            )
        } else if self.declares(ABORT) {
            Ability::Declared
        } else {
            Ability::Presumed(unconfirmed!("x-abort"))
        };
        Abilities { pause_resume, abort, reads_answers: self.declares(ACKS), remembers_questions: !self.sandbox_linked }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What serve sends and claims, by what it knows of the executor, written out.
    #[test]
    fn abilities_matrix() {
        use Ability::*;
        let caps = |c: &[&str]| c.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let nothing = caps(&[]);
        let declares = caps(&["x-pause-resume", "x-abort", "x-acks"]);
        let cannot = caps(&["x-no-pause-resume", "x-abort"]);
        let sandbox = Unable(SANDBOX);
        let (pause, abort) = (Presumed(unconfirmed!("x-pause-resume")), Presumed(unconfirmed!("x-abort")));
        let runtime_abort =
            Known { capabilities: &nothing, http_runtime: true, sandbox_linked: false }.abilities().abort;
        assert!(matches!(runtime_abort, Presumed(why) if why.contains("cannot stop")), "{runtime_abort:?}");
        #[rustfmt::skip]
        let cases = [
            // (capabilities, runtime, sandbox) -> (pause/resume, abort, answers, remembers questions)
            (&nothing, false, false, (pause, abort, false, true)),
            (&declares, false, false, (Declared, Declared, true, true)),
            (&cannot, false, false, (Unable("declares x-no-pause-resume"), Declared, false, true)),
            (&declares, true, false, (Unable(RUNTIME), runtime_abort, true, true)),
            (&declares, false, true, (sandbox, sandbox, true, false)),
            (&nothing, false, true, (sandbox, sandbox, false, false)),
        ];
        for (i, (capabilities, http_runtime, sandbox_linked, expected)) in cases.into_iter().enumerate() {
            let a = Known { capabilities, http_runtime, sandbox_linked }.abilities();
            assert_eq!((a.pause_resume, a.abort, a.reads_answers, a.remembers_questions), expected, "case {i}");
        }
    }

    #[test]
    fn names_serve_assigns_are_recognised_and_others_are_not() {
        for reserved in ["x-kind:http-runtime", "x-runtime:gpt", "x-runtime-kind:local", "x-model:m", "x-profile:p"] {
            assert!(serve_assigned(reserved), "{reserved}");
        }
        for free in ["x-kind", "x-readiness", "runtime:claude-code", "isolation:vm", "x-class:interactive_local"] {
            assert!(!serve_assigned(free), "{free}");
        }
    }
}
