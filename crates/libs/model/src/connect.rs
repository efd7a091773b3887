//! The typed (v2) API as connect-rust generates it, on the buffa runtime:
//! conversions between the domain types and `proto_connect::order::v2`.
//!
//! The same contract as [`crate::v2`] (prost), so the same rules: fields not
//! selected stay at their protobuf default and put nothing on the wire, and a
//! bad field becomes a [`ParseError`] that names it. Answers are read from
//! buffa's zero-copy views, so each string is copied once, into the domain
//! value.

use buffa::MessageField;
pub use buffa_types::google::protobuf::__buffa::view::FieldMaskView;
use buffa_types::google::protobuf::__buffa::view::TimestampView;
use buffa_types::google::protobuf::{FieldMask, Timestamp};
use chrono::{DateTime, Utc};
use proto_connect::order::v2 as cx;
use proto_connect::order::v2::__buffa::view as cxv;

use crate::v2::{parse_uuid, parse_uuid_or_nil, uuid_or_empty};
use crate::{Address, Currency, FieldSet, Order, OrderField as F, OrderStatus, ParseError};

fn timestamp(t: DateTime<Utc>) -> Timestamp {
    Timestamp {
        seconds: t.timestamp(),
        nanos: i32::try_from(t.timestamp_subsec_nanos()).unwrap_or(0),
        ..Default::default()
    }
}

fn from_timestamp(field: &str, t: Option<&TimestampView<'_>>) -> Result<DateTime<Utc>, ParseError> {
    match t {
        None => Ok(DateTime::UNIX_EPOCH),
        Some(t) => u32::try_from(t.nanos)
            .ok()
            .and_then(|n| DateTime::from_timestamp(t.seconds, n))
            .ok_or_else(|| ParseError::new(field, "is not a valid timestamp")),
    }
}

/// The field set a `FieldMask` names; an absent or empty mask means all.
pub fn field_set(mask: Option<&FieldMaskView<'_>>) -> Result<FieldSet, ParseError> {
    match mask {
        None => Ok(FieldSet::ALL),
        Some(m) => FieldSet::parse(m.paths.iter().copied())
            .map_err(|e| ParseError::new("read_mask", e.message)),
    }
}

/// The `FieldMask` of a field set; unset when every field is selected.
pub fn field_mask(fields: FieldSet) -> MessageField<FieldMask, buffa::Inline<FieldMask>> {
    if fields.is_all() {
        MessageField::none()
    } else {
        MessageField::some(FieldMask {
            paths: fields.to_mask_paths(),
            ..Default::default()
        })
    }
}

/// The request for the first `limit` orders of `user_id` with `fields`.
pub fn list_request(user_id: uuid::Uuid, limit: u32, fields: FieldSet) -> cx::ListOrdersRequest {
    cx::ListOrdersRequest {
        user_id: user_id.to_string(),
        page_size: i32::try_from(limit).unwrap_or(i32::MAX),
        read_mask: field_mask(fields),
        ..Default::default()
    }
}

fn address(a: &Address) -> cx::Address {
    cx::Address {
        line1: a.line1.clone(),
        line2: a.line2.clone(),
        city: a.city.clone(),
        postal_code: a.postal_code.clone(),
        country_code: a.country_code.clone(),
        ..Default::default()
    }
}

/// The buffa message of the selected fields of `o`: field for field what
/// [`crate::v2::order_to_pb`] builds for prost, so both encode the same bytes.
pub fn order_to_cx(o: &Order, fields: FieldSet) -> cx::Order {
    let has = |f| fields.contains(f);
    let text = |f, s: &str| if has(f) { s.to_owned() } else { String::new() };
    cx::Order {
        id: o.id.to_string(),
        user_id: if has(F::UserId) {
            uuid_or_empty(o.user_id)
        } else {
            String::new()
        },
        product_id: if has(F::ProductId) {
            uuid_or_empty(o.product_id)
        } else {
            String::new()
        },
        product_name: text(F::ProductName, &o.product_name),
        quantity: if has(F::Quantity) { o.quantity } else { 0 },
        unit_price_minor: if has(F::UnitPriceMinor) {
            o.unit_price_minor
        } else {
            0
        },
        discount_minor: if has(F::DiscountMinor) {
            o.discount_minor
        } else {
            0
        },
        total_minor: if has(F::TotalMinor) { o.total_minor } else { 0 },
        currency: text(F::Currency, o.currency.as_wire_str()),
        status: buffa::EnumValue::from(if has(F::Status) { o.status.as_i32() } else { 0 }),
        gift: has(F::Gift) && o.gift,
        shipping_address: if has(F::ShippingAddress) {
            MessageField::some(address(&o.shipping_address))
        } else {
            MessageField::none()
        },
        note: if has(F::Note) { o.note.clone() } else { None },
        coupon_code: if has(F::CouponCode) {
            o.coupon_code.clone()
        } else {
            None
        },
        created_at: if has(F::CreatedAt) {
            MessageField::some(timestamp(o.created_at))
        } else {
            MessageField::none()
        },
        updated_at: if has(F::UpdatedAt) {
            MessageField::some(timestamp(o.updated_at))
        } else {
            MessageField::none()
        },
        ..Default::default()
    }
}

/// A page of orders as the buffa message.
pub fn page_to_cx(
    orders: &[Order],
    fields: FieldSet,
    next_page_token: String,
) -> cx::ListOrdersResponse {
    cx::ListOrdersResponse {
        orders: orders.iter().map(|o| order_to_cx(o, fields)).collect(),
        next_page_token,
        ..Default::default()
    }
}

impl TryFrom<&cxv::OrderView<'_>> for Order {
    type Error = ParseError;
    fn try_from(p: &cxv::OrderView<'_>) -> Result<Self, Self::Error> {
        Ok(Order {
            id: parse_uuid("id", p.id)?,
            user_id: parse_uuid_or_nil("user_id", p.user_id)?,
            product_id: parse_uuid_or_nil("product_id", p.product_id)?,
            product_name: p.product_name.to_owned(),
            quantity: p.quantity,
            unit_price_minor: p.unit_price_minor,
            discount_minor: p.discount_minor,
            total_minor: p.total_minor,
            currency: Currency::parse_or_blank(p.currency)?,
            status: OrderStatus::from_i32(p.status.to_i32())?,
            gift: p.gift,
            shipping_address: p
                .shipping_address
                .as_option()
                .map(|a| Address {
                    line1: a.line1.to_owned(),
                    line2: a.line2.map(str::to_owned),
                    city: a.city.to_owned(),
                    postal_code: a.postal_code.to_owned(),
                    country_code: a.country_code.to_owned(),
                })
                .unwrap_or_default(),
            note: p.note.map(str::to_owned),
            coupon_code: p.coupon_code.map(str::to_owned),
            created_at: from_timestamp("created_at", p.created_at.as_option())?,
            updated_at: from_timestamp("updated_at", p.updated_at.as_option())?,
        })
    }
}

/// The orders of a page, read from buffa's view of it.
pub fn page_from_view(page: &cxv::ListOrdersResponseView<'_>) -> Result<Vec<Order>, ParseError> {
    page.orders.iter().map(Order::try_from).collect()
}
