//! The legacy all-strings form (the type-fix post's v1), to and from the domain type.
//!
//! Money is a decimal string with two places ("12.50"), booleans are
//! "true"/"false", times RFC 3339 with microseconds. An absent optional and an
//! empty one are both "": v1 cannot tell them apart, which is one of the
//! reasons v2 exists.

use chrono::{DateTime, SecondsFormat, Utc};
use proto::order::v1 as pb;

use crate::v2::parse_uuid;
use crate::{Address, Currency, Order, ParseError};

/// Minor units as a decimal string with two places: 1250 -> "12.50".
pub fn money(minor: i64) -> String {
    let sign = if minor < 0 { "-" } else { "" };
    let m = minor.unsigned_abs();
    format!("{sign}{}.{:02}", m / 100, m % 100)
}

/// A decimal string with up to two places as minor units: "12.5" -> 1250.
pub fn parse_money(field: &str, s: &str) -> Result<i64, ParseError> {
    let bad = || {
        ParseError::new(
            field,
            format!("{} is not an amount like 12.50", crate::quoted(s)),
        )
    };
    let (neg, digits) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s),
    };
    let (whole, frac) = digits.split_once('.').unwrap_or((digits, ""));
    let digits_only = |t: &str| t.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || frac.len() > 2 || !digits_only(whole) || !digits_only(frac) {
        return Err(bad());
    }
    let whole: i64 = whole.parse().map_err(|_| bad())?;
    let frac: i64 = if frac.is_empty() {
        0
    } else {
        let f: i64 = frac.parse().map_err(|_| bad())?;
        if frac.len() == 1 { f * 10 } else { f }
    };
    let v = whole
        .checked_mul(100)
        .and_then(|w| w.checked_add(frac))
        .ok_or_else(bad)?;
    Ok(if neg { -v } else { v })
}

fn time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Micros, true)
}

fn parse_time(field: &str, s: &str) -> Result<DateTime<Utc>, ParseError> {
    DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|_| {
            ParseError::new(
                field,
                format!("{} is not an RFC 3339 time", crate::quoted(s)),
            )
        })
}

/// The all-strings form of an order.
pub fn order_to_v1(o: &Order) -> pb::Order {
    pb::Order {
        id: o.id.to_string(),
        user_id: o.user_id.to_string(),
        product_id: o.product_id.to_string(),
        product_name: o.product_name.clone(),
        quantity: o.quantity.to_string(),
        unit_price: money(o.unit_price_minor),
        discount: money(o.discount_minor),
        total: money(o.total_minor),
        currency: o.currency.to_string(),
        status: o.status.as_str().to_owned(),
        gift: o.gift.to_string(),
        ship_line1: o.shipping_address.line1.clone(),
        ship_line2: o.shipping_address.line2.clone().unwrap_or_default(),
        ship_city: o.shipping_address.city.clone(),
        ship_postal_code: o.shipping_address.postal_code.clone(),
        ship_country_code: o.shipping_address.country_code.clone(),
        note: o.note.clone().unwrap_or_default(),
        coupon_code: o.coupon_code.clone().unwrap_or_default(),
        created_at: time(o.created_at),
        updated_at: time(o.updated_at),
    }
}

fn non_empty(s: String) -> Option<String> {
    (!s.is_empty()).then_some(s)
}

impl TryFrom<pb::Order> for Order {
    type Error = ParseError;
    /// Parses every string back; "" becomes `None` for the optional fields.
    fn try_from(p: pb::Order) -> Result<Self, Self::Error> {
        Ok(Order {
            id: parse_uuid("id", &p.id)?,
            user_id: parse_uuid("user_id", &p.user_id)?,
            product_id: parse_uuid("product_id", &p.product_id)?,
            product_name: p.product_name,
            quantity: p.quantity.parse().map_err(|_| {
                ParseError::new("quantity", format!("{:?} is not a count", p.quantity))
            })?,
            unit_price_minor: parse_money("unit_price", &p.unit_price)?,
            discount_minor: parse_money("discount", &p.discount)?,
            total_minor: parse_money("total", &p.total)?,
            currency: p.currency.parse::<Currency>()?,
            status: p.status.parse()?,
            gift: match p.gift.as_str() {
                "true" => true,
                "false" => false,
                other => {
                    return Err(ParseError::new(
                        "gift",
                        format!("{other:?} is not true or false"),
                    ));
                }
            },
            shipping_address: Address {
                line1: p.ship_line1,
                line2: non_empty(p.ship_line2),
                city: p.ship_city,
                postal_code: p.ship_postal_code,
                country_code: p.ship_country_code,
            },
            note: non_empty(p.note),
            coupon_code: non_empty(p.coupon_code),
            created_at: parse_time("created_at", &p.created_at)?,
            updated_at: parse_time("updated_at", &p.updated_at)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn money_round_trips_through_its_string() {
        for m in [0, 1, 9, 10, 99, 100, 1250, 123_456_789, -5, -1250] {
            assert_eq!(parse_money("x", &money(m)).unwrap(), m, "{}", money(m));
        }
        assert_eq!(money(1250), "12.50");
        assert_eq!(parse_money("x", "12.5").unwrap(), 1250);
        assert_eq!(parse_money("x", "12").unwrap(), 1200);
    }

    #[test]
    fn money_rejects_what_is_not_an_amount() {
        for bad in [
            "",
            ".5",
            "1.234",
            "abc",
            "1.x",
            "--1",
            "99999999999999999999",
        ] {
            assert!(parse_money("unit_price", bad).is_err(), "{bad:?} accepted");
        }
    }
}
