//! What every store is: the [`UserStore`] trait and the [`StoreError`] it
//! fails with.
//!
//! A leaf: the stores import it, and [`super::Store`], which dispatches to
//! them, re-exports it.

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
/// is written: `impl Future` methods and an enum of the two stores
/// ([`super::Store`]) rather than boxed futures behind `dyn`, so that no
/// query pays for a heap allocation the lab would measure as the service's.
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

/// The time a new user is stamped with: both services' one stamp.
pub use service_kit::db::now;
