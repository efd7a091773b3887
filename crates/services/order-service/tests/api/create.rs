//! Creating orders: an idempotency key makes a retry return the first order
//! and never store a second; absent and empty optionals stay distinct.

use model::json::{CreatedOrderJson, OrderJson};
use proto::order::v2 as pb2;
use uuid::Uuid;

use crate::helpers::{Backend, TestApp, new_order_json as body, spawn};

async fn post(app: &TestApp, key: &str, body: &serde_json::Value) -> (u16, CreatedOrderJson) {
    let res = app
        .h1()
        .post(app.url("/v2/orders"))
        .header("idempotency-key", key)
        .json(body)
        .send()
        .await
        .unwrap();
    let status = res.status().as_u16();
    (status, res.json().await.unwrap())
}

async fn orders_of_user(app: &TestApp, user: Uuid) -> i64 {
    let pool = sqlx::PgPool::connect(&app.db.as_ref().unwrap().url)
        .await
        .unwrap();
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM orders WHERE user_id = $1")
        .bind(user)
        .fetch_one(&pool)
        .await
        .unwrap();
    pool.close().await;
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_with_the_same_key_returns_the_first_order_and_stores_one() {
    for backend in [Backend::Postgres, Backend::Memory] {
        let app = spawn(backend).await;
        let user = Uuid::new_v4();
        let (s1, first) = post(&app, "retry-1", &body(user, None)).await;
        assert_eq!(s1, 201);
        assert!(!first.replayed);
        assert_eq!(first.order.total_minor, Some(3 * 1250 - 250));
        assert_eq!(first.order.status, Some(model::json::StatusJson::Pending));
        let (s2, second) = post(&app, "retry-1", &body(user, None)).await;
        assert_eq!(s2, 200);
        assert!(second.replayed);
        assert_eq!(second.order, first.order);

        // The same key with another body is refused, not silently replayed.
        let res = app
            .h1()
            .post(app.url("/v2/orders"))
            .header("idempotency-key", "retry-1")
            .json(&body(user, Some("different")))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 422);

        // What was created reads back unchanged.
        let got: OrderJson = app
            .h1()
            .get(app.url(&format!("/v2/orders/{}", first.order.id)))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(got, first.order, "{backend:?}");
        if backend == Backend::Postgres {
            assert_eq!(orders_of_user(&app, user).await, 1);
        }
        app.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_with_one_key_make_exactly_one_order_in_postgres() {
    let app = spawn(Backend::Postgres).await;
    let user = Uuid::new_v4();
    let b = body(user, None);
    let results = futures::future::join_all((0..20).map(|_| post(&app, "race-key", &b))).await;
    let ids: std::collections::HashSet<Uuid> = results.iter().map(|(_, c)| c.order.id).collect();
    assert_eq!(ids.len(), 1, "every answer names the same order");
    assert_eq!(results.iter().filter(|(s, _)| *s == 201).count(), 1);
    assert_eq!(results.iter().filter(|(_, c)| c.replayed).count(), 19);
    assert_eq!(orders_of_user(&app, user).await, 1);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_note_stays_empty_and_an_absent_one_stays_absent() {
    let app = spawn(Backend::Postgres).await;
    let user = Uuid::new_v4();
    let (_, empty) = post(&app, "note-empty", &body(user, Some(""))).await;
    let (_, absent) = post(&app, "note-absent", &body(user, None)).await;
    assert_eq!(empty.order.note.as_deref(), Some(""));
    assert_eq!(absent.order.note, None);

    let mut g = app.grpc_v2().await;
    for (created, want) in [(&empty, Some("")), (&absent, None)] {
        let o = g
            .get_order(pb2::GetOrderRequest {
                id: created.order.id.to_string(),
                read_mask: None,
            })
            .await
            .unwrap()
            .into_inner()
            .order
            .unwrap();
        assert_eq!(o.note.as_deref(), want);
    }
    // The JSON says so too: "note": "" versus no "note" key at all.
    let raw: serde_json::Value = app
        .h1()
        .get(app.url(&format!("/v2/orders/{}", empty.order.id)))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(raw["note"], "");
    let raw: serde_json::Value = app
        .h1()
        .get(app.url(&format!("/v2/orders/{}", absent.order.id)))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(raw.get("note").is_none());
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_create_is_idempotent_too() {
    let app = spawn(Backend::Postgres).await;
    let user = Uuid::new_v4();
    let new: model::NewOrder =
        serde_json::from_value::<model::json::CreateOrderJson>(body(user, None))
            .unwrap()
            .try_into()
            .unwrap();
    let mut g = app.grpc_v2().await;
    let req = model::v2::create_request(&new, "grpc-key");
    let a = g.create_order(req.clone()).await.unwrap().into_inner();
    let b = g.create_order(req).await.unwrap().into_inner();
    assert!(!a.replayed && b.replayed);
    assert_eq!(a.order, b.order);
    assert_eq!(orders_of_user(&app, user).await, 1);
    app.stop().await;
}
