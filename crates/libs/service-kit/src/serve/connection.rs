//! One connection, served until it ends or until the first of: the stop
//! signal (then drained as the parent module says), a bound of its
//! [`ConnLimits`] passing, or its age past the rotation age.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;

use super::activity::{Activity, Watched, watchdog};
use super::limits::{ConnLimits, DRAIN_SLACK, jittered, seed};
use super::tracked::Tracked;

/// Serves one accepted (and, for TLS, handshaken) connection as
/// [`spawn_connection`](super::spawn_connection) says, closing it when a [`ConnLimits`] bound passes.
pub(super) async fn serve_connection<I>(
    io: I,
    (router, closing): (Router, Arc<AtomicBool>),
    mut stop: tokio::sync::watch::Receiver<bool>,
    limits: ConnLimits,
    over_tls: bool,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let activity = Arc::new(Activity::new());
    let service = Tracked {
        inner: TowerToHyperService::new(router),
        closing,
        activity: activity.clone(),
        body_read: limits.body_read,
        over_tls,
    };
    let io = Watched::new(io, activity.clone(), &limits);
    let mut builder = Builder::new(TokioExecutor::new());
    builder.http2().max_concurrent_streams(limits.max_streams);
    let mut conn =
        std::pin::pin!(builder.serve_connection_with_upgrades(TokioIo::new(io), service));
    let watch = watchdog(&activity, &limits);
    tokio::pin!(watch);
    enum First {
        Ended(Result<(), Box<dyn std::error::Error + Send + Sync>>),
        Stop,
        Expired(&'static str),
        Aged,
    }
    let aged = async {
        match limits.max_age {
            Some(age) => tokio::time::sleep(jittered(age, seed())).await,
            None => std::future::pending().await,
        }
    };
    let first = tokio::select! {
        r = conn.as_mut() => First::Ended(r),
        _ = stop.wait_for(|s| *s) => First::Stop,
        why = &mut watch => First::Expired(why),
        () = aged => First::Aged,
    };
    match first {
        First::Ended(r) => return log_end(r),
        First::Stop => {}
        First::Aged => {
            tracing::debug!("rotating a connection past its maximum age");
            conn.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(limits.max_age_grace + DRAIN_SLACK, conn.as_mut()).await;
            return;
        }
        First::Expired(why) => {
            tracing::debug!(why, "closing a connection");
            conn.as_mut().graceful_shutdown();
            // A graceful close waits for streams in service; a client that
            // does not read its answers gets no longer than this.
            let _ = tokio::time::timeout(DRAIN_SLACK, conn.as_mut()).await;
            return;
        }
    }
    // HTTP/2 gets GOAWAY at once: it names the last stream served, so no
    // request is lost. HTTP/1.1 has no such message: an idle connection
    // gets `grace` to send one more request, answered with
    // `Connection: close` (closing it now could reset a request already on
    // the wire).
    if activity.h2.load(Ordering::Relaxed) {
        conn.as_mut().graceful_shutdown();
        return log_end(conn.await);
    }
    tokio::select! {
        r = conn.as_mut() => return log_end(r),
        () = tokio::time::sleep(limits.grace) => {}
        _ = &mut watch => {}
    }
    conn.as_mut().graceful_shutdown();
    log_end(conn.await);
}

fn log_end(r: Result<(), Box<dyn std::error::Error + Send + Sync>>) {
    if let Err(e) = r {
        tracing::debug!(error = %e, "HTTP connection ended with an error");
    }
}
