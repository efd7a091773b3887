//! Serialization alone, without any network: serde_json against prost, for
//! 1 to 10,000 orders, typed (v2) and all-strings (v1), with and without the
//! conversion between the domain type and the wire type.
//!
//! The RestTemplate post timed JSON against protobuf on one object (protobuf
//! about 2.5x faster); the type-fix post found that using the generated message directly, instead
//! of converting it, was faster still. The `wire` rows here are the encoding
//! alone, from and to the wire type; the `domain` rows add the conversion a
//! service does on each side (domain -> wire before encoding, wire -> domain
//! after decoding), as order-service and user-service do on every call.
//!
//! The `proto-buffa` rows are the same typed (v2) messages on buffa, the
//! runtime connect-rust generates for (the Connect transports use it): the
//! same bytes as `proto-v2`, another runtime. Its decode reads a zero-copy
//! view, as the Connect client does, and its `domain` row converts from that
//! view.
//!
//! `cargo bench -p model --bench codec` (add `-- 1000` to run one size).

use std::hint::black_box;

use buffa::{Message as _, MessageView as _};
use proto_connect::order::v2 as cx;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use model::json::{OrderJson, OrderPageJson};
use model::{FieldSet, Order};
use prost::Message as _;
use proto::order::{v1 as pb1, v2 as pb2};

const SIZES: [u32; 5] = [1, 10, 100, 1_000, 10_000];

fn orders(n: u32) -> Vec<Order> {
    let u = dataset::users()
        .into_iter()
        .find(|u| u.id == dataset::fixed_user_id(n))
        .expect("the data set has a user with exactly n orders");
    dataset::orders_of(&u)
}

fn json_page(o: &[Order]) -> OrderPageJson {
    OrderPageJson {
        orders: o
            .iter()
            .map(|o| OrderJson::from_order(o, FieldSet::ALL))
            .collect(),
        next_page_token: None,
    }
}

fn v2_page(o: &[Order]) -> pb2::ListOrdersResponse {
    pb2::ListOrdersResponse {
        orders: o
            .iter()
            .map(|o| model::v2::order_to_pb(o, FieldSet::ALL))
            .collect(),
        next_page_token: String::new(),
    }
}

fn v1_page(o: &[Order]) -> pb1::ListOrdersResponse {
    pb1::ListOrdersResponse {
        orders: o.iter().map(model::v1::order_to_v1).collect(),
        next_page_token: String::new(),
    }
}

fn buffa_page(o: &[Order]) -> cx::ListOrdersResponse {
    model::connect::page_to_cx(o, FieldSet::ALL, String::new())
}

/// The conversion a caller does after decoding: every wire order to a domain one.
fn to_domain<T: TryInto<Order, Error = model::ParseError>>(wire: Vec<T>) -> Vec<Order> {
    wire.into_iter()
        .map(TryInto::try_into)
        .collect::<Result<Vec<_>, _>>()
        .expect("parses")
}

fn encode(c: &mut Criterion) {
    let mut g = c.benchmark_group("encode");
    for n in SIZES {
        let o = orders(n);
        let (j, p2, p1, bf) = (json_page(&o), v2_page(&o), v1_page(&o), buffa_page(&o));
        g.throughput(Throughput::Elements(u64::from(n)));
        g.bench_with_input(BenchmarkId::new("json/wire", n), &j, |b, j| {
            b.iter(|| serde_json::to_vec(black_box(j)).expect("encodes"));
        });
        g.bench_with_input(BenchmarkId::new("json/domain", n), &o, |b, o| {
            b.iter(|| serde_json::to_vec(&json_page(black_box(o))).expect("encodes"));
        });
        g.bench_with_input(BenchmarkId::new("proto-v2/wire", n), &p2, |b, p| {
            b.iter(|| black_box(p).encode_to_vec());
        });
        g.bench_with_input(BenchmarkId::new("proto-v2/domain", n), &o, |b, o| {
            b.iter(|| v2_page(black_box(o)).encode_to_vec());
        });
        g.bench_with_input(BenchmarkId::new("proto-v1/wire", n), &p1, |b, p| {
            b.iter(|| black_box(p).encode_to_vec());
        });
        g.bench_with_input(BenchmarkId::new("proto-buffa/wire", n), &bf, |b, p| {
            b.iter(|| black_box(p).encode_to_vec());
        });
        g.bench_with_input(BenchmarkId::new("proto-buffa/domain", n), &o, |b, o| {
            b.iter(|| buffa_page(black_box(o)).encode_to_vec());
        });
        g.bench_with_input(BenchmarkId::new("proto-v1/domain", n), &o, |b, o| {
            b.iter(|| v1_page(black_box(o)).encode_to_vec());
        });
    }
    g.finish();
}

fn decode(c: &mut Criterion) {
    let mut g = c.benchmark_group("decode");
    for n in SIZES {
        let o = orders(n);
        let j = serde_json::to_vec(&json_page(&o)).expect("encodes");
        let p2 = v2_page(&o).encode_to_vec();
        let p1 = v1_page(&o).encode_to_vec();
        g.throughput(Throughput::Elements(u64::from(n)));
        g.bench_with_input(BenchmarkId::new("json/wire", n), &j, |b, j| {
            b.iter(|| serde_json::from_slice::<OrderPageJson>(black_box(j)).expect("decodes"));
        });
        g.bench_with_input(BenchmarkId::new("json/domain", n), &j, |b, j| {
            b.iter(|| {
                let page: OrderPageJson = serde_json::from_slice(black_box(j)).expect("decodes");
                to_domain(page.orders)
            });
        });
        g.bench_with_input(BenchmarkId::new("proto-v2/wire", n), &p2, |b, p| {
            b.iter(|| pb2::ListOrdersResponse::decode(black_box(&p[..])).expect("decodes"));
        });
        g.bench_with_input(BenchmarkId::new("proto-v2/domain", n), &p2, |b, p| {
            b.iter(|| {
                let page = pb2::ListOrdersResponse::decode(black_box(&p[..])).expect("decodes");
                to_domain(page.orders)
            });
        });
        g.bench_with_input(BenchmarkId::new("proto-v1/wire", n), &p1, |b, p| {
            b.iter(|| pb1::ListOrdersResponse::decode(black_box(&p[..])).expect("decodes"));
        });
        g.bench_with_input(BenchmarkId::new("proto-v1/domain", n), &p1, |b, p| {
            b.iter(|| {
                let page = pb1::ListOrdersResponse::decode(black_box(&p[..])).expect("decodes");
                to_domain(page.orders)
            });
        });
        g.bench_with_input(BenchmarkId::new("proto-buffa/wire", n), &p2, |b, p| {
            b.iter(|| {
                cx::__buffa::view::ListOrdersResponseView::decode_view(black_box(&p[..]))
                    .expect("decodes")
                    .orders
                    .len()
            });
        });
        g.bench_with_input(BenchmarkId::new("proto-buffa/domain", n), &p2, |b, p| {
            b.iter(|| {
                let page =
                    cx::__buffa::view::ListOrdersResponseView::decode_view(black_box(&p[..]))
                        .expect("decodes");
                model::connect::page_from_view(&page).expect("parses")
            });
        });
    }
    g.finish();
}

criterion_group!(benches, encode, decode);
criterion_main!(benches);
