//! gRPC health that tells the truth: it follows the service's readiness
//! (the store answers) as REST's `/readyz` does, and turns NOT_SERVING the
//! moment shutdown starts. Liveness stays REST's `/healthz`, up while the
//! process runs, so that a database outage restarts nothing.
//!
//! The service itself is ours ([`HealthService`], in `health/service.rs`),
//! not tonic-health's: a `Watch` of a name never set says SERVICE_UNKNOWN
//! and stays open, as grpc's health.proto says, and every `Watch` ends when
//! shutdown starts.

use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tonic_health::pb::health_check_response::ServingStatus;

mod service;
pub use service::{HealthService, Statuses, WatchStream};

/// How often readiness is checked.
pub const EVERY: Duration = Duration::from_secs(1);

/// SERVING or NOT_SERVING for every one of `names` ("" is the whole server).
pub fn set(health: &Statuses, names: &[&str], serving: bool) {
    let status = if serving {
        ServingStatus::Serving
    } else {
        ServingStatus::NotServing
    };
    for name in names {
        health.set(name, status);
    }
}

/// The gRPC health service for `names`, set from `ready(subject)` before
/// the first call can ask, then kept following it (see [`follow_readiness`])
/// by the task returned, until `shutdown`, which also ends every `Watch`.
/// Any other name is unknown: NOT_FOUND to `Check`, SERVICE_UNKNOWN to
/// `Watch`.
pub async fn following<P, F, Fut>(
    names: &'static [&'static str],
    subject: P,
    ready: F,
    shutdown: CancellationToken,
) -> (
    tonic_health::pb::health_server::HealthServer<impl tonic_health::pb::health_server::Health>,
    tokio::task::JoinHandle<()>,
)
where
    P: Clone + Send + Sync + 'static,
    F: Fn(P) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = bool> + Send + 'static,
{
    let ready = move || ready(subject.clone());
    let health = Statuses::new(shutdown.clone());
    let was = ready().await;
    set(&health, names, was);
    let service = health.server();
    let task = tokio::spawn(follow_readiness(health, names, ready, shutdown, was));
    (service, task)
}

/// Keeps `names` SERVING while `ready()` says so and NOT_SERVING while it
/// does not, checked every [`EVERY`] (`was`: the status already set), and
/// NOT_SERVING from the moment `shutdown` is cancelled.
pub async fn follow_readiness<F, Fut>(
    health: Statuses,
    names: &'static [&'static str],
    ready: F,
    shutdown: CancellationToken,
    mut was: bool,
) where
    F: Fn() -> Fut,
    Fut: Future<Output = bool>,
{
    let mut every = tokio::time::interval(EVERY);
    every.tick().await;
    loop {
        tokio::select! {
            () = shutdown.cancelled() => break,
            _ = every.tick() => {}
        }
        let now = tokio::select! {
            () = shutdown.cancelled() => break,
            r = ready() => r,
        };
        if now != was {
            tracing::warn!(ready = now, "gRPC health follows readiness");
            set(&health, names, now);
            was = now;
        }
    }
    set(&health, names, false);
}
