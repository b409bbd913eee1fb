//! The operator event stream: `GET /ws/events` (WebSocket) and `GET /api/v1/events` (Server-Sent
//! Events). Both take `?since=N` (or `Last-Event-ID` for SSE), `?mission_id=`, `?executor_id=`, and, for
//! clients that cannot set headers (browsers), `?token=` instead of a bearer header.
//! `GET /api/v1/events?follow=false` answers one JSON page instead (`limit`, default 100, at most 1000),
//! for scripts that read the log without following it.

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::ws::{Message, Utf8Bytes, WebSocket, WebSocketUpgrade};
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use futures_util::stream;
use futures_util::StreamExt;
use serde::Deserialize;

use super::extract::{Bearer, Params};
use crate::app::App;
use crate::error::{Error, Result};
use crate::services::feed::{self as log, Filter, Next};

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
}

/// One page of the log: the events after `since` and where the next page starts.
#[derive(serde::Serialize)]
struct Page {
    events: Vec<log::Item>,
    next_since: i64,
}

const PAGE_DEFAULT: u32 = 100;
const PAGE_MAX: u32 = 1000;

/// Authorizes the follower and reads where it starts and what it wants.
fn open(
    app: &App,
    p: StreamParams,
    bearer: Option<String>,
    last_event_id: Option<&str>,
) -> Result<(Option<i64>, Filter)> {
    app.fleet.authorize_operator(bearer.or(p.token).as_deref())?;
    let since =
        // A reconnecting EventSource repeats its original URL: the Last-Event-ID it adds is the newer truth.
        match last_event_id.or(p.since.as_deref()) {
            None => None,
            Some(s) => Some(s.parse::<i64>().ok().filter(|n| *n >= 0).ok_or_else(|| {
                Error::InvalidQuery(format!("since {s:?} is not a sequence number (an integer >= 0)"))
            })?),
        };
    Ok((since, Filter { mission_id: p.mission_id, executor_id: p.executor_id }))
}

async fn sse(
    State(app): State<Arc<App>>,
    Bearer(bearer): Bearer,
    headers: HeaderMap,
    Params(p): Params<StreamParams>,
) -> Result<Response> {
    let last_event_id = headers.get("last-event-id").and_then(|v| v.to_str().ok());
    let (follow, limit) = (p.follow.unwrap_or(true), p.limit);
    let (since, filter) = open(&app, p, bearer, last_event_id)?;
    app.feed.resumable(since, &filter).await?;
    if !follow {
        let limit = limit.unwrap_or(PAGE_DEFAULT);
        if !(1..=PAGE_MAX).contains(&limit) {
            return Err(Error::InvalidQuery(format!("limit must be between 1 and {PAGE_MAX}")));
        }
        let since = since.unwrap_or(0);
        let events = app.feed.page(since, &filter, limit).await?;
        let next_since = events.last().map_or(since, |e| e.seq);
        let page = Page { events, next_since };
        return Ok(axum::Json(page).into_response());
    }
    let items = app.feed.follow(since, filter);
    let events = stream::unfold(items, |mut items| async move {
        let next = items.recv().await?;
        Some((Ok::<_, Infallible>(sse_event(next)), items))
    });
    Ok(Sse::new(events).keep_alive(KeepAlive::default()).into_response())
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
    Params(p): Params<StreamParams>,
    upgrade: std::result::Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
) -> Result<Response> {
    let upgrade = upgrade.map_err(|_| Error::UpgradeRequired)?;
    let (since, filter) = open(&app, p, bearer, None)?;
    app.feed.resumable(since, &filter).await?;
    let items = app.feed.follow(since, filter);
    let hub = app.config.hub.clone();
    // Operators send nothing but control frames: the hub's small read buffer, and a small message cap.
    let upgrade = upgrade
        .read_buffer_size(hub.read_buffer_bytes)
        .max_message_size(FOLLOWER_MAX_MESSAGE)
        .max_frame_size(FOLLOWER_MAX_MESSAGE);
    Ok(upgrade.on_upgrade(move |socket| follow_socket(socket, items, hub)))
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
                    break if end.reason == log::EndReason::Lagged { (4008, "lagged: resume with since") } else { (1001, "server shutdown") };
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
