//! The operator event stream: `GET /ws/events` (WebSocket) and `GET /api/v1/events` (Server-Sent
//! Events). Both take `?since=N` (or `Last-Event-ID` for SSE), `?mission_id=`, `?executor_id=`, and, for
//! clients that cannot set headers, `?token=` instead of a bearer header. A browser's WebSocket can set
//! one header, its subprotocols: it offers `aiwg.events` and `aiwg.bearer.<the token, base64url>`, and
//! the token stays out of URLs (and so out of proxies' logs); serve answers `aiwg.events`.
//! `GET /api/v1/events?follow=false` answers one JSON page instead (`limit`, default 100, at most 1000;
//! `max_bytes` of event data, 4 MiB by default; `tail=N` to start at the last N events; `before=S` for
//! the page of history below sequence S, `older` saying whether more precede it), for scripts and the
//! dashboard that read the log without following it. `progress=false` leaves `mission.progress` out,
//! in pages and streams alike.

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::ws::{Message, Utf8Bytes, WebSocket, WebSocketUpgrade};
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use futures_util::stream;
use futures_util::StreamExt;
use serde::Deserialize;

use super::extract::{page_limit, Bearer, Params};
use crate::app::App;
use crate::error::{Error, Result};
use crate::services::feed::{self as log, Filter, Next};
use crate::services::operators::Who;
use aiwg_domain::canonical_id;
use aiwg_domain::operators::Role;

pub(super) fn router() -> Router<Arc<App>> {
    Router::new().route("/api/v1/events", get(sse)).route("/ws/events", get(socket))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StreamParams {
    since: Option<String>,
    mission_id: Option<String>,
    executor_id: Option<String>,
    token: Option<String>,
    follow: Option<bool>,
    limit: Option<u32>,
    max_bytes: Option<usize>,
    tail: Option<u32>,
    before: Option<String>,
    progress: Option<bool>,
}

const PAGE_DEFAULT: u32 = 100;
const PAGE_MAX: u32 = 1000;
/// A page's event data, past its first event (which may be up to a frame, 1 MiB): what one reader
/// makes serve hold at once, however large the events.
const PAGE_BYTES_DEFAULT: usize = 4 << 20;
const PAGE_BYTES_MIN: usize = 1024;
const PAGE_BYTES_MAX: usize = 16 << 20;

/// Where a follower starts, what it wants, and who it is.
struct Opened {
    since: Option<i64>,
    filter: Filter,
    who: Who,
}

/// Authorizes the follower and reads where it starts and what it wants.
async fn open(app: &App, p: StreamParams, bearer: Option<String>, last_event_id: Option<&str>) -> Result<Opened> {
    let who = app.operators.authorize(bearer.or(p.token).as_deref(), Role::Viewer).await?;
    // A reconnecting EventSource repeats its original URL: the Last-Event-ID it adds is the newer truth.
    let since = sequence("since", last_event_id.or(p.since.as_deref()), 0)?;
    let filter = Filter {
        mission_id: p.mission_id,
        executor_id: p.executor_id.as_deref().map(canonical_id),
        skip_progress: p.progress == Some(false),
    };
    Ok(Opened { since, filter, who })
}

impl Opened {
    /// Follows the log as asked, until the follower's operator no longer stands (revoked: the stream
    /// ends at once with `end` `revoked`, as each later request of theirs is refused).
    fn follow(self, app: &App) -> tokio::sync::mpsc::Receiver<Next> {
        app.feed.follow(self.since, self.filter, app.operators.standing(self.who))
    }
}

/// A sequence number given as `name`, at least `min`.
fn sequence(name: &str, given: Option<&str>, min: i64) -> Result<Option<i64>> {
    let Some(s) = given else { return Ok(None) };
    let n = s.parse::<i64>().ok().filter(|n| *n >= min);
    n.map(Some)
        .ok_or_else(|| Error::InvalidQuery(format!("{name} {s:?} is not a sequence number (an integer >= {min})")))
}

async fn sse(
    State(app): State<Arc<App>>,
    Bearer(bearer): Bearer,
    headers: HeaderMap,
    Params(p): Params<StreamParams>,
) -> Result<Response> {
    let last_event_id = headers.get("last-event-id").and_then(|v| v.to_str().ok());
    let (follow, limit, max_bytes, tail) = (p.follow.unwrap_or(true), p.limit, p.max_bytes, p.tail);
    let before = sequence("before", p.before.as_deref(), 1)?;
    let opened = open(&app, p, bearer, last_event_id).await?;
    let (since, filter) = (opened.since, &opened.filter);
    app.feed.resumable(since, filter).await?;
    if !follow {
        let limit = page_limit(limit, PAGE_DEFAULT, PAGE_MAX)?;
        let max_bytes = max_bytes.unwrap_or(PAGE_BYTES_DEFAULT);
        if !(PAGE_BYTES_MIN..=PAGE_BYTES_MAX).contains(&max_bytes) {
            return Err(Error::InvalidQuery(format!(
                "max_bytes must be between {PAGE_BYTES_MIN} and {PAGE_BYTES_MAX}"
            )));
        }
        let start = match (tail, since) {
            (Some(_), Some(_)) => return Err(Error::InvalidQuery("tail and since exclude each other".into())),
            (_, Some(_)) if before.is_some() => {
                return Err(Error::InvalidQuery("before and since exclude each other".into()))
            }
            (Some(n), None) if !(1..=PAGE_MAX).contains(&n) => {
                return Err(Error::InvalidQuery(format!("tail must be between 1 and {PAGE_MAX}")))
            }
            (Some(n), None) => log::Start::Tail { n, before },
            (None, None) if before.is_some() => log::Start::Tail { n: limit, before },
            (None, since) => log::Start::After(since.unwrap_or(0)),
        };
        return Ok(page_body(app.feed.page(start, filter, limit, max_bytes).await?));
    }
    if tail.is_some() || max_bytes.is_some() || before.is_some() {
        return Err(Error::InvalidQuery("tail, before and max_bytes are for pages (follow=false)".into()));
    }
    let items = opened.follow(&app);
    let events = stream::unfold(items, |mut items| async move {
        let next = items.recv().await?;
        Some((Ok::<_, Infallible>(sse_event(next)), items))
    });
    Ok(Sse::new(events).keep_alive(KeepAlive::default()).into_response())
}

/// A page as JSON, `{"events": [...], "next_since": N, "more": bool}`, written one event at a time: the
/// page's events are in memory once (as read), not again as one serialized document.
fn page_body(page: log::Page) -> Response {
    let log::Page { events, next_since, more, older } = page;
    let head = stream::once(async { Bytes::from_static(b"{\"events\":[") });
    let items = stream::iter(events.into_iter().enumerate()).map(move |(i, item)| {
        let mut chunk = if i == 0 { Vec::new() } else { vec![b','] };
        serde_json::to_writer(&mut chunk, &item).expect("items serialize");
        Bytes::from(chunk)
    });
    let older = older.map(|o| format!(",\"older\":{o}")).unwrap_or_default();
    let tail =
        stream::once(async move { Bytes::from(format!("],\"next_since\":{next_since},\"more\":{more}{older}}}")) });
    let body = Body::from_stream(head.chain(items).chain(tail).map(Ok::<_, Infallible>));
    ([(CONTENT_TYPE, "application/json")], body).into_response()
}

fn sse_event(next: Next) -> Event {
    match next {
        Next::Event(item) => Event::default()
            .id(item.seq.to_string())
            .event(item.envelope.event.clone())
            .data(serde_json::to_string(&item).expect("items serialize")),
        Next::End(end) => Event::default().event("end").data(serde_json::to_string(&end).expect("ends serialize")),
    }
}

async fn socket(
    State(app): State<Arc<App>>,
    Bearer(bearer): Bearer,
    headers: HeaderMap,
    Params(p): Params<StreamParams>,
    upgrade: std::result::Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
) -> Result<Response> {
    let upgrade = upgrade.map_err(|_| Error::UpgradeRequired)?.protocols([EVENTS_PROTOCOL]);
    let opened = open(&app, p, bearer.or_else(|| offered_token(&headers)), None).await?;
    app.feed.resumable(opened.since, &opened.filter).await?;
    let items = opened.follow(&app);
    let hub = app.config.hub.clone();
    // Operators send nothing but control frames: the hub's small read buffer, and a small message cap.
    let upgrade = upgrade
        .read_buffer_size(hub.read_buffer_bytes)
        .max_message_size(FOLLOWER_MAX_MESSAGE)
        .max_frame_size(FOLLOWER_MAX_MESSAGE);
    Ok(upgrade.on_upgrade(move |socket| follow_socket(socket, items, hub)))
}

/// The subprotocol serve answers a browser that offered its token as another.
const EVENTS_PROTOCOL: &str = "aiwg.events";
const BEARER_PROTOCOL: &str = "aiwg.bearer.";

/// The token a WebSocket client offered as a subprotocol, `aiwg.bearer.<base64url of the token>` (a
/// subprotocol is a header's token: any character a token may hold travels encoded).
fn offered_token(headers: &HeaderMap) -> Option<String> {
    use base64::Engine;
    let offered = headers.get_all(axum::http::header::SEC_WEBSOCKET_PROTOCOL).iter().filter_map(|v| v.to_str().ok());
    let encoded = offered.flat_map(|v| v.split(',')).find_map(|p| p.trim().strip_prefix(BEARER_PROTOCOL))?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(encoded).ok()?;
    String::from_utf8(bytes).ok().filter(|t| !t.is_empty())
}

/// The largest message an operator's event socket may send (it has nothing to say but close frames).
const FOLLOWER_MAX_MESSAGE: usize = 4096;

/// Writes the stream to an operator's socket. A stream that ends (lagged, shutdown) sends its `End` as a
/// last text frame, then closes (4008 for lag, 1001 for shutdown) so that the client knows to resume.
async fn follow_socket(socket: WebSocket, mut items: tokio::sync::mpsc::Receiver<Next>, hub: crate::config::HubConfig) {
    let (sink, mut incoming) = socket.split();
    let mut sink = crate::hub::Writer::new(sink, &hub);
    let close = loop {
        tokio::select! {
            next = items.recv() => match next {
                Some(Next::Event(item)) => {
                    let text = serde_json::to_string(&item).expect("items serialize");
                    if !sink.send(Message::Text(Utf8Bytes::from(text))).await {
                        return;
                    }
                }
                Some(Next::End(end)) => {
                    let text = serde_json::json!({"end": end}).to_string();
                    sink.send(Message::Text(Utf8Bytes::from(text))).await;
                    break match end.reason {
                        log::EndReason::Lagged => (4008, "lagged: resume with since"),
                        log::EndReason::Revoked => (4001, "Unauthorized: the operator was revoked"),
                        _ => (1001, "server shutdown"),
                    };
                }
                None => return,
            },
            frame = incoming.next() => match frame {
                Some(Ok(Message::Close(_))) | None => return,
                Some(Err(e)) => match crate::hub::read_error_close(&e) {
                    Some(close) => break close,
                    None => return,
                },
                Some(Ok(_)) => {}
            },
        }
    };
    sink.send(crate::hub::close_message(close.0, close.1)).await;
}
