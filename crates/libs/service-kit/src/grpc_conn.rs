//! A tonic listener's connection bounds, kept in the socket because tonic
//! serves each connection itself: [`Watched`] wraps every incoming
//! connection and fails its reads (tonic then closes it) when one passes.
//!
//! - The first bytes, whatever the protocol, must arrive within the
//!   header-read timeout ([`ENOUGH`] of them: the HTTP/2 preface's length).
//! - HTTP/2 (gRPC): every request's head (its HEADERS frame and
//!   CONTINUATIONs) must be whole within the header-read timeout of its
//!   first byte, and the first within that of the preface; a connection
//!   with no call in flight closes at the idle timeout, whatever it sends
//!   meanwhile (pings included). Frames are read from their headers as they
//!   pass, both ways ([`crate::serve::h2_frames`]): a call is in flight
//!   from the client's HEADERS to the server's END_STREAM or a reset.
//! - HTTP/1.1 (gRPC-web): each request's head must be whole within the
//!   header-read timeout of its first byte (the first within that of the
//!   opening). A later head begins with the first byte read after the
//!   server has written: a gRPC-web client sends its whole request before
//!   its answer comes.
//! - An answer may wait at most the write timeout for its client to take a
//!   byte: a socket that accepts no write, or a flow-control window the
//!   client leaves shut while an answer is begun, closes the connection,
//!   and what it held (slots of the limit, answers in memory) is freed.
//! - With rotation on, a connection past its maximum age and grace that has
//!   not closed by itself is dropped.
//!
//! A connection tonic closes gracefully (a shutdown's GOAWAY, its streams
//! done) lingers: its write side is shut, then what the client still sends
//! (window updates while it reads the last answers) is read and dropped
//! until the client closes too, for at most [`LINGER`]. Closing a socket
//! with unread bytes makes the kernel send a reset and drop what it had
//! not yet sent: the last answers would be lost under a client still
//! reading them.
//!
//! An idle connection is closed without a GOAWAY (tonic has no way to send
//! one per connection): a client that sends a call at that very moment
//! sees the connection close, as with any HTTP/1.1 keep-alive close.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use crate::serve::h2_frames::{self, H2Watch};
use crate::serve::stall::{self, Stall};
use crate::serve::{ConnLimits, LINGER};

/// The bytes that tell HTTP/2 from HTTP/1.1: the connection preface's length.
pub const ENOUGH: usize = h2_frames::PREFACE.len();

/// What is known of the connection's protocol.
#[derive(Debug)]
enum Mode {
    /// Fewer than [`ENOUGH`] bytes so far.
    Opening(Vec<u8>),
    H2(Box<H2>),
    /// gRPC-web over HTTP/1.1: how many bytes of `\r\n\r\n` end what was
    /// read, whether the current head is whole, since when a head is on
    /// its way, and whether the server has written since the head was
    /// whole (then the next byte read begins the next request's head: a
    /// gRPC-web client sends its whole request before the answer).
    Http1 {
        matched: usize,
        whole: bool,
        since: Instant,
        answered: bool,
    },
}

#[derive(Debug)]
struct H2 {
    /// Heads, calls in flight and flow-control room, read off the frames.
    watch: H2Watch,
    /// Since when a head is on its way (or, before the first request, since
    /// the preface).
    head_since: Option<Instant>,
    /// Since when no call is in flight.
    quiet_since: Instant,
}

/// A tonic connection under the bounds the module doc lists.
pub struct Watched<I> {
    inner: I,
    /// The connection's slot under its listener's cap.
    _admitted: crate::cap::Admitted,
    limits: ConnLimits,
    opened: Instant,
    mode: Mode,
    timer: Pin<Box<Sleep>>,
    /// The reader's waker, woken when a write ends the last call in flight
    /// (the idle deadline starts then).
    reader: Option<Waker>,
    /// Past this, a rotated connection that has not closed by itself is
    /// dropped.
    end_of_life: Option<Pin<Box<Sleep>>>,
    /// The write-progress timeout: a socket that takes no write, and a
    /// flow-control window left shut with an answer begun.
    socket_stall: Stall,
    window_stall: Stall,
    /// Set once the write side is shut: until when the client's last bytes
    /// are read and dropped.
    linger: Option<Pin<Box<Sleep>>>,
}

impl<I> Watched<I> {
    pub fn new(inner: I, admitted: crate::cap::Admitted, limits: ConnLimits) -> Self {
        let opened = Instant::now();
        Watched {
            inner,
            _admitted: admitted,
            limits,
            opened,
            mode: Mode::Opening(Vec::new()),
            timer: Box::pin(tokio::time::sleep_until(opened + limits.header_read)),
            reader: None,
            end_of_life: None,
            socket_stall: Stall::new(limits.write, stall::SOCKET),
            window_stall: Stall::new(limits.write, stall::WINDOW),
            linger: None,
        }
    }

    /// The same connection, dropped once it has lived `life`.
    pub fn with_life(mut self, life: Option<Duration>) -> Self {
        self.end_of_life = life.map(|l| Box::pin(tokio::time::sleep(l)));
        self
    }

    /// The next bound to pass, and what passing it means.
    fn due(&self) -> Option<(Instant, &'static str)> {
        let ms = self.limits.header_read;
        match &self.mode {
            Mode::Opening(_) => Some((
                self.opened + ms,
                "no request within the header-read timeout",
            )),
            Mode::Http1 {
                whole: false,
                since,
                ..
            } => Some((
                *since + ms,
                "the request's head did not arrive within the header-read timeout",
            )),
            Mode::Http1 { whole: true, .. } => None,
            // Whichever comes first: a head on its way past the header-read
            // timeout, or no call in flight past the idle timeout.
            Mode::H2(h2) => {
                let head = h2.head_since.map(|t| {
                    (
                        t + ms,
                        "a request's head did not arrive within the header-read timeout",
                    )
                });
                let idle = (h2.watch.calls() == 0).then(|| {
                    (
                        h2.quiet_since + self.limits.idle,
                        "no call in flight within the idle timeout",
                    )
                });
                match (head, idle) {
                    (Some(h), Some(i)) => Some(if h.0 <= i.0 { h } else { i }),
                    (h, i) => h.or(i),
                }
            }
        }
    }

    /// Notes bytes the client sent.
    fn read(&mut self, mut bytes: &[u8]) {
        if let Mode::Opening(first) = &mut self.mode {
            let take = (ENOUGH - first.len()).min(bytes.len());
            first.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
            if first.len() < ENOUGH {
                return;
            }
            let now = Instant::now();
            self.mode = if first.as_slice() == h2_frames::PREFACE {
                Mode::H2(Box::new(H2 {
                    watch: H2Watch::default(),
                    head_since: Some(now),
                    quiet_since: now,
                }))
            } else {
                let mut matched = 0;
                let whole = ends_head(&mut matched, first);
                Mode::Http1 {
                    matched,
                    whole,
                    since: self.opened,
                    answered: false,
                }
            };
        }
        match &mut self.mode {
            Mode::Opening(_) => {}
            Mode::Http1 {
                matched,
                whole,
                since,
                answered,
            } => {
                if bytes.is_empty() {
                    return;
                }
                if *whole && *answered {
                    // The next request's head begins.
                    (*matched, *whole, *since, *answered) = (0, false, Instant::now(), false);
                }
                if !*whole {
                    *whole = ends_head(matched, bytes);
                }
            }
            Mode::H2(h2) => {
                let H2 {
                    watch,
                    head_since,
                    quiet_since,
                } = &mut **h2;
                let (was_in_head, calls_before) = (watch.head_in_progress(), watch.calls());
                let opened = watch.read(bytes);
                let now = Instant::now();
                if watch.head_in_progress() {
                    head_since.get_or_insert(now);
                } else if opened || was_in_head {
                    // A head is whole (the first one ends the preface's wait).
                    *head_since = None;
                }
                if calls_before > 0 && watch.calls() == 0 {
                    // The client reset the last call in flight.
                    *quiet_since = now;
                }
            }
        }
    }

    /// Notes bytes the server wrote.
    fn wrote(&mut self, bytes: &[u8]) {
        if let Mode::Http1 {
            whole: true,
            answered,
            ..
        } = &mut self.mode
            && !bytes.is_empty()
        {
            *answered = true;
        }
        if let Mode::H2(h2) = &mut self.mode {
            let (before, was_shut) = (h2.watch.calls(), h2.watch.window_shut());
            h2.watch.wrote(bytes);
            let ended = before > 0 && h2.watch.calls() == 0;
            if ended {
                h2.quiet_since = Instant::now();
            }
            // The reader keeps the clocks that start here (idle, a shut
            // window): it is woken to set them.
            if (ended || (!was_shut && h2.watch.window_shut()))
                && let Some(w) = self.reader.take()
            {
                w.wake();
            }
        }
    }
}

/// Whether `bytes` complete a `\r\n\r\n`, `matched` bytes of which ended
/// what came before; updates `matched`.
fn ends_head(matched: &mut usize, bytes: &[u8]) -> bool {
    const END: &[u8; 4] = b"\r\n\r\n";
    for &b in bytes {
        *matched = if b == END[*matched] {
            *matched + 1
        } else if b == b'\r' {
            1
        } else {
            0
        };
        if *matched == END.len() {
            return true;
        }
    }
    false
}

fn timed_out(why: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, why)
}

impl<I: AsyncRead + Unpin> AsyncRead for Watched<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = &r {
            self.read(&buf.filled()[before..]);
        }
        if r.is_pending()
            && let Some(end) = self.end_of_life.as_mut()
            && end.as_mut().poll(cx).is_ready()
        {
            return Poll::Ready(Err(timed_out(
                "the connection outlived its maximum age and grace",
            )));
        }
        if matches!(&self.mode, Mode::H2(h2) if h2.watch.evicted(cx)) {
            tracing::debug!("closing a gRPC connection over the open-stream budget");
            return Poll::Ready(Err(crate::serve::stream_budget::Share::eviction()));
        }
        let shut = matches!(&self.mode, Mode::H2(h2) if h2.watch.window_shut());
        if let Some(e) = self.window_stall.check(shut, cx) {
            tracing::debug!(error = %e, "closing a gRPC connection");
            return Poll::Ready(Err(e));
        }
        let Some((at, why)) = self.due() else {
            if r.is_pending() {
                self.reader = Some(cx.waker().clone());
            }
            return r;
        };
        // Checked on every read, so that a client that keeps sending
        // (pings, window updates) cannot hold the connection past a bound.
        if Instant::now() >= at {
            tracing::debug!(why, "closing a gRPC connection");
            return Poll::Ready(Err(timed_out(why)));
        }
        if r.is_pending() {
            self.reader = Some(cx.waker().clone());
            if self.timer.deadline() != at {
                self.timer.as_mut().reset(at);
            }
            if self.timer.as_mut().poll(cx).is_ready() {
                tracing::debug!(why, "closing a gRPC connection");
                return Poll::Ready(Err(timed_out(why)));
            }
        }
        r
    }
}

impl<I: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Watched<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = &r {
            self.wrote(&buf[..*n]);
        }
        if let Some(e) = self.socket_stall.check(r.is_pending(), cx) {
            tracing::debug!(error = %e, "closing a gRPC connection");
            return Poll::Ready(Err(e));
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.linger.is_none() {
            std::task::ready!(Pin::new(&mut self.inner).poll_shutdown(cx))?;
            self.linger = Some(Box::pin(tokio::time::sleep(LINGER)));
        }
        // Read and drop until the client's close, an error, or the bound
        // (checked between reads: a client that keeps sending is cut there).
        let mut scratch = [0u8; 8192];
        for _ in 0..64 {
            let linger = self.linger.as_mut().expect("set above");
            if linger.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Ok(()));
            }
            let mut buf = ReadBuf::new(&mut scratch);
            match Pin::new(&mut self.inner).poll_read(cx, &mut buf) {
                Poll::Ready(Ok(())) if buf.filled().is_empty() => return Poll::Ready(Ok(())),
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(_)) => return Poll::Ready(Ok(())),
                Poll::Pending => return Poll::Pending,
            }
        }
        // Others' turn: come back for more.
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if let Some(e) = self.socket_stall.check(r.is_pending(), cx) {
            tracing::debug!(error = %e, "closing a gRPC connection");
            return Poll::Ready(Err(e));
        }
        if let Poll::Ready(Ok(n)) = &r {
            for b in h2_frames::written(bufs, *n) {
                self.wrote(b);
            }
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

impl<I: tonic::transport::server::Connected> tonic::transport::server::Connected for Watched<I> {
    type ConnectInfo = I::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}
