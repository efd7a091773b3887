//! What a connection is doing, as its socket and its service see it: the
//! [`Activity`] its socket ([`Watched`]) and its service note, and the
//! [`watchdog`] that says when a bound of its [`ConnLimits`] has passed.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::h2_frames::{self, H2Watch};
use super::limits::ConnLimits;
use super::stall::{self, Stall};

/// What a connection is doing, as its socket and its service see it.
#[derive(Debug)]
pub(super) struct Activity {
    opened: std::time::Instant,
    /// Requests whose head was read and whose answer is not yet handed
    /// back.
    in_service: std::sync::atomic::AtomicUsize,
    /// Milliseconds since `opened` of the first byte read with no request
    /// in service (a request's head begun), or [`NONE`]. The opening
    /// counts as a begun head, so a client that sends nothing is bound by
    /// the header-read timeout.
    head_begun: std::sync::atomic::AtomicU64,
    /// Milliseconds since `opened` when the last request was answered.
    quiet_since: std::sync::atomic::AtomicU64,
    /// The HTTP/2 preface has been read: heads are HTTP/2 frames from here
    /// on, followed in `h2_reads`.
    pub(super) h2: AtomicBool,
    /// The connection's HTTP/2 frames, read from their headers: whether a
    /// request's head is on its way; and the flow-control room the client
    /// gives the answers.
    h2_reads: std::sync::Mutex<H2Watch>,
    /// Bytes read so far, up to the preface's length.
    prefix: std::sync::Mutex<Vec<u8>>,
    /// Whether the connection is known to be HTTP/2 or not: `prefix` is
    /// looked at no more.
    sniffed: AtomicBool,
}

const NONE: u64 = u64::MAX;

impl Activity {
    pub(super) fn new() -> Self {
        Activity {
            opened: std::time::Instant::now(),
            in_service: 0.into(),
            head_begun: 0.into(),
            quiet_since: 0.into(),
            h2: AtomicBool::new(false),
            h2_reads: std::sync::Mutex::default(),
            prefix: std::sync::Mutex::new(Vec::new()),
            sniffed: AtomicBool::new(false),
        }
    }

    fn now(&self) -> u64 {
        self.opened.elapsed().as_millis() as u64
    }

    fn read(&self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        if !self.sniffed.load(Ordering::Relaxed) {
            let mut p = self.prefix.lock().unwrap_or_else(|e| e.into_inner());
            let take = (h2_frames::PREFACE.len() - p.len()).min(bytes.len());
            p.extend_from_slice(&bytes[..take]);
            // Decided once the bytes part from the preface or complete it:
            // later reads skip this.
            if !h2_frames::PREFACE.starts_with(&p) || p.len() == h2_frames::PREFACE.len() {
                self.sniffed.store(true, Ordering::Relaxed);
            }
            if p.as_slice() == h2_frames::PREFACE {
                self.h2.store(true, Ordering::Relaxed);
                // The first request's head is due within the header-read
                // timeout of the preface.
                self.head_begun.store(self.now(), Ordering::Relaxed);
                self.quiet_since.store(self.now(), Ordering::Relaxed);
                self.read_h2(&bytes[take..]);
                return;
            }
        }
        if self.h2.load(Ordering::Relaxed) {
            self.read_h2(bytes);
            return;
        }
        if self.in_service.load(Ordering::Relaxed) > 0 {
            return;
        }
        let _ = self.head_begun.compare_exchange(
            NONE,
            self.now(),
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }

    /// HTTP/2 frames read: a head on its way starts the header-read
    /// timeout (whatever else is in service), a head whole ends it.
    fn read_h2(&self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        let mut watch = self.h2_reads.lock().unwrap_or_else(|e| e.into_inner());
        let was_in_head = watch.head_in_progress();
        let opened = watch.read(bytes);
        if watch.head_in_progress() {
            let _ = self.head_begun.compare_exchange(
                NONE,
                self.now(),
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        } else if opened || was_in_head {
            self.head_begun.store(NONE, Ordering::Relaxed);
        }
    }

    /// HTTP/2 bytes the server wrote.
    fn wrote(&self, bytes: &[u8]) {
        if bytes.is_empty() || !self.h2.load(Ordering::Relaxed) {
            return;
        }
        let mut watch = self.h2_reads.lock().unwrap_or_else(|e| e.into_inner());
        watch.wrote(bytes);
    }

    /// Whether the client leaves no flow-control room for an answer begun.
    fn window_shut(&self) -> bool {
        self.h2.load(Ordering::Relaxed)
            && self
                .h2_reads
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .window_shut()
    }

    /// Whether the process's open-stream budget evicted this connection
    /// (if not, `cx`'s task is woken when it does).
    fn evicted(&self, cx: &std::task::Context<'_>) -> bool {
        self.h2.load(Ordering::Relaxed)
            && self
                .h2_reads
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .evicted(cx)
    }

    pub(super) fn request_started(&self) {
        self.in_service.fetch_add(1, Ordering::Relaxed);
        self.head_begun.store(NONE, Ordering::Relaxed);
    }

    pub(super) fn request_answered(&self) {
        self.quiet_since.store(self.now(), Ordering::Relaxed);
        self.in_service.fetch_sub(1, Ordering::Relaxed);
    }

    /// Why the connection should close now, if a bound has passed.
    fn expired(&self, limits: &ConnLimits) -> Option<&'static str> {
        let now = self.now();
        let head = self.head_begun.load(Ordering::Relaxed);
        // An HTTP/2 head on its way is bounded even beside streams in
        // service; an HTTP/1.1 connection has one request at a time.
        if self.h2.load(Ordering::Relaxed)
            && head != NONE
            && now.saturating_sub(head) > limits.header_read.as_millis() as u64
        {
            return Some("a request's head did not arrive within the header-read timeout");
        }
        if self.in_service.load(Ordering::Relaxed) > 0 {
            return None;
        }
        // An HTTP/1.1 head on its way is bounded by the header-read timeout
        // alone; an HTTP/2 connection with no stream in service is idle
        // too, whatever it sends (pings included).
        if head != NONE && !self.h2.load(Ordering::Relaxed) {
            return (now.saturating_sub(head) > limits.header_read.as_millis() as u64)
                .then_some("the request's head did not arrive within the header-read timeout");
        }
        let quiet = self.quiet_since.load(Ordering::Relaxed);
        (now.saturating_sub(quiet) > limits.idle.as_millis() as u64)
            .then_some("idle past the idle timeout")
    }
}

/// Completes, with the reason, when a bound of `limits` has passed.
pub(super) async fn watchdog(activity: &Activity, limits: &ConnLimits) -> &'static str {
    let tick = (limits.header_read.min(limits.idle) / 8)
        .clamp(Duration::from_millis(10), Duration::from_millis(500));
    let mut every = tokio::time::interval(tick);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        if let Some(why) = activity.expired(limits) {
            return why;
        }
    }
}

/// A connection's socket, noting what it reads in the connection's
/// [`Activity`].
pub(super) struct Watched<I> {
    inner: I,
    activity: Arc<Activity>,
    /// The write-progress timeout: a socket that takes no write, and an
    /// HTTP/2 window left shut with an answer begun.
    socket_stall: Stall,
    window_stall: Stall,
    /// The reader's waker, woken when a write shuts the window (its clock
    /// is kept by the reader).
    reader: Option<std::task::Waker>,
}

impl<I> Watched<I> {
    pub(super) fn new(inner: I, activity: Arc<Activity>, limits: &ConnLimits) -> Self {
        Watched {
            inner,
            activity,
            socket_stall: Stall::new(limits.write, stall::SOCKET),
            window_stall: Stall::new(limits.write, stall::WINDOW),
            reader: None,
        }
    }

    /// Notes bytes written, and wakes the reader if they shut the window.
    fn wrote(&mut self, bytes: &[u8]) {
        let was_shut = self.activity.window_shut();
        self.activity.wrote(bytes);
        if !was_shut
            && self.activity.window_shut()
            && let Some(w) = self.reader.take()
        {
            w.wake();
        }
    }
}

impl<I: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Watched<I> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        if let std::task::Poll::Ready(Ok(())) = &r {
            self.activity.read(&buf.filled()[before..]);
        }
        if self.activity.evicted(cx) {
            tracing::debug!("closing a connection over the open-stream budget");
            return std::task::Poll::Ready(Err(super::stream_budget::Share::eviction()));
        }
        let shut = self.activity.window_shut();
        if let Some(e) = self.window_stall.check(shut, cx) {
            tracing::debug!(error = %e, "closing a connection");
            return std::task::Poll::Ready(Err(e));
        }
        if r.is_pending() {
            self.reader = Some(cx.waker().clone());
        }
        r
    }
}

impl<I: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Watched<I> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let r = std::pin::Pin::new(&mut self.inner).poll_write(cx, buf);
        if let std::task::Poll::Ready(Ok(n)) = &r {
            self.wrote(&buf[..*n]);
        }
        if let Some(e) = self.socket_stall.check(r.is_pending(), cx) {
            tracing::debug!(error = %e, "closing a connection");
            return std::task::Poll::Ready(Err(e));
        }
        r
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let r = std::pin::Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if let std::task::Poll::Ready(Ok(n)) = &r {
            for b in h2_frames::written(bufs, *n) {
                self.wrote(b);
            }
        }
        if let Some(e) = self.socket_stall.check(r.is_pending(), cx) {
            tracing::debug!(error = %e, "closing a connection");
            return std::task::Poll::Ready(Err(e));
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}
