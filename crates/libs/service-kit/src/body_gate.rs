//! A request's slot of the limit while its body is on its way (the shed
//! layer's). A call waiting for its client's bytes is not work in service:
//!
//! - when no slot is free for new work, the call that has waited for its
//!   body longest lends it its slot (a flood of streams that announce
//!   bodies and send part of them used to leave every good request 503
//!   until they went silent);
//! - a call whose client has sent nothing more for [`BODY_WAIT`] gives its
//!   slot back (600 unfinished gRPC calls used to hold all 512 slots until
//!   the body-read timeout);
//! - either way it takes a slot again when its next bytes come, and if none
//!   is free then it is shed like any other (503 / RESOURCE_EXHAUSTED).
//!
//! A call without its slot keeps what its body had brought (the handler is
//! still collecting it), and slots lent or given back go to new calls that
//! may wait in turn: without a bound, waiting bodies could hold the request
//! cap each, many times over. So what the calls without a slot hold, over
//! the process, is held to [`STALLED_BODY_BYTES`]: a call that would pass
//! it loses its slot all the same and is shed, its bytes freed, while the
//! calls already waiting keep their place. A call whose bytes come again
//! leaves the budget. Each waiting call counts [`CALL_COST`] beside its
//! bytes, so streams that announce bodies and send nothing are bounded too
//! (about 500 of them at once).
//!
//! The calls that wait while they keep their slot (each slot's call may
//! have read most of a body before it stalls, and a flood keeps new ones
//! coming) are held to [`WAITING_BODY_BYTES`] of bytes over the process: a
//! call that would pass it gives its slot back at once, as after
//! [`BODY_WAIT`], and counts in the budget above.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Sleep;

mod budget;

use budget::Held;
pub use budget::{Budgets, CALL_COST, STALLED_BODY_BYTES, StalledBudget, WAITING_BODY_BYTES};

/// One service's limit of work in service, shared by all its surfaces:
/// REST requests and gRPC calls (through [`ShedLayer::shared`]), and each
/// lookup on a bidi stream or a raw-TCP connection ([`Limiter::try_acquire`]).
#[derive(Debug, Clone)]
pub struct Limiter {
    permits: Arc<Semaphore>,
    max: usize,
    /// Requests and lookups refused so far.
    shed: Arc<AtomicU64>,
    /// Requests holding a slot while they wait for their bodies' bytes, in
    /// the order they began to: when no slot is free, new work takes one of
    /// theirs (see [`crate::body_gate`]).
    lenders: Arc<Mutex<VecDeque<Weak<Gate>>>>,
}

impl Limiter {
    /// At most `max` (at least one) in service at once.
    pub fn new(max: usize) -> Self {
        Limiter {
            permits: Arc::new(Semaphore::new(max.max(1))),
            max: max.max(1),
            shed: Arc::default(),
            lenders: Arc::default(),
        }
    }

    /// A slot, held until dropped, or `None` when every slot is taken: the
    /// caller refuses the work at once, and it is counted as shed. When
    /// none is free, a request waiting for its body's bytes lends its own
    /// (it takes one again when they come, or is shed then).
    pub fn try_acquire(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        let permit = self
            .permits
            .clone()
            .try_acquire_owned()
            .ok()
            .or_else(|| self.borrow());
        if permit.is_none() {
            self.shed.fetch_add(1, Ordering::Relaxed);
        }
        permit
    }

    /// The slot of the request that has waited for its body longest.
    fn borrow(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        let mut lenders = self.lenders.lock().unwrap_or_else(PoisonError::into_inner);
        while let Some(gate) = lenders.pop_front() {
            if let Some(permit) = gate.upgrade().and_then(|g| g.lend()) {
                return Some(permit);
            }
        }
        None
    }

    /// `gate` waits for its body holding a slot it may lend.
    pub(crate) fn queue_lender(&self, gate: Weak<Gate>) {
        let mut lenders = self.lenders.lock().unwrap_or_else(PoisonError::into_inner);
        // Entries of requests long over, when the limit was never full
        // enough to pop them: dropped before they pile up.
        if lenders.len() >= 2 * self.max + 1024 {
            lenders.retain(|g| g.strong_count() > 0);
        }
        lenders.push_back(gate);
    }

    /// One more refusal, of work that held a slot earlier (a request
    /// body shed as it stalled).
    pub(crate) fn count_shed(&self) {
        self.shed.fetch_add(1, Ordering::Relaxed);
    }

    /// Slots free now.
    pub fn available(&self) -> usize {
        self.permits.available_permits()
    }

    /// Requests and lookups refused so far.
    pub fn shed(&self) -> u64 {
        self.shed.load(Ordering::Relaxed)
    }

    /// The count of refusals as `{prefix}_shed_requests_total` on
    /// `/metrics`, read at each scrape.
    pub fn collector(&self, prefix: &'static str) -> ShedCollector {
        ShedCollector {
            prefix,
            limiter: self.clone(),
        }
    }
}

/// See [`Limiter::collector`].
#[derive(Debug)]
pub struct ShedCollector {
    prefix: &'static str,
    limiter: Limiter,
}

impl prometheus_client::collector::Collector for ShedCollector {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        use telemetry::metrics::{Kind, NoLabels, encode_family};
        encode_family(
            &mut encoder,
            &format!("{}_shed_requests", self.prefix),
            "Requests, calls and lookups refused at once because the service was at its limit of concurrent requests",
            None,
            Kind::Counter,
            [(NoLabels::default(), self.limiter.shed())],
        )
    }
}

/// How long a request holding a slot may wait for its client's next body
/// bytes before it gives the slot back.
pub const BODY_WAIT: Duration = Duration::from_secs(1);

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// One request's slot, shared by its body and its place in the limit.
pub struct Gate {
    limiter: Limiter,
    budgets: Budgets,
    state: Mutex<State>,
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gate")
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

#[derive(Debug)]
struct State {
    permit: Option<OwnedSemaphorePermit>,
    /// A slot was wanted back and none was free, or there was no room in
    /// the budget for what the body held: the call is shed.
    shed: bool,
    /// The answer's head is out: the body passes untouched from here on
    /// (a request stream is bounded by its own limits, not by this one).
    done: bool,
    /// The handler is waiting for body bytes: the slot may be lent.
    waiting: bool,
    /// An entry for this gate is in the limiter's queue of lenders.
    queued: bool,
    /// Body bytes received so far.
    received: usize,
    /// What the body holds of the budgets while it waits.
    held: Held,
    /// The body's task, to wake when the call is shed from outside it.
    waker: Option<Waker>,
}

impl State {
    /// The slot is gone (given back or lent): what the body holds takes its
    /// room among the calls without one, or the call is shed (`false`).
    fn hold(&mut self, b: Budgets) -> bool {
        let kept = self.held.without_slot(b, self.received);
        self.shed |= !kept;
        kept
    }

    /// The call waits keeping its slot: what the body holds takes its room
    /// among the calls that do; `false` if there is none.
    fn hold_with_slot(&mut self, b: Budgets) -> bool {
        self.held.with_slot(b, self.received)
    }
}

impl Gate {
    /// A request holding `permit` of `limiter`, which gives it another
    /// when it gave its own back.
    pub(crate) fn new(limiter: Limiter, permit: OwnedSemaphorePermit) -> Arc<Self> {
        Self::with_budgets(limiter, permit, Budgets::process())
    }

    fn with_budgets(limiter: Limiter, permit: OwnedSemaphorePermit, budgets: Budgets) -> Arc<Self> {
        Arc::new(Gate {
            limiter,
            budgets,
            state: Mutex::new(State {
                permit: Some(permit),
                shed: false,
                done: false,
                waiting: false,
                queued: false,
                received: 0,
                held: Held::default(),
                waker: None,
            }),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The handler waits for body bytes: the slot, if held, may be lent to
    /// new work while it does (queued with the limiter once). What the body
    /// holds takes its room among the calls waiting with a slot; with none
    /// left the slot goes back at once, as after [`BODY_WAIT`]. `false` if
    /// the call was shed meanwhile, or is now.
    fn wait_for_body(self: &Arc<Self>, cx: &Context<'_>) -> bool {
        let queue = {
            let mut st = self.state();
            if st.shed {
                return false;
            }
            if st.permit.is_some() && !st.done && !st.hold_with_slot(self.budgets) {
                st.permit = None;
                if !st.hold(self.budgets) {
                    self.limiter.count_shed();
                    return false;
                }
            }
            st.waiting = true;
            if !st.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                st.waker = Some(cx.waker().clone());
            }
            let queue = !st.queued && !st.done && st.permit.is_some();
            st.queued |= queue;
            queue
        };
        // Outside the state's lock: the limiter locks its queue, then a
        // gate's state.
        if queue {
            self.limiter.queue_lender(Arc::downgrade(self));
        }
        true
    }

    /// The slot, taken for new work if this request is waiting for its
    /// body; its entry leaves the limiter's queue either way. What the body
    /// holds takes its room in the budget; with none left the call is shed
    /// (its body fails, and what it held is freed), so new work gets the
    /// slot either way.
    pub(crate) fn lend(&self) -> Option<OwnedSemaphorePermit> {
        let mut st = self.state();
        st.queued = false;
        if !st.waiting || st.done {
            return None;
        }
        let permit = st.permit.take()?;
        if !st.hold(self.budgets) {
            self.limiter.count_shed();
            if let Some(w) = st.waker.take() {
                w.wake();
            }
        }
        Some(permit)
    }

    /// Silent for [`BODY_WAIT`]: the slot goes back, and what the body
    /// holds takes its room in the budget; `false` (shed) if there was none.
    fn give_back(&self) -> bool {
        let mut st = self.state();
        if st.done {
            return true;
        }
        st.permit = None;
        let kept = st.hold(self.budgets);
        if !kept {
            self.limiter.count_shed();
        }
        kept
    }

    /// `n` bytes came: they leave the budget, and the call takes a slot
    /// again if it had none; `false` (and the call is shed) when none is
    /// free.
    fn came(&self, n: usize) -> bool {
        {
            let mut st = self.state();
            st.waiting = false;
            st.held.release(self.budgets);
            st.received += n;
            if st.shed {
                return false;
            }
            if st.done || st.permit.is_some() {
                return true;
            }
        }
        // Outside the state's lock (the limiter may lock other gates').
        let permit = self.limiter.try_acquire();
        let mut st = self.state();
        match permit {
            Some(p) => {
                if !st.done {
                    st.permit = Some(p);
                }
                true
            }
            None => {
                st.shed = true;
                false
            }
        }
    }

    /// The body is gone: what it held leaves the budget, and the handler
    /// waits for no bytes now, so its slot is not lent.
    fn dropped(&self) {
        let mut st = self.state();
        st.waiting = false;
        st.held.release(self.budgets);
    }

    /// The answer's head is out: the slot is freed, and whether the call
    /// was shed while its body came.
    pub(crate) fn finish(&self) -> bool {
        let mut st = self.state();
        st.done = true;
        st.permit = None;
        st.held.release(self.budgets);
        st.shed
    }
}

/// A request body whose [`Gate`] gives its slot back while it waits.
pub struct Gated<B> {
    inner: Pin<Box<B>>,
    gate: Arc<Gate>,
    wait: Option<Pin<Box<Sleep>>>,
    /// Silent past [`BODY_WAIT`] since its last bytes: the slot is back.
    silent: bool,
}

impl<B> Gated<B> {
    fn new(inner: B, gate: &Arc<Gate>) -> Self {
        Gated {
            inner: Box::pin(inner),
            gate: gate.clone(),
            wait: None,
            silent: false,
        }
    }
}

impl<B> Drop for Gated<B> {
    fn drop(&mut self) {
        self.gate.dropped();
    }
}

/// The error a shed body ends with; the answer is the shed one anyway.
#[derive(Debug, thiserror::Error)]
#[error("the service is at its limit of concurrent requests: shed while its body came")]
pub struct ShedWhileWaiting;

impl<B> Body for Gated<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        // A call shed from outside (its slot lent with no room in the
        // budget) fails here: `wait_for_body` and `came` see it.
        match this.inner.as_mut().poll_frame(cx) {
            Poll::Pending => {
                if !this.gate.wait_for_body(cx) {
                    return Poll::Ready(Some(Err(ShedWhileWaiting.into())));
                }
                if !this.silent {
                    let wait = this
                        .wait
                        .get_or_insert_with(|| Box::pin(tokio::time::sleep(BODY_WAIT)));
                    if wait.as_mut().poll(cx).is_ready() {
                        this.wait = None;
                        this.silent = true;
                        if !this.gate.give_back() {
                            return Poll::Ready(Some(Err(ShedWhileWaiting.into())));
                        }
                    }
                }
                Poll::Pending
            }
            Poll::Ready(frame) => {
                this.wait = None;
                this.silent = false;
                let n = match &frame {
                    Some(Ok(f)) => f.data_ref().map_or(0, Bytes::len),
                    _ => 0,
                };
                if !this.gate.came(n) {
                    return Poll::Ready(Some(Err(ShedWhileWaiting.into())));
                }
                Poll::Ready(frame.map(|f| f.map_err(Into::into)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A request body type the limit can gate.
pub trait GateBody: Sized {
    /// This body, giving its slot back while it waits; a body that is
    /// already over is left as it is.
    fn gated(self, gate: &Arc<Gate>) -> Self;
}

impl GateBody for axum::body::Body {
    fn gated(self, gate: &Arc<Gate>) -> Self {
        if self.is_end_stream() {
            return self;
        }
        axum::body::Body::new(Gated::new(self, gate))
    }
}

impl GateBody for tonic::body::Body {
    fn gated(self, gate: &Arc<Gate>) -> Self {
        if self.is_end_stream() {
            return self;
        }
        tonic::body::Body::new(Gated::new(self, gate))
    }
}

/// No body at all: nothing to wait for.
impl GateBody for () {
    fn gated(self, _: &Arc<Gate>) -> Self {}
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A body whose bytes come when the test sends them.
    struct Fed(tokio::sync::mpsc::UnboundedReceiver<Bytes>);

    impl Body for Fed {
        type Data = Bytes;
        type Error = std::convert::Infallible;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            self.0.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b))))
        }
    }

    type Call = (
        Arc<Gate>,
        Gated<Fed>,
        tokio::sync::mpsc::UnboundedSender<Bytes>,
    );

    /// A call holding a slot of `limiter`, its stalled body counted in
    /// `budget` (and room enough for calls waiting with their slots).
    fn call(limiter: &Limiter, budget: &'static StalledBudget) -> Call {
        static ROOMY: StalledBudget = StalledBudget::new(1 << 30);
        call_with(limiter, budget, &ROOMY)
    }

    fn call_with(
        limiter: &Limiter,
        budget: &'static StalledBudget,
        with_slot: &'static StalledBudget,
    ) -> Call {
        let permit = limiter.try_acquire().expect("a free slot");
        let gate = Gate::with_budgets(
            limiter.clone(),
            permit,
            Budgets {
                stalled: budget,
                with_slot,
            },
        );
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let body = Gated::new(Fed(rx), &gate);
        (gate, body, tx)
    }

    fn poll(body: &mut Gated<Fed>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let mut cx = Context::from_waker(Waker::noop());
        Pin::new(body).poll_frame(&mut cx)
    }

    #[tokio::test]
    async fn a_call_waiting_for_its_body_lends_its_slot_and_is_shed_if_none_is_free_when_it_comes()
    {
        static BUDGET: StalledBudget = StalledBudget::new(1 << 20);
        let limiter = Limiter::new(1);
        let (gate, mut body, tx) = call(&limiter, &BUDGET);
        tx.send(Bytes::from_static(b"abc")).unwrap();
        assert!(matches!(poll(&mut body), Poll::Ready(Some(Ok(_)))));
        // Waiting for the rest: new work takes its slot.
        assert!(poll(&mut body).is_pending());
        let work = limiter
            .try_acquire()
            .expect("the waiting call's slot, lent");
        assert_eq!(BUDGET.held(), 3 + CALL_COST, "what it holds, counted");
        // Its bytes come with the slot still taken: shed.
        tx.send(Bytes::from_static(b"d")).unwrap();
        assert!(matches!(poll(&mut body), Poll::Ready(Some(Err(_)))));
        assert!(gate.finish(), "the answer is the shed one");
        assert_eq!(BUDGET.held(), 0);
        assert_eq!(limiter.shed(), 1);
        drop(work);
    }

    #[tokio::test]
    async fn past_the_budget_the_lender_is_shed_and_new_work_still_gets_the_slot() {
        static BUDGET: StalledBudget = StalledBudget::new(CALL_COST + 10);
        let limiter = Limiter::new(2);
        let (first, mut a, tx_a) = call(&limiter, &BUDGET);
        let (second, mut b, tx_b) = call(&limiter, &BUDGET);
        for (body, tx) in [(&mut a, &tx_a), (&mut b, &tx_b)] {
            tx.send(Bytes::from_static(b"12345")).unwrap();
            assert!(matches!(poll(body), Poll::Ready(Some(Ok(_)))));
            assert!(poll(body).is_pending());
        }
        // The first lends within the budget and keeps waiting; the second
        // finds no room: it lends all the same and is shed, its bytes freed.
        let one = limiter.try_acquire().expect("a slot lent");
        let two = limiter.try_acquire().expect("a slot lent");
        assert_eq!(BUDGET.held(), 5 + CALL_COST);
        assert!(poll(&mut a).is_pending(), "the first still waits");
        assert!(matches!(poll(&mut b), Poll::Ready(Some(Err(_)))));
        assert!(second.finish());
        // Its bytes come and the slots are back: the first is served.
        drop((one, two));
        tx_a.send(Bytes::from_static(b"6")).unwrap();
        assert!(matches!(poll(&mut a), Poll::Ready(Some(Ok(_)))));
        assert_eq!(BUDGET.held(), 0);
        assert!(!first.finish(), "not shed");
    }

    #[tokio::test]
    async fn calls_waiting_with_their_slots_past_their_budget_give_them_back_at_once() {
        static STALLED: StalledBudget = StalledBudget::new(CALL_COST + 4);
        static WITH_SLOT: StalledBudget = StalledBudget::new(5);
        let limiter = Limiter::new(3);
        let (first, mut a, tx_a) = call_with(&limiter, &STALLED, &WITH_SLOT);
        let (second, mut b, tx_b) = call_with(&limiter, &STALLED, &WITH_SLOT);
        let (third, mut c, tx_c) = call_with(&limiter, &STALLED, &WITH_SLOT);
        for (tx, body) in [(&tx_a, &mut a), (&tx_b, &mut b), (&tx_c, &mut c)] {
            tx.send(Bytes::from_static(b"abcd")).unwrap();
            assert!(matches!(poll(body), Poll::Ready(Some(Ok(_)))));
        }
        // The first waits within the budget, keeping its slot.
        assert!(poll(&mut a).is_pending());
        assert_eq!(WITH_SLOT.held(), 4);
        assert_eq!(limiter.available(), 0);
        // The second would pass it: its slot goes back at once, and its
        // bytes take the stalled budget's room.
        assert!(poll(&mut b).is_pending());
        assert_eq!(limiter.available(), 1, "the second's slot is back");
        assert_eq!((WITH_SLOT.held(), STALLED.held()), (4, 4 + CALL_COST));
        // The third finds no room in either: shed, its bytes freed.
        assert!(matches!(poll(&mut c), Poll::Ready(Some(Err(_)))));
        assert!(third.finish());
        assert_eq!(limiter.available(), 2);
        assert_eq!(limiter.shed(), 1);
        // Bytes coming to the first take it out of the budget.
        tx_a.send(Bytes::from_static(b"e")).unwrap();
        assert!(matches!(poll(&mut a), Poll::Ready(Some(Ok(_)))));
        assert_eq!(WITH_SLOT.held(), 0);
        assert!(!first.finish());
        drop((b, second, tx_c));
        assert_eq!((WITH_SLOT.held(), STALLED.held()), (0, 0));
    }
}
