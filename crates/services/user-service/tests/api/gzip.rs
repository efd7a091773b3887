//! Gzip between the services: on only when both ends are set for it
//! (`ORDER_REST_GZIP` / `ORDER_GRPC_GZIP` on order-service,
//! `USER_UPSTREAM_GZIP` on user-service). The oracle for the orders is the
//! data set; for the bytes, user-service's socket counters of the same
//! calls made uncompressed.

use model::Order;
use user_service::upstream::Transport;

use crate::helpers::{OrderService, fixed_user, spawn_users_with};

/// The transports that compress when asked: REST (not the tuned twin) and
/// gRPC unary and server-streaming.
const COMPRESSING: [Transport; 6] = [
    Transport::H1Json,
    Transport::H1Proto,
    Transport::H2cJson,
    Transport::H2cProto,
    Transport::Grpc,
    Transport::GrpcStream,
];

fn expected(count: u32) -> Vec<Order> {
    dataset::orders_of(&fixed_user(count))
}

#[tokio::test]
async fn gzip_on_both_ends_carries_the_same_orders_in_fewer_bytes() {
    let zipping = OrderService::start_with(|s| {
        s.rest_gzip = true;
        s.grpc_gzip = true;
    })
    .await;
    let plain = OrderService::start().await;
    // Asks for nothing: a compressing server answers it uncompressed.
    let asks_not = spawn_users_with(&zipping, |_| {}).await;
    let asks = spawn_users_with(&zipping, |s| s.upstream_gzip = true).await;
    // Asks, of a server that does not compress.
    let asks_plain = spawn_users_with(&plain, |s| s.upstream_gzip = true).await;
    let id = dataset::fixed_user_id(1_000);
    for via in COMPRESSING {
        for users in [&asks_not, &asks, &asks_plain] {
            let (_, got) = users.orders_ok(id, via, "&limit=1000").await;
            assert_eq!(got, expected(1_000), "the data set's orders over {via}");
        }
        let identity = asks_not.snapshot(via).bytes_read;
        let gzipped = asks.snapshot(via).bytes_read;
        let refused = asks_plain.snapshot(via).bytes_read;
        eprintln!("{via}: identity {identity} B, gzip {gzipped} B, not offered {refused} B");
        // 1,000 orders compress: JSON to well under half, protobuf (whose
        // ids and timestamps are already dense) by a fifth at least. A
        // server stream compresses each message on its own, and its
        // messages are one order each: gzip gains almost nothing there.
        let most = match via {
            Transport::GrpcStream => 1.0,
            v if v.name().contains("json") => 0.5,
            _ => 0.8,
        };
        assert!(
            (gzipped as f64) < identity as f64 * most,
            "{via}: {gzipped} B with gzip against {identity} B without"
        );
        // A server not set to compress answers as if nobody asked: the
        // same bytes within the headers.
        assert!(
            refused.abs_diff(identity) < 512,
            "{via}: {refused} B asked of a plain server against {identity} B"
        );
    }
    // The tuned twin never asks: the same bytes either way.
    let via = Transport::H2cProtoTuned;
    let (_, got) = asks.orders_ok(id, via, "&limit=1000").await;
    assert_eq!(got, expected(1_000));
    let (_, _) = asks_not.orders_ok(id, via, "&limit=1000").await;
    let (a, b) = (
        asks.snapshot(via).bytes_read,
        asks_not.snapshot(via).bytes_read,
    );
    assert!(a.abs_diff(b) < 512, "{via}: {a} B and {b} B");
}

#[tokio::test]
async fn zstd_on_both_ends_carries_the_same_orders_in_fewer_bytes_and_wins_over_gzip() {
    let both = OrderService::start_with(|s| {
        s.rest_gzip = true;
        s.grpc_gzip = true;
        s.rest_zstd = true;
        s.grpc_zstd = true;
    })
    .await;
    let plain = spawn_users_with(&both, |_| {}).await;
    let gzip = spawn_users_with(&both, |s| s.upstream_gzip = true).await;
    let zstd = spawn_users_with(&both, |s| s.upstream_zstd = true).await;
    // Asks for both: zstd is preferred, so the same bytes as zstd alone.
    let either = spawn_users_with(&both, |s| {
        s.upstream_gzip = true;
        s.upstream_zstd = true;
    })
    .await;
    let id = dataset::fixed_user_id(1_000);
    for via in COMPRESSING {
        for users in [&plain, &gzip, &zstd, &either] {
            let (_, got) = users.orders_ok(id, via, "&limit=1000").await;
            assert_eq!(got, expected(1_000), "the data set's orders over {via}");
        }
        let read = |u: &crate::helpers::UserService| u.snapshot(via).bytes_read;
        let (identity, gz, zs, ei) = (read(&plain), read(&gzip), read(&zstd), read(&either));
        eprintln!("{via}: identity {identity} B, gzip {gz} B, zstd {zs} B, both offered {ei} B");
        // A server stream compresses each one-order message on its own:
        // neither encoding gains much there.
        let most = if via == Transport::GrpcStream {
            1.0
        } else {
            0.8
        };
        assert!(
            (zs as f64) < identity as f64 * most,
            "{via}: {zs} B with zstd against {identity} B without"
        );
        // Not gzip's bytes: a different encoding went over the wire.
        assert_ne!(zs, gz, "{via}: zstd and gzip moved the same bytes");
        assert!(
            ei.abs_diff(zs) < 512,
            "{via}: {ei} B offering both against {zs} B offering zstd"
        );
    }
}
