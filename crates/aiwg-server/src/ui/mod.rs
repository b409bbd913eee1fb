//! The operator dashboard's files: three static files compiled into the binary, so that `aiwg-serve
//! serve` and a browser are all an operator needs (no Node toolchain, no CDN; these machines are
//! offline). `http/ui.rs` serves them at `/`, `/ui/app.js` and `/ui/style.css`.
//!
//! The page is a client of the public operator API and nothing else: it reads `/api/v1/*`, follows
//! `/api/v1/events`, and sends the same control requests the CLI sends, with the operator's token as a
//! bearer header (never in a URL, so never in a log line). Everything it shows from executors or
//! operators is set as text, never as markup; the Content-Security-Policy below forbids inline script as
//! a second line of defence.

/// Only this origin's scripts, styles and connections; no inline script or style, no plugins, no
/// framing, no form posts anywhere (the page sends its requests with `fetch`).
pub(crate) const PAGE_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

pub(crate) struct Asset {
    pub(crate) body: &'static str,
    pub(crate) content_type: &'static str,
}

pub(crate) const PAGE: usize = 0;
pub(crate) const SCRIPT: usize = 1;
pub(crate) const STYLE: usize = 2;

pub(crate) static ASSETS: [Asset; 3] = [
    Asset { body: include_str!("index.html"), content_type: "text/html; charset=utf-8" },
    Asset { body: include_str!("app.js"), content_type: "text/javascript; charset=utf-8" },
    Asset { body: include_str!("style.css"), content_type: "text/css; charset=utf-8" },
];
