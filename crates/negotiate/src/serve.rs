//! Serving an axum router so that a shutdown loses no request, HTTP/1.1
//! keep-alive included.
//!
//! `axum::serve`'s graceful shutdown closes every idle keep-alive connection
//! at once. A client may have just written its next request on one: the
//! server never read it, the client sees the connection close with its
//! request unanswered (`IncompleteMessage`), and a request is lost. Under a
//! steady load that is most connections (tests/sigterm.rs in order-service
//! counted 7 of 8). HTTP/1.1 has one race-free way to end a connection: answer
//! a request with `Connection: close`. So, at the signal, [`serve`]:
//!
//! 1. takes every connection already waiting in the accept backlog (closing
//!    the listener would reset them, requests and all), then closes the
//!    listener: a new caller is refused before it sends anything;
//! 2. answers every further request on an open connection with
//!    `Connection: close`, and the connection ends after that answer;
//! 3. gives a connection that stays idle `grace` to send one, then closes it
//!    (a client silent that long is not in the middle of sending);
//! 4. returns when every connection has ended.
//!
//! HTTP/2 (h2c) connections get GOAWAY at the same point, which tells the
//! client exactly which streams were served, so none is lost either.
//!
//! [`serve_with_tls`] does the same over TLS: each connection's handshake
//! runs in the connection's own task (ALPN `h2` or `http/1.1`, though the
//! server tells the two apart by the client's first bytes anyway), so the
//! accept loop and the drain above are unchanged.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use axum::http::{HeaderValue, Version, header};
use axum::middleware::Next;
use axum::response::Response;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

/// Serves `router` on `listener` until `shutdown` completes, then drains as
/// the module doc says. An HTTP/2 connection may have `max_streams` streams
/// open at once (its SETTINGS_MAX_CONCURRENT_STREAMS): a client past it
/// waits for one to end.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send,
    grace: Duration,
    max_streams: u32,
) -> std::io::Result<()> {
    serve_with_tls(listener, router, shutdown, grace, max_streams, None).await
}

/// [`serve`], with every connection TLS first when `tls` is given.
pub async fn serve_with_tls(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send,
    grace: Duration,
    max_streams: u32,
    tls: Option<tls::Acceptor>,
) -> std::io::Result<()> {
    let closing = Arc::new(AtomicBool::new(false));
    let router = router.layer(axum::middleware::from_fn_with_state(
        closing.clone(),
        close_after_answer,
    ));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut connections = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (io, _peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: pause rather than spin.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        spawn_connection(
            &mut connections,
            io,
            &router,
            &stop_rx,
            (grace, max_streams),
            tls.as_ref(),
        );
        // Reap finished connections as we go, so the set stays small.
        while connections.try_join_next().is_some() {}
    }
    // Closing a listener resets every connection still in its accept
    // backlog, and a client may already have written its request on one.
    // Take them all first; each is then served like any open connection.
    let backlog = drain_backlog(listener);
    closing.store(true, Ordering::SeqCst);
    let _ = stop_tx.send(true);
    if !backlog.is_empty() {
        tracing::debug!(
            connections = backlog.len(),
            "served from the accept backlog"
        );
    }
    for io in backlog {
        spawn_connection(
            &mut connections,
            io,
            &router,
            &stop_rx,
            (grace, max_streams),
            tls.as_ref(),
        );
    }
    tracing::debug!(connections = connections.len(), "draining HTTP connections");
    while connections.join_next().await.is_some() {}
    Ok(())
}

/// Serves one connection until it ends, or until the stop signal plus
/// `grace` of idleness, then shuts it gracefully.
fn spawn_connection(
    connections: &mut JoinSet<()>,
    io: TcpStream,
    router: &Router,
    stop_rx: &tokio::sync::watch::Receiver<bool>,
    (grace, max_streams): (Duration, u32),
    tls: Option<&tls::Acceptor>,
) {
    // Without it, Nagle's algorithm holds back a small write until the
    // peer's delayed ACK: tens of milliseconds on a small answer.
    let _ = io.set_nodelay(true);
    let service = TowerToHyperService::new(router.clone());
    let stop = stop_rx.clone();
    let tls = tls.cloned();
    connections.spawn(async move {
        match tls {
            None => serve_connection(io, service, stop, grace, max_streams).await,
            // The handshake is bounded by `tls::HANDSHAKE_TIMEOUT`, so a
            // silent client cannot hold the drain for ever.
            Some(acceptor) => match acceptor.accept(io).await {
                Ok(io) => serve_connection(io, service, stop, grace, max_streams).await,
                Err(e) => tracing::debug!(error = %e, "HTTPS connection refused"),
            },
        }
    });
}

/// Serves one accepted (and, for TLS, handshaken) connection as
/// [`spawn_connection`] says.
async fn serve_connection<I>(
    io: I,
    service: TowerToHyperService<Router>,
    mut stop: tokio::sync::watch::Receiver<bool>,
    grace: Duration,
    max_streams: u32,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let mut builder = Builder::new(TokioExecutor::new());
    builder.http2().max_concurrent_streams(max_streams);
    let mut conn =
        std::pin::pin!(builder.serve_connection_with_upgrades(TokioIo::new(io), service));
    tokio::select! {
        r = conn.as_mut() => return log_end(r),
        _ = stop.wait_for(|s| *s) => {}
    }
    tokio::select! {
        r = conn.as_mut() => return log_end(r),
        () = tokio::time::sleep(grace) => {}
    }
    conn.as_mut().graceful_shutdown();
    log_end(conn.await);
}

/// Accepts every connection the kernel has already completed, then closes
/// the listener. What arrives after that is refused at connect, before the
/// client has sent anything.
fn drain_backlog(listener: TcpListener) -> Vec<TcpStream> {
    let mut taken = Vec::new();
    let listener = match listener.into_std() {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(error = %e, "could not drain the accept backlog");
            return taken;
        }
    };
    // `into_std` leaves the socket non-blocking: `accept` says WouldBlock
    // once the backlog is empty.
    loop {
        match listener.accept() {
            Ok((io, _)) => {
                let io = io
                    .set_nonblocking(true)
                    .and_then(|()| TcpStream::from_std(io));
                match io {
                    Ok(io) => taken.push(io),
                    Err(e) => tracing::warn!(error = %e, "backlog connection unusable"),
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                tracing::warn!(error = %e, "accept failed while draining the backlog");
                break;
            }
        }
    }
    taken
}

fn log_end(r: Result<(), Box<dyn std::error::Error + Send + Sync>>) {
    if let Err(e) = r {
        tracing::debug!(error = %e, "HTTP connection ended with an error");
    }
}

/// Once draining, every HTTP/1.x answer ends its connection.
async fn close_after_answer(
    axum::extract::State(closing): axum::extract::State<Arc<AtomicBool>>,
    req: Request,
    next: Next,
) -> Response {
    let h1 = req.version() <= Version::HTTP_11;
    let mut res = next.run(req).await;
    if h1 && closing.load(Ordering::SeqCst) {
        res.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    res
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    /// Connections the kernel completed but the server never accepted, each
    /// with its request already written, when the shutdown comes: closing
    /// the listener would reset every one. All are answered instead.
    #[tokio::test]
    async fn requests_waiting_in_the_accept_backlog_are_answered_at_shutdown() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("binds");
        let addr = listener.local_addr().expect("address");
        let mut clients = Vec::new();
        for _ in 0..6 {
            let mut c = TcpStream::connect(addr)
                .await
                .expect("connects into the backlog");
            c.write_all(b"GET / HTTP/1.1\r\nhost: test\r\n\r\n")
                .await
                .expect("writes");
            clients.push(c);
        }
        let router = Router::new().route("/", axum::routing::get(|| async { "served" }));
        // The shutdown has already come when serve starts: before the fix,
        // the accept loop stopped at once and the listener's close reset
        // every waiting connection.
        let server = tokio::spawn(serve(
            listener,
            router,
            std::future::ready(()),
            Duration::from_secs(5),
            256,
        ));
        for mut c in clients {
            let mut answer = String::new();
            tokio::time::timeout(Duration::from_secs(10), c.read_to_string(&mut answer))
                .await
                .expect("the answer comes")
                .expect("no reset");
            assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
            assert!(
                answer.to_ascii_lowercase().contains("connection: close"),
                "{answer}"
            );
            assert!(answer.ends_with("served"), "{answer}");
        }
        tokio::time::timeout(Duration::from_secs(10), server)
            .await
            .expect("serve returns once every connection ended")
            .expect("no panic")
            .expect("no error");
        assert!(
            TcpStream::connect(addr).await.is_err(),
            "the listener is closed"
        );
    }
}
