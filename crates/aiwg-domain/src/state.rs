//! The mission state machine of the contract, as a pure transition table.
//!
//! `queued ─► assigned ─► running ─► (paused | hitl-required | suspended)* ─► done | failed | aborted`
//!
//! The event type, never `data.state`, decides the transition. Beyond the bare diagram the table admits
//! what real executors do (an executor may finish or fail without ever sending `mission.started`; the
//! agentic-sandbox executor suspends never-started missions on shutdown and re-announces
//! `mission.resumed` for missions that are already running, and sends its own `mission.assigned` late,
//! after work began: acknowledged as a duplicate), and refuses what would rewrite history (anything
//! after a terminal state).

use serde::{Deserialize, Serialize};

use aiwg_contract::EventType;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MissionState {
    Queued,
    Assigned,
    Running,
    Paused,
    HitlRequired,
    Suspended,
    Done,
    Failed,
    Aborted,
}

impl MissionState {
    pub const ALL: [MissionState; 9] = [
        MissionState::Queued,
        MissionState::Assigned,
        MissionState::Running,
        MissionState::Paused,
        MissionState::HitlRequired,
        MissionState::Suspended,
        MissionState::Done,
        MissionState::Failed,
        MissionState::Aborted,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            MissionState::Queued => "queued",
            MissionState::Assigned => "assigned",
            MissionState::Running => "running",
            MissionState::Paused => "paused",
            MissionState::HitlRequired => "hitl-required",
            MissionState::Suspended => "suspended",
            MissionState::Done => "done",
            MissionState::Failed => "failed",
            MissionState::Aborted => "aborted",
        }
    }

    pub fn parse(s: &str) -> Option<MissionState> {
        MissionState::ALL.into_iter().find(|m| m.as_str() == s)
    }

    pub fn is_terminal(self) -> bool {
        matches!(self, MissionState::Done | MissionState::Failed | MissionState::Aborted)
    }
}

impl std::fmt::Display for MissionState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What an executor's event does to a mission in a given state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Accepted; the mission moves to this state (which may be the state it is in).
    Move(MissionState),
    /// Accepted; the state is unchanged (progress, re-announcements).
    Stay,
    /// The terminal event that ended the mission, sent again. Idempotent when its data is identical to
    /// what was stored, refused otherwise; the caller compares.
    TerminalRepeat,
    /// A late restatement of what already happened (an executor's own `mission.assigned` arriving after
    /// the mission started): acknowledged as a duplicate, not stored, the state unchanged.
    Late,
    /// Refused: this event cannot happen in this state.
    Illegal,
}

/// The transition table for events an executor sends about a mission it owns.
pub fn on_executor_event(state: MissionState, event: EventType) -> Outcome {
    use EventType as E;
    use MissionState as S;
    use Outcome::{Illegal, Late, Move, Stay, TerminalRepeat};

    if state.is_terminal() {
        return match (state, event) {
            (S::Done, E::MissionCompleted) | (S::Failed, E::MissionFailed) | (S::Aborted, E::MissionAborted) => {
                TerminalRepeat
            }
            // The agentic-sandbox's `mission.assigned` crosses its session's end on the other socket.
            (_, E::MissionAssigned) => Late,
            _ => Illegal,
        };
    }
    match (state, event) {
        // A queued mission has no executor yet, so no executor can speak for it.
        (S::Queued, _) => Illegal,

        // Ending a mission is always the executor's call while it is live.
        (_, E::MissionCompleted) => Move(S::Done),
        (_, E::MissionFailed) => Move(S::Failed),
        (_, E::MissionAborted) => Move(S::Aborted),

        (S::Assigned, E::MissionAssigned) => Stay,
        // The agentic-sandbox executor sends its `mission.assigned` late, sometimes after serve inferred
        // the start from its sandbox socket: it says nothing new, and never moves a mission back.
        (_, E::MissionAssigned) => Late,

        (S::Assigned, E::MissionStarted) => Move(S::Running),
        (S::Running, E::MissionStarted) => Stay,
        (_, E::MissionStarted) => Illegal,

        // A suspended mission must be reconnected or resumed before it reports work again.
        (S::Suspended, E::MissionProgress) => Illegal,
        (_, E::MissionProgress) => Stay,

        (S::Paused | S::Suspended, E::MissionHitlRequired) => Illegal,
        (_, E::MissionHitlRequired) => Move(S::HitlRequired),

        (S::Suspended, E::MissionPaused) => Illegal,
        (S::Paused, E::MissionPaused) => Stay,
        (_, E::MissionPaused) => Move(S::Paused),

        (S::Running, E::MissionResumed) => Stay,
        (_, E::MissionResumed) => Move(S::Running),

        (S::Suspended, E::MissionSuspended) => Stay,
        (_, E::MissionSuspended) => Move(S::Suspended),

        // "I am back for this mission": the state changes only with the mission.resumed that follows.
        (_, E::MissionReconnected) => Stay,

        // Executor-level and serve-originated events never name a mission's transition.
        (_, E::ExecutorRegistered | E::ExecutorDeregistered | E::ExecutorResync | E::MissionHitlResponded) => Illegal,
    }
}

/// What an operator can do to a mission.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Control {
    Pause,
    Resume,
    Abort,
    /// A response to the mission's pending HITL request.
    AnswerHitl,
}

impl Control {
    pub const ALL: [Control; 4] = [Control::Pause, Control::Resume, Control::Abort, Control::AnswerHitl];

    /// The control's name, as its route ends (`/pause`, ...) and as a mission's read lists it.
    pub fn as_str(self) -> &'static str {
        match self {
            Control::Pause => "pause",
            Control::Resume => "resume",
            Control::Abort => "abort",
            Control::AnswerHitl => "hitl_response",
        }
    }

    /// The controls the state machine allows in `state`: what a page offers, no more.
    pub fn allowed(state: MissionState) -> Vec<Control> {
        Control::ALL.into_iter().filter(|c| on_control(state, *c).is_some()).collect()
    }
}

/// The transition table for operator actions: the state the mission moves to, or `None` when the action
/// is illegal in that state. Terminal states refuse everything (upstream silently answers 200; we don't).
pub fn on_control(state: MissionState, control: Control) -> Option<MissionState> {
    use Control as C;
    use MissionState as S;
    match (state, control) {
        (S::Done | S::Failed | S::Aborted, _) => None,
        (_, C::Abort) => Some(S::Aborted),
        (S::Assigned | S::Running | S::HitlRequired, C::Pause) => Some(S::Paused),
        (S::Paused, C::Resume) => Some(S::Running),
        (S::HitlRequired, C::AnswerHitl) => Some(S::Running),
        _ => None,
    }
}

/// Where a resume (the executor's `mission.resumed`, the operator's resume, serve's resume on resync)
/// takes a mission: back to the state it was paused or suspended from (`None`: not known, e.g. after a
/// restart of serve, which is running), and to `hitl-required` whenever a HITL request is pending,
/// because the agent is still waiting for its answer and the operator must still be able to give it.
pub fn resume_target(paused_from: Option<MissionState>, hitl_pending: bool) -> MissionState {
    if hitl_pending {
        return MissionState::HitlRequired;
    }
    match paused_from {
        // Never started: it goes back to waiting for its start.
        Some(MissionState::Assigned) => MissionState::Assigned,
        // Interrupted while asking, but the request is gone (withdrawn or expired): nothing to wait for.
        _ => MissionState::Running,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use EventType as E;
    use MissionState as S;

    /// The whole table written out a second time, as a matrix a reviewer can read against the contract's
    /// diagram. Columns: queued assigned running paused hitl-required suspended done failed aborted.
    /// `.` illegal, `=` stay, `r` terminal repeat, `l` late (a duplicate), otherwise the first letter of the target state
    /// (a assigned, R running, p paused, h hitl-required, s suspended, d done, f failed, x aborted).
    const MATRIX: &[(EventType, &str)] = &[
        (E::ExecutorRegistered, "........."),
        (E::ExecutorDeregistered, "........."),
        (E::ExecutorResync, "........."),
        (E::MissionAssigned, ".=lllllll"),
        (E::MissionStarted, ".R=......"),
        (E::MissionProgress, ".====...."),
        (E::MissionHitlRequired, ".hh.h...."),
        (E::MissionHitlResponded, "........."),
        (E::MissionPaused, ".pp=p...."),
        (E::MissionResumed, ".R=RRR..."),
        (E::MissionSuspended, ".ssss=..."),
        (E::MissionReconnected, ".=====..."),
        (E::MissionCompleted, ".dddddr.."),
        (E::MissionFailed, ".fffff.r."),
        (E::MissionAborted, ".xxxxx..r"),
    ];

    fn decode(c: char) -> Outcome {
        match c {
            '.' => Outcome::Illegal,
            '=' => Outcome::Stay,
            'r' => Outcome::TerminalRepeat,
            'l' => Outcome::Late,
            'a' => Outcome::Move(S::Assigned),
            'R' => Outcome::Move(S::Running),
            'p' => Outcome::Move(S::Paused),
            'h' => Outcome::Move(S::HitlRequired),
            's' => Outcome::Move(S::Suspended),
            'd' => Outcome::Move(S::Done),
            'f' => Outcome::Move(S::Failed),
            'x' => Outcome::Move(S::Aborted),
            other => panic!("bad matrix cell {other}"),
        }
    }

    #[test]
    fn a_resume_returns_to_where_the_mission_was() {
        use MissionState as S;
        let cases = [
            (None, false, S::Running),
            (Some(S::Assigned), false, S::Assigned),
            (Some(S::Running), false, S::Running),
            (Some(S::HitlRequired), false, S::Running),
            (Some(S::Assigned), true, S::HitlRequired),
            (None, true, S::HitlRequired),
            (Some(S::Suspended), false, S::Running),
        ];
        for (from, pending, to) in cases {
            assert_eq!(resume_target(from, pending), to, "{from:?} pending={pending}");
        }
    }

    #[test]
    fn every_state_event_pair_matches_the_matrix() {
        assert_eq!(MATRIX.len(), EventType::ALL.len());
        for (event, row) in MATRIX {
            let cells: Vec<char> = row.chars().collect();
            assert_eq!(cells.len(), MissionState::ALL.len(), "row for {event}");
            for (state, cell) in MissionState::ALL.into_iter().zip(cells) {
                assert_eq!(on_executor_event(state, *event), decode(cell), "{state} + {event}");
            }
        }
    }

    /// Operator actions, columns as in [`MATRIX`].
    const CONTROLS: &[(Control, &str)] = &[
        (Control::Pause, ".pp.p...."),
        (Control::Resume, "...R....."),
        (Control::Abort, "xxxxxx..."),
        (Control::AnswerHitl, "....R...."),
    ];

    /// What a page offers is the matrix's row for the state, in the controls' order.
    #[test]
    fn the_allowed_controls_are_the_matrix_read_by_state() {
        use MissionState as S;
        assert_eq!(Control::allowed(S::Paused), [Control::Resume, Control::Abort]);
        assert_eq!(Control::allowed(S::HitlRequired), [Control::Pause, Control::Abort, Control::AnswerHitl]);
        assert!(Control::allowed(S::Done).is_empty() && Control::allowed(S::Aborted).is_empty());
        let names: Vec<&str> = Control::ALL.into_iter().map(Control::as_str).collect();
        assert_eq!(names, ["pause", "resume", "abort", "hitl_response"], "the routes' last segments");
    }

    #[test]
    fn every_state_control_pair_matches_the_matrix() {
        for (control, row) in CONTROLS {
            let cells: Vec<char> = row.chars().collect();
            assert_eq!(cells.len(), MissionState::ALL.len(), "row for {control:?}");
            for (state, cell) in MissionState::ALL.into_iter().zip(cells) {
                let expected = match decode(cell) {
                    Outcome::Move(to) => Some(to),
                    _ => None,
                };
                assert_eq!(on_control(state, *control), expected, "{state} + {control:?}");
            }
        }
        assert_eq!(CONTROLS.len(), Control::ALL.len());
    }

    #[test]
    fn terminal_states_are_final() {
        for state in MissionState::ALL.into_iter().filter(|s| s.is_terminal()) {
            for event in EventType::ALL {
                assert!(
                    matches!(
                        on_executor_event(state, event),
                        Outcome::Illegal | Outcome::TerminalRepeat | Outcome::Late
                    ),
                    "{state} + {event} must not move"
                );
            }
        }
    }

    #[test]
    fn states_round_trip_through_their_names() {
        for s in MissionState::ALL {
            assert_eq!(MissionState::parse(s.as_str()), Some(s));
            assert_eq!(serde_json::to_value(s).unwrap(), serde_json::Value::String(s.as_str().into()));
        }
        assert_eq!(MissionState::parse("hitl_required"), None);
    }
}
