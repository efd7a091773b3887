//! What every store shares, and what the rest of the service sees of one:
//! the [`OrderStore`] trait, its queries, answers and errors. A leaf: the
//! stores import it, it imports none of them.

use model::{FieldSet, NewOrder, Order, PageToken};
use uuid::Uuid;

/// The time a new order is stamped with: both services' one stamp.
pub use service_kit::db::now;

/// One page of one user's orders, as the store is asked for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListQuery {
    pub user_id: Uuid,
    /// 1 to the configured maximum.
    pub limit: u32,
    /// Start after this order id; `None` for the first page.
    pub after: Option<Uuid>,
    /// The fields to read. The Postgres store selects only their columns.
    pub fields: FieldSet,
}

/// A page of orders, sorted by id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderPage {
    pub orders: Vec<Order>,
    /// Where the next page starts; `None` on the last page.
    pub next: Option<PageToken>,
}

impl OrderPage {
    /// The page made of the first `limit` of `orders` (which holds up to one
    /// more, fetched to learn whether another page follows).
    pub(super) fn from_overfetch(mut orders: Vec<Order>, limit: u32) -> Self {
        let limit = limit as usize;
        let next = if orders.len() > limit {
            orders.truncate(limit);
            orders.last().map(|o| PageToken(o.id))
        } else {
            None
        };
        OrderPage { orders, next }
    }
}

impl OrderPage {
    /// The page as protobuf: its orders with the selected fields, and the
    /// next page token ("" on the last page).
    pub fn into_pb(self, fields: FieldSet) -> (Vec<proto::order::v2::Order>, String) {
        (
            self.orders
                .iter()
                .map(|o| model::v2::order_to_pb(o, fields))
                .collect(),
            self.next.map(|t| t.encode()).unwrap_or_default(),
        )
    }
}

/// The answer to a create: the order, and whether it had been made before.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Created {
    pub order: Order,
    /// True when the idempotency key had been seen: nothing new was written.
    pub replayed: bool,
}

/// What a store can fail with.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("no order has the id {0}")]
    NotFound(Uuid),
    #[error("the idempotency key {0:?} was already used for a different order")]
    KeyReused(String),
    #[error("the database is unavailable")]
    Unavailable(#[source] sqlx::Error),
    #[error(transparent)]
    Other(#[from] anyhow::Error),
}

service_kit::store_error_from_sqlx!(StoreError, "querying Postgres");

/// What order-service needs from a store.
///
/// Both services' stores follow one pattern: a trait whose methods return
/// `impl Future`, and an enum of the two stores ([`Store`](super::Store)) that the
/// application holds, chosen once at start. The set of stores is closed, so
/// dispatching over an enum costs a branch where a `dyn` store would cost a
/// heap allocation per query, a cost the lab would otherwise measure as part
/// of every transport's hop.
///
/// The enum boxes the Postgres store's futures, and only those: sqlx's are
/// kilobytes, and unboxed they would make every future that awaits the store
/// that large, copied whole at each move (into a span's `Instrumented`, a
/// spawned task, ...) even when the store is in memory. A transport whose
/// path moves the future more often would then pay more for a reason that
/// is not the transport. One allocation beside a database round trip is
/// nothing.
pub trait OrderStore: Send + Sync {
    /// "memory" or "postgres", for logs and metrics labels.
    fn kind(&self) -> &'static str;
    /// One page of a user's orders; a user with none gets an empty page.
    fn list(&self, q: &ListQuery) -> impl Future<Output = Result<OrderPage, StoreError>> + Send;
    /// One order, with the selected fields.
    fn get(
        &self,
        id: Uuid,
        fields: FieldSet,
    ) -> impl Future<Output = Result<Order, StoreError>> + Send;
    /// Creates an order once per idempotency key.
    fn create(
        &self,
        new: NewOrder,
        idempotency_key: &str,
    ) -> impl Future<Output = Result<Created, StoreError>> + Send;
    /// Whether the store can answer now.
    fn ping(&self) -> impl Future<Output = Result<(), StoreError>> + Send;
}
