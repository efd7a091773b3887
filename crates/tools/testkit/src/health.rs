//! A service's gRPC health, as both services' outage tests watch it.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

pub use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};

/// The gRPC health status `service` ("" for the whole server) has on the
/// gRPC listener at `grpc`, asked on a new connection.
pub async fn status_of(grpc: SocketAddr, service: &str) -> ServingStatus {
    let channel = tonic::transport::Channel::from_shared(format!("http://{grpc}"))
        .expect("a URI")
        .connect()
        .await
        .unwrap_or_else(|e| panic!("connecting to {grpc}: {e}"));
    let status = HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: service.into(),
        })
        .await
        .unwrap_or_else(|e| panic!("health of {service:?}: {e}"))
        .into_inner()
        .status;
    ServingStatus::try_from(status).unwrap_or_else(|_| panic!("no such status {status}"))
}

/// Waits, 15 s at most, until every one of `services` has `want` on the
/// gRPC listener at `grpc`.
pub async fn becomes(grpc: SocketAddr, services: &[&str], want: ServingStatus) {
    let deadline = Instant::now() + Duration::from_secs(15);
    for name in services {
        loop {
            let got = status_of(grpc, name).await;
            if got == want {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{name:?} is still {got:?}, not {want:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
