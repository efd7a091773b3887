//! The use cases both boundaries (REST and gRPC) call, and the one error type
//! they map to a status each.

use std::time::Duration;

use model::{FieldSet, Order, ParseError};
use uuid::Uuid;

use crate::domain::{NewUser, User};
use crate::store::{Store, StoreError, UserStore};
use crate::upstream::{OrderQuery, Transport, UnknownTransport, UpstreamError, Upstreams};

/// The most orders one request may ask for (order-service's own maximum).
pub const MAX_LIMIT: u32 = 10_000;
/// The orders fetched when a request names no limit.
pub const DEFAULT_LIMIT: u32 = 100;

/// The most users one `GET /v1/orders` may name.
pub const MAX_USERS: usize = 1_000;

/// Everything a use case can fail with.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error("{0}")]
    Invalid(#[from] ParseError),
    #[error("{0}")]
    UnknownTransport(#[from] UnknownTransport),
    #[error("no user has the id {0}")]
    NotFound(Uuid),
    #[error("the username {0:?} is taken")]
    UsernameTaken(String),
    /// The call to order-service failed; how long it took still goes into
    /// the `x-upstream-micros` header.
    #[error("fetching the orders over {via} failed: {error}")]
    Upstream {
        via: Transport,
        elapsed: Duration,
        error: UpstreamError,
    },
    #[error("the users database is unavailable")]
    StoreUnavailable(#[source] sqlx::Error),
    #[error("internal error")]
    Internal(#[source] anyhow::Error),
}

impl From<StoreError> for AppError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::UsernameTaken(n) => AppError::UsernameTaken(n),
            StoreError::Unavailable(e) => AppError::StoreUnavailable(e),
            StoreError::Other(e) => AppError::Internal(e),
        }
    }
}

impl AppError {
    /// The request field at fault, when there is one.
    pub fn field(&self) -> Option<&str> {
        match self {
            AppError::Invalid(e) => Some(&e.field),
            AppError::UnknownTransport(_) => Some("via"),
            AppError::UsernameTaken(_) => Some("username"),
            _ => None,
        }
    }

    /// Logs what the caller will not see: the cause of a 5xx. Called once,
    /// where the error becomes a response.
    pub fn log(&self) {
        match self {
            AppError::Internal(e) => tracing::error!(error = ?e, "request failed"),
            AppError::StoreUnavailable(e) => {
                tracing::error!(error = %e, "the users database is unavailable")
            }
            AppError::Upstream {
                via,
                elapsed,
                error,
            } => tracing::warn!(
                via = via.name(),
                elapsed_ms = elapsed.as_millis() as u64,
                error = %error,
                "order-service call failed"
            ),
            _ => {}
        }
    }
}

/// A user and the orders fetched for it.
#[derive(Debug, Clone)]
pub struct UserWithOrders {
    pub user: User,
    pub orders: Vec<Order>,
    /// The fields selected: the others are blank in `orders`.
    pub fields: FieldSet,
    pub via: Transport,
    /// The round trip to order-service, slot wait included.
    pub upstream: Duration,
    /// Where the round trip went, when it is recorded
    /// (`USER_UPSTREAM_BREAKDOWN`) and order-service gave its account.
    pub parts: Option<crate::upstream::parts::CallParts>,
}

/// The orders of several users, fetched in one request.
#[derive(Debug, Clone)]
pub struct OrdersOfUsers {
    /// Each user with its orders, in the order the users were named.
    pub lookups: Vec<(Uuid, Vec<Order>)>,
    /// The fields selected: the others are blank in the orders.
    pub fields: FieldSet,
    pub via: Transport,
    /// Calls made to order-service: one per user, or one for all.
    pub calls: usize,
    /// From the first call's start to the last one's end.
    pub upstream: Duration,
}

/// How the orders of several users are fetched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fanout {
    /// One call per user, all at once.
    Each,
    /// One call that answers every user ([`Transport::batch_call`]).
    Batch,
}

/// The use cases.
#[derive(Clone)]
pub struct Service {
    store: Store,
    upstreams: Upstreams,
}

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service")
            .field("store", &self.store.kind())
            .field("upstreams", &self.upstreams)
            .finish()
    }
}

impl Service {
    /// The use cases over this store and these adapters.
    pub fn new(store: Store, upstreams: Upstreams) -> Self {
        Service { store, upstreams }
    }

    /// The store, for readiness.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The transport a request names; none or empty means the default.
    pub fn transport(&self, via: Option<&str>) -> Result<Transport, AppError> {
        match via.map(str::trim) {
            None | Some("") => Ok(self.upstreams.default_transport()),
            Some(name) => Ok(name.parse()?),
        }
    }

    /// The user alone.
    #[tracing::instrument(skip(self))]
    pub async fn get_user(&self, id: Uuid) -> Result<User, AppError> {
        self.store.get(id).await?.ok_or(AppError::NotFound(id))
    }

    /// Registers a user.
    #[tracing::instrument(skip_all, fields(username = %new.username))]
    pub async fn register(&self, new: NewUser) -> Result<User, AppError> {
        Ok(self.store.register(new).await?)
    }

    /// The first `limit` orders of each of `users` from order-service over
    /// `via`, as one call per user or one call for all. user-service's own
    /// store is not read: a user unknown to order-service has no orders.
    #[tracing::instrument(skip(self, users, fields), fields(users = users.len()))]
    pub async fn orders_of_users(
        &self,
        users: Vec<Uuid>,
        via: Transport,
        limit: u32,
        fields: FieldSet,
        fanout: Fanout,
    ) -> Result<OrdersOfUsers, AppError> {
        if users.is_empty() || users.len() > MAX_USERS {
            return Err(ParseError::new(
                "users",
                format!("must name 1 to {MAX_USERS} users, not {}", users.len()),
            )
            .into());
        }
        if limit == 0 || u64::from(limit) * users.len() as u64 > u64::from(MAX_LIMIT) {
            return Err(ParseError::new(
                "limit",
                format!(
                    "must be at least 1, and the limit times the number of users ({}) at most {MAX_LIMIT}",
                    users.len()
                ),
            )
            .into());
        }
        let queries: Vec<OrderQuery> = users
            .iter()
            .map(|&user_id| OrderQuery {
                user_id,
                limit,
                fields,
            })
            .collect();
        let (result, elapsed, calls) = match fanout {
            Fanout::Each => {
                let (r, d) = self.upstreams.fetch_each(via, &queries).await;
                (r, d, queries.len())
            }
            Fanout::Batch => match self.upstreams.fetch_batch(via, &queries).await {
                Some((r, d)) => (r, d, 1),
                None => return Err(no_batch(via).into()),
            },
        };
        match result {
            Ok(answers) => Ok(OrdersOfUsers {
                lookups: users.into_iter().zip(answers).collect(),
                fields,
                via,
                calls,
                upstream: elapsed,
            }),
            Err(error) => Err(AppError::Upstream {
                via,
                elapsed,
                error,
            }),
        }
    }

    /// The user, then its first `limit` orders from order-service over `via`.
    /// An unknown user is 404 without any call to order-service.
    #[tracing::instrument(skip(self, fields))]
    pub async fn user_with_orders(
        &self,
        id: Uuid,
        via: Transport,
        limit: u32,
        fields: FieldSet,
    ) -> Result<UserWithOrders, AppError> {
        if !(1..=MAX_LIMIT).contains(&limit) {
            return Err(ParseError::new("limit", format!("must be 1 to {MAX_LIMIT}")).into());
        }
        let user = self.get_user(id).await?;
        let q = OrderQuery {
            user_id: id,
            limit,
            fields,
        };
        let (result, elapsed, parts) = self.upstreams.fetch_with_parts(via, &q).await;
        match result {
            Ok(orders) => Ok(UserWithOrders {
                user,
                orders,
                fields,
                via,
                upstream: elapsed,
                parts,
            }),
            Err(error) => Err(AppError::Upstream {
                via,
                elapsed,
                error,
            }),
        }
    }
}

/// The error of a batch asked of a transport without a batch call.
pub fn no_batch(via: Transport) -> ParseError {
    let with: Vec<String> = Transport::ALL
        .into_iter()
        .filter_map(|t| t.batch_call().map(|c| format!("{t} ({c})")))
        .collect();
    ParseError::new(
        "batch",
        format!(
            "{via} has no call that answers many users at once; those that do: {}",
            with.join(", ")
        ),
    )
}
