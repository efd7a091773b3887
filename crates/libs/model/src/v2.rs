//! The protobuf form of the typed (v2) API: conversions between the domain
//! types and `proto::order::v2`.

use chrono::{DateTime, Utc};
use proto::order::v2 as pb;
use proto::prost_types::{FieldMask, Timestamp};
use uuid::Uuid;

use crate::{
    Address, Currency, FieldSet, NewOrder, Order, OrderField as F, OrderStatus, ParseError,
};

/// A time as a protobuf Timestamp.
pub fn timestamp(t: DateTime<Utc>) -> Timestamp {
    Timestamp {
        seconds: t.timestamp(),
        nanos: i32::try_from(t.timestamp_subsec_nanos()).unwrap_or(0),
    }
}

/// A protobuf Timestamp as a time.
pub fn from_timestamp(field: &str, t: &Timestamp) -> Result<DateTime<Utc>, ParseError> {
    u32::try_from(t.nanos)
        .ok()
        .and_then(|n| DateTime::from_timestamp(t.seconds, n))
        .ok_or_else(|| ParseError::new(field, "is not a valid timestamp"))
}

/// A UUID from its text, naming the field when it is not one.
pub fn parse_uuid(field: &str, s: &str) -> Result<Uuid, ParseError> {
    Uuid::try_parse(s)
        .map_err(|_| ParseError::new(field, format!("{} is not a UUID", crate::quoted(s))))
}

pub(crate) fn parse_uuid_or_nil(field: &str, s: &str) -> Result<Uuid, ParseError> {
    if s.is_empty() {
        Ok(Uuid::nil())
    } else {
        parse_uuid(field, s)
    }
}

pub(crate) fn uuid_or_empty(u: Uuid) -> String {
    if u.is_nil() {
        String::new()
    } else {
        u.to_string()
    }
}

/// The field set a `FieldMask` names; an absent or empty mask means all.
pub fn field_set(mask: Option<&FieldMask>) -> Result<FieldSet, ParseError> {
    match mask {
        None => Ok(FieldSet::ALL),
        Some(m) => FieldSet::parse(m.paths.iter().map(String::as_str))
            .map_err(|e| ParseError::new("read_mask", e.message)),
    }
}

/// The `FieldMask` of a field set; `None` when every field is selected.
pub fn field_mask(fields: FieldSet) -> Option<FieldMask> {
    (!fields.is_all()).then(|| FieldMask {
        paths: fields.to_mask_paths(),
    })
}

impl From<&Address> for pb::Address {
    fn from(a: &Address) -> Self {
        pb::Address {
            line1: a.line1.clone(),
            line2: a.line2.clone(),
            city: a.city.clone(),
            postal_code: a.postal_code.clone(),
            country_code: a.country_code.clone(),
        }
    }
}

impl From<pb::Address> for Address {
    fn from(a: pb::Address) -> Self {
        Address {
            line1: a.line1,
            line2: a.line2,
            city: a.city,
            postal_code: a.postal_code,
            country_code: a.country_code,
        }
    }
}

/// The protobuf of the selected fields of `o`. Fields not selected are left at
/// their protobuf default, which puts nothing on the wire.
pub fn order_to_pb(o: &Order, fields: FieldSet) -> pb::Order {
    let has = |f| fields.contains(f);
    pb::Order {
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
        product_name: if has(F::ProductName) {
            o.product_name.clone()
        } else {
            String::new()
        },
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
        currency: if has(F::Currency) {
            o.currency.as_wire_str().to_owned()
        } else {
            String::new()
        },
        status: if has(F::Status) { o.status.as_i32() } else { 0 },
        gift: has(F::Gift) && o.gift,
        shipping_address: has(F::ShippingAddress).then(|| (&o.shipping_address).into()),
        note: if has(F::Note) { o.note.clone() } else { None },
        coupon_code: if has(F::CouponCode) {
            o.coupon_code.clone()
        } else {
            None
        },
        created_at: has(F::CreatedAt).then(|| timestamp(o.created_at)),
        updated_at: has(F::UpdatedAt).then(|| timestamp(o.updated_at)),
    }
}

impl TryFrom<pb::Order> for Order {
    type Error = ParseError;
    fn try_from(p: pb::Order) -> Result<Self, Self::Error> {
        Ok(Order {
            id: parse_uuid("id", &p.id)?,
            user_id: parse_uuid_or_nil("user_id", &p.user_id)?,
            product_id: parse_uuid_or_nil("product_id", &p.product_id)?,
            product_name: p.product_name,
            quantity: p.quantity,
            unit_price_minor: p.unit_price_minor,
            discount_minor: p.discount_minor,
            total_minor: p.total_minor,
            currency: Currency::parse_or_blank(&p.currency)?,
            status: OrderStatus::from_i32(p.status)?,
            gift: p.gift,
            shipping_address: p.shipping_address.map(Into::into).unwrap_or_default(),
            note: p.note,
            coupon_code: p.coupon_code,
            created_at: p
                .created_at
                .as_ref()
                .map(|t| from_timestamp("created_at", t))
                .transpose()?
                .unwrap_or(DateTime::UNIX_EPOCH),
            updated_at: p
                .updated_at
                .as_ref()
                .map(|t| from_timestamp("updated_at", t))
                .transpose()?
                .unwrap_or(DateTime::UNIX_EPOCH),
        })
    }
}

impl TryFrom<pb::CreateOrderRequest> for NewOrder {
    type Error = ParseError;
    fn try_from(r: pb::CreateOrderRequest) -> Result<Self, Self::Error> {
        let n = NewOrder {
            user_id: parse_uuid("user_id", &r.user_id)?,
            product_id: parse_uuid("product_id", &r.product_id)?,
            product_name: r.product_name,
            quantity: r.quantity,
            unit_price_minor: r.unit_price_minor,
            discount_minor: r.discount_minor,
            currency: r.currency.parse()?,
            gift: r.gift,
            shipping_address: r
                .shipping_address
                .map(Into::into)
                .ok_or_else(|| ParseError::new("shipping_address", "is required"))?,
            note: r.note,
            coupon_code: r.coupon_code,
        };
        n.validate()?;
        Ok(n)
    }
}

/// The protobuf request that places `n` under `idempotency_key`.
pub fn create_request(n: &NewOrder, idempotency_key: &str) -> pb::CreateOrderRequest {
    pb::CreateOrderRequest {
        idempotency_key: idempotency_key.to_owned(),
        user_id: n.user_id.to_string(),
        product_id: n.product_id.to_string(),
        product_name: n.product_name.clone(),
        quantity: n.quantity,
        unit_price_minor: n.unit_price_minor,
        discount_minor: n.discount_minor,
        currency: n.currency.to_string(),
        gift: n.gift,
        shipping_address: Some((&n.shipping_address).into()),
        note: n.note.clone(),
        coupon_code: n.coupon_code.clone(),
    }
}
