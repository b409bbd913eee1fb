//! The reclaim rule: who may register an executor id that is already known, and whether its token is
//! kept or a new one issued.

use std::net::IpAddr;

use crate::net::is_loopback;
use aiwg_contract::tokens;

/// What is known of an identity when its id is registered again.
pub struct Held<'a> {
    /// Not deregistered.
    pub live: bool,
    pub token_hash: &'a tokens::TokenHash,
    /// The address of its last registration (`None`: released by an operator, anyone may claim it).
    pub registered_from: Option<&'a str>,
    pub seen_non_loopback: bool,
    /// It has a live socket now.
    pub connected: bool,
    /// The registration names the endpoints the identity has now.
    pub same_endpoints: bool,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum TokenDecision {
    /// The caller presented the current token: it stays.
    Keep,
    /// A new token replaces the old one; `rotated_for_non_loopback` on the identity's first registration
    /// from off the host (upstream's one-time rotation, announced in `X-AIWG-Warning`).
    Issue { rotated_for_non_loopback: bool },
}

/// Why a registration may not take over a known identity.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Refusal {
    /// A live identity registered from elsewhere, or from off the host: only its token reclaims it.
    Live,
    /// A deregistered identity, claimed from another address than its own.
    ElsewhereDeregistered,
    /// A connected identity, claimed without its token for other endpoints: another local process
    /// would receive its dispatches.
    OtherEndpoints,
}

impl Refusal {
    pub fn message(&self, executor_id: &str) -> String {
        let what = match self {
            Refusal::Live => "is registered and was not registered from this loopback address",
            Refusal::ElsewhereDeregistered => "was registered from another address",
            Refusal::OtherEndpoints => "is connected with other transport_endpoints",
        };
        format!(
            "executor {executor_id} {what}: re-register with its current token (Authorization: Bearer), or have an \
             operator release the identity (aiwg-serve executors remove {executor_id})"
        )
    }
}

/// The reclaim rule: who may register an id that is already known.
///
/// With the identity's current token, anyone (it is the proof). Without it, a registration takes over
/// a *live* identity only from the loopback address it was registered from: the executor's own host,
/// which the contract trusts, and where the real agentic-sandbox executor re-registers without its
/// token on every socket cycle (always with the same endpoints); and while the identity is connected,
/// only for the endpoints it has (another process on the host would otherwise receive its dispatches). A deregistered identity (an executor that said goodbye and restarts)
/// may be claimed from the address it was registered from. Anything else is a takeover attempt: a
/// caller on the network would get the identity's missions, objectives and token.
pub fn decide_token(
    held: Option<Held<'_>>,
    bearer: Option<&str>,
    peer: IpAddr,
) -> std::result::Result<TokenDecision, Refusal> {
    let Some(held) = held else { return Ok(TokenDecision::Issue { rotated_for_non_loopback: false }) };
    let first_non_loopback = !is_loopback(peer) && !held.seen_non_loopback;
    let presented_current =
        held.live && bearer.is_some_and(|b| tokens::hashes_equal(&tokens::hash(b), held.token_hash));
    if presented_current {
        return Ok(if first_non_loopback {
            TokenDecision::Issue { rotated_for_non_loopback: true }
        } else {
            TokenDecision::Keep
        });
    }
    let same_address = held.registered_from.is_none_or(|from| from.parse::<IpAddr>().is_ok_and(|ip| ip == peer));
    match (held.live, same_address) {
        (true, true) if held.connected && !held.same_endpoints => return Err(Refusal::OtherEndpoints),
        (true, true) if is_loopback(peer) || held.registered_from.is_none() => {}
        (true, _) => return Err(Refusal::Live),
        (false, false) => return Err(Refusal::ElsewhereDeregistered),
        (false, true) => {}
    }
    Ok(TokenDecision::Issue { rotated_for_non_loopback: first_non_loopback })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reclaim rule, written out: (identity, token presented, where from) -> decision.
    #[test]
    fn reclaim_matrix() {
        use Refusal::*;
        use TokenDecision::*;
        let current = tokens::hash("current");
        let revoked = tokens::revoked();
        let held = |live: bool, from: Option<&'static str>, seen_lan: bool| {
            Some(Held {
                live,
                token_hash: if live { &current } else { &revoked },
                registered_from: from,
                seen_non_loopback: seen_lan,
                connected: false,
                same_endpoints: true,
            })
        };
        let connected = |same_endpoints: bool| {
            held(true, Some("127.0.0.1"), false).map(|h| Held { connected: true, same_endpoints, ..h })
        };
        let lo = "127.0.0.1";
        let lo2 = "127.0.0.2";
        let lan = "192.168.1.42";
        let lan2 = "192.168.1.43";
        let issue = Ok(Issue { rotated_for_non_loopback: false });
        let rotate = Ok(Issue { rotated_for_non_loopback: true });
        #[rustfmt::skip]
        let cases = [
            // new identity: anyone, anywhere
            (None, None, lan, issue),
            // live, current token: kept (rotated once on the first registration from off the host)
            (held(true, Some(lo), false), Some("current"), lo, Ok(Keep)),
            (held(true, Some(lo), false), Some("current"), lo2, Ok(Keep)),
            (held(true, Some(lo), false), Some("current"), lan, rotate),
            (held(true, Some(lan), true), Some("current"), lan2, Ok(Keep)),
            // live, no or a wrong token: only from its own loopback address
            (held(true, Some(lo), false), None, lo, issue),
            (held(true, Some(lo), false), Some("wrong"), lo, issue),
            (held(true, Some(lo), false), None, lo2, Err(Live)),
            (held(true, Some(lo), false), None, lan, Err(Live)),
            (held(true, Some(lan), true), None, lan, Err(Live)),
            (held(true, Some(lan), true), Some("wrong"), lan2, Err(Live)),
            // deregistered: from the address it was registered from
            (held(false, Some(lo), false), Some("current"), lo, issue),
            (held(false, Some(lan), true), None, lan, issue),
            (held(false, Some(lan), true), None, lan2, Err(ElsewhereDeregistered)),
            (held(false, Some(lo), false), None, lan, Err(ElsewhereDeregistered)),
            // released by an operator: anyone
            (held(false, None, true), None, lan2, issue),
            // connected: a tokenless reclaim keeps its endpoints; its token may move them
            (connected(true), None, lo, issue),
            (connected(false), None, lo, Err(OtherEndpoints)),
            (connected(false), Some("current"), lo, Ok(Keep)),
        ];
        for (i, (held, bearer, peer, expected)) in cases.into_iter().enumerate() {
            assert_eq!(decide_token(held, bearer, peer.parse().unwrap()), expected, "case {i}");
        }
    }
}
