//! Field selection: which fields of an order a caller wants.
//!
//! REST takes `fields=id,status,total_minor`; gRPC takes a `FieldMask` with the
//! same names. Both become a [`FieldSet`], which travels to the store (the
//! Postgres query selects only those columns) and back to the encoders.

use crate::ParseError;

/// One field of an order, named as in `order.v2.Order`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OrderField {
    Id,
    UserId,
    ProductId,
    ProductName,
    Quantity,
    UnitPriceMinor,
    DiscountMinor,
    TotalMinor,
    Currency,
    Status,
    Gift,
    ShippingAddress,
    Note,
    CouponCode,
    CreatedAt,
    UpdatedAt,
}

impl OrderField {
    /// Every field, in proto order.
    pub const ALL: [OrderField; 16] = [
        OrderField::Id,
        OrderField::UserId,
        OrderField::ProductId,
        OrderField::ProductName,
        OrderField::Quantity,
        OrderField::UnitPriceMinor,
        OrderField::DiscountMinor,
        OrderField::TotalMinor,
        OrderField::Currency,
        OrderField::Status,
        OrderField::Gift,
        OrderField::ShippingAddress,
        OrderField::Note,
        OrderField::CouponCode,
        OrderField::CreatedAt,
        OrderField::UpdatedAt,
    ];

    /// The field's name in JSON, in the proto and in `fields=`.
    pub fn name(self) -> &'static str {
        match self {
            OrderField::Id => "id",
            OrderField::UserId => "user_id",
            OrderField::ProductId => "product_id",
            OrderField::ProductName => "product_name",
            OrderField::Quantity => "quantity",
            OrderField::UnitPriceMinor => "unit_price_minor",
            OrderField::DiscountMinor => "discount_minor",
            OrderField::TotalMinor => "total_minor",
            OrderField::Currency => "currency",
            OrderField::Status => "status",
            OrderField::Gift => "gift",
            OrderField::ShippingAddress => "shipping_address",
            OrderField::Note => "note",
            OrderField::CouponCode => "coupon_code",
            OrderField::CreatedAt => "created_at",
            OrderField::UpdatedAt => "updated_at",
        }
    }

    fn bit(self) -> u32 {
        1 << (self as u32)
    }
}

impl std::str::FromStr for OrderField {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        OrderField::ALL
            .iter()
            .copied()
            .find(|f| f.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = OrderField::ALL.iter().map(|f| f.name()).collect();
                ParseError::new(
                    "fields",
                    format!(
                        "unknown field {}; known fields: {}",
                        crate::quoted(s),
                        names.join(", ")
                    ),
                )
            })
    }
}

/// A set of order fields. `id` is always in it: it is the key, and pages are
/// cut by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FieldSet(u32);

impl FieldSet {
    /// Every field.
    pub const ALL: FieldSet = FieldSet((1 << 16) - 1);

    /// The six fields of the `schema` experiment's narrow selection (the type-fix
    /// post asked for 6 of about 60).
    pub const SUMMARY: [OrderField; 6] = [
        OrderField::Id,
        OrderField::ProductName,
        OrderField::TotalMinor,
        OrderField::Currency,
        OrderField::Status,
        OrderField::CreatedAt,
    ];

    /// Only `id`.
    pub fn id_only() -> Self {
        FieldSet(OrderField::Id.bit())
    }

    /// The set of these fields, plus `id`.
    pub fn of(fields: impl IntoIterator<Item = OrderField>) -> Self {
        fields
            .into_iter()
            .fold(Self::id_only(), |s, f| FieldSet(s.0 | f.bit()))
    }

    /// Parses names; no names at all means every field.
    pub fn parse<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<Self, ParseError> {
        let mut set = Self::id_only();
        let mut any = false;
        for n in names {
            let n = n.trim();
            if n.is_empty() {
                continue;
            }
            any = true;
            set.0 |= n.parse::<OrderField>()?.bit();
        }
        Ok(if any { set } else { Self::ALL })
    }

    /// Parses a comma-separated list, as in `fields=id,status`.
    pub fn parse_csv(csv: &str) -> Result<Self, ParseError> {
        Self::parse(csv.split(','))
    }

    /// Whether the field is selected.
    pub fn contains(self, f: OrderField) -> bool {
        self.0 & f.bit() != 0
    }

    /// Whether every field is selected.
    pub fn is_all(self) -> bool {
        self == Self::ALL
    }

    /// The selected fields, in proto order.
    pub fn iter(self) -> impl Iterator<Item = OrderField> {
        OrderField::ALL
            .into_iter()
            .filter(move |f| self.contains(*f))
    }

    /// The selected names, comma-separated.
    pub fn to_csv(self) -> String {
        self.iter()
            .map(OrderField::name)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The selected names, for a `FieldMask`; empty when all are selected.
    pub fn to_mask_paths(self) -> Vec<String> {
        if self.is_all() {
            Vec::new()
        } else {
            self.iter().map(|f| f.name().to_owned()).collect()
        }
    }
}

impl Default for FieldSet {
    fn default() -> Self {
        Self::ALL
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_selection_means_every_field() {
        assert!(FieldSet::parse_csv("").unwrap().is_all());
        assert!(FieldSet::parse([]).unwrap().is_all());
    }

    #[test]
    fn id_is_always_selected() {
        let s = FieldSet::parse_csv("status,total_minor").unwrap();
        assert!(s.contains(OrderField::Id));
        assert!(s.contains(OrderField::Status));
        assert!(!s.contains(OrderField::Note));
        assert_eq!(s.to_csv(), "id,total_minor,status");
    }

    #[test]
    fn unknown_field_is_named_in_the_error() {
        let e = FieldSet::parse_csv("id,colour").unwrap_err();
        assert_eq!(e.field, "fields");
        assert!(e.message.contains("\"colour\""), "{}", e.message);
    }

    #[test]
    fn every_name_parses_back() {
        for f in OrderField::ALL {
            assert_eq!(f.name().parse::<OrderField>().unwrap(), f);
        }
        assert!(FieldSet::of(OrderField::ALL).is_all());
    }
}
