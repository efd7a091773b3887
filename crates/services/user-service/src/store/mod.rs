//! Where users live: one trait, two stores.
//!
//! [`postgres::PgStore`] is the real one, migrated from `migrations/users`;
//! [`memory::MemoryStore`] holds the data set's users for the runs that
//! measure protocol overhead alone and for a demo with no set-up. Both start
//! with the same users (the data set's, whose ids match order-service's).

pub mod memory;
pub mod postgres;

use std::sync::Arc;

use uuid::Uuid;

use crate::domain::{NewUser, User};

/// What a store can fail with.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("the username {0:?} is taken")]
    UsernameTaken(String),
    #[error("the database is unavailable")]
    Unavailable(#[source] sqlx::Error),
    #[error(transparent)]
    Other(#[from] anyhow::Error),
}

service_kit::store_error_from_sqlx!(StoreError, "querying the users database");

/// The repository of users.
///
/// It follows the pattern of order-service's `OrderStore`, where the reason
/// is written: `impl Future` methods and an enum of the two stores ([`Store`])
/// rather than boxed futures behind `dyn`, so that no query pays for a heap
/// allocation the lab would measure as the service's.
pub trait UserStore: Send + Sync {
    /// "postgres" or "memory", for the start-up log and the metrics labels.
    fn kind(&self) -> &'static str;

    /// The user with this id, if any.
    fn get(&self, id: Uuid) -> impl Future<Output = Result<Option<User>, StoreError>> + Send;

    /// Creates a user; a taken username is [`StoreError::UsernameTaken`].
    fn register(&self, user: NewUser) -> impl Future<Output = Result<User, StoreError>> + Send;

    /// Whether the store can answer now (`/readyz`).
    fn ping(&self) -> impl Future<Output = Result<(), StoreError>> + Send;
}

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

/// The time a new user is stamped with: both services' one stamp.
pub use service_kit::db::now;
