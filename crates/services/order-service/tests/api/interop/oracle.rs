//! The data set as the interop clients print it: one JSON form of an order
//! (every field, as a proto3 client decodes it), so that an answer read by
//! grpcio, grpc-js or connect-node is compared with the data set field by
//! field, not only counted. user-service's interop tests include this file
//! by path.

use model::{FieldSet, Order};
use serde_json::{Value, json};

/// The data set's user with `count` orders.
pub fn fixed_user(count: u32) -> dataset::DatasetUser {
    let id = dataset::fixed_user_id(count);
    dataset::users()
        .into_iter()
        .find(|u| u.id == id)
        .expect("a fixed user of the data set")
}

/// The orders of the fixed user with `count` orders, by id.
pub fn orders_of(count: u32) -> Vec<Order> {
    dataset::orders_of(&fixed_user(count))
}

/// An order as a client prints it: a field outside a read mask is absent on
/// the wire and reads as proto3's default (`""`, `0`, `false`, the zero
/// enum, an empty address, `null` for an optional, `[0, 0]` for a time).
pub fn order_json(o: &Order) -> Value {
    let uuid = |u: uuid::Uuid| {
        if u.is_nil() {
            String::new()
        } else {
            u.to_string()
        }
    };
    let time =
        |t: chrono::DateTime<chrono::Utc>| json!([t.timestamp(), t.timestamp_subsec_nanos()]);
    let a = &o.shipping_address;
    json!({
        "id": uuid(o.id),
        "user_id": uuid(o.user_id),
        "product_id": uuid(o.product_id),
        "product_name": o.product_name,
        "quantity": o.quantity,
        "unit_price_minor": o.unit_price_minor,
        "discount_minor": o.discount_minor,
        "total_minor": o.total_minor,
        "currency": o.currency.as_wire_str(),
        "status": format!("ORDER_STATUS_{}", o.status.as_str()),
        "gift": o.gift,
        "shipping_address": {
            "line1": a.line1,
            "line2": a.line2,
            "city": a.city,
            "postal_code": a.postal_code,
            "country_code": a.country_code,
        },
        "note": o.note,
        "coupon_code": o.coupon_code,
        "created_at": time(o.created_at),
        "updated_at": time(o.updated_at),
    })
}

/// Asserts that `got` (a client's array of orders) is `want` with `fields`,
/// in order; names the first order that differs, and `what` it was.
pub fn assert_orders(got: &Value, want: &[Order], fields: FieldSet, what: &str) {
    let got = got
        .as_array()
        .unwrap_or_else(|| panic!("{what}: not an array of orders: {got}"));
    assert_eq!(got.len(), want.len(), "{what}: how many orders");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let w = order_json(&w.project(fields));
        assert_eq!(g, &w, "{what}: order {i} differs from the data set's");
    }
}

/// The ids of `orders`, in order.
pub fn ids(orders: &[Order]) -> Vec<String> {
    orders.iter().map(|o| o.id.to_string()).collect()
}

/// The error a client reported for a call that should have failed (its
/// `{"error": ...}`), or a panic naming `what` and what came back instead.
pub fn error_of<'a>(got: &'a Value, what: &str) -> &'a Value {
    got.get("error")
        .unwrap_or_else(|| panic!("{what}: expected an error, got {got}"))
}

/// The answer a client reported for a call that should have succeeded.
pub fn ok_of<'a>(got: &'a Value, what: &str) -> &'a Value {
    got.get("ok")
        .unwrap_or_else(|| panic!("{what}: expected an answer, got {got}"))
}
