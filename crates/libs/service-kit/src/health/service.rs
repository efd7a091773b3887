//! The `grpc.health.v1.Health` service as grpc's health.proto describes it.
//! tonic-health ends a `Watch` of a name it has not been told at once with
//! NOT_FOUND; the protocol says to send SERVICE_UNKNOWN and keep the call
//! open, sending the status if the name is ever set, so that a watcher
//! learns when the service appears instead of retrying. `Check` of such a
//! name is NOT_FOUND, as the protocol says.
//!
//! Every `Watch` ends, cleanly, once shutdown starts (after a last
//! NOT_SERVING for a name that was set), so that no watcher holds the
//! drain open. A `Watch` holds no queue: it reads one shared map of
//! statuses, and sends only when what it last sent differs.

use std::collections::HashMap;
use std::pin::Pin;

use futures::Stream;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_server::{Health, HealthServer};
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};

/// The status of every name set, shared by whoever sets them and the
/// service that answers for them. One channel holds the whole map: the
/// names are few and change rarely, and a `Watch` of a name not set yet has
/// to see it appear.
#[derive(Clone, Debug)]
pub struct Statuses {
    map: watch::Sender<HashMap<String, ServingStatus>>,
    /// Cancelled: every name set is NOT_SERVING, and every `Watch` ends.
    shutdown: CancellationToken,
}

impl Statuses {
    /// No name set yet; `shutdown` ends every `Watch`.
    pub fn new(shutdown: CancellationToken) -> Self {
        Statuses {
            map: watch::Sender::new(HashMap::new()),
            shutdown,
        }
    }

    /// Sets `name` ("" is the whole server) to `status`, telling its
    /// watchers if that is a change.
    pub fn set(&self, name: &str, status: ServingStatus) {
        self.map
            .send_if_modified(|m| m.insert(name.to_owned(), status) != Some(status));
    }

    /// The status of `name`: `None` if it was never set, NOT_SERVING once
    /// shutdown has started.
    pub fn of(&self, name: &str) -> Option<ServingStatus> {
        Self::in_map(&self.map.borrow(), name, self.shutdown.is_cancelled())
    }

    fn in_map(
        map: &HashMap<String, ServingStatus>,
        name: &str,
        shutting_down: bool,
    ) -> Option<ServingStatus> {
        let status = *map.get(name)?;
        Some(if shutting_down {
            ServingStatus::NotServing
        } else {
            status
        })
    }

    /// The gRPC service answering for these statuses.
    pub fn server(&self) -> HealthServer<HealthService> {
        HealthServer::new(HealthService(self.clone()))
    }
}

/// `grpc.health.v1.Health`, answering from [`Statuses`].
#[derive(Debug)]
pub struct HealthService(Statuses);

/// A `Watch`'s messages.
pub type WatchStream = Pin<Box<dyn Stream<Item = Result<HealthCheckResponse, Status>> + Send>>;

#[tonic::async_trait]
impl Health for HealthService {
    async fn check(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status> {
        let name = &request.get_ref().service;
        match self.0.of(name) {
            Some(status) => Ok(Response::new(answer(status))),
            // A name is quoted as every bad value is: its start and its
            // length, never a huge grpc-message.
            None => Err(Status::not_found(format!(
                "unknown service {}",
                model::quoted(name)
            ))),
        }
    }

    type WatchStream = WatchStream;

    async fn watch(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<WatchStream>, Status> {
        Ok(Response::new(Box::pin(watching(
            self.0.clone(),
            request.into_inner().service,
        ))))
    }
}

fn answer(status: ServingStatus) -> HealthCheckResponse {
    HealthCheckResponse {
        status: status as i32,
    }
}

/// What one `Watch` of `name` holds between messages.
struct Watching {
    statuses: Statuses,
    changes: watch::Receiver<HashMap<String, ServingStatus>>,
    name: String,
    sent: Option<ServingStatus>,
}

/// The status of `name` now (SERVICE_UNKNOWN while it is not set), then
/// each change, until shutdown.
fn watching(
    statuses: Statuses,
    name: String,
) -> impl Stream<Item = Result<HealthCheckResponse, Status>> + Send {
    let changes = statuses.map.subscribe();
    let start = Watching {
        statuses,
        changes,
        name,
        sent: None,
    };
    futures::stream::unfold(start, |mut w| async move {
        loop {
            let shutting_down = w.statuses.shutdown.is_cancelled();
            let now = Statuses::in_map(&w.changes.borrow_and_update(), &w.name, shutting_down)
                .unwrap_or(ServingStatus::ServiceUnknown);
            if w.sent != Some(now) {
                w.sent = Some(now);
                return Some((Ok(answer(now)), w));
            }
            if shutting_down {
                return None;
            }
            tokio::select! {
                () = w.statuses.shutdown.cancelled() => {}
                changed = w.changes.changed() => {
                    if changed.is_err() {
                        return None;
                    }
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures::StreamExt as _;

    use super::*;

    async fn next(s: &mut WatchStream) -> Option<ServingStatus> {
        let got = tokio::time::timeout(Duration::from_secs(1), s.next())
            .await
            .expect("a message or the end within 1 s")?;
        Some(ServingStatus::try_from(got.expect("no error").status).expect("a known status"))
    }

    async fn open(h: &HealthService, name: &str) -> WatchStream {
        let req = Request::new(HealthCheckRequest {
            service: name.into(),
        });
        h.watch(req).await.expect("a Watch").into_inner()
    }

    async fn silent(s: &mut WatchStream) -> bool {
        tokio::time::timeout(Duration::from_millis(50), s.next())
            .await
            .is_err()
    }

    #[tokio::test]
    async fn a_watch_of_a_name_not_set_says_service_unknown_then_the_status_once_set() {
        let shutdown = CancellationToken::new();
        let statuses = Statuses::new(shutdown.clone());
        let h = HealthService(statuses.clone());
        let mut w = open(&h, "late.v1.Service").await;
        assert_eq!(next(&mut w).await, Some(ServingStatus::ServiceUnknown));
        assert!(silent(&mut w).await);
        // Another name changing sends nothing to this watcher.
        statuses.set("", ServingStatus::Serving);
        assert!(silent(&mut w).await);
        statuses.set("late.v1.Service", ServingStatus::Serving);
        assert_eq!(next(&mut w).await, Some(ServingStatus::Serving));
        // The same status again is no change.
        statuses.set("late.v1.Service", ServingStatus::Serving);
        assert!(silent(&mut w).await);
        statuses.set("late.v1.Service", ServingStatus::NotServing);
        assert_eq!(next(&mut w).await, Some(ServingStatus::NotServing));
    }

    #[tokio::test]
    async fn shutdown_ends_every_watch_after_a_last_not_serving_for_names_set() {
        let shutdown = CancellationToken::new();
        let statuses = Statuses::new(shutdown.clone());
        statuses.set("", ServingStatus::Serving);
        let h = HealthService(statuses.clone());
        let mut known = open(&h, "").await;
        let mut unknown = open(&h, "nope").await;
        assert_eq!(next(&mut known).await, Some(ServingStatus::Serving));
        assert_eq!(
            next(&mut unknown).await,
            Some(ServingStatus::ServiceUnknown)
        );
        shutdown.cancel();
        assert_eq!(next(&mut known).await, Some(ServingStatus::NotServing));
        assert_eq!(next(&mut known).await, None);
        assert_eq!(next(&mut unknown).await, None);
        assert_eq!(statuses.of(""), Some(ServingStatus::NotServing));
    }

    #[tokio::test]
    async fn check_of_a_name_not_set_is_not_found() {
        let statuses = Statuses::new(CancellationToken::new());
        statuses.set("a", ServingStatus::Serving);
        let h = HealthService(statuses);
        let ask = |name: &str| {
            Request::new(HealthCheckRequest {
                service: name.into(),
            })
        };
        let known = h.check(ask("a")).await.expect("an answer").into_inner();
        assert_eq!(known.status, ServingStatus::Serving as i32);
        let err = h.check(ask("b")).await.expect_err("NOT_FOUND");
        assert_eq!(err.code(), tonic::Code::NotFound);
        assert_eq!(err.message(), "unknown service \"b\"");
        // A 100 KB name is quoted by its start and its length.
        let huge = "x".repeat(100_000);
        let err = h.check(ask(&huge)).await.expect_err("NOT_FOUND");
        assert!(err.message().len() < 200, "{} bytes", err.message().len());
        assert!(
            err.message().ends_with("… (100000 bytes)"),
            "{}",
            err.message()
        );
    }
}
