//! The write-progress timeout: how long a connection may hold an answer
//! that its client takes no byte of. [`Stall`] keeps the clock for one
//! cause (a socket that accepts no write, a flow-control window left shut),
//! and wakes the connection's task when the bound passes.

use std::io;
use std::pin::Pin;
use std::task::Context;
use std::time::Duration;

use tokio::time::{Instant, Sleep};

/// One cause of a stalled answer, and its clock.
#[derive(Debug)]
pub(crate) struct Stall {
    limit: Duration,
    since: Option<Instant>,
    timer: Pin<Box<Sleep>>,
    why: &'static str,
}

impl Stall {
    pub fn new(limit: Duration, why: &'static str) -> Self {
        Stall {
            limit,
            since: None,
            timer: Box::pin(tokio::time::sleep(limit)),
            why,
        }
    }

    /// Whether the cause holds now (`stuck`); an error once it has held
    /// for the whole limit. While it holds, `cx`'s task is woken when the
    /// limit passes.
    pub fn check(&mut self, stuck: bool, cx: &mut Context<'_>) -> Option<io::Error> {
        if !stuck {
            self.since = None;
            return None;
        }
        let since = *self.since.get_or_insert_with(Instant::now);
        let at = since + self.limit;
        if Instant::now() >= at {
            return Some(io::Error::new(io::ErrorKind::TimedOut, self.why));
        }
        if self.timer.deadline() != at {
            self.timer.as_mut().reset(at);
        }
        if self.timer.as_mut().poll(cx).is_ready() {
            return Some(io::Error::new(io::ErrorKind::TimedOut, self.why));
        }
        None
    }
}

/// Why a connection is closed when its socket takes no write.
pub(crate) const SOCKET: &str = "the client took no byte of its answer within the write timeout";
/// Why a connection is closed when its HTTP/2 window stays shut.
pub(crate) const WINDOW: &str =
    "the client left its HTTP/2 flow-control window shut past the write timeout";

/// A writer whose writes fail once one has taken no byte for `limit`: the
/// write-progress timeout for a connection served without hyper (raw TCP).
pub struct WriteTimeout<W> {
    inner: W,
    stall: Stall,
}

impl<W> WriteTimeout<W> {
    pub fn new(inner: W, limit: Duration) -> Self {
        WriteTimeout {
            inner,
            stall: Stall::new(limit, SOCKET),
        }
    }
}

impl<W: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for WriteTimeout<W> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        match self.stall.check(r.is_pending(), cx) {
            Some(e) => std::task::Poll::Ready(Err(e)),
            None => r,
        }
    }

    fn poll_flush(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_flush(cx);
        match self.stall.check(r.is_pending(), cx) {
            Some(e) => std::task::Poll::Ready(Err(e)),
            None => r,
        }
    }

    fn poll_shutdown(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_shutdown(cx);
        match self.stall.check(r.is_pending(), cx) {
            Some(e) => std::task::Poll::Ready(Err(e)),
            None => r,
        }
    }
}
