//! The deterministic demo data set, identical in every store on every run.
//!
//! Six users have fixed ids whose last digits spell how many orders they have:
//! `00000000-0000-0000-0000-000000000000` has none, `…-000000000001` has one,
//! and so on through `…-000000010000` with ten thousand. About a thousand
//! other users (`00000000-0000-0001-0000-…`) have a long-tailed spread of
//! orders (log-normal, median about 45), as real shops do: most users order a
//! little, a few order a lot. Every value comes from a fixed-seed SplitMix64
//! generator, so nothing depends on a crate's choice of random algorithm.
//!
//! # Layout
//! - [`users`]: every user of the set, with its profile and order count.
//! - [`orders_of`]: one user's orders, sorted by id (the order stores page by).
//! - [`all_orders`]: every order, user by user.

use chrono::{DateTime, Duration, NaiveDate, Utc};
use model::{Address, Currency, Order, OrderStatus};
use uuid::Uuid;

/// A version of the data set: a hash (FNV-1a) of this generator's source,
/// for names that must change when the data set does (the test databases'
/// templates).
pub fn version() -> String {
    let src = include_str!("lib.rs");
    let h = src.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("dataset-{h:016x}")
}

/// The order counts of the users with fixed ids.
pub const FIXED_COUNTS: [u32; 6] = [0, 1, 10, 100, 1_000, 10_000];

/// How many users besides the fixed ones.
pub const OTHER_USERS: u32 = 1_000;

/// The id of the fixed user with `count` orders: its last digits spell the count.
pub fn fixed_user_id(count: u32) -> Uuid {
    Uuid::from_u128(u128::from_str_radix(&count.to_string(), 16).unwrap_or(0))
}

/// The id of the `i`-th other user (1-based).
pub fn other_user_id(i: u32) -> Uuid {
    Uuid::from_u128((1u128 << 64) | u128::from_str_radix(&i.to_string(), 16).unwrap_or(0))
}

/// A small, stable pseudo-random generator (SplitMix64).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator for one purpose and one key: the same pair always gives the
    /// same sequence.
    pub fn new(purpose: u64, key: u64) -> Self {
        let mut r = Rng(purpose.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ key);
        r.next_u64();
        r
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// A float in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    /// One element of a non-empty slice.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }

    /// A UUID (version 4 bits set) from the generator.
    pub fn uuid(&mut self) -> Uuid {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&self.next_u64().to_le_bytes());
        b[8..].copy_from_slice(&self.next_u64().to_le_bytes());
        uuid::Builder::from_random_bytes(b).into_uuid()
    }
}

const FIRST_NAMES: [&str; 24] = [
    "Minji", "Jisoo", "Seojun", "Hana", "Doyun", "Yuna", "Ana", "Liam", "Olivia", "Noah", "Emma",
    "Mateo", "Sofia", "Lucas", "Amara", "Kenji", "Aiko", "Ravi", "Priya", "Omar", "Leila", "Jonas",
    "Freya", "Tomas",
];
const LAST_NAMES: [&str; 20] = [
    "Kim", "Lee", "Park", "Choi", "Jung", "Garcia", "Smith", "Muller", "Rossi", "Silva", "Tanaka",
    "Sato", "Patel", "Khan", "Nielsen", "Novak", "Dubois", "Haddad", "Okafor", "Larsen",
];
const STREETS: [&str; 12] = [
    "Maple",
    "Harbour",
    "Station",
    "Mill",
    "Chestnut",
    "Bridge",
    "Garden",
    "Castle",
    "Church",
    "Orchard",
    "Riverside",
    "Market",
];
/// (city, country, currency)
const PLACES: [(&str, &str, &str); 8] = [
    ("Seoul", "KR", "USD"),
    ("Busan", "KR", "USD"),
    ("Berlin", "DE", "EUR"),
    ("Lyon", "FR", "EUR"),
    ("Porto", "PT", "EUR"),
    ("Leeds", "GB", "GBP"),
    ("Austin", "US", "USD"),
    ("Osaka", "JP", "USD"),
];
const ADJECTIVES: [&str; 16] = [
    "Walnut", "Linen", "Ceramic", "Steel", "Bamboo", "Wool", "Copper", "Oak", "Glass", "Leather",
    "Cotton", "Marble", "Felt", "Cork", "Brass", "Canvas",
];
const NOUNS: [&str; 20] = [
    "Desk Lamp",
    "Notebook",
    "Mug",
    "Backpack",
    "Chair",
    "Throw",
    "Kettle",
    "Shelf",
    "Vase",
    "Wallet",
    "Tote",
    "Coaster Set",
    "Planter",
    "Clock",
    "Headphones",
    "Keyboard",
    "Blanket",
    "Bottle",
    "Tray",
    "Bookend",
];
const NOTES: [&str; 6] = [
    "Please leave at the door",
    "Ring twice",
    "Gift, no invoice in the box",
    "Call before delivery",
    "Fragile",
    "Deliver after 6pm",
];
static GENDERS: [&str; 3] = ["FEMALE", "MALE", "OTHER"];
const COUPONS: [&str; 4] = ["WELCOME10", "SPRING25", "FREESHIP", "LOYAL5"];
/// How many products the catalog has (the type-fix post's shop had 603).
pub const PRODUCTS: u64 = 600;

/// A user of the data set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatasetUser {
    pub id: Uuid,
    /// How many orders this user has in the set.
    pub order_count: u32,
    pub username: String,
    pub first_name: String,
    pub last_name: String,
    pub email: String,
    pub phone: String,
    /// "FEMALE", "MALE" or "OTHER".
    pub gender: &'static str,
    pub birth_date: NaiveDate,
    pub created_at: DateTime<Utc>,
    address: Address,
    currency: Currency,
}

fn epoch() -> DateTime<Utc> {
    // 2024-01-01T00:00:00Z: every time in the set is after it.
    DateTime::from_timestamp(1_704_067_200, 0).unwrap_or(DateTime::UNIX_EPOCH)
}

/// A well-mixed 64-bit key of a UUID, so that similar ids get unrelated streams.
fn id_key(id: Uuid) -> u64 {
    let (hi, lo) = id.as_u64_pair();
    Rng::new(7, lo).next_u64() ^ Rng::new(8, hi).next_u64().rotate_left(29)
}

fn user(id: Uuid, order_count: u32) -> DatasetUser {
    let mut r = Rng::new(1, id_key(id));
    let first = *r.pick(&FIRST_NAMES);
    let last = *r.pick(&LAST_NAMES);
    let short = id.as_u128() & 0xFFFF_FFFF_FFFF;
    let username = format!("{}.{}.{short:x}", first.to_lowercase(), last.to_lowercase());
    let (city, country, currency) = *r.pick(&PLACES);
    let address = Address {
        line1: format!("{} {} Street", 1 + r.below(300), r.pick(&STREETS)),
        line2: r.chance(0.2).then(|| format!("Apt {}", 1 + r.below(90))),
        city: city.to_owned(),
        postal_code: format!("{:05}", r.below(100_000)),
        country_code: country.to_owned(),
    };
    DatasetUser {
        id,
        order_count,
        email: format!("{username}@example.com"),
        phone: format!("+1-555-{:04}-{:04}", r.below(10_000), r.below(10_000)),
        gender: r.pick::<&'static str>(&GENDERS),
        birth_date: NaiveDate::from_ymd_opt(1950, 1, 1)
            .unwrap_or_default()
            .checked_add_days(chrono::Days::new(r.below(365 * 55)))
            .unwrap_or_default(),
        created_at: epoch() - Duration::days(30 + r.below(700) as i64),
        username,
        first_name: first.to_owned(),
        last_name: last.to_owned(),
        address,
        currency: currency.parse().unwrap_or_default(),
    }
}

/// How many orders the `i`-th other user has: log-normal, median about 45,
/// capped at 2,000.
fn other_count(i: u32) -> u32 {
    let mut r = Rng::new(2, u64::from(i));
    // Box-Muller.
    let (u1, u2) = (r.unit().max(1e-12), r.unit());
    let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
    ((3.8 + 1.1 * z).exp().floor() as u32).min(2_000)
}

/// Every user of the set: the six fixed ones first, then the others.
pub fn users() -> Vec<DatasetUser> {
    FIXED_COUNTS
        .iter()
        .map(|&c| user(fixed_user_id(c), c))
        .chain((1..=OTHER_USERS).map(|i| user(other_user_id(i), other_count(i))))
        .collect()
}

/// One user's orders, sorted by id.
pub fn orders_of(u: &DatasetUser) -> Vec<Order> {
    let mut orders: Vec<Order> = (0..u.order_count).map(|k| order(u, k)).collect();
    orders.sort_unstable_by_key(|o| o.id);
    orders
}

/// Every order of the set, user by user.
pub fn all_orders() -> impl Iterator<Item = Order> {
    users().into_iter().flat_map(|u| orders_of(&u))
}

fn order(u: &DatasetUser, k: u32) -> Order {
    let mut r = Rng::new(3, Rng::new(6, id_key(u.id) ^ u64::from(k)).next_u64());
    let id = r.uuid();
    let product = r.below(PRODUCTS);
    let mut pr = Rng::new(4, product);
    let product_id = pr.uuid();
    let product_name = format!("{} {}", pr.pick(&ADJECTIVES), pr.pick(&NOUNS));
    let unit_price_minor = 199 + pr.below(49_800) as i64;
    let quantity = *r.pick(&[1, 1, 1, 1, 2, 2, 3, 5]);
    let subtotal = i64::from(quantity) * unit_price_minor;
    let discount_minor = if r.chance(0.2) {
        subtotal * (5 + r.below(16) as i64) / 100
    } else {
        0
    };
    let created_at = epoch() + Duration::seconds(r.below(700 * 86_400) as i64);
    let status = *r.pick(&[
        OrderStatus::Delivered,
        OrderStatus::Delivered,
        OrderStatus::Delivered,
        OrderStatus::Shipped,
        OrderStatus::Paid,
        OrderStatus::Pending,
        OrderStatus::Cancelled,
    ]);
    let updated_at = if status == OrderStatus::Pending {
        created_at
    } else {
        created_at + Duration::seconds(r.below(14 * 86_400) as i64)
    };
    Order {
        id,
        user_id: u.id,
        product_id,
        product_name,
        quantity,
        unit_price_minor,
        discount_minor,
        total_minor: subtotal - discount_minor,
        currency: u.currency,
        status,
        gift: r.chance(0.1),
        shipping_address: u.address.clone(),
        note: r.chance(0.15).then(|| (*r.pick(&NOTES)).to_owned()),
        coupon_code: (discount_minor > 0 && r.chance(0.6)).then(|| (*r.pick(&COUPONS)).to_owned()),
        created_at,
        updated_at,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_ids_spell_their_order_counts() {
        assert_eq!(
            fixed_user_id(100).to_string(),
            "00000000-0000-0000-0000-000000000100"
        );
        assert_eq!(
            fixed_user_id(10_000).to_string(),
            "00000000-0000-0000-0000-000000010000"
        );
        let us = users();
        for c in FIXED_COUNTS {
            let u = us.iter().find(|u| u.id == fixed_user_id(c)).unwrap();
            assert_eq!(orders_of(u).len() as u32, c);
        }
    }

    #[test]
    fn every_other_user_has_an_order_and_an_id_that_spells_its_number() {
        // The many-users load (k6's USERS) asks for other users 1..N's first
        // orders and expects one each.
        for u in users().into_iter().skip(FIXED_COUNTS.len()) {
            assert!(u.order_count >= 1, "{} has no order", u.id);
        }
        assert_eq!(
            other_user_id(27).to_string(),
            "00000000-0000-0001-0000-000000000027"
        );
    }

    #[test]
    fn the_set_is_the_same_on_every_call() {
        let u = users();
        assert_eq!(u, users());
        assert_eq!(orders_of(&u[3]), orders_of(&u[3]));
    }

    #[test]
    fn the_set_has_a_realistic_size_and_unique_ids() {
        let us = users();
        assert_eq!(us.len(), 1_006);
        let mut ids: Vec<Uuid> = all_orders().map(|o| o.id).collect();
        let n = ids.len();
        assert!((60_000..150_000).contains(&n), "{n} orders");
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), n, "order ids collide");
        let mut names: Vec<&str> = us.iter().map(|u| u.username.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), us.len(), "usernames collide");
    }

    #[test]
    fn orders_are_consistent_and_never_hold_an_empty_optional() {
        for o in all_orders().take(20_000) {
            assert_eq!(
                o.total_minor,
                i64::from(o.quantity) * o.unit_price_minor - o.discount_minor
            );
            assert!(o.updated_at >= o.created_at);
            // The legacy v1 API cannot tell "" from absent; the set avoids ""
            // so that every transport returns the same orders.
            assert_ne!(o.note.as_deref(), Some(""));
            assert_ne!(o.coupon_code.as_deref(), Some(""));
            assert_ne!(o.shipping_address.line2.as_deref(), Some(""));
        }
    }
}
