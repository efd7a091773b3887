//! Many lookups on one connection, matched by `request_id`: the machinery the
//! `grpc-bidi` stream and the `tcp-proto` connection share.
//!
//! A [`Link`] is one live carrier (a bidi stream, a TCP connection). Callers
//! register their request id, hand the request to the link's writer and wait
//! for the answer the reader task delivers. When the carrier breaks, the
//! reader marks the link broken and fails every pending lookup at once with
//! the reason, so that nothing waits for an answer that cannot come; the next
//! call sees the broken link and a [`Slot`] builds a new one.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use proto::order::v2::{LookupOrdersRequest, LookupOrdersResponse};
use tokio::sync::{mpsc, oneshot};

use crate::upstream::parts;
use crate::upstream::port::{UpstreamError, to_domain};
use crate::upstream::semconv;

/// An answer, and the time the reader spent decoding it.
type Delivered = Result<(LookupOrdersResponse, std::time::Duration), UpstreamError>;
type Reply = oneshot::Sender<Delivered>;

#[derive(Debug, Default)]
struct State {
    pending: HashMap<u64, Reply>,
    /// Why the carrier broke; once set, no lookup is registered again.
    broken: Option<String>,
    /// The server said it takes no new lookup on this carrier.
    going_away: bool,
}

/// The pending lookups of one carrier.
#[derive(Debug, Default)]
pub struct Pending {
    state: Mutex<State>,
}

impl Pending {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Hands an answer to whoever waits for its request id. An answer nobody
    /// waits for (its caller timed out) is dropped.
    pub fn deliver(&self, answer: LookupOrdersResponse) {
        self.deliver_decoded(answer, std::time::Duration::ZERO);
    }

    /// [`Pending::deliver`], with the time the reader spent decoding it,
    /// which the caller adds to its call's decode time.
    pub fn deliver_decoded(&self, answer: LookupOrdersResponse, decoded: std::time::Duration) {
        let reply = self.lock().pending.remove(&answer.request_id);
        if let Some(reply) = reply {
            let _ = reply.send(Ok((answer, decoded)));
        }
    }

    /// Marks the carrier broken and fails every pending lookup with `why`.
    pub fn fail_all(&self, why: &str) {
        let drained: Vec<Reply> = {
            let mut st = self.lock();
            if st.broken.is_none() {
                st.broken = Some(why.to_owned());
            }
            st.pending.drain().map(|(_, r)| r).collect()
        };
        if !drained.is_empty() {
            tracing::warn!(
                pending = drained.len(),
                reason = why,
                "failing the lookups of a broken connection"
            );
        }
        for reply in drained {
            let _ = reply.send(Err(UpstreamError::Unavailable(why.to_owned())));
        }
    }

    /// The server said the carrier takes no new lookup (raw TCP's own
    /// GOAWAY): no lookup is registered on it again, so the next call builds
    /// a new carrier, and the pending ones wait for their answers.
    pub fn going_away(&self, why: &str) {
        let mut st = self.lock();
        st.going_away = true;
        if st.broken.is_none() {
            st.broken = Some(why.to_owned());
        }
    }

    /// Whether the server said the carrier takes no new lookup.
    pub fn went_away(&self) -> bool {
        self.lock().going_away
    }

    /// Whether the carrier broke.
    pub fn is_broken(&self) -> bool {
        self.lock().broken.is_some()
    }

    fn register(&self, id: u64) -> Result<oneshot::Receiver<Delivered>, UpstreamError> {
        let mut st = self.lock();
        if let Some(why) = &st.broken {
            return Err(UpstreamError::Unavailable(why.clone()));
        }
        let (tx, rx) = oneshot::channel();
        st.pending.insert(id, tx);
        Ok(rx)
    }

    fn forget(&self, id: u64) {
        self.lock().pending.remove(&id);
    }
}

/// Removes a lookup from the pending table when its caller gives up (a
/// timeout drops the future), so that the table never grows.
struct Forget<'a>(&'a Pending, u64);

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        self.0.forget(self.1);
    }
}

/// One live carrier: the writer's queue and the pending table its reader
/// fills.
#[derive(Debug)]
pub struct Link {
    tx: mpsc::Sender<LookupOrdersRequest>,
    pending: Arc<Pending>,
}

impl Link {
    /// A link whose writer drains `tx`'s receiver and whose reader delivers
    /// into `pending`.
    pub fn new(tx: mpsc::Sender<LookupOrdersRequest>, pending: Arc<Pending>) -> Self {
        Link { tx, pending }
    }

    /// Whether the carrier broke (or its writer is gone).
    pub fn is_broken(&self) -> bool {
        self.pending.is_broken() || self.tx.is_closed()
    }

    /// Whether the server said this carrier takes no new lookup: what it
    /// refuses from then on was not processed.
    pub fn went_away(&self) -> bool {
        self.pending.went_away()
    }

    /// Sends one lookup and waits for its answer.
    pub async fn call(
        &self,
        req: LookupOrdersRequest,
    ) -> Result<LookupOrdersResponse, UpstreamError> {
        let id = req.request_id;
        let rx = self.pending.register(id)?;
        let _forget = Forget(&self.pending, id);
        if self.tx.send(req).await.is_err() {
            return Err(UpstreamError::Unavailable(
                "the connection to order-service closed before the lookup was sent".to_owned(),
            ));
        }
        match rx.await {
            Ok(Ok((answer, decoded))) => {
                parts::decoded(decoded);
                Ok(answer)
            }
            Ok(Err(e)) => Err(e),
            // The reader task ended without failing us: it was dropped with
            // its runtime. Say so rather than hang.
            Err(_) => Err(UpstreamError::Unavailable(
                "the connection to order-service closed with the lookup pending".to_owned(),
            )),
        }
    }
}

/// A place for one link, rebuilt when it breaks. The async lock makes
/// concurrent callers share the one connection being opened instead of each
/// opening their own: that is what keeps the budget at one per slot.
#[derive(Debug, Default)]
pub struct Slot {
    link: tokio::sync::Mutex<Option<Arc<Link>>>,
}

impl Slot {
    /// The slot's live link, or a new one from `open`.
    pub async fn get<F, Fut>(&self, open: F) -> Result<Arc<Link>, UpstreamError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Link, UpstreamError>>,
    {
        let mut slot = self.link.lock().await;
        if let Some(link) = slot.as_ref().filter(|l| !l.is_broken()) {
            return Ok(link.clone());
        }
        // Drop a broken link first: its socket closes before a new one opens.
        *slot = None;
        let link = Arc::new(open().await?);
        *slot = Some(link.clone());
        Ok(link)
    }
}

/// Request ids, unique per adapter.
#[derive(Debug, Default)]
pub struct Ids(AtomicU64);

impl Ids {
    /// The next id (starting at 1: 0 is what a missing field decodes to).
    pub fn next(&self) -> u64 {
        self.0.fetch_add(1, Ordering::Relaxed) + 1
    }
}

/// The domain answer of one lookup, with its error mapped like a gRPC status.
pub fn answer_to_orders(answer: LookupOrdersResponse) -> Result<Vec<model::Order>, UpstreamError> {
    if let Some(t) = &answer.timing {
        parts::server(parts::ServerParts::of(t));
    }
    let code = answer
        .error
        .as_ref()
        .map_or(tonic::Code::Ok, |e| tonic::Code::from_i32(e.code));
    // The lookup's status, in gRPC's codes (raw-TCP frames use them too).
    semconv::record_grpc_code(code);
    if let Some(e) = answer.error {
        return Err(match code {
            tonic::Code::DeadlineExceeded => UpstreamError::Timeout(e.message),
            tonic::Code::Unavailable => UpstreamError::Unavailable(e.message),
            _ => UpstreamError::Rejected {
                status: format!("{code:?}"),
                message: e.message,
            },
        });
    }
    parts::decoding(|| to_domain(answer.orders))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(id: u64) -> LookupOrdersRequest {
        LookupOrdersRequest {
            request_id: id,
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn answers_reach_their_callers_in_any_order() {
        let (tx, mut rx) = mpsc::channel(8);
        let pending = Arc::new(Pending::default());
        let link = Arc::new(Link::new(tx, pending.clone()));
        let echo = tokio::spawn(async move {
            let a = rx.recv().await.unwrap();
            let b = rx.recv().await.unwrap();
            for r in [b, a] {
                pending.deliver(LookupOrdersResponse {
                    request_id: r.request_id,
                    next_page_token: format!("for {}", r.request_id),
                    ..Default::default()
                });
            }
        });
        let (a, b) = tokio::join!(link.call(req(1)), link.call(req(2)));
        echo.await.unwrap();
        assert_eq!(a.unwrap().next_page_token, "for 1");
        assert_eq!(b.unwrap().next_page_token, "for 2");
    }

    #[tokio::test]
    async fn a_broken_link_fails_pending_lookups_instead_of_hanging() {
        let (tx, mut rx) = mpsc::channel(8);
        let pending = Arc::new(Pending::default());
        let link = Link::new(tx, pending.clone());
        let breaker = tokio::spawn(async move {
            rx.recv().await.unwrap();
            pending.fail_all("the stream broke: reset");
            rx
        });
        let err = link.call(req(7)).await.unwrap_err();
        assert_eq!(
            err,
            UpstreamError::Unavailable("the stream broke: reset".into())
        );
        assert!(link.is_broken());
        let _rx = breaker.await.unwrap();
        assert!(matches!(
            link.call(req(8)).await,
            Err(UpstreamError::Unavailable(_))
        ));
    }

    #[tokio::test]
    async fn a_slot_replaces_a_broken_link() {
        let slot = Slot::default();
        let mk = || async {
            let (tx, rx) = mpsc::channel(1);
            std::mem::forget(rx);
            Ok(Link::new(tx, Arc::new(Pending::default())))
        };
        let first = slot.get(mk).await.unwrap();
        let again = slot.get(mk).await.unwrap();
        assert!(Arc::ptr_eq(&first, &again));
        first.pending.fail_all("gone");
        let fresh = slot.get(mk).await.unwrap();
        assert!(!Arc::ptr_eq(&first, &fresh));
    }
}
