//! The domain `Order` and the small types it is made of.
//!
//! An `Order` may be partial: when a caller selects fields, the fields it did
//! not select hold the values of [`Order::blank`]. Every wire form decodes a
//! missing field to that same value, so a partial order fetched over any
//! transport compares equal to the same partial order fetched over another.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::ParseError;

/// Where an order is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum OrderStatus {
    /// Not selected, or not known.
    #[default]
    Unspecified,
    Pending,
    Paid,
    Shipped,
    Delivered,
    Cancelled,
}

impl OrderStatus {
    /// Every status, in enum order.
    pub const ALL: [OrderStatus; 6] = [
        OrderStatus::Unspecified,
        OrderStatus::Pending,
        OrderStatus::Paid,
        OrderStatus::Shipped,
        OrderStatus::Delivered,
        OrderStatus::Cancelled,
    ];

    /// The name used in JSON and in the v1 strings.
    pub fn as_str(self) -> &'static str {
        match self {
            OrderStatus::Unspecified => "UNSPECIFIED",
            OrderStatus::Pending => "PENDING",
            OrderStatus::Paid => "PAID",
            OrderStatus::Shipped => "SHIPPED",
            OrderStatus::Delivered => "DELIVERED",
            OrderStatus::Cancelled => "CANCELLED",
        }
    }

    /// The stable number stored in Postgres and sent in protobuf.
    pub fn as_i32(self) -> i32 {
        self as i32
    }

    /// The status with that number.
    pub fn from_i32(n: i32) -> Result<Self, ParseError> {
        usize::try_from(n)
            .ok()
            .and_then(|i| Self::ALL.get(i).copied())
            .ok_or_else(|| ParseError::new("status", format!("{n} is not an order status")))
    }
}

impl std::str::FromStr for OrderStatus {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .iter()
            .copied()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| {
                ParseError::new(
                    "status",
                    format!(
                        "{} is not one of PENDING, PAID, SHIPPED, DELIVERED, CANCELLED",
                        crate::quoted(s)
                    ),
                )
            })
    }
}

/// An ISO 4217 currency code: three ASCII capital letters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Currency([u8; 3]);

impl Currency {
    /// The blank value of a partial order.
    pub const BLANK: Currency = Currency(*b"   ");

    /// The code as text.
    pub fn as_str(&self) -> &str {
        // Only ever built from ASCII capitals or spaces.
        std::str::from_utf8(&self.0).unwrap_or("   ")
    }

    /// Whether this is the blank of a partial order.
    pub fn is_blank(&self) -> bool {
        *self == Self::BLANK
    }

    /// Parses a currency; an empty string is the blank of a partial order.
    pub fn parse_or_blank(s: &str) -> Result<Self, ParseError> {
        if s.is_empty() {
            Ok(Self::BLANK)
        } else {
            s.parse()
        }
    }

    /// The code as text, or "" for the blank.
    pub fn as_wire_str(&self) -> &str {
        if self.is_blank() { "" } else { self.as_str() }
    }
}

impl Default for Currency {
    fn default() -> Self {
        Self::BLANK
    }
}

impl std::str::FromStr for Currency {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let b = s.as_bytes();
        if b.len() == 3 && b.iter().all(u8::is_ascii_uppercase) {
            Ok(Currency([b[0], b[1], b[2]]))
        } else {
            Err(ParseError::new(
                "currency",
                format!(
                    "{} is not an ISO 4217 code (three capital letters)",
                    crate::quoted(s)
                ),
            ))
        }
    }
}

impl std::fmt::Display for Currency {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A postal address.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Address {
    pub line1: String,
    /// `None` when the address has no second line.
    pub line2: Option<String>,
    pub city: String,
    pub postal_code: String,
    /// ISO 3166-1 alpha-2.
    pub country_code: String,
}

/// One purchase of one product by one user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Order {
    pub id: Uuid,
    pub user_id: Uuid,
    pub product_id: Uuid,
    pub product_name: String,
    pub quantity: u32,
    /// Price of one unit in minor units of `currency`.
    pub unit_price_minor: i64,
    /// Discount on the whole order in minor units.
    pub discount_minor: i64,
    /// `quantity * unit_price_minor - discount_minor`.
    pub total_minor: i64,
    pub currency: Currency,
    pub status: OrderStatus,
    pub gift: bool,
    pub shipping_address: Address,
    /// `None`: no note given; `Some("")`: given and blank.
    pub note: Option<String>,
    pub coupon_code: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl Order {
    /// An order whose fields all hold the value a missing field decodes to.
    pub fn blank(id: Uuid) -> Self {
        Order {
            id,
            user_id: Uuid::nil(),
            product_id: Uuid::nil(),
            product_name: String::new(),
            quantity: 0,
            unit_price_minor: 0,
            discount_minor: 0,
            total_minor: 0,
            currency: Currency::BLANK,
            status: OrderStatus::Unspecified,
            gift: false,
            shipping_address: Address::default(),
            note: None,
            coupon_code: None,
            created_at: DateTime::UNIX_EPOCH,
            updated_at: DateTime::UNIX_EPOCH,
        }
    }

    /// A copy holding only the selected fields; the others are blank.
    /// [`Order::project`] of an owned order: the order itself, moved, when
    /// every field is selected, so that a caller that needs no projection
    /// pays no copy.
    pub fn into_projected(self, fields: crate::FieldSet) -> Order {
        if fields.is_all() {
            self
        } else {
            self.project(fields)
        }
    }

    pub fn project(&self, fields: crate::FieldSet) -> Order {
        use crate::OrderField as F;
        if fields.is_all() {
            return self.clone();
        }
        let mut o = Order::blank(self.id);
        for f in fields.iter() {
            match f {
                F::Id => {}
                F::UserId => o.user_id = self.user_id,
                F::ProductId => o.product_id = self.product_id,
                F::ProductName => o.product_name.clone_from(&self.product_name),
                F::Quantity => o.quantity = self.quantity,
                F::UnitPriceMinor => o.unit_price_minor = self.unit_price_minor,
                F::DiscountMinor => o.discount_minor = self.discount_minor,
                F::TotalMinor => o.total_minor = self.total_minor,
                F::Currency => o.currency = self.currency,
                F::Status => o.status = self.status,
                F::Gift => o.gift = self.gift,
                F::ShippingAddress => o.shipping_address.clone_from(&self.shipping_address),
                F::Note => o.note.clone_from(&self.note),
                F::CouponCode => o.coupon_code.clone_from(&self.coupon_code),
                F::CreatedAt => o.created_at = self.created_at,
                F::UpdatedAt => o.updated_at = self.updated_at,
            }
        }
        o
    }
}

/// What a caller sends to place an order; the server fills in the rest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewOrder {
    pub user_id: Uuid,
    pub product_id: Uuid,
    pub product_name: String,
    pub quantity: u32,
    pub unit_price_minor: i64,
    pub discount_minor: i64,
    pub currency: Currency,
    pub gift: bool,
    pub shipping_address: Address,
    pub note: Option<String>,
    pub coupon_code: Option<String>,
}

impl NewOrder {
    /// Checks the values no type can: positive quantity, sane money, a total
    /// that is not negative, and text lengths the store accepts.
    pub fn validate(&self) -> Result<(), ParseError> {
        if self.quantity == 0 || self.quantity > 10_000 {
            return Err(ParseError::new("quantity", "must be 1 to 10000"));
        }
        if self.unit_price_minor < 0 || self.unit_price_minor > 100_000_000_000 {
            return Err(ParseError::new(
                "unit_price_minor",
                "must be 0 to 100000000000",
            ));
        }
        if self.discount_minor < 0 {
            return Err(ParseError::new("discount_minor", "must not be negative"));
        }
        if self.discount_minor > self.subtotal_minor() {
            return Err(ParseError::new(
                "discount_minor",
                "must not exceed quantity * unit_price_minor",
            ));
        }
        if self.currency.is_blank() {
            return Err(ParseError::new("currency", "is required"));
        }
        for (name, value, max) in [
            ("product_name", Some(self.product_name.as_str()), 200),
            ("note", self.note.as_deref(), 1000),
            ("coupon_code", self.coupon_code.as_deref(), 64),
            (
                "shipping_address.line1",
                Some(self.shipping_address.line1.as_str()),
                200,
            ),
            (
                "shipping_address.line2",
                self.shipping_address.line2.as_deref(),
                200,
            ),
            (
                "shipping_address.city",
                Some(self.shipping_address.city.as_str()),
                100,
            ),
            (
                "shipping_address.postal_code",
                Some(self.shipping_address.postal_code.as_str()),
                20,
            ),
        ] {
            if let Some(v) = value {
                if v.chars().count() > max {
                    return Err(ParseError::new(
                        name,
                        format!("is longer than {max} characters"),
                    ));
                }
                if v.contains('\0') {
                    return Err(ParseError::new(name, "contains a NUL character"));
                }
            }
        }
        if self.product_name.trim().is_empty() {
            return Err(ParseError::new("product_name", "is required"));
        }
        let cc = self.shipping_address.country_code.as_bytes();
        if cc.len() != 2 || !cc.iter().all(u8::is_ascii_uppercase) {
            return Err(ParseError::new(
                "shipping_address.country_code",
                "must be two capital letters (ISO 3166-1 alpha-2)",
            ));
        }
        Ok(())
    }

    /// `quantity * unit_price_minor`.
    pub fn subtotal_minor(&self) -> i64 {
        i64::from(self.quantity).saturating_mul(self.unit_price_minor)
    }

    /// The order this request creates, with the id and time the server chose.
    pub fn into_order(self, id: Uuid, now: DateTime<Utc>) -> Order {
        Order {
            id,
            total_minor: self.subtotal_minor() - self.discount_minor,
            user_id: self.user_id,
            product_id: self.product_id,
            product_name: self.product_name,
            quantity: self.quantity,
            unit_price_minor: self.unit_price_minor,
            discount_minor: self.discount_minor,
            currency: self.currency,
            status: OrderStatus::Pending,
            gift: self.gift,
            shipping_address: self.shipping_address,
            note: self.note,
            coupon_code: self.coupon_code,
            created_at: now,
            updated_at: now,
        }
    }

    /// A fingerprint of the request, so that a reused idempotency key with a
    /// different body can be told from a retry.
    pub fn fingerprint(&self) -> String {
        format!("{self:?}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_numbers_round_trip() {
        for s in OrderStatus::ALL {
            assert_eq!(OrderStatus::from_i32(s.as_i32()).unwrap(), s);
            assert_eq!(s.as_str().parse::<OrderStatus>().unwrap(), s);
        }
        assert!(OrderStatus::from_i32(6).is_err());
        assert!(OrderStatus::from_i32(-1).is_err());
    }

    #[test]
    fn currency_accepts_only_three_capitals() {
        assert_eq!("EUR".parse::<Currency>().unwrap().as_str(), "EUR");
        for bad in ["eur", "EURO", "E1R", "", "€UR"] {
            assert!(bad.parse::<Currency>().is_err(), "{bad} accepted");
        }
    }
}
