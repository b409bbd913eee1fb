//! The HTTP and WebSocket edge: one router per resource, merged here, with the shared state injected
//! once. Handlers translate between HTTP and the domain; they hold no business logic.

mod error;
mod etag;
mod events;
mod executors;
mod extract;
mod guard;
mod health;
mod missions;
mod runtimes;
mod sandboxes;
mod sessions;

use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::response::IntoResponse;
use axum::Router;
use tower_http::trace::{DefaultMakeSpan, DefaultOnResponse, TraceLayer};
use tracing::Level;

use crate::app::App;
use crate::error::Error;

pub fn router(app: Arc<App>) -> Router {
    let limit = app.config.server.max_body_bytes;
    Router::new()
        .merge(health::router())
        .merge(executors::router())
        .merge(sessions::router())
        .merge(missions::router())
        .merge(events::router())
        .merge(sandboxes::router())
        .merge(runtimes::router())
        .fallback(|| async { Error::NotFound("no such route".into()).into_response() })
        .method_not_allowed_fallback(|| async { Error::MethodNotAllowed.into_response() })
        .layer(DefaultBodyLimit::max(limit))
        .layer(axum::middleware::from_fn_with_state(Arc::new(guard::Guard::new(&app.config.server)), guard::guard))
        // One DEBUG line per answered request; no "started" line (it doubles every request) and no
        // ERROR per 5xx (a 503 for no executor available is a normal answer; real faults log themselves).
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(DefaultMakeSpan::new().level(Level::DEBUG))
                .on_request(())
                .on_response(DefaultOnResponse::new().level(Level::DEBUG))
                .on_failure(()),
        )
        .with_state(app)
}
