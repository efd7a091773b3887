//! The Postgres store, through sqlx.
//!
//! Queries bind every value. The column list of a read is built from the
//! field selection, from a fixed table of column names, so that a narrow
//! `fields=` really reads less from the database (the type-fix post measured how little
//! that saves once the row is found; this lets the lab measure it again). That
//! dynamic column list is why these queries are checked by the tests rather
//! than by `query!` at compile time.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use anyhow::Context as _;
use model::{Address, Currency, FieldSet, NewOrder, Order, OrderField as F, OrderStatus};
use sqlx::pool::PoolConnection;
use sqlx::postgres::PgRow;
use sqlx::{Acquire as _, AssertSqlSafe, PgPool, Postgres, Row};
use uuid::Uuid;

use super::port::{Created, ListQuery, OrderPage, OrderStore, StoreError, now};

/// The migrations of `migrations/orders`, embedded at compile time.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../../migrations/orders");

/// The Postgres store.
#[derive(Debug, Clone)]
pub struct PgStore {
    pool: PgPool,
    /// Queries waiting for a pooled connection now: sqlx does not count them,
    /// and a growing queue is the first sign the pool is the bottleneck.
    waiting: Arc<AtomicI64>,
}

/// The pool's state, for /metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolStats {
    pub size: u32,
    pub idle: usize,
    pub waiting: i64,
}

/// Counts a query as waiting until it has a connection (or gives up).
struct Waiting<'a>(&'a AtomicI64);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl PgStore {
    /// Connects, and applies the migrations.
    pub async fn connect(s: &service_kit::db::PoolSettings) -> anyhow::Result<Self> {
        let pool = service_kit::db::connect(s, &MIGRATOR, "migrations/orders").await?;
        Ok(Self::from_pool(pool))
    }

    /// A store on an existing pool (migrations already applied).
    pub fn from_pool(pool: PgPool) -> Self {
        PgStore {
            pool,
            waiting: Arc::new(AtomicI64::new(0)),
        }
    }

    /// Connections open, idle, and queries waiting for one.
    pub fn pool_stats(&self) -> PoolStats {
        PoolStats {
            size: self.pool.size(),
            idle: self.pool.num_idle(),
            waiting: self.waiting.load(Ordering::Relaxed),
        }
    }

    /// A pooled connection, counted as waiting while it is awaited.
    async fn conn(&self) -> Result<PoolConnection<Postgres>, StoreError> {
        self.waiting.fetch_add(1, Ordering::Relaxed);
        let _counted = Waiting(&self.waiting);
        Ok(self.pool.acquire().await?)
    }

    /// Loads the deterministic data set; returns how many orders were new.
    /// Running it twice changes nothing: rows whose id exists are skipped.
    ///
    /// The rows go in by `COPY` into a temporary table and one
    /// `INSERT … ON CONFLICT DO NOTHING`, which loads 100k orders in seconds.
    pub async fn seed(&self) -> anyhow::Result<u64> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("CREATE TEMP TABLE seed_orders (LIKE orders) ON COMMIT DROP")
            .execute(&mut *tx)
            .await?;
        let mut copy = tx
            .copy_in_raw("COPY seed_orders FROM STDIN (FORMAT csv)")
            .await?;
        let mut buf = String::with_capacity(1 << 20);
        for o in dataset::all_orders() {
            csv_row(&mut buf, &o);
            if buf.len() > (1 << 20) - 4096 {
                copy.send(std::mem::take(&mut buf).into_bytes()).await?;
                buf.reserve(1 << 20);
            }
        }
        if !buf.is_empty() {
            copy.send(buf.into_bytes()).await?;
        }
        copy.finish().await?;
        let inserted =
            sqlx::query("INSERT INTO orders SELECT * FROM seed_orders ON CONFLICT (id) DO NOTHING")
                .execute(&mut *tx)
                .await?
                .rows_affected();
        tx.commit().await?;
        Ok(inserted)
    }
}

fn csv_text(buf: &mut String, s: Option<&str>) {
    // In CSV, an unquoted empty field is NULL and a quoted one is ''.
    if let Some(s) = s {
        buf.push('"');
        for c in s.chars() {
            if c == '"' {
                buf.push('"');
            }
            buf.push(c);
        }
        buf.push('"');
    }
}

fn csv_row(buf: &mut String, o: &Order) {
    let a = &o.shipping_address;
    let _ = write!(buf, "{},{},{},", o.id, o.user_id, o.product_id);
    csv_text(buf, Some(&o.product_name));
    let _ = write!(
        buf,
        ",{},{},{},{},{},{},{},",
        o.quantity,
        o.unit_price_minor,
        o.discount_minor,
        o.total_minor,
        o.currency,
        o.status.as_i32(),
        o.gift
    );
    for (i, s) in [
        Some(a.line1.as_str()),
        a.line2.as_deref(),
        Some(a.city.as_str()),
        Some(a.postal_code.as_str()),
        Some(a.country_code.as_str()),
        o.note.as_deref(),
        o.coupon_code.as_deref(),
    ]
    .into_iter()
    .enumerate()
    {
        if i > 0 {
            buf.push(',');
        }
        csv_text(buf, s);
    }
    let _ = writeln!(
        buf,
        ",{},{}",
        o.created_at.to_rfc3339(),
        o.updated_at.to_rfc3339()
    );
}

/// The columns that hold a field.
fn columns(f: F) -> &'static [&'static str] {
    match f {
        F::Id => &["id"],
        F::UserId => &["user_id"],
        F::ProductId => &["product_id"],
        F::ProductName => &["product_name"],
        F::Quantity => &["quantity"],
        F::UnitPriceMinor => &["unit_price_minor"],
        F::DiscountMinor => &["discount_minor"],
        F::TotalMinor => &["total_minor"],
        F::Currency => &["currency"],
        F::Status => &["status"],
        F::Gift => &["gift"],
        F::ShippingAddress => &[
            "ship_line1",
            "ship_line2",
            "ship_city",
            "ship_postal_code",
            "ship_country_code",
        ],
        F::Note => &["note"],
        F::CouponCode => &["coupon_code"],
        F::CreatedAt => &["created_at"],
        F::UpdatedAt => &["updated_at"],
    }
}

/// The SELECT list of a field set: only its columns.
fn select_list(fields: FieldSet) -> String {
    fields
        .iter()
        .flat_map(|f| columns(f).iter().copied())
        .collect::<Vec<_>>()
        .join(", ")
}

/// An order from a row that holds the columns of `fields`.
fn order_from_row(row: &PgRow, fields: FieldSet) -> Result<Order, StoreError> {
    let mut o = Order::blank(row.try_get("id")?);
    for f in fields.iter() {
        match f {
            F::Id => {}
            F::UserId => o.user_id = row.try_get("user_id")?,
            F::ProductId => o.product_id = row.try_get("product_id")?,
            F::ProductName => o.product_name = row.try_get("product_name")?,
            F::Quantity => {
                let q: i32 = row.try_get("quantity")?;
                o.quantity = u32::try_from(q).context("a negative quantity in the database")?;
            }
            F::UnitPriceMinor => o.unit_price_minor = row.try_get("unit_price_minor")?,
            F::DiscountMinor => o.discount_minor = row.try_get("discount_minor")?,
            F::TotalMinor => o.total_minor = row.try_get("total_minor")?,
            F::Currency => {
                let c: &str = row.try_get("currency")?;
                o.currency = c
                    .parse::<Currency>()
                    .context("a bad currency in the database")?;
            }
            F::Status => {
                let s: i16 = row.try_get("status")?;
                o.status =
                    OrderStatus::from_i32(i32::from(s)).context("a bad status in the database")?;
            }
            F::Gift => o.gift = row.try_get("gift")?,
            F::ShippingAddress => {
                o.shipping_address = Address {
                    line1: row.try_get("ship_line1")?,
                    line2: row.try_get("ship_line2")?,
                    city: row.try_get("ship_city")?,
                    postal_code: row.try_get("ship_postal_code")?,
                    country_code: row.try_get("ship_country_code")?,
                }
            }
            F::Note => o.note = row.try_get("note")?,
            F::CouponCode => o.coupon_code = row.try_get("coupon_code")?,
            F::CreatedAt => o.created_at = row.try_get("created_at")?,
            F::UpdatedAt => o.updated_at = row.try_get("updated_at")?,
        }
    }
    Ok(o)
}

impl OrderStore for PgStore {
    fn kind(&self) -> &'static str {
        "postgres"
    }

    #[tracing::instrument(name = "db.list_orders", skip_all, fields(db.system = "postgresql", limit = q.limit))]
    async fn list(&self, q: &ListQuery) -> Result<OrderPage, StoreError> {
        let sql = format!(
            "SELECT {} FROM orders WHERE user_id = $1 AND ($2::uuid IS NULL OR id > $2) \
             ORDER BY id LIMIT $3",
            select_list(q.fields)
        );
        let rows = sqlx::query(AssertSqlSafe(sql))
            .bind(q.user_id)
            .bind(q.after)
            .bind(i64::from(q.limit) + 1)
            .fetch_all(&mut *self.conn().await?)
            .await?;
        let orders = rows
            .iter()
            .map(|r| order_from_row(r, q.fields))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(OrderPage::from_overfetch(orders, q.limit))
    }

    #[tracing::instrument(name = "db.get_order", skip_all, fields(db.system = "postgresql"))]
    async fn get(&self, id: Uuid, fields: FieldSet) -> Result<Order, StoreError> {
        let sql = format!("SELECT {} FROM orders WHERE id = $1", select_list(fields));
        let row = sqlx::query(AssertSqlSafe(sql))
            .bind(id)
            .fetch_optional(&mut *self.conn().await?)
            .await?
            .ok_or(StoreError::NotFound(id))?;
        order_from_row(&row, fields)
    }

    #[tracing::instrument(name = "db.create_order", skip_all, fields(db.system = "postgresql"))]
    async fn create(&self, new: NewOrder, key: &str) -> Result<Created, StoreError> {
        let fingerprint = new.fingerprint();
        let order = new.into_order(Uuid::new_v4(), now());
        let a = &order.shipping_address;
        let mut conn = self.conn().await?;
        let mut tx = conn.begin().await?;
        sqlx::query(
            "INSERT INTO orders (id, user_id, product_id, product_name, quantity, \
             unit_price_minor, discount_minor, total_minor, currency, status, gift, \
             ship_line1, ship_line2, ship_city, ship_postal_code, ship_country_code, \
             note, coupon_code, created_at, updated_at) \
             VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17,$18,$19,$20)",
        )
        .bind(order.id)
        .bind(order.user_id)
        .bind(order.product_id)
        .bind(&order.product_name)
        .bind(i32::try_from(order.quantity).context("quantity out of range")?)
        .bind(order.unit_price_minor)
        .bind(order.discount_minor)
        .bind(order.total_minor)
        .bind(order.currency.as_str())
        .bind(order.status.as_i32() as i16)
        .bind(order.gift)
        .bind(&a.line1)
        .bind(&a.line2)
        .bind(&a.city)
        .bind(&a.postal_code)
        .bind(&a.country_code)
        .bind(&order.note)
        .bind(&order.coupon_code)
        .bind(order.created_at)
        .bind(order.updated_at)
        .execute(&mut *tx)
        .await?;
        // A concurrent request with the same key waits here until the first
        // commits, then inserts nothing.
        let claimed = sqlx::query(
            "INSERT INTO idempotency_keys (key, order_id, fingerprint) VALUES ($1, $2, $3) \
             ON CONFLICT (key) DO NOTHING",
        )
        .bind(key)
        .bind(order.id)
        .bind(&fingerprint)
        .execute(&mut *tx)
        .await?
        .rows_affected()
            == 1;
        if claimed {
            tx.commit().await?;
            return Ok(Created {
                order,
                replayed: false,
            });
        }
        tx.rollback().await?;
        let (first, fp): (Uuid, String) =
            sqlx::query_as("SELECT order_id, fingerprint FROM idempotency_keys WHERE key = $1")
                .bind(key)
                .fetch_one(&mut *conn)
                .await?;
        drop(conn);
        if fp != fingerprint {
            return Err(StoreError::KeyReused(key.to_owned()));
        }
        Ok(Created {
            order: self.get(first, FieldSet::ALL).await?,
            replayed: true,
        })
    }

    async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1")
            .execute(&mut *self.conn().await?)
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_narrow_selection_reads_only_its_columns() {
        let s = FieldSet::parse_csv("status,shipping_address").unwrap();
        assert_eq!(
            select_list(s),
            "id, status, ship_line1, ship_line2, ship_city, ship_postal_code, ship_country_code"
        );
    }

    #[test]
    fn csv_tells_null_from_empty() {
        let mut buf = String::new();
        csv_text(&mut buf, None);
        buf.push(',');
        csv_text(&mut buf, Some(""));
        buf.push(',');
        csv_text(&mut buf, Some("say \"hi\""));
        assert_eq!(buf, r#","","say ""hi""""#);
    }
}
