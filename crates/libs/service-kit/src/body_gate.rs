//! A request's slot of the limit while its body is on its way (the shed
//! layer's): a call whose client has sent nothing more for
//! [`BODY_WAIT`] gives its slot back, and takes one again when its next
//! bytes come. If none is free then, the call is shed like any other
//! (503 / RESOURCE_EXHAUSTED). So clients that declare bodies and send them
//! slowly, or never, hold no slot past [`BODY_WAIT`]: 600 unfinished gRPC
//! calls used to hold all 512 slots until the body-read timeout, and every
//! other request was refused meanwhile.

use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Sleep;

/// How long a request holding a slot may wait for its client's next body
/// bytes before it gives the slot back.
pub const BODY_WAIT: Duration = Duration::from_secs(1);

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Takes a slot of the limit, or `None` (counted as shed) when none is free.
type Take = Box<dyn Fn() -> Option<OwnedSemaphorePermit> + Send + Sync>;

/// One request's slot, shared by its body and its place in the limit.
pub struct Gate {
    take: Take,
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
    /// A slot was wanted back and none was free: the call is shed.
    shed: bool,
    /// The answer's head is out: the body passes untouched from here on
    /// (a request stream is bounded by its own limits, not by this one).
    done: bool,
}

impl Gate {
    /// A request holding `permit`; `take` gets it another when it gave its
    /// own back.
    pub(crate) fn new(
        take: impl Fn() -> Option<OwnedSemaphorePermit> + Send + Sync + 'static,
        permit: OwnedSemaphorePermit,
    ) -> Arc<Self> {
        Arc::new(Gate {
            take: Box::new(take),
            state: Mutex::new(State {
                permit: Some(permit),
                shed: false,
                done: false,
            }),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a slot is held and may be given back.
    fn holds(&self) -> bool {
        let st = self.state();
        !st.done && st.permit.is_some()
    }

    fn give_back(&self) {
        let mut st = self.state();
        if !st.done {
            st.permit = None;
        }
    }

    /// A slot again, if one was given back; `false` (and the call is shed)
    /// when none is free.
    fn take_again(&self) -> bool {
        let mut st = self.state();
        if st.done || st.permit.is_some() {
            return true;
        }
        match (self.take)() {
            Some(p) => {
                st.permit = Some(p);
                true
            }
            None => {
                st.shed = true;
                false
            }
        }
    }

    /// The answer's head is out: the slot is freed, and whether the call
    /// was shed while its body came.
    pub(crate) fn finish(&self) -> bool {
        let mut st = self.state();
        st.done = true;
        st.permit = None;
        st.shed
    }
}

/// A request body whose [`Gate`] gives its slot back while it waits.
pub struct Gated<B> {
    inner: Pin<Box<B>>,
    gate: Arc<Gate>,
    wait: Option<Pin<Box<Sleep>>>,
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
        match this.inner.as_mut().poll_frame(cx) {
            Poll::Pending => {
                if this.gate.holds() {
                    let wait = this
                        .wait
                        .get_or_insert_with(|| Box::pin(tokio::time::sleep(BODY_WAIT)));
                    if wait.as_mut().poll(cx).is_ready() {
                        this.gate.give_back();
                        this.wait = None;
                    }
                }
                Poll::Pending
            }
            Poll::Ready(frame) => {
                this.wait = None;
                if !this.gate.take_again() {
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
        axum::body::Body::new(Gated {
            inner: Box::pin(self),
            gate: gate.clone(),
            wait: None,
        })
    }
}

impl GateBody for tonic::body::Body {
    fn gated(self, gate: &Arc<Gate>) -> Self {
        if self.is_end_stream() {
            return self;
        }
        tonic::body::Body::new(Gated {
            inner: Box::pin(self),
            gate: gate.clone(),
            wait: None,
        })
    }
}

/// No body at all: nothing to wait for.
impl GateBody for () {
    fn gated(self, _: &Arc<Gate>) -> Self {}
}
