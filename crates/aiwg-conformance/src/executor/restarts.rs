//! The checks that break the executor's connection on purpose: a dropped socket (resumable: resync on
//! reconnect, the mission goes on), a refused token (4001: register again, same identity, new token),
//! and for an executor the suite started, a stop and a restart (resumable: suspend, resync, reconcile)
//! and the final stop (deregister).

use serde_json::Value;

use super::checks::*;
use super::scenario::{outcome, Registered, Scenario};
use crate::report::Outcome;
use aiwg_domain::{MissionState, ServeEvent};

/// How long a stopped executor has to exit before it is killed.
const EXIT_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

impl Scenario<'_> {
    /// Socket and registration counts: where to look for what comes next.
    fn marks(&self) -> (usize, usize) {
        self.plane.read(|j| (j.registrations.len(), j.connections.len()))
    }

    /// Waits for the executor's next accepted socket (from connection `from` on) and its
    /// `executor.resync`; they become the suite's socket. The resync's frame number and JSON.
    async fn resynced(&mut self, from: usize) -> Result<(usize, Value), String> {
        let socket = self.plane.wait("reconnection with the current token", self.wait, |j| j.accepted_from(from)).await;
        let socket = socket.map_err(|e| {
            let refused = self.plane.read(|j| j.connections.len() > from);
            if refused {
                format!("{e}: it reconnected only with a token that was refused")
            } else {
                e
            }
        })?;
        self.socket = socket;
        self.plane
            .wait("executor.resync on the new socket", self.wait, |j| {
                j.find(0, |f, v| f.connection == socket && v["event"] == "executor.resync")
            })
            .await
    }

    pub(super) async fn resumable(&mut self, e: &Registered) {
        if !e.resumable {
            return self.skip_all(&[RESYNC, GOES_ON], "the executor does not declare resumable");
        }
        let mission = match self.running(e, &self.suite.resumable_objective.clone()).await {
            Ok(m) => m,
            Err(why) => return self.skip_all(&[RESYNC, GOES_ON], &format!("needs a running mission: {why}")),
        };
        let (_, sockets) = self.marks();
        self.plane.close(self.socket, 1001, "going away");
        let (at, resync) = match self.resynced(sockets).await {
            Ok(r) => r,
            Err(why) => {
                self.record(RESYNC, Outcome::Fail(format!("after serve closed its socket (1001): {why}")));
                return self.record(GOES_ON, Outcome::Skip("needs the executor back (resync failed)".into()));
            }
        };
        if self.plane.read(|j| j.ending(0, &mission)).is_some_and(|(end, _)| end < at) {
            let why = "the mission ended before the executor reconnected; give --resumable-objective a longer run";
            return self.skip_all(&[RESYNC, GOES_ON], why);
        }
        self.record(RESYNC, outcome(lists(&resync, &mission)));
        let goes_on = match self.plane.wait("the mission's end", self.wait, |j| j.ending(at, &mission)).await {
            Ok((_, last)) if last["event"] == "mission.completed" => Ok(()),
            Ok((_, last)) => Err(format!("after the reconnect the mission ended with {last}")),
            Err(why) => Err(why),
        };
        self.record(GOES_ON, outcome(goes_on));
    }

    /// Dispatches `objective` and waits until the executor says it started.
    async fn running(&mut self, e: &Registered, objective: &str) -> Result<String, String> {
        let (mission, _) = self.dispatch(e, objective).await?;
        self.reached("mission.started", &mission).await?;
        Ok(mission)
    }

    /// Serve closes the socket with 4001 (its token refused): the executor registers again under the
    /// same id and comes back with the new token.
    pub(super) async fn refused_token(&mut self, e: &Registered) {
        if !self.suite.strict() {
            let why = "the contract profile (run with --profile strict): the contract names no 4001; a \
                       re-registration is provoked there";
            return self.skip_all(&[IDENTITY, REREGISTER], why);
        }
        let (registrations, sockets) = self.marks();
        self.plane.close(self.socket, 4001, "Unauthorized");
        let again = self
            .plane
            .wait("registration after 4001", self.wait, |j| j.registrations.get(registrations).cloned())
            .await;
        let payload = match again {
            Ok(p) => p,
            Err(why) => {
                self.record(REREGISTER, Outcome::Fail(why));
                return self.record(IDENTITY, Outcome::Skip("needs a second registration".into()));
            }
        };
        let same = match payload["executor_id"].as_str() {
            Some(id) if id == e.id => Ok(()),
            other => Err(format!("it registered again as {other:?}, not {}", e.id)),
        };
        self.record(IDENTITY, outcome(same));
        let back = self.resynced(sockets).await.map(drop);
        self.record(REREGISTER, outcome(back));
    }

    /// For a resumable executor the suite started: stop it with a mission running (it suspends it),
    /// start it again (it resyncs the mission), and say `mission.resumed` as serve does (it reconnects
    /// the mission, or settles it honestly with a terminal event).
    pub(super) async fn restart(&mut self, e: &Registered) {
        let checks = [SUSPENDS, RESYNC_RESTART, RECONCILED];
        if !e.resumable {
            return self.skip_all(&checks, "the executor does not declare resumable");
        }
        if self.launched.is_none() {
            return self.skip_all(&checks, "needs --exec, so that the suite can stop and start the executor");
        }
        let mission = match self.running(e, &self.suite.long_objective.clone()).await {
            Ok(m) => m,
            Err(why) => return self.skip_all(&checks, &format!("needs a running mission: {why}")),
        };
        let (registrations, sockets) = self.marks();
        let socket = self.socket;
        self.launched.as_ref().expect("checked above").terminate();
        let suspended = self
            .reached("mission.suspended", &mission)
            .await
            .map(drop)
            .map_err(|why| format!("on SIGTERM the executor did not suspend the mission: {why}"));
        self.record(SUSPENDS, outcome(suspended));
        let _ = self.plane.wait("the socket's end", self.wait, |j| j.connections[socket].ended.then_some(())).await;
        if let Err(why) = self.start_again().await {
            return self.skip_all(&checks[1..], &why);
        }
        let resync = self.back_as(e, registrations, sockets).await;
        let at = match resync.and_then(|(at, resync)| lists(&resync, &mission).map(|()| at)) {
            Ok(at) => at,
            Err(why) => {
                self.record(RESYNC_RESTART, Outcome::Fail(why));
                return self.record(RECONCILED, Outcome::Skip("needs the mission in the resync".into()));
            }
        };
        self.record(RESYNC_RESTART, Outcome::Pass);
        let resumed = ServeEvent::Resumed { from: MissionState::Suspended };
        let reconciled = match self.say(&e.id, &mission, &resumed) {
            Ok(_) => self.reconciled(at, &mission).await,
            Err(why) => Err(why),
        };
        self.record(RECONCILED, outcome(reconciled));
    }

    async fn start_again(&mut self) -> Result<(), String> {
        let launched = self.launched.as_mut().expect("only called with --exec");
        launched.reap(EXIT_GRACE).await;
        launched.start()
    }

    /// After a restart: registered again under the same id, reconnected, resynced.
    async fn back_as(
        &mut self,
        e: &Registered,
        registrations: usize,
        sockets: usize,
    ) -> Result<(usize, Value), String> {
        let again = self
            .plane
            .wait("registration after the restart", self.wait, |j| j.registrations.get(registrations).cloned())
            .await?;
        if again["executor_id"] != e.id.as_str() {
            return Err(format!("after the restart it registered as {}, not {}", again["executor_id"], e.id));
        }
        self.resynced(sockets).await
    }

    /// The executor's first word on the mission after its resync: reconnected, or ended.
    async fn reconciled(&self, from: usize, mission: &str) -> Result<(), String> {
        let settled = |v: &Value| v["event"] == "mission.reconnected" || super::plane::is_terminal(v);
        let wait = self.plane.wait("mission.reconnected or an end", self.wait, |j| {
            j.find(from, |_, v| v["mission_id"] == mission && settled(v))
        });
        wait.await.map(drop).map_err(|why| {
            format!("after the resync and serve's mission.resumed: {why}; the mission is left suspended")
        })
    }

    /// The final stop of an executor the suite started: it deregisters with its token.
    pub(super) async fn shutdown(&mut self, e: &Registered) {
        let Some(launched) = &self.launched else {
            return self
                .record(DEREGISTER, Outcome::Skip("needs --exec, so that the suite can stop the executor".into()));
        };
        let before = self.plane.read(|j| j.deregistrations.len());
        launched.terminate();
        let token = self.plane.token(&e.id);
        let deregistered = self
            .plane
            .wait("DELETE /api/v1/executors/{id} after SIGTERM", self.wait, |j| j.deregistrations.get(before).cloned())
            .await;
        let verdict = deregistered.and_then(|(id, bearer)| match (id == e.id, bearer == token) {
            (true, true) => Ok(()),
            (false, _) => Err(format!("it deregistered {id}, not {}", e.id)),
            (true, false) => Err("it deregistered without its current token as the bearer".to_owned()),
        });
        self.record(DEREGISTER, outcome(verdict));
        self.stop().await;
    }

    /// Stops the executor the suite started, if any.
    pub(super) async fn stop(&mut self) {
        if let Some(launched) = self.launched.as_mut() {
            launched.terminate();
            launched.reap(EXIT_GRACE).await;
        }
    }
}

/// The resync lists the mission among those it owns.
fn lists(resync: &Value, mission: &str) -> Result<(), String> {
    match resync["data"]["owned_mission_ids"].as_array().is_some_and(|ids| ids.iter().any(|id| id == mission)) {
        true => Ok(()),
        false => Err(format!("the executor's resync does not list its mission {mission}: {resync}")),
    }
}
