//! A batch of list queries as one call: `BatchListOrders` (one message) and
//! `BatchStreamOrders` (one message per query). Each answer is held to the
//! data set, in the order asked; a bad query fails the whole batch and names
//! its position; a batch never asks for more than the largest single page.

use model::{FieldSet, Order};
use proto::order::v2 as pb2;

use crate::helpers::{Backend, TestApp, spawn, spawn_with};

fn query(user: uuid::Uuid, page_size: i32, fields: FieldSet) -> pb2::ListOrdersRequest {
    pb2::ListOrdersRequest {
        user_id: user.to_string(),
        page_size,
        page_token: String::new(),
        read_mask: model::v2::field_mask(fields),
    }
}

/// The first `n` orders of `user` in the data set, with `fields` selected.
fn first(user: uuid::Uuid, n: usize, fields: FieldSet) -> Vec<Order> {
    let u = dataset::users().into_iter().find(|u| u.id == user).unwrap();
    dataset::orders_of(&u)
        .into_iter()
        .take(n)
        .map(|o| o.project(fields))
        .collect()
}

fn domain(orders: Vec<pb2::Order>) -> Vec<Order> {
    orders
        .into_iter()
        .map(|o| Order::try_from(o).unwrap())
        .collect()
}

/// Twenty other users' first orders, two fixed users' first pages (one cut
/// short, so it has a next page), and the user with none, with six fields.
fn mixed_batch() -> (Vec<pb2::ListOrdersRequest>, Vec<Vec<Order>>) {
    let six = FieldSet::of(FieldSet::SUMMARY);
    let mut asks: Vec<(uuid::Uuid, i32, FieldSet)> = (1..=20)
        .map(|i| (dataset::other_user_id(i), 1, FieldSet::ALL))
        .collect();
    asks.push((dataset::fixed_user_id(10), 4, FieldSet::ALL));
    asks.push((dataset::fixed_user_id(100), 100, six));
    asks.push((dataset::fixed_user_id(0), 5, FieldSet::ALL));
    let want = asks
        .iter()
        .map(|&(u, n, f)| first(u, n as usize, f))
        .collect();
    let requests = asks.iter().map(|&(u, n, f)| query(u, n, f)).collect();
    (requests, want)
}

async fn batch_answers_as_the_data_set(backend: Backend) {
    let app = spawn(backend).await;
    let (requests, want) = mixed_batch();
    assert!(
        want[..20].iter().all(|w| w.len() == 1),
        "every one of the first twenty other users has an order"
    );
    let mut g = app.grpc_v2().await;

    let unary = g
        .batch_list_orders(pb2::BatchListOrdersRequest {
            requests: requests.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(unary.responses.len(), want.len());
    for (i, (got, want)) in unary.responses.iter().zip(&want).enumerate() {
        assert_eq!(
            &domain(got.orders.clone()),
            want,
            "BatchListOrders query {i}"
        );
    }

    let mut stream = g
        .batch_stream_orders(pb2::BatchStreamOrdersRequest {
            requests: requests.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    let mut messages = Vec::new();
    while let Some(m) = stream.message().await.unwrap() {
        messages.push(m);
    }
    assert_eq!(messages.len(), want.len(), "one message per query");
    for (i, (m, want)) in messages.iter().zip(&want).enumerate() {
        assert_eq!(m.index as usize, i, "in the order asked");
        assert_eq!(
            &domain(m.orders.clone()),
            want,
            "BatchStreamOrders query {i}"
        );
    }

    // The 10-order user was asked for 4: its token leads to the next 4, in
    // both forms of the batch, and the other queries have no next page.
    let ten = 20;
    for (form, token) in [
        ("unary", unary.responses[ten].next_page_token.clone()),
        ("stream", messages[ten].next_page_token.clone()),
    ] {
        assert!(!token.is_empty(), "{form}: a next page");
        let next = g
            .list_orders(pb2::ListOrdersRequest {
                page_token: token,
                ..query(dataset::fixed_user_id(10), 4, FieldSet::ALL)
            })
            .await
            .unwrap()
            .into_inner();
        let all = first(dataset::fixed_user_id(10), 8, FieldSet::ALL);
        assert_eq!(domain(next.orders), all[4..], "{form}");
    }
    // One order asked of each other user: a next page exactly when it has more.
    let counts: std::collections::HashMap<uuid::Uuid, u32> = dataset::users()
        .into_iter()
        .map(|u| (u.id, u.order_count))
        .collect();
    for i in 1..=20u32 {
        let more = counts[&dataset::other_user_id(i)] > 1;
        let r = &unary.responses[i as usize - 1];
        assert_eq!(!r.next_page_token.is_empty(), more, "other user {i}");
    }
    assert_eq!(
        unary.responses[22].next_page_token, "",
        "no orders, no page"
    );

    // Each batch is one request on order-service's side.
    let text = app.metrics_text().await;
    for method in ["BatchListOrders", "BatchStreamOrders"] {
        let line = format!(
            "order_requests_total{{protocol=\"grpc\",route=\"/order.v2.OrderService/{method}\",code=\"200\",grpc_code=\"OK\"}} 1"
        );
        assert!(text.contains(&line), "{line} in\n{text}");
    }
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_answers_every_query_as_the_data_set_has_it_in_memory() {
    batch_answers_as_the_data_set(Backend::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_answers_every_query_as_the_data_set_has_it_on_postgres() {
    batch_answers_as_the_data_set(Backend::Postgres).await;
}

/// Both forms of the batch, for the same requests: the status each gives.
async fn both(app: &TestApp, requests: Vec<pb2::ListOrdersRequest>) -> [tonic::Status; 2] {
    let mut g = app.grpc_v2().await;
    let unary = g
        .batch_list_orders(pb2::BatchListOrdersRequest {
            requests: requests.clone(),
        })
        .await
        .expect_err("the batch is refused");
    // A refused stream sends no message: the status comes with the headers
    // or instead of the first message.
    let stream = match g
        .batch_stream_orders(pb2::BatchStreamOrdersRequest { requests })
        .await
    {
        Err(s) => s,
        Ok(r) => {
            let mut s = r.into_inner();
            match s.message().await {
                Err(status) => status,
                Ok(m) => panic!("the refused stream sent {m:?}"),
            }
        }
    };
    [unary, stream]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_query_fails_the_whole_batch_and_names_its_position() {
    let app = spawn(Backend::Memory).await;
    let mut requests: Vec<_> = (1..=4)
        .map(|i| query(dataset::other_user_id(i), 1, FieldSet::ALL))
        .collect();
    requests[2].user_id = "not-a-uuid".into();
    for s in both(&app, requests).await {
        assert_eq!(s.code(), tonic::Code::InvalidArgument, "{s:?}");
        assert!(s.message().contains("requests[2].user_id"), "{s:?}");
    }
    for s in both(&app, Vec::new()).await {
        assert_eq!(s.code(), tonic::Code::InvalidArgument, "{s:?}");
        assert!(s.message().contains("requests"), "{s:?}");
    }
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_asks_for_at_most_the_largest_single_page() {
    let app = spawn_with(Backend::Memory, |s| s.max_page_size = 50).await;
    let at = |n: i32, k: u32| -> Vec<pb2::ListOrdersRequest> {
        (1..=k)
            .map(|i| query(dataset::other_user_id(i), n, FieldSet::ALL))
            .collect()
    };
    // 5 × 10 is the maximum exactly: answered.
    let mut g = app.grpc_v2().await;
    let ok = g
        .batch_list_orders(pb2::BatchListOrdersRequest {
            requests: at(10, 5),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(ok.responses.len(), 5);
    // One more order is refused; so is a page size 0 (the default, 100 here
    // cut to the maximum of 50) beside another query.
    let mut over = at(10, 5);
    over[4].page_size = 11;
    let mut default = at(1, 2);
    default[0].page_size = 0;
    for requests in [over, default] {
        for s in both(&app, requests).await {
            assert_eq!(s.code(), tonic::Code::InvalidArgument, "{s:?}");
            assert!(s.message().contains("more than 50"), "{s:?}");
        }
    }
    app.stop().await;
}
