//! The user routes and the errors every caller meets: an unknown `via`, a
//! user that does not exist, a taken username; health, readiness, metrics,
//! OpenAPI; the seed command's idempotence.

use prost::Message as _;
use proto::user::v1 as pb;
use user_service::domain::{RegisterUserJson, UserEnvelopeJson};
use user_service::store::postgres::PgStore;
use user_service::upstream::Transport;
use uuid::Uuid;

use crate::helpers::{
    OrderService, fixed_user, problem_of, spawn_users, spawn_users_on, users_database,
};

pub(crate) fn form(username: &str) -> RegisterUserJson {
    RegisterUserJson {
        username: username.into(),
        first_name: "Hana".into(),
        last_name: "Park".into(),
        email: "hana.park@example.com".into(),
        phone: "+82 10 1234 5678".into(),
        gender: "FEMALE".into(),
        birth_date: "1991-02-03".into(),
    }
}

#[tokio::test]
async fn an_unknown_via_is_a_400_that_lists_every_transport() {
    let orders = OrderService::start().await;
    let users = spawn_users(&orders).await;
    let id = dataset::fixed_user_id(1);
    let by_query = users
        .http
        .get(users.url(&format!("/v1/users/{id}/orders?via=carrier-pigeon")))
        .send()
        .await
        .unwrap();
    let by_header = users
        .http
        .get(users.url(&format!("/v1/users/{id}/orders")))
        .header("x-via", "smoke-signals")
        .send()
        .await
        .unwrap();
    for res in [by_query, by_header] {
        assert_eq!(res.status(), 400);
        let e = problem_of(res).await;
        assert_eq!(
            (e.error.as_str(), e.field.as_deref()),
            ("invalid_argument", Some("via"))
        );
        for t in Transport::ALL {
            assert!(e.detail.contains(t.name()), "{} lacks {t}", e.detail);
        }
    }
    // gRPC says the same with INVALID_ARGUMENT.
    let status = users
        .grpc_client()
        .await
        .get_user_with_orders(pb::GetUserWithOrdersRequest {
            id: id.to_string(),
            via: "carrier-pigeon".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(
        status.message().contains("tcp-proto"),
        "{}",
        status.message()
    );
    // Nothing was sent to order-service.
    assert!(Transport::ALL.iter().all(|t| users.snapshot(*t).calls == 0));
    users.stop().await;
    orders.stop().await;
}

#[tokio::test]
async fn the_x_via_header_chooses_the_transport_and_the_query_wins_over_it() {
    let orders = OrderService::start().await;
    let users = spawn_users(&orders).await;
    let id = dataset::fixed_user_id(10);
    let res = users
        .http
        .get(users.url(&format!("/v1/users/{id}/orders")))
        .header("x-via", "h2c-proto")
        .send()
        .await
        .unwrap();
    assert_eq!(
        (
            res.status().as_u16(),
            res.headers()["x-via"].to_str().unwrap()
        ),
        (200, "h2c-proto")
    );
    let res = users
        .http
        .get(users.url(&format!("/v1/users/{id}/orders?via=tcp-proto")))
        .header("x-via", "h2c-proto")
        .send()
        .await
        .unwrap();
    assert_eq!(res.headers()["x-via"], "tcp-proto");
    // Neither: the configured default.
    let res = users
        .http
        .get(users.url(&format!("/v1/users/{id}/orders")))
        .send()
        .await
        .unwrap();
    assert_eq!(res.headers()["x-via"], "grpc");
    users.stop().await;
    orders.stop().await;
}

#[tokio::test]
async fn a_user_that_does_not_exist_is_a_404_without_a_call_to_order_service() {
    let orders = OrderService::start().await;
    let users = spawn_users(&orders).await;
    let nobody = Uuid::from_u128(0xdead_beef);
    for path in [
        format!("/v1/users/{nobody}"),
        format!("/v1/users/{nobody}/orders?via=h1-json"),
    ] {
        let res = users.http.get(users.url(&path)).send().await.unwrap();
        assert_eq!(res.status(), 404, "{path}");
        let e = problem_of(res).await;
        assert_eq!(e.error, "not_found");
    }
    let mut client = users.grpc_client().await;
    let status = client
        .get_user(pb::GetUserRequest {
            id: nobody.to_string(),
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::NotFound);
    let status = client
        .get_user_with_orders(pb::GetUserWithOrdersRequest {
            id: nobody.to_string(),
            via: "grpc-bidi".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::NotFound);
    assert_eq!(users.snapshot(Transport::H1Json).calls, 0);
    assert_eq!(users.snapshot(Transport::GrpcBidi).calls, 0);

    // A malformed id or limit names its field.
    let res = users
        .http
        .get(users.url("/v1/users/not-a-uuid"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 400);
    assert_eq!(problem_of(res).await.field.as_deref(), Some("id"));
    let one = dataset::fixed_user_id(1);
    for bad in ["limit=0", "limit=10001", "limit=lots", "fields=colour"] {
        let res = users
            .http
            .get(users.url(&format!("/v1/users/{one}/orders?{bad}")))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 400, "{bad}");
    }
    users.stop().await;
    orders.stop().await;
}

#[tokio::test]
async fn a_seeded_user_reads_back_in_json_and_protobuf_on_rest_and_grpc() {
    let orders = OrderService::start().await;
    let users = spawn_users(&orders).await;
    let d = fixed_user(10_000);
    let res = users
        .http
        .get(users.url(&format!("/v1/users/{}", d.id)))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert!(
        !res.headers().contains_key("x-upstream-micros"),
        "no upstream call, no header"
    );
    let json: UserEnvelopeJson = res.json().await.unwrap();
    assert_eq!(
        (json.user.username.as_str(), json.user.email.as_str()),
        (d.username.as_str(), d.email.as_str())
    );

    let res = users
        .http
        .get(users.url(&format!("/v1/users/{}", d.id)))
        .header("accept", "application/x-protobuf")
        .send()
        .await
        .unwrap();
    assert_eq!(res.headers()["content-type"], "application/x-protobuf");
    let pb_user = pb::GetUserResponse::decode(res.bytes().await.unwrap())
        .unwrap()
        .user
        .unwrap();
    assert_eq!(pb_user.username, d.username);
    assert_eq!(pb_user.birth_date, d.birth_date.to_string());

    let grpc_user = users
        .grpc_client()
        .await
        .get_user(pb::GetUserRequest {
            id: d.id.to_string(),
        })
        .await
        .unwrap()
        .into_inner()
        .user
        .unwrap();
    assert_eq!(grpc_user, pb_user);
    users.stop().await;
    orders.stop().await;
}

#[tokio::test]
async fn registering_a_user_then_reading_it_back_and_a_taken_username_is_409() {
    let orders = OrderService::start().await;
    let users = spawn_users(&orders).await;
    let res = users
        .http
        .post(users.url("/v1/users"))
        .json(&form("hana.park"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201);
    let location = res.headers()["location"].to_str().unwrap().to_owned();
    let created: UserEnvelopeJson = res.json().await.unwrap();
    assert_eq!(location, format!("/v1/users/{}", created.user.id));
    let again: UserEnvelopeJson = users
        .http
        .get(users.url(&location))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(again, created);

    let res = users
        .http
        .post(users.url("/v1/users"))
        .json(&form("hana.park"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 409);
    let e = problem_of(res).await;
    assert_eq!(
        (e.error.as_str(), e.field.as_deref()),
        ("already_exists", Some("username"))
    );

    // A data set username is taken too.
    let res = users
        .http
        .post(users.url("/v1/users"))
        .json(&form(&fixed_user(1).username))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 409);

    // A bad field is a 400 naming it.
    let mut bad = form("someone.else");
    bad.birth_date = "yesterday".into();
    let res = users
        .http
        .post(users.url("/v1/users"))
        .json(&bad)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 400);
    assert_eq!(problem_of(res).await.field.as_deref(), Some("birth_date"));

    // Protobuf in, protobuf out.
    let body = pb::RegisterUserRequest {
        username: "jonas.novak".into(),
        first_name: "Jonas".into(),
        last_name: "Novak".into(),
        email: "jonas@example.com".into(),
        phone: "+420 601 123 456".into(),
        gender: pb::Gender::Male as i32,
        birth_date: "1985-11-30".into(),
    };
    let res = users
        .http
        .post(users.url("/v1/users"))
        .header("content-type", "application/x-protobuf")
        .header("accept", "application/x-protobuf")
        .body(body.encode_to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201);
    let u = pb::RegisterUserResponse::decode(res.bytes().await.unwrap())
        .unwrap()
        .user
        .unwrap();
    assert_eq!(
        (u.username.as_str(), u.gender),
        ("jonas.novak", pb::Gender::Male as i32)
    );

    // gRPC: ALREADY_EXISTS for the same username.
    let status = users
        .grpc_client()
        .await
        .register_user(body)
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::AlreadyExists);
    users.stop().await;
    orders.stop().await;
}

#[tokio::test]
async fn health_readiness_metrics_and_openapi_are_served() {
    // In memory, with no order-service at all: none of these need it.
    let users = spawn_users_on(user_service::Settings::default(), None).await;
    for path in ["/healthz", "/readyz"] {
        assert_eq!(
            users
                .http
                .get(users.url(path))
                .send()
                .await
                .unwrap()
                .status(),
            200,
            "{path}"
        );
    }
    let res = users.http.get(users.url("/metrics")).send().await.unwrap();
    assert!(
        res.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );
    let text = res.text().await.unwrap();
    assert!(
        text.contains("user_service_info{store=\"memory\",pool_size=\"4\"} 1"),
        "{text}"
    );
    assert!(text.contains(
        "user_upstream_duration_seconds_bucket{via=\"grpc-bidi\",store=\"memory\",le=\"+Inf\"} 0"
    ));

    let doc: serde_json::Value = users
        .http
        .get(users.url("/openapi.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    for path in ["/v1/users", "/v1/users/{id}", "/v1/users/{id}/orders"] {
        assert!(
            doc["paths"][path].is_object(),
            "{path} missing from the OpenAPI document"
        );
    }

    // h2c on the same REST port.
    let h2c = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let res = h2c.get(users.url("/healthz")).send().await.unwrap();
    assert_eq!(
        (res.status().as_u16(), res.version()),
        (200, reqwest::Version::HTTP_2)
    );

    // gRPC health.
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", users.grpc))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel.clone());
    let res = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: "user.v1.UserService".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        res.status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );
    users.stop().await;
}

#[tokio::test]
async fn seeding_twice_inserts_the_data_set_once() {
    let db = users_database().await;
    // The template is seeded already: seeding again adds nothing.
    let store = PgStore::connect(&service_kit::db::PoolSettings {
        url: service_kit::db::DatabaseUrl(db.url.clone()),
        max_connections: 2,
        acquire_timeout: std::time::Duration::from_secs(2),
    })
    .await
    .unwrap();
    assert_eq!(store.seed().await.unwrap(), 0);
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM users")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(n as usize, dataset::users().len());
    sqlx::query("DELETE FROM users WHERE id = $1")
        .bind(dataset::fixed_user_id(0))
        .execute(store.pool())
        .await
        .unwrap();
    assert_eq!(store.seed().await.unwrap(), 1);
    store.pool().close().await;
    db.drop_database().await.unwrap();
}

/// Every error is `application/problem+json`, also for a client that asked
/// for protobuf, and gRPC names the bad field in a `google.rpc.BadRequest`
/// detail, as REST does in `field`.
#[tokio::test]
async fn every_error_is_a_problem_and_grpc_names_the_bad_field_in_its_details() {
    use tonic_types::StatusExt as _;
    // In memory, with no order-service: no error here needs it.
    let users = spawn_users_on(user_service::Settings::default(), None).await;
    let c = &users.http;
    let proto = |req: reqwest::RequestBuilder| req.header("accept", "application/x-protobuf");
    let mut bad = form("someone.new");
    bad.birth_date = "yesterday".into();
    let bad_pb = pb::RegisterUserRequest {
        username: "someone.new".into(),
        first_name: "Some".into(),
        last_name: "One".into(),
        email: "some.one@example.com".into(),
        phone: "+33 6 12 34 56 78".into(),
        gender: pb::Gender::Female as i32,
        birth_date: "yesterday".into(),
    };
    let one = dataset::fixed_user_id(1);
    for (req, status, error, field) in [
        (
            proto(c.get(users.url("/v1/users/not-a-uuid"))),
            400,
            "invalid_argument",
            Some("id"),
        ),
        (
            proto(c.post(users.url("/v1/users"))).json(&bad),
            400,
            "invalid_argument",
            Some("birth_date"),
        ),
        (
            proto(c.post(users.url("/v1/users")))
                .header("content-type", "application/x-protobuf")
                .body(bad_pb.encode_to_vec()),
            400,
            "invalid_argument",
            Some("birth_date"),
        ),
        (
            proto(c.post(users.url("/v1/users")))
                .header("content-type", "application/x-protobuf")
                .body(vec![0xFF; 8]),
            400,
            "invalid_argument",
            Some("body"),
        ),
        (
            proto(c.get(users.url(&format!("/v1/users/{one}/orders?via=pigeon")))),
            400,
            "invalid_argument",
            Some("via"),
        ),
        (
            proto(c.get(users.url("/v1/orders"))),
            400,
            "invalid_argument",
            Some("users"),
        ),
        (
            proto(c.post(users.url("/v1/users")))
                .header("content-type", "text/xml")
                .body("<user/>"),
            415,
            "unsupported_media_type",
            None,
        ),
        (
            proto(c.get(users.url(&format!("/v1/users/{}", Uuid::from_u128(7))))),
            404,
            "not_found",
            None,
        ),
        (
            proto(c.get(users.url("/v2/nothing"))),
            404,
            "not_found",
            None,
        ),
        (
            proto(c.delete(users.url("/v1/users"))),
            405,
            "method_not_allowed",
            None,
        ),
    ] {
        let res = req.send().await.unwrap();
        assert_eq!(res.status(), status, "{}", res.url());
        let e = problem_of(res).await;
        assert_eq!(
            (e.error.as_str(), e.field.as_deref()),
            (error, field),
            "{e:?}"
        );
    }
    let page = c
        .get(users.url("/problems/upstream_timeout"))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().starts_with("Upstream timeout"));

    let mut g = users.grpc_client().await;
    let field_of = |s: tonic::Status| {
        assert_eq!(s.code(), tonic::Code::InvalidArgument, "{s:?}");
        let bad = s
            .get_details_bad_request()
            .unwrap_or_else(|| panic!("no BadRequest detail in {s:?}"));
        assert_eq!(bad.field_violations.len(), 1, "{bad:?}");
        let v = &bad.field_violations[0];
        // The message says the same, prefixed by the field.
        assert!(s.message().contains(&v.description), "{s:?}");
        v.field.clone()
    };
    let s = g.register_user(bad_pb).await.unwrap_err();
    assert_eq!(field_of(s), "birth_date");
    let s = g
        .get_user(pb::GetUserRequest { id: "nope".into() })
        .await
        .unwrap_err();
    assert_eq!(field_of(s), "id");
    let s = g
        .get_user_with_orders(pb::GetUserWithOrdersRequest {
            id: one.to_string(),
            via: "pigeon".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(field_of(s), "via");
    let s = g
        .get_user(pb::GetUserRequest {
            id: Uuid::from_u128(7).to_string(),
        })
        .await
        .unwrap_err();
    assert_eq!(s.code(), tonic::Code::NotFound);
    assert!(s.get_details_bad_request().is_none(), "{s:?}");
    users.stop().await;
}
