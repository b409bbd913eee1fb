//! The fleet's membership: executors registering, deregistering, removed by an operator, drained; and
//! who may act as an operator.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use super::ledger::{Ledger, Verdict};
use super::queue::Queue;
use super::registry::{Registered, Registry};
use super::Core;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::limits::RateLimiter;
use crate::store::Store;
use aiwg_contract::{spec_support, RegisterPayload, SpecSupport, SPEC_VERSION};
use aiwg_domain::{capabilities, Live, Origin, ServeEvent};

/// The answer to `POST /api/v1/executors/{id}/remove`.
#[derive(Debug, serde::Serialize)]
pub struct Removed {
    pub executor_id: String,
    pub removed: bool,
    /// It had been removed already: nothing changed.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub already: bool,
}

pub struct Fleet {
    registry: Arc<Registry>,
    ledger: Arc<Ledger>,
    store: Store,
    /// The queue wakes when an executor stops draining.
    queue: Arc<Queue>,
    registrations: RateLimiter,
    registrations_per_minute: u32,
    max_executors: usize,
    /// `dispatch.executor_hosts`: the hosts serve may call (empty: any).
    executor_hosts: Vec<String>,
}

impl Fleet {
    pub(crate) fn new(core: &Core, config: &Config) -> Fleet {
        Fleet {
            registry: core.registry.clone(),
            ledger: core.ledger.clone(),
            store: core.store.clone(),
            queue: core.queue.clone(),
            registrations: RateLimiter::per_minute(config.server.registrations_per_minute),
            registrations_per_minute: config.server.registrations_per_minute,
            max_executors: config.server.max_executors,
            executor_hosts: config.dispatch.executor_hosts.clone(),
        }
    }

    /// Registration is open, so one address may only register so often (loopback excepted).
    pub fn admit_registration(&self, peer: IpAddr) -> Result<()> {
        if self.registrations.admit(peer, Instant::now()) {
            return Ok(());
        }
        tracing::warn!(%peer, "registration refused: rate limit");
        Err(Error::TooManyRequests(format!(
            "more than {} registrations a minute from {peer} (server.registrations_per_minute)",
            self.registrations_per_minute
        )))
    }

    /// Registers an executor. Returns a warning for a newer 1.x spec minor.
    pub async fn register(
        &self,
        payload: &RegisterPayload,
        peer: IpAddr,
        bearer: Option<&str>,
    ) -> Result<(Registered, Option<String>)> {
        let warning = match spec_support(&payload.spec_version) {
            SpecSupport::Exact => None,
            SpecSupport::NewerMinor => {
                let w = format!(
                    "spec_version {} is not {SPEC_VERSION}; served as executor.aiwg.io/v1 {SPEC_VERSION}, unknown fields are ignored",
                    payload.spec_version
                );
                tracing::warn!(executor_id = %payload.executor_id, spec_version = %payload.spec_version, "registering with an unknown 1.x spec version");
                Some(w)
            }
            SpecSupport::UnsupportedMajor => return Err(Error::UnsupportedSpecVersion(payload.spec_version.clone())),
        };
        self.check_endpoints(&payload.transport_endpoints)?;
        if let Some(c) = payload.capabilities.iter().find(|c| capabilities::serve_assigned(c)) {
            return Err(Error::Forbidden(format!(
                "capability {c} is one serve assigns to the HTTP agent runtimes it drives itself; an executor cannot \
                 declare it"
            )));
        }
        let registered = self.registry.register(payload, peer, bearer, self.max_executors).await?;
        if registered.rotated_for_non_loopback {
            tracing::warn!(executor_id = %registered.executor_id, %peer, "token rotated: first non-loopback registration");
        }
        Ok((registered, warning))
    }

    /// serve calls an executor's REST endpoint with the executor's token: only http(s), and only the
    /// configured hosts when `dispatch.executor_hosts` lists any (a registrant must not point serve at
    /// `file:///etc/passwd` or at another service on the network). Its other endpoints obey the same
    /// list: serve dials `ws` (`x-dial-in`), and none may name a host the operator did not allow.
    fn check_endpoints(&self, endpoints: &aiwg_contract::TransportEndpoints) -> Result<()> {
        let refuse = |field: &str, why: String| Error::SchemaViolation {
            what: "the register payload",
            details: vec![aiwg_contract::SchemaDetail {
                instance_path: format!("/transport_endpoints/{field}"),
                keyword: "format".into(),
                message: why,
            }],
        };
        let setting = "dispatch.executor_hosts";
        crate::net::allowed_url(&endpoints.rest, &self.executor_hosts, setting).map_err(|why| refuse("rest", why))?;
        crate::net::allowed_host(&endpoints.ws, &self.executor_hosts, setting).map_err(|why| refuse("ws", why))?;
        if let Some(grpc) = &endpoints.grpc {
            crate::net::allowed_host(grpc, &self.executor_hosts, setting).map_err(|why| refuse("grpc", why))?;
        }
        Ok(())
    }

    /// `DELETE /api/v1/executors/{id}` with the executor's own token: its sockets close, its token is
    /// revoked, it leaves the listings; its live missions are suspended (resumable executor) or failed.
    /// Nothing changes unless all of it is committed.
    pub async fn deregister(&self, executor_id: &str, bearer: Option<&str>) -> Result<()> {
        self.registry.authenticate(executor_id, bearer)?;
        self.end_identity(executor_id, "graceful_shutdown", false, Origin::Executor).await
    }

    /// `POST /api/v1/executors/{id}/remove` (operator): what a deregistration does, for an executor that
    /// will not do it itself (stale, lost its token), and the identity is released: anyone may register
    /// that id again, from anywhere, without a token. A connected executor is not removed under its feet.
    ///
    /// Idempotent, as the other controls: an executor that has left already (by its exact id) has its
    /// identity released if it still held one (the refusal of a registration from elsewhere tells the
    /// operator to remove it), and a repeated removal answers that it is removed already.
    pub async fn remove_executor(&self, reference: &str, by: &str) -> Result<Removed> {
        let executor_id = match self.registry.resolve(reference) {
            Ok(id) => id,
            Err(Error::NotFound(why)) => match self.registry.departed(reference) {
                Some(departed) => return self.release_departed(departed).await,
                None => return Err(Error::NotFound(why)),
            },
            Err(e) => return Err(e),
        };
        // A runtime's health is serve's probe, not a peer that would carry on under a removed identity.
        if self.registry.is_connected(&executor_id) && !self.registry.is_runtime(&executor_id) {
            return Err(Error::Conflict(format!(
                "executor {executor_id} is connected: stop it (or let it deregister itself) before removing it"
            )));
        }
        self.end_identity(&executor_id, "operator_deleted", true, Origin::Operator { name: by.to_owned() }).await?;
        tracing::info!(%executor_id, "executor removed by an operator; its identity is released");
        Ok(Removed { executor_id, removed: true, already: false })
    }

    async fn release_departed(&self, departed: super::registry::Departed) -> Result<Removed> {
        let executor_id = departed.executor_id;
        if departed.released {
            return Ok(Removed { executor_id, removed: true, already: true });
        }
        let _serial = self.registry.serialized().await;
        if let Some(changes) = self.registry.release_changes(&executor_id) {
            self.store.commit(changes).await?;
            self.registry.apply_release(&executor_id);
            tracing::info!(%executor_id, "departed executor's identity released by an operator");
        }
        Ok(Removed { executor_id, removed: true, already: false })
    }

    /// Ends an executor's registration (`reason` for `executor.deregistered`, the word of `origin`),
    /// suspending or failing its live missions, and with `release` frees the identity for anyone. One
    /// commit, then memory.
    async fn end_identity(&self, executor_id: &str, reason: &'static str, release: bool, origin: Origin) -> Result<()> {
        let _serial = self.registry.serialized().await;
        let resumable = self.registry.has_capability(executor_id, capabilities::RESUMABLE);
        let changes = self
            .registry
            .deregister_changes(executor_id, reason, release, origin)
            .ok_or_else(|| Error::NotFound(format!("executor {executor_id} is not registered")))?;
        let (to, said) = ServeEvent::executor_gone(resumable, "executor_deregistered");
        let owned = self.ledger.owned_by(executor_id);
        let owned: Vec<&str> = owned.iter().map(String::as_str).collect();
        let judge = |live: &Live| {
            let moves = !live.state().is_terminal() && live.state() != to;
            moves.then(|| Verdict::new(said.clone(), to))
        };
        // The registration ends in the same commit as its missions' transitions, or not at all.
        self.ledger.serve_decides(Some(executor_id), &owned, judge, changes).await?;
        self.registry.apply_deregister(executor_id, release);
        Ok(())
    }

    /// Drain (or undrain) an executor: no new missions while draining; its current ones go on.
    pub async fn set_draining(&self, executor_id: &str, draining: bool) -> Result<()> {
        self.registry
            .set_draining(executor_id, draining)
            .await
            .ok_or_else(|| Error::NotFound(format!("executor {executor_id} is not registered")))??;
        tracing::info!(executor_id, draining, "executor drain changed");
        if !draining {
            self.queue.kick();
        }
        Ok(())
    }
}
