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
//! Every connection is also bounded in time ([`ConnLimits`]): a client
//! that opens a connection and sends nothing, or trickles a request's head
//! or body, or keeps an idle connection open, is cut off; and the drain
//! itself ends `grace` plus one second after the signal, whatever clients
//! do (connections still open then are dropped).
//!
//! [`serve_with_tls`] does the same over TLS: each connection's handshake
//! runs in the connection's own task (ALPN `h2` or `http/1.1`, though the
//! server tells the two apart by the client's first bytes anyway), so the
//! accept loop and the drain above are unchanged.
//!
//! # Layout
//! - this file: the accept loop, the backlog taken at the signal, the drain;
//! - [`limits`]: [`ConnLimits`], each connection's bounds in time, and the
//!   jitter of connection rotation;
//! - `connection`: one connection served to its end, whichever comes first;
//! - `activity`: what a connection is doing, read off its socket, and the
//!   watchdog that closes it when a bound passes;
//! - `tracked`: the service around the router that counts requests and
//!   ends HTTP/1.1 answers with `Connection: close` once closing;
//! - [`h3`]: HTTP/3, the same bounds and drain over QUIC;
//! - [`leftover`]: a request body left unread by an early answer,
//!   read within a bound so that the client sees the answer.

mod activity;
mod connection;
pub(crate) mod h2_frames;
pub mod h3;
pub mod leftover;
pub mod limits;
pub(crate) mod stall;
pub mod stream_budget;
mod tracked;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

pub use crate::cap::ConnCap;

/// Connections open at once on a service's admin listener (health,
/// readiness, metrics): a few probes and scrapers, never the API's clients.
pub const ADMIN_CONNECTIONS: usize = 64;
pub use limits::{AGE_JITTER, ConnLimits, DRAIN_SLACK, LINGER, jittered, seed, splitmix};
pub use stall::WriteTimeout;

/// Serves `router` on `listener` until `shutdown` completes, then drains as
/// the module doc says, each connection bounded by `limits`.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send,
    limits: ConnLimits,
    cap: ConnCap,
) -> std::io::Result<()> {
    serve_with_tls(listener, router, shutdown, limits, cap, None).await
}

/// [`serve`], with every connection TLS first when `tls` is given. At most
/// `cap` connections are open at once; past it one is closed as it comes.
pub async fn serve_with_tls(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send,
    limits: ConnLimits,
    cap: ConnCap,
    tls: Option<tls::Acceptor>,
) -> std::io::Result<()> {
    let closing = Arc::new(AtomicBool::new(false));
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
        let Some(admitted) = cap.admit() else {
            drop(io);
            continue;
        };
        spawn_connection(
            &mut connections,
            (io, admitted),
            (&router, &closing),
            &stop_rx,
            limits,
            tls.as_ref(),
        );
        // Reap finished connections as we go, so the set stays small.
        while connections.try_join_next().is_some() {}
    }
    let deadline = tokio::time::Instant::now() + limits.grace + DRAIN_SLACK;
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
        let Some(admitted) = cap.admit() else {
            continue;
        };
        spawn_connection(
            &mut connections,
            (io, admitted),
            (&router, &closing),
            &stop_rx,
            limits,
            tls.as_ref(),
        );
    }
    tracing::debug!(connections = connections.len(), "draining HTTP connections");
    let drained = tokio::time::timeout_at(deadline, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            connections = connections.len(),
            "the drain's time is up: dropping the connections still open"
        );
        connections.shutdown().await;
    }
    Ok(())
}

/// Serves one connection until it ends, or until the stop signal plus
/// `grace` of idleness, then shuts it gracefully.
fn spawn_connection(
    connections: &mut JoinSet<()>,
    (io, admitted): (TcpStream, crate::cap::Admitted),
    (router, closing): (&Router, &Arc<AtomicBool>),
    stop_rx: &tokio::sync::watch::Receiver<bool>,
    limits: ConnLimits,
    tls: Option<&tls::Acceptor>,
) {
    // Without it, Nagle's algorithm holds back a small write until the
    // peer's delayed ACK: tens of milliseconds on a small answer.
    let _ = io.set_nodelay(true);
    let stop = stop_rx.clone();
    let tls = tls.cloned();
    let router = router.clone();
    let closing = closing.clone();
    connections.spawn(async move {
        // The slot is held for as long as the connection lives.
        let _admitted = admitted;
        match tls {
            None => connection::serve_connection(io, (router, closing), stop, limits, false).await,
            // The handshake is bounded by `tls::HANDSHAKE_TIMEOUT`, so a
            // silent client cannot hold the drain for ever.
            Some(acceptor) => match acceptor.accept(io).await {
                Ok(io) => {
                    connection::serve_connection(io, (router, closing), stop, limits, true).await
                }
                Err(e) => tracing::debug!(error = %e, "HTTPS connection refused"),
            },
        }
    });
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

#[cfg(test)]
mod tests;
