//! The gRPC boundary: `user.v1.UserService`, with health and reflection.
//!
//! Errors are mapped to a status once, in [`to_status`]; the causes of
//! internal errors are logged there and not returned.

use std::time::Duration;

use model::ParseError;
use model::v2::{field_set, order_to_pb, parse_uuid};
use proto::user::v1 as pb;
use proto::user::v1::user_service_server::{UserService, UserServiceServer};
use tonic::metadata::MetadataValue;
use tonic::{Request, Response, Status};
use tonic_types::{ErrorDetails, StatusExt as _};

use crate::domain::{NewUser, user_to_pb};
use crate::service::{AppError, DEFAULT_LIMIT, Service};
use crate::upstream::{MAX_MESSAGE_BYTES, UpstreamError};

/// The `user.v1.UserService` implementation.
#[derive(Debug, Clone)]
pub struct UserApi {
    service: Service,
}

impl UserApi {
    /// The service, ready to add to a tonic router: requests up to
    /// `max_request_bytes` (the service's request cap), answers large
    /// enough for 10,000 orders.
    pub fn server(service: Service, max_request_bytes: usize) -> UserServiceServer<UserApi> {
        UserServiceServer::new(UserApi { service })
            .max_decoding_message_size(max_request_bytes)
            .max_encoding_message_size(MAX_MESSAGE_BYTES)
    }
}

/// The answer to a call shed by the concurrency limit.
pub fn overloaded() -> http::Response<tonic::body::Body> {
    Status::resource_exhausted("the service is at its limit of concurrent requests: retry later")
        .into_http()
}

/// The one mapping from the use cases' error to a gRPC status. A bad field
/// is named in the message and in a `google.rpc.BadRequest` detail with one
/// `FieldViolation`, as a REST problem names it in `field`.
pub fn to_status(e: AppError) -> Status {
    e.log();
    let msg = e.to_string();
    let mut status = match &e {
        AppError::Invalid(p) => Status::with_error_details(
            tonic::Code::InvalidArgument,
            msg,
            ErrorDetails::with_bad_request_violation(&p.field, &p.message),
        ),
        AppError::UnknownTransport(_) => Status::with_error_details(
            tonic::Code::InvalidArgument,
            msg.clone(),
            ErrorDetails::with_bad_request_violation("via", msg),
        ),
        AppError::NotFound(_) => Status::not_found(msg),
        AppError::UsernameTaken(_) => Status::already_exists(msg),
        AppError::Upstream { error, .. } => match error {
            UpstreamError::Timeout(_) => Status::deadline_exceeded(msg),
            UpstreamError::Unavailable(_) => Status::unavailable(msg),
            UpstreamError::Rejected { .. } | UpstreamError::Protocol(_) => Status::internal(msg),
        },
        AppError::StoreUnavailable(_) => Status::unavailable(msg),
        AppError::Internal(_) => Status::internal("internal error"),
    };
    if let AppError::Upstream { via, elapsed, .. } = &e {
        upstream_metadata(status.metadata_mut(), via.name(), *elapsed);
    }
    status
}

fn upstream_metadata(md: &mut tonic::metadata::MetadataMap, via: &'static str, elapsed: Duration) {
    md.insert("x-via", MetadataValue::from_static(via));
    md.insert(
        "x-upstream-micros",
        MetadataValue::from(elapsed.as_micros() as u64),
    );
}

#[tonic::async_trait]
impl UserService for UserApi {
    #[tracing::instrument(skip_all)]
    async fn get_user(
        &self,
        request: Request<pb::GetUserRequest>,
    ) -> Result<Response<pb::GetUserResponse>, Status> {
        let id = parse_uuid("id", &request.get_ref().id).map_err(|e| to_status(e.into()))?;
        let user = self.service.get_user(id).await.map_err(to_status)?;
        Ok(Response::new(pb::GetUserResponse {
            user: Some(user_to_pb(&user)),
        }))
    }

    #[tracing::instrument(skip_all)]
    async fn get_user_with_orders(
        &self,
        request: Request<pb::GetUserWithOrdersRequest>,
    ) -> Result<Response<pb::GetUserWithOrdersResponse>, Status> {
        let r = request.into_inner();
        let id = parse_uuid("id", &r.id).map_err(|e| to_status(e.into()))?;
        let via = self.service.transport(Some(&r.via)).map_err(to_status)?;
        let limit = match r.limit {
            0 => DEFAULT_LIMIT,
            n => u32::try_from(n)
                .map_err(|_| to_status(ParseError::new("limit", "must be 1 to 10000").into()))?,
        };
        let fields = field_set(r.read_mask.as_ref()).map_err(|e| to_status(e.into()))?;
        let got = self
            .service
            .user_with_orders(id, via, limit, fields)
            .await
            .map_err(to_status)?;
        let mut resp = Response::new(pb::GetUserWithOrdersResponse {
            user: Some(user_to_pb(&got.user)),
            orders: got
                .orders
                .iter()
                .map(|o| order_to_pb(o, got.fields))
                .collect(),
            via: got.via.name().to_owned(),
            upstream_micros: got.upstream.as_micros() as u64,
        });
        upstream_metadata(resp.metadata_mut(), got.via.name(), got.upstream);
        Ok(resp)
    }

    #[tracing::instrument(skip_all)]
    async fn register_user(
        &self,
        request: Request<pb::RegisterUserRequest>,
    ) -> Result<Response<pb::RegisterUserResponse>, Status> {
        let new = NewUser::try_from(request.into_inner()).map_err(|e| to_status(e.into()))?;
        let user = self.service.register(new).await.map_err(to_status)?;
        Ok(Response::new(pb::RegisterUserResponse {
            user: Some(user_to_pb(&user)),
        }))
    }
}
