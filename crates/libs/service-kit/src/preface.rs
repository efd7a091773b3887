//! A tonic listener's connections and answers: every connection is
//! [`Watched`] under the listener's bounds (see [`crate::grpc_conn`]), the
//! drain is bounded, and a few of tonic's answers are corrected (an oversize
//! message is RESOURCE_EXHAUSTED, a `grpc-message` is capped, a client's bad
//! bytes are INVALID_ARGUMENT).

use futures::{Stream, StreamExt as _};

pub use crate::grpc_conn::{ENOUGH, Watched};

/// Every connection of `incoming` that `cap` admits, [`Watched`] under
/// the bounds of `conn` (see [`crate::grpc_conn`]), and with rotation on,
/// dropped at its maximum age (jitter included) plus its grace if it has
/// not closed by then; the others are closed as they come.
pub fn deadlined_for<S, I, E>(
    incoming: S,
    conn: crate::serve::ConnLimits,
    cap: crate::cap::ConnCap,
) -> impl Stream<Item = Result<Watched<I>, E>>
where
    S: Stream<Item = Result<I, E>>,
{
    let life = conn
        .max_age
        .map(|age| age.mul_f64(1.0 + crate::serve::AGE_JITTER) + conn.max_age_grace);
    incoming.filter_map(move |r| {
        let admitted = match r {
            Ok(io) => cap
                .admit()
                .map(|a| Ok(Watched::new(io, a, conn).with_life(life))),
            Err(e) => Some(Err(e)),
        };
        std::future::ready(admitted)
    })
}

/// How long an HTTP/2 keep-alive ping may go unanswered before the
/// connection is closed.
pub const KEEPALIVE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);

/// Runs a tonic server to its end, but no longer than `grace` plus
/// [`crate::serve::DRAIN_SLACK`] after `shutdown`: tonic's own drain
/// waits for every connection with no deadline.
pub async fn bounded_drain<E>(
    serving: impl std::future::Future<Output = Result<(), E>>,
    shutdown: tokio_util::sync::CancellationToken,
    conn: crate::serve::ConnLimits,
) -> Result<(), E> {
    tokio::pin!(serving);
    tokio::select! {
        r = &mut serving => return r,
        () = shutdown.cancelled() => {}
    }
    match tokio::time::timeout(conn.grace + crate::serve::DRAIN_SLACK, serving).await {
        Ok(r) => r,
        Err(_) => {
            tracing::warn!("the gRPC drain's time is up: dropping the connections still open");
            Ok(())
        }
    }
}

/// Serves `router` on `listener` (over TLS when `tls` is given) until
/// `shutdown`, with the bounds of [`ConnLimits`](crate::serve::ConnLimits)
/// that tonic does not apply itself: connections past `cap` closed at once,
/// a deadline on each connection's first bytes, and a drain that ends in
/// time. Both services' gRPC listeners run through here.
pub async fn serve_tonic<L, ResBody>(
    router: tonic::transport::server::Router<L>,
    listener: tokio::net::TcpListener,
    tls: Option<tls::Acceptor>,
    conn: crate::serve::ConnLimits,
    cap: crate::cap::ConnCap,
    shutdown: tokio_util::sync::CancellationToken,
) -> Result<(), tonic::transport::Error>
where
    L: tower::Layer<tonic::service::Routes>,
    L::Service: tower::Service<
            axum::http::Request<tonic::body::Body>,
            Response = axum::http::Response<ResBody>,
        > + Clone
        + Send
        + 'static,
    <L::Service as tower::Service<axum::http::Request<tonic::body::Body>>>::Future: Send,
    <L::Service as tower::Service<axum::http::Request<tonic::body::Body>>>::Error:
        Into<Box<dyn std::error::Error + Send + Sync>> + Send,
    ResBody: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    ResBody::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let stop = shutdown.clone().cancelled_owned();
    let serving = async move {
        match tls {
            None => {
                // Nagle's algorithm would hold small frames back until the
                // peer's delayed ACK: about 40 ms on small calls.
                let plain =
                    tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
                router
                    .serve_with_incoming_shutdown(deadlined_for(plain, conn, cap), stop)
                    .await
            }
            Some(acceptor) => {
                let tls = tls::incoming::incoming(listener, acceptor);
                router
                    .serve_with_incoming_shutdown(deadlined_for(tls, conn, cap), stop)
                    .await
            }
        }
    };
    bounded_drain(serving, shutdown, conn).await
}

/// tonic answers a request message over the size limit with OUT_OF_RANGE; the
/// gRPC spec (and every other implementation) says RESOURCE_EXHAUSTED, which
/// is what clients retry-classify on. The refusal comes before any handler
/// runs, as a trailers-only response, so fixing its header is enough.
pub fn oversize_is_resource_exhausted<B>(
    mut res: axum::http::Response<B>,
) -> axum::http::Response<B> {
    let h = res.headers();
    let oversize = h.get("grpc-status").is_some_and(|s| s == "11")
        && h.get("grpc-message").is_some_and(|m| {
            let has = |needle: &[u8]| m.as_bytes().windows(needle.len()).any(|w| w == needle);
            has(b"too%20large") || has(b"too large")
        });
    if oversize {
        res.headers_mut()
            .insert("grpc-status", axum::http::HeaderValue::from_static("8"));
    }
    res
}

/// A `grpc-message` (percent-encoded, as gRPC sends it) over 1 KiB is cut
/// to about that, at a whole character, and says how long it was: whatever
/// a request held, its error stays small (a client's metadata limit is
/// often 8 KiB). Applied to trailers-only answers, which is how every
/// refusal and every handler error goes out.
pub fn capped_grpc_message<B>(mut res: axum::http::Response<B>) -> axum::http::Response<B> {
    const MAX: usize = 1024;
    let Some(m) = res.headers().get("grpc-message") else {
        return res;
    };
    let encoded = m.as_bytes();
    if encoded.len() <= MAX {
        return res;
    }
    let text = telemetry::spans::percent_decoded(encoded);
    // Each character takes at most 3 × 4 bytes encoded.
    let mut out = Vec::with_capacity(MAX + 64);
    for c in text.chars() {
        let mut buf = [0u8; 4];
        let piece = percent_encode(c.encode_utf8(&mut buf).as_bytes());
        if out.len() + piece.len() > MAX - 48 {
            break;
        }
        out.extend_from_slice(&piece);
    }
    out.extend_from_slice(&percent_encode(
        format!("… ({} bytes encoded)", encoded.len()).as_bytes(),
    ));
    if let Ok(v) = axum::http::HeaderValue::from_bytes(&out) {
        res.headers_mut().insert("grpc-message", v);
    }
    res
}

/// gRPC's percent-encoding: every byte outside printable ASCII, and `%`.
fn percent_encode(b: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(b.len());
    for &c in b {
        if (0x20..=0x7e).contains(&c) && c != b'%' {
            out.push(c);
        } else {
            out.extend_from_slice(format!("%{c:02X}").as_bytes());
        }
    }
    out
}

/// tonic answers a request message that does not decode (bytes that are
/// not the message, a string that is not UTF-8) with INTERNAL, as if the
/// server had failed; it is the client's fault, INVALID_ARGUMENT, as
/// grpc-go and grpc-java answer it. The refusal comes before any handler
/// runs, as a trailers-only response. (A compressed flag with no encoding
/// stays INTERNAL: the gRPC compression spec says it MUST.)
pub fn bad_bytes_are_invalid_argument<B>(
    mut res: axum::http::Response<B>,
) -> axum::http::Response<B> {
    let h = res.headers();
    let undecodable = h.get("grpc-status").is_some_and(|s| s == "13")
        && h.get("grpc-message").is_some_and(|m| {
            let m = m.as_bytes();
            m.starts_with(b"failed to decode Protobuf message")
                || m.starts_with(b"failed%20to%20decode%20Protobuf%20message")
        });
    if undecodable {
        res.headers_mut()
            .insert("grpc-status", axum::http::HeaderValue::from_static("3"));
    }
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_message(m: &str) -> axum::http::Response<()> {
        let mut r = axum::http::Response::new(());
        r.headers_mut().insert(
            "grpc-message",
            axum::http::HeaderValue::from_str(m).unwrap(),
        );
        r
    }

    #[test]
    fn a_long_grpc_message_is_cut_at_a_whole_escape_and_says_its_length() {
        // "é" encoded is `%C3%A9`: 6 bytes, so 1024 falls inside an escape.
        let long = "%C3%A9".repeat(1000);
        let res = capped_grpc_message(with_message(&long));
        let m = res.headers()["grpc-message"].to_str().unwrap();
        assert!(m.len() < 1100, "{}", m.len());
        assert!(m.ends_with("%E2%80%A6 (6000 bytes encoded)"), "{m}");
        let head = m.split("%E2%80%A6").next().unwrap();
        assert!(head.len() <= 1024 && head.len().is_multiple_of(6), "{head}");
        // What a client decodes is whole characters.
        assert!(!telemetry::spans::percent_decoded(head.as_bytes()).contains('\u{FFFD}'));
        // A short one is left as it is.
        let res = capped_grpc_message(with_message("bad%20id"));
        assert_eq!(res.headers()["grpc-message"], "bad%20id");
    }
}
