//! Where users live: one trait, two stores.
//!
//! [`postgres::PgStore`] is the real one, migrated from `migrations/users`;
//! [`memory::MemoryStore`] holds the data set's users for the runs that
//! measure protocol overhead alone and for a demo with no set-up. Both start
//! with the same users (the data set's, whose ids match order-service's).

pub mod memory;
pub mod port;
pub mod postgres;

use std::sync::Arc;

use uuid::Uuid;

pub use self::port::{StoreError, UserStore, now};
use crate::domain::{NewUser, User};

/// The store the service runs on, chosen at start.
#[derive(Debug, Clone)]
pub enum Store {
    Memory(Arc<memory::MemoryStore>),
    Postgres(postgres::PgStore),
}

impl UserStore for Store {
    fn kind(&self) -> &'static str {
        match self {
            Store::Memory(s) => s.kind(),
            Store::Postgres(s) => s.kind(),
        }
    }

    async fn get(&self, id: Uuid) -> Result<Option<User>, StoreError> {
        match self {
            Store::Memory(s) => s.get(id).await,
            Store::Postgres(s) => Box::pin(s.get(id)).await,
        }
    }

    async fn register(&self, user: NewUser) -> Result<User, StoreError> {
        match self {
            Store::Memory(s) => s.register(user).await,
            Store::Postgres(s) => Box::pin(s.register(user)).await,
        }
    }

    async fn ping(&self) -> Result<(), StoreError> {
        match self {
            Store::Memory(s) => s.ping().await,
            Store::Postgres(s) => Box::pin(s.ping()).await,
        }
    }
}
