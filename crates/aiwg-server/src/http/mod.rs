//! The HTTP and WebSocket edge: one router per resource, merged here, with the shared state injected
//! once. Handlers translate between HTTP and the domain; they hold no business logic.

mod acted;
mod audit;
mod budgets;
mod error;
mod etag;
mod events;
mod executors;
mod extract;
mod guard;
mod health;
mod hitl;
mod idempotency;
mod missions;
mod operators;
mod outputs;
mod peer;
mod runtimes;
mod sandboxes;
mod sessions;
mod store;
mod ui;
mod usage;
mod webhooks;

use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::response::IntoResponse;
use axum::Router;
use tower_http::trace::{DefaultOnResponse, TraceLayer};
use tracing::Level;

use crate::app::App;
use crate::error::Error;
pub use peer::Vouched;

pub fn router(app: Arc<App>) -> Router {
    let limit = app.config.server.max_body_bytes;
    let operators = app.operators.clone();
    let guard = Arc::new(guard::Guard::new(&app.config.server, move || operators.is_open()));
    Router::new()
        .merge(health::router())
        .merge(executors::router())
        .merge(sessions::router())
        .merge(missions::router())
        .merge(outputs::router())
        .merge(events::router())
        .merge(sandboxes::router())
        .merge(runtimes::router())
        .merge(operators::router())
        .merge(audit::router())
        .merge(hitl::router())
        .merge(store::router())
        .merge(webhooks::router())
        .merge(budgets::router())
        .merge(usage::router())
        .merge(ui::router())
        .route_layer(axum::middleware::from_fn_with_state(app.clone(), idempotency::keyed))
        .route_layer(axum::middleware::from_fn_with_state(app.clone(), guard::declared_size))
        .route_layer(axum::middleware::from_fn_with_state(app.clone(), audit::record))
        .fallback(|| async { Error::NotFound("no such route".into()).into_response() })
        .method_not_allowed_fallback(|| async { Error::MethodNotAllowed.into_response() })
        .layer(DefaultBodyLimit::max(limit))
        .layer(axum::middleware::from_fn_with_state(guard, guard::guard))
        // One DEBUG line per answered request; no "started" line (it doubles every request) and no
        // ERROR per 5xx (a 503 for no executor available is a normal answer; real faults log themselves).
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(|request: &axum::extract::Request| {
                    // In tower_http's target, so that `info,tower_http=debug` (the setting of `docs/operations/observability.md`) shows
                    // each request's method and path beside its status and latency, not the latter alone.
                    tracing::debug_span!(target: "tower_http::trace", "request", method = %request.method(), uri = %redacted(request.uri()))
                })
                .on_request(())
                .on_response(DefaultOnResponse::new().level(Level::DEBUG))
                .on_failure(()),
        )
        .with_state(app)
}

/// A request's path and query as logged: the value of every `token` parameter (executor and sandbox
/// sockets, event streams) replaced, so that a DEBUG log never holds a credential.
/// A `Warning` header (RFC 7234 warn-code 299, persistent) carrying `text`; `None` when the text cannot
/// be a header value.
pub(crate) fn warning_header(text: &str) -> Option<axum::http::HeaderValue> {
    axum::http::HeaderValue::from_str(&format!("299 aiwg-serve \"{}\"", text.replace('"', "'"))).ok()
}

pub(crate) fn redacted(uri: &axum::http::Uri) -> String {
    let Some(query) = uri.query() else { return uri.path().to_owned() };
    let query: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            // The name as the query extractor decodes it: `%74oken` is `token` too.
            Some((name, _)) if is_token(name) => format!("{name}=REDACTED"),
            _ => pair.to_owned(),
        })
        .collect();
    format!("{}?{}", uri.path(), query.join("&"))
}

/// Whether a raw query parameter name decodes to `token` (in any case).
fn is_token(raw_name: &str) -> bool {
    form_urlencoded::parse(raw_name.as_bytes()).next().is_some_and(|(name, _)| name.eq_ignore_ascii_case("token"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn tokens_are_redacted_from_logged_uris() {
        let cases = [
            ("/ws/executors/e?%74oken=secret", "/ws/executors/e?%74oken=REDACTED"),
            ("/api/v1/events?t%6Fk%65n=secret&since=1", "/api/v1/events?t%6Fk%65n=REDACTED&since=1"),
            ("/ws/executors/e?token=exec_tk_secret", "/ws/executors/e?token=REDACTED"),
            ("/api/v1/events?since=4&TOKEN=op&mission_id=m", "/api/v1/events?since=4&TOKEN=REDACTED&mission_id=m"),
            ("/api/v1/missions?state=running", "/api/v1/missions?state=running"),
            ("/healthz", "/healthz"),
            ("/x?token", "/x?token"),
        ];
        for (uri, logged) in cases {
            assert_eq!(super::redacted(&uri.parse().unwrap()), logged);
        }
    }
}
