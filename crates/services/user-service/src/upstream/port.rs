//! The outbound port itself: what user-service asks order-service for
//! ([`OrderQuery`]), what every adapter answers it with, or fails with
//! ([`UpstreamError`]), and the trait every adapter implements
//! ([`OrderSource`]).
//!
//! A leaf: the adapters and [`super::Upstreams`] import it, and it imports
//! none of them.

use futures::future::BoxFuture;
use model::{FieldSet, Order};
use transports::Transport;
use uuid::Uuid;

/// The largest message any client here accepts or sends: 10,000 orders are
/// about 2-3 MB, well past tonic's 4 MiB default margin for comfort.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// What user-service asks order-service for: the first `limit` orders of a
/// user (ordered by order id), with the selected fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OrderQuery {
    pub user_id: Uuid,
    /// 1 to 10,000.
    pub limit: u32,
    pub fields: FieldSet,
}

/// Why a call to order-service failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UpstreamError {
    /// No answer within the configured upstream timeout (or order-service
    /// said its own deadline passed).
    #[error("order-service timed out: {0}")]
    Timeout(String),
    /// order-service could not be reached, or the connection broke.
    #[error("order-service is unavailable: {0}")]
    Unavailable(String),
    /// order-service answered with an error of its own.
    #[error("order-service refused the query ({status}): {message}")]
    Rejected { status: String, message: String },
    /// order-service's answer could not be read.
    #[error("order-service's answer could not be read: {0}")]
    Protocol(String),
}

/// The outbound port: one user's orders from order-service.
///
/// Object-safe on purpose (a boxed future rather than `async fn`) so that
/// [`super::Upstreams`] can hold every adapter in one table and pick one per call.
pub trait OrderSource: Send + Sync {
    /// The transport this adapter speaks.
    fn transport(&self) -> Transport;

    /// The first `q.limit` orders of `q.user_id`, with `q.fields` selected and
    /// the other fields blank.
    fn list_orders<'a>(
        &'a self,
        q: &'a OrderQuery,
    ) -> BoxFuture<'a, Result<Vec<Order>, UpstreamError>>;

    /// Every query's answer, in order, from one call that carries them all;
    /// `None` when this transport has no such call. The queries are at
    /// least one and their limits add up to at most order-service's
    /// maximum page size.
    fn list_batch<'a>(
        &'a self,
        _qs: &'a [OrderQuery],
    ) -> Option<BoxFuture<'a, Result<Vec<Vec<Order>>, UpstreamError>>> {
        None
    }
}

/// Converts every order of an answer, naming the bad field of the first that
/// does not parse.
pub(crate) fn to_domain<T>(items: Vec<T>) -> Result<Vec<Order>, UpstreamError>
where
    T: TryInto<Order, Error = model::ParseError>,
{
    items
        .into_iter()
        .map(|o| {
            o.try_into()
                .map_err(|e: model::ParseError| UpstreamError::Protocol(format!("an order's {e}")))
        })
        .collect()
}
