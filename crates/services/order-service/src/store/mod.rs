//! Where orders live: one trait, two stores.
//!
//! [`postgres::PgStore`] is the real one; [`memory::MemoryStore`] holds the data
//! set in memory for the runs that measure protocol overhead alone (the Spring
//! Boot post ran without a database on purpose) and for a demo with no set-up. Both load
//! the same deterministic data set and answer every query identically.

pub mod memory;
mod port;
pub mod postgres;

use std::sync::Arc;

use model::{FieldSet, NewOrder, Order};
use uuid::Uuid;

pub use port::{Created, ListQuery, OrderPage, OrderStore, StoreError, now};

/// The store the service runs on, chosen at start.
#[derive(Debug, Clone)]
pub enum Store {
    Memory(Arc<memory::MemoryStore>),
    Postgres(postgres::PgStore),
}

impl OrderStore for Store {
    fn kind(&self) -> &'static str {
        match self {
            Store::Memory(s) => s.kind(),
            Store::Postgres(s) => s.kind(),
        }
    }

    async fn list(&self, q: &ListQuery) -> Result<OrderPage, StoreError> {
        match self {
            Store::Memory(s) => s.list(q).await,
            Store::Postgres(s) => Box::pin(s.list(q)).await,
        }
    }

    async fn get(&self, id: Uuid, fields: FieldSet) -> Result<Order, StoreError> {
        match self {
            Store::Memory(s) => s.get(id, fields).await,
            Store::Postgres(s) => Box::pin(s.get(id, fields)).await,
        }
    }

    async fn create(&self, new: NewOrder, key: &str) -> Result<Created, StoreError> {
        match self {
            Store::Memory(s) => s.create(new, key).await,
            Store::Postgres(s) => Box::pin(s.create(new, key)).await,
        }
    }

    async fn ping(&self) -> Result<(), StoreError> {
        match self {
            Store::Memory(s) => s.ping().await,
            Store::Postgres(s) => Box::pin(s.ping()).await,
        }
    }
}
