//! The JSON form of the typed (v2) API, with the schemas the OpenAPI document
//! is generated from.
//!
//! A field that was not selected is left out of the JSON; a selected optional
//! field that is absent (`note`, `coupon_code`, `line2`) is left out too, so
//! that JSON and protobuf say "absent" the same way. Decoding turns a missing
//! field into the blank of [`Order::blank`].

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::{
    Address, Currency, FieldSet, NewOrder, Order, OrderField as F, OrderStatus, ParseError,
};

/// An order's status, as JSON names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum StatusJson {
    Pending,
    Paid,
    Shipped,
    Delivered,
    Cancelled,
}

impl StatusJson {
    fn from_domain(s: OrderStatus) -> Option<Self> {
        Some(match s {
            OrderStatus::Unspecified => return None,
            OrderStatus::Pending => StatusJson::Pending,
            OrderStatus::Paid => StatusJson::Paid,
            OrderStatus::Shipped => StatusJson::Shipped,
            OrderStatus::Delivered => StatusJson::Delivered,
            OrderStatus::Cancelled => StatusJson::Cancelled,
        })
    }

    fn to_domain(self) -> OrderStatus {
        match self {
            StatusJson::Pending => OrderStatus::Pending,
            StatusJson::Paid => OrderStatus::Paid,
            StatusJson::Shipped => OrderStatus::Shipped,
            StatusJson::Delivered => OrderStatus::Delivered,
            StatusJson::Cancelled => OrderStatus::Cancelled,
        }
    }
}

/// A postal address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AddressJson {
    pub line1: String,
    /// Absent when the address has no second line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line2: Option<String>,
    pub city: String,
    pub postal_code: String,
    /// ISO 3166-1 alpha-2.
    #[schema(pattern = "^[A-Z]{2}$", example = "FR")]
    pub country_code: String,
}

impl From<&Address> for AddressJson {
    fn from(a: &Address) -> Self {
        AddressJson {
            line1: a.line1.clone(),
            line2: a.line2.clone(),
            city: a.city.clone(),
            postal_code: a.postal_code.clone(),
            country_code: a.country_code.clone(),
        }
    }
}

impl From<AddressJson> for Address {
    fn from(a: AddressJson) -> Self {
        Address {
            line1: a.line1,
            line2: a.line2,
            city: a.city,
            postal_code: a.postal_code,
            country_code: a.country_code,
        }
    }
}

/// An order. Only `id` is always present: the other fields are there when
/// selected (all are, unless `fields=` narrowed them) and, for `note`,
/// `coupon_code` and `shipping_address.line2`, when they have a value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct OrderJson {
    pub id: Uuid,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<Uuid>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub product_id: Option<Uuid>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub product_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantity: Option<u32>,
    /// Price of one unit in minor units (cents) of `currency`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit_price_minor: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discount_minor: Option<i64>,
    /// `quantity * unit_price_minor - discount_minor`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_minor: Option<i64>,
    /// ISO 4217.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(example = "EUR")]
    pub currency: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<StatusJson>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gift: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shipping_address: Option<AddressJson>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coupon_code: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<DateTime<Utc>>,
}

impl OrderJson {
    /// The JSON of the selected fields of `o`.
    pub fn from_order(o: &Order, fields: FieldSet) -> Self {
        let has = |f| fields.contains(f);
        OrderJson {
            id: o.id,
            user_id: has(F::UserId).then_some(o.user_id),
            product_id: has(F::ProductId).then_some(o.product_id),
            product_name: has(F::ProductName).then(|| o.product_name.clone()),
            quantity: has(F::Quantity).then_some(o.quantity),
            unit_price_minor: has(F::UnitPriceMinor).then_some(o.unit_price_minor),
            discount_minor: has(F::DiscountMinor).then_some(o.discount_minor),
            total_minor: has(F::TotalMinor).then_some(o.total_minor),
            currency: has(F::Currency).then(|| o.currency.as_wire_str().to_owned()),
            status: if has(F::Status) {
                StatusJson::from_domain(o.status)
            } else {
                None
            },
            gift: has(F::Gift).then_some(o.gift),
            shipping_address: has(F::ShippingAddress).then(|| (&o.shipping_address).into()),
            note: if has(F::Note) { o.note.clone() } else { None },
            coupon_code: if has(F::CouponCode) {
                o.coupon_code.clone()
            } else {
                None
            },
            created_at: has(F::CreatedAt).then_some(o.created_at),
            updated_at: has(F::UpdatedAt).then_some(o.updated_at),
        }
    }
}

impl TryFrom<OrderJson> for Order {
    type Error = ParseError;
    fn try_from(j: OrderJson) -> Result<Self, Self::Error> {
        let mut o = Order::blank(j.id);
        if let Some(v) = j.user_id {
            o.user_id = v;
        }
        if let Some(v) = j.product_id {
            o.product_id = v;
        }
        if let Some(v) = j.product_name {
            o.product_name = v;
        }
        if let Some(v) = j.quantity {
            o.quantity = v;
        }
        if let Some(v) = j.unit_price_minor {
            o.unit_price_minor = v;
        }
        if let Some(v) = j.discount_minor {
            o.discount_minor = v;
        }
        if let Some(v) = j.total_minor {
            o.total_minor = v;
        }
        if let Some(v) = j.currency {
            o.currency = Currency::parse_or_blank(&v)?;
        }
        if let Some(v) = j.status {
            o.status = v.to_domain();
        }
        if let Some(v) = j.gift {
            o.gift = v;
        }
        if let Some(v) = j.shipping_address {
            o.shipping_address = v.into();
        }
        o.note = j.note;
        o.coupon_code = j.coupon_code;
        if let Some(v) = j.created_at {
            o.created_at = v;
        }
        if let Some(v) = j.updated_at {
            o.updated_at = v;
        }
        Ok(o)
    }
}

/// One page of a user's orders.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct OrderPageJson {
    pub orders: Vec<OrderJson>,
    /// Pass as `page_token` for the next page; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_page_token: Option<String>,
}

/// A new order. The server chooses the id, status (`PENDING`), total and times.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateOrderJson {
    pub user_id: Uuid,
    pub product_id: Uuid,
    #[schema(min_length = 1, max_length = 200, example = "Oak Tray")]
    pub product_name: String,
    #[schema(minimum = 1, maximum = 10000)]
    pub quantity: u32,
    #[schema(minimum = 0, maximum = 100_000_000_000_i64)]
    pub unit_price_minor: i64,
    /// At most `quantity * unit_price_minor`.
    #[serde(default)]
    #[schema(minimum = 0)]
    pub discount_minor: i64,
    /// ISO 4217: three capital letters.
    #[schema(example = "EUR", pattern = "^[A-Z]{3}$")]
    pub currency: String,
    #[serde(default)]
    pub gift: bool,
    pub shipping_address: AddressJson,
    #[serde(default)]
    #[schema(max_length = 1000)]
    pub note: Option<String>,
    #[serde(default)]
    #[schema(max_length = 64)]
    pub coupon_code: Option<String>,
}

impl TryFrom<CreateOrderJson> for NewOrder {
    type Error = ParseError;
    fn try_from(j: CreateOrderJson) -> Result<Self, Self::Error> {
        let n = NewOrder {
            user_id: j.user_id,
            product_id: j.product_id,
            product_name: j.product_name,
            quantity: j.quantity,
            unit_price_minor: j.unit_price_minor,
            discount_minor: j.discount_minor,
            currency: j.currency.parse()?,
            gift: j.gift,
            shipping_address: j.shipping_address.into(),
            note: j.note,
            coupon_code: j.coupon_code,
        };
        n.validate()?;
        Ok(n)
    }
}

impl From<&NewOrder> for CreateOrderJson {
    fn from(n: &NewOrder) -> Self {
        CreateOrderJson {
            user_id: n.user_id,
            product_id: n.product_id,
            product_name: n.product_name.clone(),
            quantity: n.quantity,
            unit_price_minor: n.unit_price_minor,
            discount_minor: n.discount_minor,
            currency: n.currency.to_string(),
            gift: n.gift,
            shipping_address: (&n.shipping_address).into(),
            note: n.note.clone(),
            coupon_code: n.coupon_code.clone(),
        }
    }
}

/// The answer to a created (or replayed) order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CreatedOrderJson {
    pub order: OrderJson,
    /// True when the idempotency key had been seen and no new order was made.
    pub replayed: bool,
}

/// The body of every error answer: RFC 9457 problem details, sent as
/// `application/problem+json` whatever the request's `Accept` says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(
    description = "An error, as RFC 9457 problem details (`application/problem+json`, whatever \
                   `Accept` says). `type` is `/problems/` followed by `error`, a reference \
                   relative to the service's URL, where a GET describes the type.",
    example = json!({
        "type": "/problems/invalid_argument",
        "title": "Invalid argument",
        "status": 400,
        "detail": "limit: \"ten\" is not a whole number",
        "field": "limit",
        "error": "invalid_argument"
    })
)]
pub struct Problem {
    /// The problem type, a URI reference: `/problems/<error>`.
    #[serde(rename = "type")]
    #[schema(example = "/problems/invalid_argument")]
    pub type_uri: String,
    /// Short, and the same for every problem of a type.
    #[schema(example = "Invalid argument")]
    pub title: String,
    /// The HTTP status code of the answer.
    #[schema(minimum = 400, maximum = 599, example = 400)]
    pub status: u16,
    /// What was wrong with this request, for a person.
    pub detail: String,
    /// Extension: the request field at fault, when there is one (`body` for
    /// a body that could not be read or decoded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// Extension: the problem type's stable machine-readable name, such as
    /// `invalid_argument`, as the API named its errors before RFC 9457.
    #[schema(example = "invalid_argument")]
    pub error: String,
}
