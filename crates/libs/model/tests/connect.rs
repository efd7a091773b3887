//! buffa (Connect's runtime) and prost are two runtimes for one contract:
//! the domain's conversions to each must give the same bytes, and read the
//! same orders back. prost's side is the oracle.

use buffa::{Message as _, MessageView as _};
use model::{FieldSet, Order};
use prost::Message as _;
use proto_connect::order::v2 as cx;
use proto_connect::order::v2::__buffa::view as cxv;

#[test]
fn buffa_and_prost_agree_on_every_field_selection() {
    let user = dataset::users().into_iter().next().unwrap();
    let orders = dataset::orders_of(&user);
    for fields in [
        FieldSet::ALL,
        FieldSet::parse(["product_name", "note"]).unwrap(),
    ] {
        let bytes = model::connect::page_to_cx(&orders, fields, String::new()).encode_to_vec();
        let prost_page = proto::order::v2::ListOrdersResponse {
            orders: orders
                .iter()
                .map(|o| model::v2::order_to_pb(o, fields))
                .collect(),
            next_page_token: String::new(),
        };
        assert_eq!(bytes, prost_page.encode_to_vec());
        let view = cxv::ListOrdersResponseView::decode_view(&bytes).unwrap();
        let back = model::connect::page_from_view(&view).unwrap();
        let want: Vec<Order> = prost_page
            .orders
            .into_iter()
            .map(|o| Order::try_from(o).unwrap())
            .collect();
        assert_eq!(back, want);
    }
}

#[test]
fn a_bad_id_is_named() {
    let bytes = cx::ListOrdersResponse {
        orders: vec![cx::Order {
            id: "nope".into(),
            ..Default::default()
        }],
        ..Default::default()
    }
    .encode_to_vec();
    let view = cxv::ListOrdersResponseView::decode_view(&bytes).unwrap();
    assert_eq!(
        model::connect::page_from_view(&view).unwrap_err().field,
        "id"
    );
}

#[test]
fn a_request_carries_its_mask_only_when_fields_are_selected() {
    let id = dataset::fixed_user_id(10);
    let all = model::connect::list_request(id, 10, FieldSet::ALL);
    assert!(all.read_mask.is_unset());
    let note = FieldSet::parse(["note"]).unwrap();
    let some = model::connect::list_request(id, 10, note);
    // The same paths as the prost request's mask.
    assert_eq!(
        some.read_mask.as_option().unwrap().paths,
        model::v2::field_mask(note).unwrap().paths
    );
    assert!(
        some.read_mask
            .as_option()
            .unwrap()
            .paths
            .contains(&"note".to_owned())
    );
    assert_eq!(some.page_size, 10);
    assert_eq!(some.user_id, id.to_string());
}
