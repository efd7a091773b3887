//! Whatever a request holds, its error stays small: a 60 KB `birth_date`
//! is quoted short over REST and gRPC, where it was echoed whole (a
//! 177,795-byte `grpc-message`).

use proto::user::v1 as pb;

use crate::helpers::{OrderService, spawn_users};
use crate::users::form;

#[tokio::test]
async fn a_huge_bad_birth_date_is_quoted_short_over_rest_and_grpc() {
    let orders = OrderService::start().await;
    let users = spawn_users(&orders).await;
    let huge = "9".repeat(60_000);
    let mut bad = form("someone.huge");
    bad.birth_date = huge.clone();
    let res = users
        .http
        .post(users.url("/v1/users"))
        .json(&bad)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 400);
    let body = res.bytes().await.unwrap();
    assert!(body.len() <= 1536, "a 400 of {} bytes", body.len());

    let err = users
        .grpc_client()
        .await
        .register_user(pb::RegisterUserRequest {
            username: "someone.huger".into(),
            first_name: "A".into(),
            last_name: "B".into(),
            email: "a@example.com".into(),
            phone: "+1 555 0100".into(),
            gender: pb::Gender::Female as i32,
            birth_date: huge,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(
        err.message().len() <= 1024,
        "a grpc-message of {} bytes",
        err.message().len()
    );
    assert!(err.message().contains("birth_date"), "{}", err.message());
}
