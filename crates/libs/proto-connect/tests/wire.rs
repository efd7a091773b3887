//! buffa's messages and prost's are two runtimes for one contract: the same
//! bytes must mean the same orders to both. prost's encoding of the data set
//! is the oracle.

use buffa::Message as _;
use model::FieldSet;
use prost::Message as _;

/// The first `n` orders of the data set's user with `n` orders, as prost's
/// `ListOrdersResponse` (what order-service's gRPC server sends).
fn prost_page(n: u32) -> proto::order::v2::ListOrdersResponse {
    let id = dataset::fixed_user_id(n);
    let user = dataset::users()
        .into_iter()
        .find(|u| u.id == id)
        .expect("the data set has a user with exactly n orders");
    proto::order::v2::ListOrdersResponse {
        orders: dataset::orders_of(&user)
            .iter()
            .take(n as usize)
            .map(|o| model::v2::order_to_pb(o, FieldSet::ALL))
            .collect(),
        next_page_token: String::new(),
    }
}

#[test]
fn buffa_reads_what_prost_writes_and_writes_the_same_bytes() {
    for n in [1, 100, 1_000] {
        let page = prost_page(n);
        let wire = page.encode_to_vec();
        let read = proto_connect::order::v2::ListOrdersResponse::decode_from_slice(&wire)
            .expect("buffa decodes prost's bytes");
        assert_eq!(read.orders.len(), n as usize);
        for (b, p) in read.orders.iter().zip(&page.orders) {
            assert_eq!(b.id, p.id);
            assert_eq!(b.user_id, p.user_id);
            assert_eq!(b.product_name, p.product_name);
            assert_eq!(b.quantity, p.quantity);
        }
        assert_eq!(
            read.encode_to_vec(),
            wire,
            "buffa re-encodes {n} orders byte for byte"
        );
    }
}
