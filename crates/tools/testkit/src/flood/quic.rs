//! Floods over QUIC (HTTP/3): connections that open many request streams,
//! announce large bodies, send part of them and stop. The caller gives the
//! client endpoints (whose TLS takes the service's certificate), so this
//! module knows nothing of the services' TLS.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;

/// One flooding connection and the request streams it holds open: dropping
/// it closes them with the connection.
pub struct HeldConnection {
    /// The QUIC connection (`close_reason` says whether the server ended it).
    pub quic: quinn::Connection,
    _send: h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>,
    /// Each stream's send half, kept open (neither finished nor reset), and
    /// how many body bytes the server took before the send stopped.
    pub streams: Vec<(
        h3::client::RequestStream<h3_quinn::BidiStream<Bytes>, Bytes>,
        usize,
    )>,
}

/// What [`partial_bodies`] opens, as the client sees it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Connections that completed their handshake.
    pub connections: usize,
    /// Request streams opened.
    pub streams: usize,
    /// Streams whose whole part of the body went out.
    pub sent_whole: usize,
    /// Body bytes the server's flow control took, over every stream.
    pub bytes: usize,
}

/// `conns` QUIC connections to `addr` (spread over `endpoints`, a few client
/// sockets), each opening `streams` POST requests to `path` that announce a
/// body of `announce` bytes, send `send` of it (each stream from a task of
/// its own, so a stream the server's flow control holds up holds up no
/// other, for at most `within`), and then stop, the streams left open.
/// Connections that fail to open are left out.
pub async fn partial_bodies(
    endpoints: &[quinn::Endpoint],
    addr: SocketAddr,
    (conns, streams): (usize, usize),
    path: &str,
    (announce, send): (usize, usize),
    within: Duration,
) -> (Vec<HeldConnection>, Tally) {
    // One buffer for every stream: the client's part of the memory is flat.
    let chunk = Bytes::from(vec![b' '; send]);
    let mut opening = tokio::task::JoinSet::new();
    for i in 0..conns {
        let ep = endpoints[i % endpoints.len()].clone();
        let path = path.to_owned();
        let chunk = chunk.clone();
        opening.spawn(async move {
            let quic = ep.connect(addr, "localhost").ok()?.await.ok()?;
            let (mut driver, mut send_request) =
                h3::client::new(h3_quinn::Connection::new(quic.clone()))
                    .await
                    .ok()?;
            tokio::spawn(async move { std::future::poll_fn(|cx| driver.poll_close(cx)).await });
            let mut sending = tokio::task::JoinSet::new();
            for _ in 0..streams {
                let request = http::Request::post(format!("https://{addr}{path}"))
                    .header("content-type", "application/json")
                    .header("content-length", announce.to_string())
                    .body(())
                    .ok()?;
                let Ok(mut stream) = send_request.send_request(request).await else {
                    break;
                };
                let chunk = chunk.clone();
                sending.spawn(async move {
                    let sent = tokio::time::timeout(within, stream.send_data(chunk.clone())).await;
                    let took = if matches!(sent, Ok(Ok(()))) {
                        chunk.len()
                    } else {
                        0
                    };
                    (stream, took)
                });
            }
            let held = sending.join_all().await;
            Some(HeldConnection {
                quic,
                _send: send_request,
                streams: held,
            })
        });
    }
    let mut held = Vec::with_capacity(conns);
    let mut tally = Tally::default();
    while let Some(done) = opening.join_next().await {
        let Ok(Some(c)) = done else { continue };
        tally.connections += 1;
        tally.streams += c.streams.len();
        tally.sent_whole += c.streams.iter().filter(|(_, n)| *n == send).count();
        tally.bytes += c.streams.iter().map(|(_, n)| n).sum::<usize>();
        held.push(c);
    }
    (held, tally)
}
