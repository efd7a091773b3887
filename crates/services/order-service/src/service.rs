//! The service itself, independent of any wire: parse the query, ask the
//! store, and say precisely what went wrong. REST, gRPC and raw TCP all call
//! these same functions, so every transport gives the same answer.

use model::{FieldSet, NewOrder, Order, PageToken, ParseError};
use uuid::Uuid;

use crate::store::{Created, ListQuery, OrderPage, OrderStore, Store, StoreError};

/// The page size when the caller gives none.
pub const DEFAULT_PAGE_SIZE: u32 = 100;

/// What every transport's handler fails with, mapped once per transport to an
/// HTTP status, a gRPC code and a raw-TCP error frame.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// A request field is malformed or out of range: 400 / INVALID_ARGUMENT.
    #[error("{0}")]
    Invalid(#[from] ParseError),
    /// 404 / NOT_FOUND.
    #[error("{0}")]
    NotFound(String),
    /// An idempotency key reused with a different body: 422 / FAILED_PRECONDITION.
    #[error("{0}")]
    KeyReused(String),
    /// The store cannot answer now: 503 / UNAVAILABLE.
    #[error("the order store is unavailable; try again")]
    Unavailable(#[source] StoreError),
    /// A bug or an unexpected failure: 500 / INTERNAL, detail logged only.
    #[error("internal error")]
    Internal(#[source] anyhow::Error),
}

impl From<StoreError> for AppError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound(id) => AppError::NotFound(format!("no order has the id {id}")),
            StoreError::KeyReused(_) => AppError::KeyReused(e.to_string()),
            StoreError::Unavailable(_) => AppError::Unavailable(e),
            StoreError::Other(e) => AppError::Internal(e),
        }
    }
}

impl AppError {
    /// The field at fault, if one is.
    pub fn field(&self) -> Option<&str> {
        match self {
            AppError::Invalid(p) => Some(&p.field),
            _ => None,
        }
    }

    /// Logs what the caller will not see: the cause of a 5xx.
    pub fn log(&self) {
        match self {
            AppError::Unavailable(e) => tracing::warn!(error = ?e, "store unavailable"),
            AppError::Internal(e) => tracing::error!(error = ?e, "internal error"),
            _ => {}
        }
    }
}

/// Request limits, all configurable.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// The largest page a caller may ask for.
    pub max_page_size: u32,
}

/// The service: a store and its limits.
#[derive(Debug, Clone)]
pub struct Orders {
    pub store: Store,
    pub limits: Limits,
    /// Give each answer's own account of its time (`ORDER_SERVER_TIMING`,
    /// see [`crate::timing`]).
    pub server_timing: bool,
}

/// A user id from the request.
pub fn parse_user_id(s: &str) -> Result<Uuid, ParseError> {
    if s.is_empty() {
        return Err(ParseError::new("user_id", "is required"));
    }
    model::v2::parse_uuid("user_id", s)
}

impl Orders {
    /// Validates a page size; `None` (REST: absent, gRPC: 0) means the default.
    pub fn page_size(&self, field: &str, n: Option<i64>) -> Result<u32, ParseError> {
        let max = self.limits.max_page_size;
        match n {
            None => Ok(DEFAULT_PAGE_SIZE.min(max)),
            Some(n) if n >= 1 && n <= i64::from(max) => Ok(n as u32),
            Some(n) => Err(ParseError::new(
                field,
                format!("{n} is out of range: must be 1 to {max}"),
            )),
        }
    }

    /// Parses a list query from its wire parts.
    pub fn list_query(
        &self,
        user_id: &str,
        (size_field, page_size): (&str, Option<i64>),
        page_token: &str,
        fields: FieldSet,
    ) -> Result<ListQuery, ParseError> {
        Ok(ListQuery {
            user_id: parse_user_id(user_id)?,
            limit: self.page_size(size_field, page_size)?,
            after: PageToken::decode(page_token)?.map(|t| t.0),
            fields,
        })
    }

    /// Parses a list query as the protobuf APIs (gRPC, bidi, raw TCP) carry
    /// it: `page_size` 0 means the default, an absent mask means all fields.
    pub fn proto_query(
        &self,
        user_id: &str,
        page_size: i32,
        page_token: &str,
        mask: Option<&proto::prost_types::FieldMask>,
    ) -> Result<ListQuery, ParseError> {
        let fields = model::v2::field_set(mask)?;
        let size = (page_size != 0).then_some(i64::from(page_size));
        self.list_query(user_id, ("page_size", size), page_token, fields)
    }

    /// The queries of a batch (`BatchListOrders`, `BatchStreamOrders`), each
    /// parsed as [`Orders::proto_query`] parses one, before any is answered.
    /// A bad query fails the batch, naming its position (`requests[3].user_id`).
    /// The page sizes add up to at most the maximum page size, so that a
    /// batch never costs more than the largest single page.
    pub fn batch_queries(
        &self,
        requests: &[proto::order::v2::ListOrdersRequest],
    ) -> Result<Vec<ListQuery>, ParseError> {
        if requests.is_empty() {
            return Err(ParseError::new("requests", "must hold at least one query"));
        }
        let max = self.limits.max_page_size;
        let mut total = 0u64;
        let mut queries = Vec::with_capacity(requests.len());
        for (i, r) in requests.iter().enumerate() {
            let q = self
                .proto_query(&r.user_id, r.page_size, &r.page_token, r.read_mask.as_ref())
                .map_err(|e| ParseError::new(format!("requests[{i}].{}", e.field), e.message))?;
            total += u64::from(q.limit);
            if total > u64::from(max) {
                return Err(ParseError::new(
                    "requests",
                    format!(
                        "the page sizes add up to more than {max} by query {i} (0 counts as {DEFAULT_PAGE_SIZE}): split the batch"
                    ),
                ));
            }
            queries.push(q);
        }
        Ok(queries)
    }

    /// One page of a user's orders.
    #[tracing::instrument(name = "orders.list", skip_all, fields(user_id = %q.user_id, limit = q.limit))]
    pub async fn list(&self, q: &ListQuery) -> Result<OrderPage, AppError> {
        Ok(crate::timing::store(self.store.list(q)).await?)
    }

    /// One order.
    #[tracing::instrument(name = "orders.get", skip_all)]
    pub async fn get(&self, id: &str, fields: FieldSet) -> Result<Order, AppError> {
        let id = model::v2::parse_uuid("id", id)?;
        Ok(crate::timing::store(self.store.get(id, fields)).await?)
    }

    /// Places an order once per idempotency key.
    #[tracing::instrument(name = "orders.create", skip_all)]
    pub async fn create(&self, new: NewOrder, key: &str) -> Result<Created, AppError> {
        if key.is_empty() || key.len() > 255 {
            return Err(ParseError::new(
                "idempotency_key",
                "is required: 1 to 255 characters that name this order, the same on every retry",
            )
            .into());
        }
        Ok(self.store.create(new, key).await?)
    }

    /// Whether the store answers.
    pub async fn ready(&self) -> Result<(), AppError> {
        Ok(self.store.ping().await?)
    }
}
