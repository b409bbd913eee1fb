//! Executors serve may open a WebSocket to itself (`serve::dial`), for those that only listen.

use super::Registry;
use aiwg_domain::capabilities;

/// An executor serve may open a WebSocket to, as [`Registry::listening`] finds it.
pub struct Listening {
    pub executor_id: String,
    /// The endpoint as registered (what a change of registration is told by).
    pub ws: String,
    /// What serve dials: the endpoint's scheme, host and port, and serve's own path ([`dial_url`]).
    pub url: String,
    pub token: String,
    pub connected: bool,
}

impl Registry {
    /// The executors serve opens a socket to (`serve::dial`): registered, declaring `x-dial-in`, with a
    /// `ws://` or `wss://` endpoint, and with a token serve knows (it registered in this process).
    pub fn listening(&self) -> Vec<Listening> {
        let inner = self.inner.read().expect("registry lock");
        let entries = inner.order.iter().filter_map(|id| inner.executors.get(id));
        entries
            .filter(|e| e.live() && e.row.runtime.is_none())
            .filter(|e| e.row.identity.capabilities.iter().any(|c| c == capabilities::DIAL_IN))
            .filter_map(|e| {
                let executor_id = &e.row.identity.executor_id;
                let ws = &e.row.identity.transport_endpoints.ws;
                let token = e.token.clone()?;
                Some(Listening {
                    url: dial_url(ws, executor_id, &token)?,
                    executor_id: executor_id.clone(),
                    ws: ws.clone(),
                    token,
                    connected: e.connected(),
                })
            })
            .collect()
    }
}

/// The URL serve dials for an executor whose `transport_endpoints.ws` is `ws`: its scheme (`ws` or
/// `wss`), host and port, and the path the contract names, `/ws/executors/{id}?token=`. Nothing else of
/// the registrant's URL is used: its path, query and fragment would let whoever registers choose the
/// request serve sends, with the executor's token, to that host. `None` for any other endpoint.
pub(crate) fn dial_url(ws: &str, executor_id: &str, token: &str) -> Option<String> {
    let endpoint = reqwest::Url::parse(ws).ok()?;
    if !matches!(endpoint.scheme(), "ws" | "wss") {
        return None;
    }
    let host = endpoint.host()?;
    let port = endpoint.port().map(|p| format!(":{p}")).unwrap_or_default();
    let id = aiwg_contract::encode_segment(executor_id);
    let token = aiwg_contract::encode_segment(token);
    Some(format!("{}://{host}{port}/ws/executors/{id}?token={token}", endpoint.scheme()))
}

#[cfg(test)]
mod tests {
    use super::dial_url;

    #[test]
    fn a_dial_url_keeps_only_the_scheme_host_and_port_of_the_endpoint() {
        let cases = [
            ("ws://127.0.0.1:9999/internal/admin?x=#", "ws://127.0.0.1:9999/ws/executors/e-1?token=t"),
            ("wss://exec.example/some/path", "wss://exec.example/ws/executors/e-1?token=t"),
            ("ws://[::1]:80/", "ws://[::1]/ws/executors/e-1?token=t"),
            ("ws://user:pw@10.0.0.1:1/x", "ws://10.0.0.1:1/ws/executors/e-1?token=t"),
        ];
        for (ws, url) in cases {
            assert_eq!(dial_url(ws, "e-1", "t").as_deref(), Some(url), "{ws}");
        }
        assert_eq!(dial_url("ws://h/", "a b", "t").as_deref(), Some("ws://h/ws/executors/a%20b?token=t"));
        for not in ["http://h/", "ws://", "not a url", "/relative"] {
            assert_eq!(dial_url(not, "e", "t"), None, "{not}");
        }
    }
}
