//! Executors serve may open a WebSocket to itself (`serve::dial`), for those that only listen.

use super::Registry;
use aiwg_domain::capabilities;

/// An executor serve may open a WebSocket to, as [`Registry::listening`] finds it.
pub struct Listening {
    pub executor_id: String,
    pub ws: String,
    pub token: String,
    /// It declares that it waits to be dialled (`x-dial-in`).
    pub dial_in: bool,
    pub connected: bool,
}

impl Registry {
    /// The WebSocket executors serve could open a socket to (`serve::dial`): registered, with a
    /// `ws://` or `wss://` endpoint, and with a token serve knows (it registered in this process).
    pub fn listening(&self) -> Vec<Listening> {
        let inner = self.inner.read().expect("registry lock");
        let entries = inner.order.iter().filter_map(|id| inner.executors.get(id));
        entries
            .filter(|e| e.live() && e.row.runtime.is_none())
            .filter_map(|e| {
                let ws = &e.row.identity.transport_endpoints.ws;
                let dialable = ws.starts_with("ws://") || ws.starts_with("wss://");
                Some(Listening {
                    executor_id: e.row.identity.executor_id.clone(),
                    ws: dialable.then(|| ws.clone())?,
                    token: e.token.clone()?,
                    dial_in: e.row.identity.capabilities.iter().any(|c| c == capabilities::DIAL_IN),
                    connected: e.connected(),
                })
            })
            .collect()
    }
}
