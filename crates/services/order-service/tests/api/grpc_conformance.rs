//! What both services' gRPC ports are asked about health and reflection, by
//! the clients tonic-health and tonic-reflection generate (the protocol's
//! own, not this project's code): a Watch's messages and how its stream
//! ends, the services reflection lists over v1 and over v1alpha, and a real
//! call to each one. user-service's tests use this file too (by `#[path]`).

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

use tonic::transport::Channel;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};

/// A name no port serves.
pub const UNKNOWN: &str = "no.such.v1.Service";

/// How long a Watch must stay silent to count as open: the brief's 300 ms.
pub const STILL_OPEN: Duration = Duration::from_millis(300);

/// The two reflection services: both are served on each gRPC port.
pub const REFLECTION: [&str; 2] = [
    "grpc.reflection.v1.ServerReflection",
    "grpc.reflection.v1alpha.ServerReflection",
];

/// A new connection to the gRPC port at `grpc`.
pub async fn channel(grpc: SocketAddr) -> Channel {
    Channel::from_shared(format!("http://{grpc}"))
        .unwrap()
        .connect()
        .await
        .unwrap()
}

/// The answer to a health `Check` of `service`.
pub async fn check(channel: &Channel, service: &str) -> Result<ServingStatus, tonic::Status> {
    let r = HealthClient::new(channel.clone())
        .check(HealthCheckRequest {
            service: service.into(),
        })
        .await?;
    Ok(ServingStatus::try_from(r.into_inner().status).unwrap())
}

/// A health `Watch` of `service`, opened.
pub async fn watch(channel: &Channel, service: &str) -> tonic::Streaming<HealthCheckResponse> {
    HealthClient::new(channel.clone())
        .watch(HealthCheckRequest {
            service: service.into(),
        })
        .await
        .unwrap_or_else(|s| panic!("Watch of {service:?} refused: {s:?}"))
        .into_inner()
}

/// The next status on `watch`, which must come within 5 s.
pub async fn next_status(watch: &mut tonic::Streaming<HealthCheckResponse>) -> ServingStatus {
    let got = tokio::time::timeout(Duration::from_secs(5), watch.message())
        .await
        .expect("a message within 5 s")
        .expect("a message, not an error")
        .expect("a message, not the end of the stream");
    ServingStatus::try_from(got.status).unwrap()
}

/// Asserts that `watch` sends nothing and does not end for [`STILL_OPEN`].
pub async fn assert_still_open(watch: &mut tonic::Streaming<HealthCheckResponse>) {
    if let Ok(next) = tokio::time::timeout(STILL_OPEN, watch.message()).await {
        panic!("the Watch was to stay open and silent, got {next:?}");
    }
}

/// Asserts that `watch` ends cleanly (status OK, no more messages) within
/// `within`.
pub async fn assert_ends(watch: &mut tonic::Streaming<HealthCheckResponse>, within: Duration) {
    let end = tokio::time::timeout(within, watch.message())
        .await
        .unwrap_or_else(|_| panic!("the Watch was still open {within:?} after shutdown began"));
    assert!(
        matches!(end, Ok(None)),
        "the Watch was to end cleanly, got {end:?}"
    );
}

/// The services reflection v1 lists.
pub async fn listed_v1(channel: &Channel) -> BTreeSet<String> {
    use tonic_reflection::pb::v1::ServerReflectionRequest;
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
    let req = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let answer = ServerReflectionClient::new(channel.clone())
        .server_reflection_info(futures::stream::iter([req]))
        .await
        .unwrap()
        .into_inner()
        .message()
        .await
        .unwrap()
        .unwrap();
    let Some(MessageResponse::ListServicesResponse(list)) = answer.message_response else {
        panic!("v1: expected a service list, got {answer:?}");
    };
    list.service.into_iter().map(|s| s.name).collect()
}

/// The services reflection v1alpha lists.
pub async fn listed_v1alpha(channel: &Channel) -> BTreeSet<String> {
    use tonic_reflection::pb::v1alpha::ServerReflectionRequest;
    use tonic_reflection::pb::v1alpha::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1alpha::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1alpha::server_reflection_response::MessageResponse;
    let req = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let answer = ServerReflectionClient::new(channel.clone())
        .server_reflection_info(futures::stream::iter([req]))
        .await
        .unwrap_or_else(|s| panic!("v1alpha reflection refused: {s:?}"))
        .into_inner()
        .message()
        .await
        .unwrap()
        .unwrap();
    let Some(MessageResponse::ListServicesResponse(list)) = answer.message_response else {
        panic!("v1alpha: expected a service list, got {answer:?}");
    };
    list.service.into_iter().map(|s| s.name).collect()
}

/// How many file descriptors reflection v1 and v1alpha each send for
/// `symbol` (a client such as grpcurl needs at least one to call it).
pub async fn described(channel: &Channel, symbol: &str) -> (usize, usize) {
    use tonic_reflection::pb::{v1, v1alpha};
    let req = v1::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(
            v1::server_reflection_request::MessageRequest::FileContainingSymbol(symbol.into()),
        ),
    };
    let a1 = v1::server_reflection_client::ServerReflectionClient::new(channel.clone())
        .server_reflection_info(futures::stream::iter([req]))
        .await
        .unwrap()
        .into_inner()
        .message()
        .await
        .unwrap()
        .unwrap();
    let n1 = match a1.message_response {
        Some(v1::server_reflection_response::MessageResponse::FileDescriptorResponse(f)) => {
            f.file_descriptor_proto.len()
        }
        other => panic!("v1: no descriptor for {symbol}: {other:?}"),
    };
    let req = v1alpha::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(
            v1alpha::server_reflection_request::MessageRequest::FileContainingSymbol(symbol.into()),
        ),
    };
    let a2 = v1alpha::server_reflection_client::ServerReflectionClient::new(channel.clone())
        .server_reflection_info(futures::stream::iter([req]))
        .await
        .unwrap()
        .into_inner()
        .message()
        .await
        .unwrap()
        .unwrap();
    let n2 = match a2.message_response {
        Some(v1alpha::server_reflection_response::MessageResponse::FileDescriptorResponse(f)) => {
            f.file_descriptor_proto.len()
        }
        other => panic!("v1alpha: no descriptor for {symbol}: {other:?}"),
    };
    (n1, n2)
}

/// The code of one real call to `service` on `channel` (OK, or the error's):
/// UNIMPLEMENTED means the port does not serve it. A service this knows no
/// call for fails the test, so that a new one listed gets a call here.
pub async fn code_of_a_call(channel: &Channel, service: &str) -> tonic::Code {
    use proto::order::{v1 as o1, v2 as o2};
    use proto::user::v1 as u1;
    let nil = "00000000-0000-0000-0000-000000000000".to_string();
    let code = |r: Result<(), tonic::Status>| r.err().map_or(tonic::Code::Ok, |s| s.code());
    match service {
        "order.v2.OrderService" => code(
            o2::order_service_client::OrderServiceClient::new(channel.clone())
                .get_order(o2::GetOrderRequest {
                    id: nil,
                    read_mask: None,
                })
                .await
                .map(drop),
        ),
        "order.v1.OrderService" => code(
            o1::order_service_client::OrderServiceClient::new(channel.clone())
                .list_orders(o1::ListOrdersRequest {
                    user_id: nil,
                    page_size: 1,
                    page_token: String::new(),
                })
                .await
                .map(drop),
        ),
        "user.v1.UserService" => code(
            u1::user_service_client::UserServiceClient::new(channel.clone())
                .get_user(u1::GetUserRequest { id: nil })
                .await
                .map(drop),
        ),
        "grpc.health.v1.Health" => code(check(channel, "").await.map(drop)),
        "grpc.reflection.v1.ServerReflection" => {
            listed_v1(channel).await;
            tonic::Code::Ok
        }
        "grpc.reflection.v1alpha.ServerReflection" => {
            listed_v1alpha(channel).await;
            tonic::Code::Ok
        }
        other => panic!("no call known for {other}: add one here"),
    }
}

/// Asserts that reflection v1 and v1alpha each list exactly `serves`, that
/// each service listed answers a real call (is not UNIMPLEMENTED) and is
/// described by both, and that each of `not_here` is UNIMPLEMENTED.
pub async fn assert_lists_exactly(channel: &Channel, serves: &[&str], not_here: &[&str]) {
    let want: BTreeSet<String> = serves.iter().map(|s| (*s).to_owned()).collect();
    assert_eq!(listed_v1(channel).await, want, "reflection v1's list");
    assert_eq!(
        listed_v1alpha(channel).await,
        want,
        "reflection v1alpha's list"
    );
    for name in serves {
        let code = code_of_a_call(channel, name).await;
        assert_ne!(code, tonic::Code::Unimplemented, "{name} is listed");
        let (v1, v1alpha) = described(channel, name).await;
        assert!(v1 > 0 && v1alpha > 0, "{name}: {v1} and {v1alpha} files");
    }
    for name in not_here {
        assert_eq!(
            code_of_a_call(channel, name).await,
            tonic::Code::Unimplemented,
            "{name} is not served on this port"
        );
    }
}

/// A 2 MiB health check and a 2 MiB reflection request, over the 1 MiB
/// request cap of the port's APIs, are not decoded under tonic's 4 MiB
/// default: the check is refused `RESOURCE_EXHAUSTED`, the reflection
/// stream gets no answer.
pub async fn assert_over_the_cap_refused(channel: &Channel) {
    let big = "x".repeat(2 << 20);
    let err = check(channel, &big).await.unwrap_err();
    assert_eq!(
        err.code(),
        tonic::Code::ResourceExhausted,
        "health: {err:?}"
    );
    use tonic_reflection::pb::v1::ServerReflectionRequest;
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    let req = ServerReflectionRequest {
        host: big,
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let got = async {
        ServerReflectionClient::new(channel.clone())
            .server_reflection_info(futures::stream::iter([req]))
            .await?
            .into_inner()
            .message()
            .await
    }
    .await;
    // tonic-reflection ends its stream when a request cannot be decoded,
    // with status OK: what counts is that nothing was answered.
    match got {
        Ok(None) => {}
        Err(e) => assert_eq!(
            e.code(),
            tonic::Code::ResourceExhausted,
            "reflection: {e:?}"
        ),
        Ok(Some(answer)) => panic!("a 2 MiB reflection request was answered: {answer:?}"),
    }
}
