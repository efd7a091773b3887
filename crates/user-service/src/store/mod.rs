//! Where users live: one trait, two stores.
//!
//! [`postgres::PgStore`] is the real one, migrated from `migrations/users`;
//! [`memory::MemoryStore`] holds the data set's users for the runs that
//! measure protocol overhead alone and for a demo with no set-up. Both start
//! with the same users (the data set's, whose ids match order-service's).

pub mod memory;
pub mod postgres;

use futures::future::BoxFuture;
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

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        match negotiate::db::classify(&e) {
            negotiate::db::Failure::Unavailable => StoreError::Unavailable(e),
            negotiate::db::Failure::Other => {
                StoreError::Other(anyhow::Error::new(e).context("querying the users database"))
            }
        }
    }
}

/// The repository of users.
///
/// Object-safe (boxed futures) so that the application holds one
/// `Arc<dyn UserStore>` whichever store the settings chose.
pub trait UserStore: Send + Sync {
    /// "postgres" or "memory", for the start-up log and the metrics labels.
    fn kind(&self) -> &'static str;

    /// The user with this id, if any.
    fn get(&self, id: Uuid) -> BoxFuture<'_, Result<Option<User>, StoreError>>;

    /// Creates a user; a taken username is [`StoreError::UsernameTaken`].
    fn register(&self, user: NewUser) -> BoxFuture<'_, Result<User, StoreError>>;

    /// Whether the store can answer now (`/readyz`).
    fn ready(&self) -> BoxFuture<'_, Result<(), StoreError>>;
}

/// The time a new user is stamped with: both services' one stamp.
pub use negotiate::db::now;
