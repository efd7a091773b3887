//! What the gRPC adapters share: their channels, each call's status as an
//! upstream error, the resend of a call whose connection failed under it,
//! the requests they send and the reader of a `StreamOrders` answer.
//!
//! One tonic `Channel` is one HTTP/2 connection, so a budget of N is N
//! channels, picked round-robin. Each channel connects through
//! [`wire::connect`], lazily, and reconnects by itself when its connection
//! breaks.

use std::sync::Arc;

use hyper_util::rt::TokioIo;
use model::v2::field_mask;
use proto::order::v2::{ListOrdersRequest, StreamOrdersRequest, StreamOrdersResponse};
use tonic::transport::{Channel, Endpoint};

use crate::metrics::TransportMetrics;
use crate::upstream::endpoints::Endpoints;
use crate::upstream::parts;
use crate::upstream::port::{OrderQuery, UpstreamError, to_domain};
use crate::upstream::semconv;
use crate::upstream::wire;

/// `pool_size` lazily connected channels whose sockets are counted; over
/// TLS (ALPN h2) when it is on. `max_frame`: the largest DATA frame the
/// channels accept, when not HTTP/2's default 16 KiB (a twin's setting).
pub(crate) fn channels(
    ep: &Endpoints,
    metrics: &Arc<TransportMetrics>,
    max_frame: Option<u32>,
) -> anyhow::Result<Vec<Channel>> {
    let dial = ep.dialer(wire::authority(&ep.grpc_url)?, tls::ALPN_H2, metrics);
    // The scheme only becomes `:scheme`: the connector below does the TLS.
    let mut url = ep.grpc_url.clone().into_parts();
    url.scheme = Some(dial.scheme());
    let url = http::Uri::from_parts(url)?;
    let mut endpoint = Endpoint::from(url)
        .connect_timeout(ep.live.connect_timeout.unwrap_or(ep.timeout))
        .max_frame_size(max_frame);
    // HTTP/2 PINGs on every channel, idle or not, each answered within the
    // same time or the connection is closed (and made again).
    if let Some(k) = ep.live.keepalive {
        endpoint = endpoint
            .http2_keep_alive_interval(k)
            .keep_alive_timeout(k)
            .keep_alive_while_idle(true);
    }
    Ok((0..ep.pool_size)
        .map(|_| {
            let dial = dial.clone();
            let metrics = metrics.clone();
            endpoint.connect_with_connector_lazy(tower::service_fn(move |_: http::Uri| {
                let dial = dial.clone();
                let metrics = metrics.clone();
                async move { dial.connect(&metrics).await.map(TokioIo::new) }
            }))
        })
        .collect())
}

/// A tonic status as an upstream error.
pub(crate) fn from_status(s: &tonic::Status) -> UpstreamError {
    use tonic::Code;
    let message = s.message().to_owned();
    match s.code() {
        Code::DeadlineExceeded => UpstreamError::Timeout(message),
        // tonic enforces the deadline it sends on the client side too, and
        // reports it as CANCELLED with exactly this message.
        Code::Cancelled if message == tonic::TimeoutExpired(()).to_string() => {
            UpstreamError::Timeout(message)
        }
        // A refused or broken connection reaches us as Unavailable or, when
        // the channel could not even become ready, as Unknown. Its cause (a
        // TLS alert, a reset) is in the sources, not in tonic's message.
        Code::Unavailable | Code::Unknown | Code::Cancelled => {
            let cause = std::error::Error::source(s).map(wire::chain);
            UpstreamError::Unavailable(match cause {
                Some(c) if !message.contains(&c) => format!("{message}: {c}"),
                _ => message,
            })
        }
        code => UpstreamError::Rejected {
            status: format!("{code:?}"),
            message,
        },
    }
}

/// A call's status as an upstream error, its code recorded on the call's
/// span.
pub(crate) fn failed(s: tonic::Status) -> UpstreamError {
    semconv::record_grpc_code(s.code());
    from_status(&s)
}

/// Whether a call failed on its connection before order-service answered:
/// tonic made the status from a transport error (an h2 or hyper error, a
/// reset, a connection closed under the call, as when a rotated connection
/// goes away under a call in flight), which a status order-service sent
/// never carries. hyper's "operation was canceled", a request its
/// connection closed before sending, reaches us as CANCELLED with that
/// cause. A timeout is not one: sending again would only wait twice.
pub(crate) fn connection_failed(s: &tonic::Status) -> bool {
    use tonic::Code;
    let Some(cause) = std::error::Error::source(s) else {
        return false;
    };
    let late =
        cause.is::<tonic::TimeoutExpired>() || s.message() == tonic::TimeoutExpired(()).to_string();
    !late
        && matches!(
            s.code(),
            Code::Internal | Code::Unavailable | Code::Unknown | Code::Cancelled
        )
}

/// The pauses before each resend of a call whose connection failed under
/// it. A request can land in the queue of a connection task that is already
/// ending (hyper's "operation was canceled: connection closed"); sent again
/// at once, on a busy machine, it can meet the same dying task before the
/// channel has noticed and reconnected. A short pause lets the task finish;
/// the second, longer one covers a reconnect that itself met a closing
/// connection. At most 55 ms are added to a call that fails anyway.
const RESEND_PAUSES: [std::time::Duration; 2] = [
    std::time::Duration::from_millis(5),
    std::time::Duration::from_millis(50),
];

/// The answer of `call`, made again when its connection failed under it
/// (see [`connection_failed`] and [`RESEND_PAUSES`]): only for calls that
/// read and change nothing, as the REST adapters resend a GET whose pooled
/// connection had died.
pub(crate) async fn resent<T, Fut>(mut call: impl FnMut() -> Fut) -> Result<T, UpstreamError>
where
    Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
{
    let mut answer = call().await;
    for pause in RESEND_PAUSES {
        match &answer {
            Err(s) if connection_failed(s) => {
                tracing::debug!(status = %s, ?pause, "a gRPC call's connection failed; sending it again");
                tokio::time::sleep(pause).await;
                answer = call().await;
            }
            _ => break,
        }
    }
    answer
        .map(|r| {
            semconv::record_grpc_code(tonic::Code::Ok);
            // tonic merges a unary call's trailers into its metadata.
            parts::server_timing(r.metadata().as_ref());
            r.into_inner()
        })
        .map_err(failed)
}

/// `StreamOrders`' request for `q`.
pub(crate) fn stream_request(q: &OrderQuery) -> StreamOrdersRequest {
    StreamOrdersRequest {
        user_id: q.user_id.to_string(),
        page_size: page_size(q),
        page_token: String::new(),
        read_mask: field_mask(q.fields),
    }
}

/// The `ListOrders` query of `q`: its first page.
pub(crate) fn list_request(q: &OrderQuery) -> ListOrdersRequest {
    ListOrdersRequest {
        user_id: q.user_id.to_string(),
        page_size: page_size(q),
        page_token: String::new(),
        read_mask: field_mask(q.fields),
    }
}

pub(crate) fn page_size(q: &OrderQuery) -> i32 {
    i32::try_from(q.limit).unwrap_or(i32::MAX)
}

/// The orders of a `StreamOrders` answer to `q`, one per message, to the
/// end of the stream; its trailers read for order-service's account when it
/// is recorded.
pub(crate) async fn read_stream(
    q: &OrderQuery,
    stream: &mut tonic::Streaming<StreamOrdersResponse>,
) -> Result<Vec<model::Order>, UpstreamError> {
    let mut orders = Vec::with_capacity(q.limit.min(10_000) as usize);
    while let Some(msg) = stream.message().await.map_err(failed)? {
        let o = msg.order.ok_or_else(|| {
            UpstreamError::Protocol("a StreamOrdersResponse carried no order".to_owned())
        })?;
        orders.push(o);
    }
    // The stream ended without an error: its status was OK.
    semconv::record_grpc_code(tonic::Code::Ok);
    if parts::recording()
        && let Some(trailers) = stream.trailers().await.map_err(failed)?
    {
        parts::server_timing(trailers.as_ref());
    }
    parts::decoding(|| to_domain(orders))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_status_made_from_a_transport_error_counts_as_a_failed_connection() {
        // What order-service sends: no source, whatever the code.
        assert!(!connection_failed(&tonic::Status::internal("a bug")));
        assert!(!connection_failed(&tonic::Status::unavailable(
            "store down"
        )));
        // What tonic makes of a connection that broke under the call.
        let broken = tonic::Status::from_error(Box::new(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "reset",
        )));
        assert!(std::error::Error::source(&broken).is_some(), "{broken:?}");
        assert!(connection_failed(&broken), "{broken:?}");
        // A deadline is never sent twice.
        let late = tonic::Status::from_error(Box::new(tonic::TimeoutExpired(())));
        assert!(!connection_failed(&late), "{late:?}");
        // A request its connection closed before sending (hyper's
        // "operation was canceled"): CANCELLED, with the transport's cause.
        let mut canceled = tonic::Status::cancelled("operation was canceled");
        canceled.set_source(Arc::new(std::io::Error::other("connection closed")));
        assert!(connection_failed(&canceled), "{canceled:?}");
        // A CANCELLED that order-service sent carries no cause.
        assert!(!connection_failed(&tonic::Status::cancelled(
            "by the server"
        )));
    }

    fn broken() -> tonic::Status {
        tonic::Status::from_error(Box::new(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "reset",
        )))
    }

    /// A call that fails on its connection `fails` times, then answers;
    /// returns its result and how often it was made.
    async fn flaky(fails: usize) -> (Result<u32, UpstreamError>, usize) {
        let made = std::sync::atomic::AtomicUsize::new(0);
        let answer = resent(|| {
            let n = made.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async move {
                if n < fails {
                    Err(broken())
                } else {
                    Ok(tonic::Response::new(7))
                }
            }
        })
        .await;
        (answer, made.into_inner())
    }

    #[tokio::test]
    async fn a_call_whose_connection_failed_is_sent_again_at_most_twice() {
        let (answer, made) = flaky(0).await;
        assert_eq!((answer.ok(), made), (Some(7), 1));
        let (answer, made) = flaky(2).await;
        assert_eq!((answer.ok(), made), (Some(7), 3));
        let (answer, made) = flaky(3).await;
        assert!(
            matches!(answer, Err(UpstreamError::Unavailable(_))),
            "{answer:?}"
        );
        assert_eq!(made, 3, "gives up after the pauses");
        // An answer from order-service is never sent again.
        let made = std::sync::atomic::AtomicUsize::new(0);
        let answer: Result<u32, _> = resent(|| {
            made.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async { Err(tonic::Status::unavailable("store down")) }
        })
        .await;
        assert!(answer.is_err());
        assert_eq!(made.into_inner(), 1);
    }
}
