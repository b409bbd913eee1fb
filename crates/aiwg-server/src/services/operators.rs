//! Who calls the operator routes, and whether their role lets them (issue 37).
//!
//! Three kinds of caller: nobody at all while the routes are open (no token configured nor stored,
//! which the configuration allows on loopback only: one anonymous admin); the configuration's plain
//! `server.operator_tokens`, admins named `config-1`, `config-2`, ... by position; and named operators
//! added through the API, each with its role and a token of its own of which only the hash is stored.
//! Adding the first named operator closes open routes; revoking the last one (with no configured
//! token) opens them again.
//!
//! The stored operators are read from the store at most every [`REFRESH`], when a call needs them, and
//! at once after this replica changed them: another replica's addition or revocation takes effect here
//! within that. A token is compared with every known one in constant time, as the configured ones
//! always were: timing tells nothing of which matched, or whether one did.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::watch;

use super::registry::Registry;
use crate::error::{Error, Result};
use crate::store::{Change, Store};
use aiwg_contract::clock;
use aiwg_contract::tokens::{self, TokenHash};
use aiwg_domain::operators::{invalid_name, OperatorRecord, Role, ANONYMOUS, CONFIG_PREFIX};

/// How stale this replica's copy of the stored operators may be.
pub(crate) const REFRESH: Duration = Duration::from_secs(2);

/// Who is calling, and as what.
#[derive(Clone, Debug, PartialEq)]
pub struct Who {
    /// What is bound to the caller is bound to this: a named operator's own id (a name may be given
    /// again after a revocation), the name of a configured admin (`config-N`) or of the anonymous one.
    pub id: String,
    pub name: String,
    pub role: Role,
}

impl Who {
    /// Whether their role allows what needs `needed`; the refusal names both.
    pub fn may(&self, needed: Role) -> Result<()> {
        if self.role.allows(needed) {
            return Ok(());
        }
        let article = if self.role == Role::Viewer { "a" } else { "an" };
        Err(Error::Forbidden(format!("this needs the {needed} role; {} is {article} {}", self.name, self.role)))
    }
}

/// A token this replica knows, and who it stands for.
struct Known {
    hash: TokenHash,
    who: Who,
}

/// The stored operators as last read.
struct Stored {
    active: Vec<Known>,
    read_at: Instant,
}

/// An operator as listed: never its token.
#[derive(Debug, Serialize)]
pub struct Listed {
    pub name: String,
    pub role: Role,
    /// Named by its position in `server.operator_tokens`: managed in the configuration, not here.
    pub configured: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_by: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revoked_at: Option<String>,
}

/// A named operator just added: the only time its token is shown.
#[derive(Debug, Serialize)]
pub struct Added {
    pub name: String,
    pub role: Role,
    pub token: String,
}

pub struct Operators {
    store: Store,
    registry: Arc<Registry>,
    configured: Vec<Known>,
    stored: Mutex<Stored>,
    /// Additions and revocations one at a time (a name checked, then written).
    changes: tokio::sync::Mutex<()>,
    /// Moves on each time the stored operators are read: who follows the event stream is looked at again.
    reread: watch::Sender<u64>,
}

impl Operators {
    pub(crate) async fn load(store: Store, registry: Arc<Registry>, configured: &[String]) -> Result<Operators> {
        let configured = configured
            .iter()
            .enumerate()
            .map(|(i, token)| {
                let name = format!("{CONFIG_PREFIX}{}", i + 1);
                let who = Who { id: name.clone(), name, role: Role::Admin };
                Known { hash: tokens::hash(token), who }
            })
            .collect();
        let active = Operators::active(&store).await?;
        let stored = Mutex::new(Stored { active, read_at: Instant::now() });
        let changes = tokio::sync::Mutex::new(());
        Ok(Operators { store, registry, configured, stored, changes, reread: watch::channel(0).0 })
    }

    async fn active(store: &Store) -> Result<Vec<Known>> {
        let all = store.operators().await?;
        let active = all.into_iter().filter(|o| o.revoked_at.is_none());
        Ok(active.map(|o| Known { hash: o.token_hash, who: Who { id: o.id, name: o.name, role: o.role } }).collect())
    }

    /// Reads the stored operators again when this replica's copy is older than [`REFRESH`] (or
    /// `now`). The first call to find it stale reads it; the calls meanwhile go on with the copy they
    /// have, rather than all reading the store at once. A store that fails leaves the copy as it was:
    /// a storage outage does not lock operators out, nor let a revoked one back in.
    async fn refresh(&self, now: bool) {
        {
            let mut stored = self.stored.lock().expect("operators lock");
            if !now && stored.read_at.elapsed() < REFRESH {
                return;
            }
            stored.read_at = Instant::now();
        }
        match Operators::active(&self.store).await {
            Ok(active) => {
                *self.stored.lock().expect("operators lock") = Stored { active, read_at: Instant::now() };
                self.reread.send_modify(|n| *n += 1);
            }
            Err(e) => tracing::warn!(error = %e, "cannot read the stored operators; the last copy stands"),
        }
    }

    /// Whether operator routes are open: no token configured nor stored (as this replica last read).
    pub fn is_open(&self) -> bool {
        self.configured.is_empty() && self.stored.lock().expect("operators lock").active.is_empty()
    }

    /// Whether `who` still stands: a configured admin always does, the anonymous one while the routes
    /// are open, a named operator until revoked.
    fn stands(&self, who: &Who) -> bool {
        if who.id == ANONYMOUS {
            return self.is_open();
        }
        let stored = self.stored.lock().expect("operators lock");
        self.configured.iter().chain(stored.active.iter()).any(|known| known.who.id == who.id)
    }

    /// A signal that turns true once `who` no longer stands ([`Operators::stands`]): at once when this
    /// replica revokes them, within [`REFRESH`] when another does. Watched by a task of its own, which
    /// ends when the signal's last receiver is dropped (the stream it guards ended).
    pub fn standing(self: &Arc<Self>, who: Who) -> watch::Receiver<bool> {
        let (revoked, signal) = watch::channel(false);
        let operators = Arc::clone(self);
        tokio::spawn(async move {
            let mut reread = operators.reread.subscribe();
            let mut look = tokio::time::interval(REFRESH);
            while operators.stands(&who) {
                tokio::select! {
                    () = revoked.closed() => return,
                    _ = reread.changed() => {}
                    _ = look.tick() => operators.refresh(false).await,
                }
            }
            let _ = revoked.send(true);
        });
        signal
    }

    /// Who `bearer` stands for, if it is an operator's token: every known token is compared.
    fn identify(&self, bearer: &str) -> Option<Who> {
        let hash = tokens::hash(bearer);
        let stored = self.stored.lock().expect("operators lock");
        let mut found = None;
        for known in self.configured.iter().chain(stored.active.iter()) {
            if tokens::hashes_equal(&known.hash, &hash) {
                found = Some(known.who.clone());
            }
        }
        found
    }

    /// Who calls with `bearer`, if their role allows what needs `needed` (see [`Operators::caller`]).
    pub async fn authorize(&self, bearer: Option<&str>, needed: Role) -> Result<Who> {
        let who = self.caller(bearer).await?;
        who.may(needed)?;
        Ok(who)
    }

    /// Who calls with `bearer`, whatever their role. Open routes: the anonymous admin. An executor's
    /// token never acts as an operator.
    pub async fn caller(&self, bearer: Option<&str>) -> Result<Who> {
        self.refresh(false).await;
        if self.is_open() {
            return Ok(Who { id: ANONYMOUS.into(), name: ANONYMOUS.into(), role: Role::Admin });
        }
        let token = bearer.ok_or(Error::Unauthorized("an operator bearer token is required"))?;
        let Some(who) = self.identify(token) else {
            if self.registry.is_token_of_an_executor(&tokens::hash(token)) {
                return Err(Error::Forbidden("executor tokens cannot be used on operator routes".into()));
            }
            return Err(Error::TokenInvalid(
                "the bearer token is not a valid operator token: check --token or AIWG_SERVE_TOKEN",
            ));
        };
        Ok(who)
    }

    /// Every operator: the configured tokens' admins, then the named ones (revoked ones too).
    pub async fn list(&self) -> Result<Vec<Listed>> {
        let configured = self.configured.iter().map(|k| Listed {
            name: k.who.name.clone(),
            role: k.who.role,
            configured: true,
            created_at: None,
            created_by: None,
            revoked_at: None,
        });
        let stored = self.store.operators().await?.into_iter().map(|o| Listed {
            name: o.name,
            role: o.role,
            configured: false,
            created_at: Some(clock::format(o.created_at)),
            created_by: Some(o.created_by),
            revoked_at: o.revoked_at.map(clock::format),
        });
        Ok(configured.chain(stored).collect())
    }

    /// Adds a named operator with a fresh token, shown once. A name in use is a conflict; a revoked
    /// one's name is given again.
    pub async fn add(&self, by: &Who, name: &str, role: Role) -> Result<Added> {
        if let Some(why) = invalid_name(name) {
            return Err(Error::InvalidOperator(why));
        }
        let _one = self.changes.lock().await;
        let existing = self.store.operators().await?.into_iter().find(|o| o.name == name);
        if existing.is_some_and(|o| o.revoked_at.is_none()) {
            return Err(Error::Conflict(format!("operator {name} exists; revoke it first to give the name again")));
        }
        let token = tokens::issue();
        let record = OperatorRecord {
            id: format!("op_{}", uuid::Uuid::new_v4().simple()),
            name: name.to_owned(),
            role,
            token_hash: tokens::hash(&token),
            created_at: clock::now(),
            created_by: by.name.clone(),
            revoked_at: None,
        };
        self.store.commit(vec![Change::PutOperator(Box::new(record))]).await?;
        self.refresh(true).await;
        tracing::info!(operator = name, %role, by = by.name, "operator added");
        Ok(Added { name: name.to_owned(), role, token })
    }

    /// Revokes a named operator: its token acts no more, here at once, on other replicas within
    /// [`REFRESH`].
    pub async fn revoke(&self, by: &Who, name: &str) -> Result<()> {
        let _one = self.changes.lock().await;
        let existing = self.store.operators().await?.into_iter().find(|o| o.name == name && o.revoked_at.is_none());
        let Some(mut record) = existing else {
            let configured = self.configured.iter().any(|k| k.who.name == name);
            return Err(if configured {
                Error::Conflict(format!(
                    "{name} is a token of server.operator_tokens: remove it from the configuration"
                ))
            } else {
                Error::NotFound(format!("no operator {name}"))
            });
        };
        record.revoked_at = Some(clock::now());
        // What the revoked token hashed to is forgotten: a row that stays must not match it again.
        record.token_hash = tokens::revoked();
        self.store.commit(vec![Change::PutOperator(Box::new(record))]).await?;
        self.refresh(true).await;
        tracing::info!(operator = name, by = by.name, "operator revoked");
        Ok(())
    }
}
