//! The request side of a client connection: our limits on the request head, the router as hyper's
//! service, and the answer's body that keeps the connection busy until it is written.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::extract::ConnectInfo;
use axum::http::{Request, Response};
use axum::response::IntoResponse;
use axum::Router;
use hyper::body::{Frame, Incoming, SizeHint};
use tokio::sync::watch;
use tower::Service;

use super::{MAX_HEADERS, MAX_HEAD_BYTES, MAX_URI_BYTES};
use crate::error::Error;
use crate::http::Vouched;
use crate::serve::activity::{Activity, InFlight};
use crate::serve::client::Believed;

/// The router as hyper's service for one connection: the client's address for `ConnectInfo` (as far as
/// serve believes it, see [`Believed`]), what vouches for the peer (`http::Vouched`), our limits on the
/// head, and the connection marked busy until the answer is written.
pub(super) fn edge_service(
    routes: watch::Receiver<Router>,
    peer: SocketAddr,
    believed: Believed,
    activity: Arc<Activity>,
    vouched: Option<Vouched>,
) -> impl hyper::service::Service<
    Request<Incoming>,
    Response = Response<BusyBody>,
    Error = Infallible,
    Future = impl std::future::Future<Output = Result<Response<BusyBody>, Infallible>> + Send,
> + Clone {
    hyper::service::service_fn(move |request: Request<Incoming>| {
        let in_flight = activity.request_started();
        let routed = match check_head(&request) {
            Ok(()) => {
                let mut request = request.map(Body::new);
                let client = believed.client(request.headers_mut(), peer);
                request.extensions_mut().insert(ConnectInfo(client));
                if let Some(vouched) = &vouched {
                    request.extensions_mut().insert(vouched.clone());
                }
                let mut router = routes.borrow().clone();
                Ok(router.call(request))
            }
            Err(refusal) => {
                tracing::debug!(method = %request.method(), reason = %refusal, "request head refused");
                Err(refusal)
            }
        };
        async move {
            let response = match routed {
                Ok(routed) => routed.await.unwrap_or_else(|never| match never {}),
                Err(refusal) => refusal.into_response(),
            };
            Ok(response.map(|body| BusyBody { body, _in_flight: in_flight }))
        }
    })
}

/// Our limits on the request head, below hyper's, so that they are answered as JSON errors.
fn check_head<B>(request: &Request<B>) -> Result<(), Error> {
    let target = request.uri().path_and_query().map_or(0, |p| p.as_str().len())
        + request.uri().authority().map_or(0, |a| a.as_str().len());
    if target > MAX_URI_BYTES {
        return Err(Error::UriTooLong(MAX_URI_BYTES));
    }
    let headers = request.headers();
    if headers.len() > MAX_HEADERS {
        return Err(Error::HeadersTooLarge(format!(
            "the request has {} header fields; at most {MAX_HEADERS} are accepted",
            headers.len()
        )));
    }
    // As on the wire: "name: value\r\n" per field, after the request line.
    let size = request.method().as_str().len()
        + target
        + 12
        + headers.iter().map(|(name, value)| name.as_str().len() + value.len() + 4).sum::<usize>();
    if size > MAX_HEAD_BYTES {
        return Err(Error::HeadersTooLarge(format!(
            "the request head is about {size} bytes; at most {MAX_HEAD_BYTES} are accepted"
        )));
    }
    Ok(())
}

/// An answer's body, holding its connection busy until hyper has written it (and dropped it).
pub(super) struct BusyBody {
    body: Body,
    _in_flight: InFlight,
}

impl hyper::body::Body for BusyBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
