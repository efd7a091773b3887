//! Serving an axum router so that a shutdown loses no request, HTTP/1.1
//! keep-alive included.
//!
//! `axum::serve`'s graceful shutdown closes every idle keep-alive connection
//! at once. A client may have just written its next request on one: the
//! server never read it, the client sees the connection close with its
//! request unanswered (`IncompleteMessage`), and a request is lost. Under a
//! steady load that is most connections (tests/sigterm.rs in order-service
//! counted 7 of 8). HTTP/1.1 has one race-free way to end a connection: answer
//! a request with `Connection: close`. So, at the signal, [`serve`]:
//!
//! 1. takes every connection already waiting in the accept backlog (closing
//!    the listener would reset them, requests and all), then closes the
//!    listener: a new caller is refused before it sends anything;
//! 2. answers every further request on an open connection with
//!    `Connection: close`, and the connection ends after that answer;
//! 3. gives a connection that stays idle `grace` to send one, then closes it
//!    (a client silent that long is not in the middle of sending);
//! 4. returns when every connection has ended.
//!
//! HTTP/2 (h2c) connections get GOAWAY at the same point, which tells the
//! client exactly which streams were served, so none is lost either.
//!
//! Every connection is also bounded in time ([`ConnLimits`]): a client
//! that opens a connection and sends nothing, or trickles a request's head
//! or body, or keeps an idle connection open, is cut off; and the drain
//! itself ends `grace` plus one second after the signal, whatever clients
//! do (connections still open then are dropped).
//!
//! [`serve_with_tls`] does the same over TLS: each connection's handshake
//! runs in the connection's own task (ALPN `h2` or `http/1.1`, though the
//! server tells the two apart by the client's first bytes anyway), so the
//! accept loop and the drain above are unchanged.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::http::{HeaderValue, Version, header};
use axum::response::Response;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

pub use crate::cap::ConnCap;

/// How long a connection may take over each of its parts: settings both
/// services give their HTTP listeners alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnLimits {
    /// At shutdown, how long an idle HTTP/1.1 connection may still send one
    /// request. The drain ends this plus [`DRAIN_SLACK`] after the signal.
    pub grace: Duration,
    /// SETTINGS_MAX_CONCURRENT_STREAMS of an HTTP/2 connection: a client
    /// past it waits for one of its streams to end.
    pub max_streams: u32,
    /// From a connection's opening, or from the first byte read after the
    /// previous answer, to the end of a request's head (HTTP/1.1; for
    /// HTTP/2, to the end of the connection preface). Past it the
    /// connection is closed.
    pub header_read: Duration,
    /// From a request's head to its body's last byte. Past it the body
    /// fails to read, which the routes answer with 408.
    pub body_read: Duration,
    /// How long a connection with no request in service and none begun
    /// stays open: an idle HTTP/1.1 keep-alive connection, an HTTP/2
    /// connection with no stream (pings do not count).
    pub idle: Duration,
    /// Connection rotation: past this age (give or take [`AGE_JITTER`]) a
    /// connection is closed gracefully (HTTP/2 GOAWAY; HTTP/1.1 closed after
    /// the answer in service, or at once when idle), so that a client behind
    /// an L4 balancer reconnects and may land elsewhere. `None`: never.
    pub max_age: Option<Duration>,
    /// How long a rotated connection may take to finish what it serves.
    pub max_age_grace: Duration,
}

/// A rotated connection's age varies by up to this share either way, so
/// that connections opened together do not all close together.
pub const AGE_JITTER: f64 = 0.1;

/// `age`, give or take [`AGE_JITTER`], drawn from `seed`.
pub fn jittered(age: Duration, seed: u64) -> Duration {
    let unit = (splitmix(seed) >> 11) as f64 / (1u64 << 53) as f64;
    age.mul_f64(1.0 - AGE_JITTER + 2.0 * AGE_JITTER * unit)
}

/// SplitMix64's finaliser: any seed spread evenly over `u64`, without a
/// random-number crate or a lock (rotation jitter; user-service's replica
/// picks).
pub fn splitmix(seed: u64) -> u64 {
    let mut x = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// A seed that differs per call: the clock's nanoseconds and a counter.
pub fn seed() -> u64 {
    static COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    nanos ^ COUNT.fetch_add(1, Ordering::Relaxed).rotate_left(32)
}

/// How long past `grace` a drain may take before the connections still
/// open are dropped.
pub const DRAIN_SLACK: Duration = Duration::from_secs(1);

impl ConnLimits {
    /// The bounds from settings in milliseconds, as both services name them
    /// (`*_SHUTDOWN_GRACE_MS`, `*_HEADER_READ_TIMEOUT_MS`,
    /// `*_BODY_READ_TIMEOUT_MS`, `*_IDLE_TIMEOUT_MS`).
    pub fn from_millis(
        grace: u64,
        max_streams: u32,
        header_read: u64,
        body_read: u64,
        idle: u64,
    ) -> Self {
        ConnLimits {
            grace: Duration::from_millis(grace),
            max_streams,
            header_read: Duration::from_millis(header_read),
            body_read: Duration::from_millis(body_read),
            idle: Duration::from_millis(idle),
            max_age: None,
            max_age_grace: Duration::ZERO,
        }
    }

    /// The defaults besides `grace` and `max_streams`: 10 s to send a
    /// request's head, 30 s for its body, 60 s idle, no rotation.
    pub fn new(grace: Duration, max_streams: u32) -> Self {
        ConnLimits {
            grace,
            max_streams,
            header_read: Duration::from_secs(10),
            body_read: Duration::from_secs(30),
            idle: Duration::from_secs(60),
            max_age: None,
            max_age_grace: Duration::ZERO,
        }
    }

    /// The same, with connections rotated past `max_age_ms` (0: never),
    /// given `grace_ms` to finish.
    pub fn with_max_age(self, max_age_ms: u64, grace_ms: u64) -> Self {
        ConnLimits {
            max_age: (max_age_ms > 0).then(|| Duration::from_millis(max_age_ms)),
            max_age_grace: Duration::from_millis(grace_ms),
            ..self
        }
    }
}

/// Serves `router` on `listener` until `shutdown` completes, then drains as
/// the module doc says, each connection bounded by `limits`.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send,
    limits: ConnLimits,
    cap: ConnCap,
) -> std::io::Result<()> {
    serve_with_tls(listener, router, shutdown, limits, cap, None).await
}

/// [`serve`], with every connection TLS first when `tls` is given. At most
/// `cap` connections are open at once; past it one is closed as it comes.
pub async fn serve_with_tls(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send,
    limits: ConnLimits,
    cap: ConnCap,
    tls: Option<tls::Acceptor>,
) -> std::io::Result<()> {
    let closing = Arc::new(AtomicBool::new(false));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut connections = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (io, _peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: pause rather than spin.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Some(admitted) = cap.admit() else {
            drop(io);
            continue;
        };
        spawn_connection(
            &mut connections,
            (io, admitted),
            (&router, &closing),
            &stop_rx,
            limits,
            tls.as_ref(),
        );
        // Reap finished connections as we go, so the set stays small.
        while connections.try_join_next().is_some() {}
    }
    let deadline = tokio::time::Instant::now() + limits.grace + DRAIN_SLACK;
    // Closing a listener resets every connection still in its accept
    // backlog, and a client may already have written its request on one.
    // Take them all first; each is then served like any open connection.
    let backlog = drain_backlog(listener);
    closing.store(true, Ordering::SeqCst);
    let _ = stop_tx.send(true);
    if !backlog.is_empty() {
        tracing::debug!(
            connections = backlog.len(),
            "served from the accept backlog"
        );
    }
    for io in backlog {
        let Some(admitted) = cap.admit() else {
            continue;
        };
        spawn_connection(
            &mut connections,
            (io, admitted),
            (&router, &closing),
            &stop_rx,
            limits,
            tls.as_ref(),
        );
    }
    tracing::debug!(connections = connections.len(), "draining HTTP connections");
    let drained = tokio::time::timeout_at(deadline, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            connections = connections.len(),
            "the drain's time is up: dropping the connections still open"
        );
        connections.shutdown().await;
    }
    Ok(())
}

/// Serves one connection until it ends, or until the stop signal plus
/// `grace` of idleness, then shuts it gracefully.
fn spawn_connection(
    connections: &mut JoinSet<()>,
    (io, admitted): (TcpStream, crate::cap::Admitted),
    (router, closing): (&Router, &Arc<AtomicBool>),
    stop_rx: &tokio::sync::watch::Receiver<bool>,
    limits: ConnLimits,
    tls: Option<&tls::Acceptor>,
) {
    // Without it, Nagle's algorithm holds back a small write until the
    // peer's delayed ACK: tens of milliseconds on a small answer.
    let _ = io.set_nodelay(true);
    let stop = stop_rx.clone();
    let tls = tls.cloned();
    let router = router.clone();
    let closing = closing.clone();
    connections.spawn(async move {
        // The slot is held for as long as the connection lives.
        let _admitted = admitted;
        match tls {
            None => serve_connection(io, (router, closing), stop, limits, false).await,
            // The handshake is bounded by `tls::HANDSHAKE_TIMEOUT`, so a
            // silent client cannot hold the drain for ever.
            Some(acceptor) => match acceptor.accept(io).await {
                Ok(io) => serve_connection(io, (router, closing), stop, limits, true).await,
                Err(e) => tracing::debug!(error = %e, "HTTPS connection refused"),
            },
        }
    });
}

/// Serves one accepted (and, for TLS, handshaken) connection as
/// [`spawn_connection`] says, closing it when a [`ConnLimits`] bound passes.
async fn serve_connection<I>(
    io: I,
    (router, closing): (Router, Arc<AtomicBool>),
    mut stop: tokio::sync::watch::Receiver<bool>,
    limits: ConnLimits,
    over_tls: bool,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let activity = Arc::new(Activity::new());
    let service = Tracked {
        inner: TowerToHyperService::new(router),
        closing,
        activity: activity.clone(),
        body_read: limits.body_read,
        over_tls,
    };
    let io = Watched {
        inner: io,
        activity: activity.clone(),
    };
    let mut builder = Builder::new(TokioExecutor::new());
    builder.http2().max_concurrent_streams(limits.max_streams);
    let mut conn =
        std::pin::pin!(builder.serve_connection_with_upgrades(TokioIo::new(io), service));
    let watch = watchdog(&activity, &limits);
    tokio::pin!(watch);
    enum First {
        Ended(Result<(), Box<dyn std::error::Error + Send + Sync>>),
        Stop,
        Expired(&'static str),
        Aged,
    }
    let aged = async {
        match limits.max_age {
            Some(age) => tokio::time::sleep(jittered(age, seed())).await,
            None => std::future::pending().await,
        }
    };
    let first = tokio::select! {
        r = conn.as_mut() => First::Ended(r),
        _ = stop.wait_for(|s| *s) => First::Stop,
        why = &mut watch => First::Expired(why),
        () = aged => First::Aged,
    };
    match first {
        First::Ended(r) => return log_end(r),
        First::Stop => {}
        First::Aged => {
            tracing::debug!("rotating a connection past its maximum age");
            conn.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(limits.max_age_grace + DRAIN_SLACK, conn.as_mut()).await;
            return;
        }
        First::Expired(why) => {
            tracing::debug!(why, "closing a connection");
            conn.as_mut().graceful_shutdown();
            // A graceful close waits for streams in service; a client that
            // does not read its answers gets no longer than this.
            let _ = tokio::time::timeout(DRAIN_SLACK, conn.as_mut()).await;
            return;
        }
    }
    // HTTP/2 gets GOAWAY at once: it names the last stream served, so no
    // request is lost. HTTP/1.1 has no such message: an idle connection
    // gets `grace` to send one more request, answered with
    // `Connection: close` (closing it now could reset a request already on
    // the wire).
    if activity.h2.load(Ordering::Relaxed) {
        conn.as_mut().graceful_shutdown();
        return log_end(conn.await);
    }
    tokio::select! {
        r = conn.as_mut() => return log_end(r),
        () = tokio::time::sleep(limits.grace) => {}
        _ = &mut watch => {}
    }
    conn.as_mut().graceful_shutdown();
    log_end(conn.await);
}

/// What a connection is doing, as its socket and its service see it.
#[derive(Debug)]
struct Activity {
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
    /// on, bounded by the idle timeout only.
    h2: AtomicBool,
    /// Bytes read so far, up to the preface's length.
    prefix: std::sync::Mutex<Vec<u8>>,
    /// Whether the connection is known to be HTTP/2 or not: `prefix` is
    /// looked at no more.
    sniffed: AtomicBool,
}

const NONE: u64 = u64::MAX;
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

impl Activity {
    fn new() -> Self {
        Activity {
            opened: std::time::Instant::now(),
            in_service: 0.into(),
            head_begun: 0.into(),
            quiet_since: 0.into(),
            h2: AtomicBool::new(false),
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
            let take = (H2_PREFACE.len() - p.len()).min(bytes.len());
            p.extend_from_slice(&bytes[..take]);
            // Decided once the bytes part from the preface or complete it:
            // later reads skip this.
            if !H2_PREFACE.starts_with(&p) || p.len() == H2_PREFACE.len() {
                self.sniffed.store(true, Ordering::Relaxed);
            }
            if p.as_slice() == H2_PREFACE {
                self.h2.store(true, Ordering::Relaxed);
                self.head_begun.store(NONE, Ordering::Relaxed);
                self.quiet_since.store(self.now(), Ordering::Relaxed);
                return;
            }
        }
        if self.h2.load(Ordering::Relaxed) || self.in_service.load(Ordering::Relaxed) > 0 {
            return;
        }
        let _ = self.head_begun.compare_exchange(
            NONE,
            self.now(),
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }

    fn request_started(&self) {
        self.in_service.fetch_add(1, Ordering::Relaxed);
        self.head_begun.store(NONE, Ordering::Relaxed);
    }

    fn request_answered(&self) {
        self.quiet_since.store(self.now(), Ordering::Relaxed);
        self.in_service.fetch_sub(1, Ordering::Relaxed);
    }

    /// Why the connection should close now, if a bound has passed.
    fn expired(&self, limits: &ConnLimits) -> Option<&'static str> {
        if self.in_service.load(Ordering::Relaxed) > 0 {
            return None;
        }
        let now = self.now();
        let head = self.head_begun.load(Ordering::Relaxed);
        if head != NONE {
            return (now.saturating_sub(head) > limits.header_read.as_millis() as u64)
                .then_some("the request's head did not arrive within the header-read timeout");
        }
        let quiet = self.quiet_since.load(Ordering::Relaxed);
        (now.saturating_sub(quiet) > limits.idle.as_millis() as u64)
            .then_some("idle past the idle timeout")
    }
}

/// Completes, with the reason, when a bound of `limits` has passed.
async fn watchdog(activity: &Activity, limits: &ConnLimits) -> &'static str {
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
struct Watched<I> {
    inner: I,
    activity: Arc<Activity>,
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
        r
    }
}

impl<I: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Watched<I> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write(cx, buf)
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
        std::pin::Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// The connection's service: counts requests in service in its
/// [`Activity`], gives each request's body `body_read` to arrive, marks
/// the requests of a TLS connection with [`tls::OverTls`], and once the
/// server is `closing`, ends each HTTP/1.x answer with `Connection: close`,
/// so that a keep-alive client opens its next request elsewhere rather than
/// on a connection about to close.
///
/// It wraps the router once, where an axum middleware would wrap each of its
/// routes and add a box and a clone to every request.
#[derive(Clone)]
struct Tracked {
    inner: TowerToHyperService<Router>,
    closing: Arc<AtomicBool>,
    activity: Arc<Activity>,
    body_read: Duration,
    over_tls: bool,
}

impl hyper::service::Service<axum::http::Request<hyper::body::Incoming>> for Tracked {
    type Response = Response;
    type Error = std::convert::Infallible;
    type Future =
        std::pin::Pin<Box<dyn Future<Output = Result<Response, std::convert::Infallible>> + Send>>;

    fn call(&self, req: axum::http::Request<hyper::body::Incoming>) -> Self::Future {
        self.activity.request_started();
        let mut req = req
            .map(|b| axum::body::Body::new(crate::deadline::DeadlineBody::new(b, self.body_read)));
        if self.over_tls {
            req.extensions_mut().insert(tls::OverTls);
        }
        let h1 = req.version() <= Version::HTTP_11;
        let answer = hyper::service::Service::call(&self.inner, req);
        let activity = self.activity.clone();
        let closing = self.closing.clone();
        Box::pin(async move {
            let Ok(mut res) = answer.await;
            activity.request_answered();
            if h1 && closing.load(Ordering::SeqCst) {
                res.headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            Ok(res)
        })
    }
}

/// Accepts every connection the kernel has already completed, then closes
/// the listener. What arrives after that is refused at connect, before the
/// client has sent anything.
fn drain_backlog(listener: TcpListener) -> Vec<TcpStream> {
    let mut taken = Vec::new();
    let listener = match listener.into_std() {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(error = %e, "could not drain the accept backlog");
            return taken;
        }
    };
    // `into_std` leaves the socket non-blocking: `accept` says WouldBlock
    // once the backlog is empty.
    loop {
        match listener.accept() {
            Ok((io, _)) => {
                let io = io
                    .set_nonblocking(true)
                    .and_then(|()| TcpStream::from_std(io));
                match io {
                    Ok(io) => taken.push(io),
                    Err(e) => tracing::warn!(error = %e, "backlog connection unusable"),
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                tracing::warn!(error = %e, "accept failed while draining the backlog");
                break;
            }
        }
    }
    taken
}

fn log_end(r: Result<(), Box<dyn std::error::Error + Send + Sync>>) {
    if let Err(e) = r {
        tracing::debug!(error = %e, "HTTP connection ended with an error");
    }
}

#[cfg(test)]
mod tests {
    use testkit::flood::closed_within;

    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    /// Connections the kernel completed but the server never accepted, each
    /// with its request already written, when the shutdown comes: closing
    /// the listener would reset every one. All are answered instead.
    #[tokio::test]
    async fn requests_waiting_in_the_accept_backlog_are_answered_at_shutdown() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("binds");
        let addr = listener.local_addr().expect("address");
        let mut clients = Vec::new();
        for _ in 0..6 {
            let mut c = TcpStream::connect(addr)
                .await
                .expect("connects into the backlog");
            c.write_all(b"GET / HTTP/1.1\r\nhost: test\r\n\r\n")
                .await
                .expect("writes");
            clients.push(c);
        }
        let router = Router::new().route("/", axum::routing::get(|| async { "served" }));
        // The shutdown has already come when serve starts: before the fix,
        // the accept loop stopped at once and the listener's close reset
        // every waiting connection.
        let server = tokio::spawn(serve(
            listener,
            router,
            std::future::ready(()),
            ConnLimits::new(Duration::from_secs(5), 256),
            ConnCap::new("rest", 64),
        ));
        for mut c in clients {
            let mut answer = String::new();
            tokio::time::timeout(Duration::from_secs(10), c.read_to_string(&mut answer))
                .await
                .expect("the answer comes")
                .expect("no reset");
            assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
            assert!(
                answer.to_ascii_lowercase().contains("connection: close"),
                "{answer}"
            );
            assert!(answer.ends_with("served"), "{answer}");
        }
        tokio::time::timeout(Duration::from_secs(10), server)
            .await
            .expect("serve returns once every connection ended")
            .expect("no panic")
            .expect("no error");
        assert!(
            TcpStream::connect(addr).await.is_err(),
            "the listener is closed"
        );
    }

    /// A server on port 0 with these bounds: `/` answers at once, `/echo`
    /// reads its body with [`crate::negotiate::read_body`], `/slow` takes a minute.
    async fn bounded(
        limits: ConnLimits,
    ) -> (
        std::net::SocketAddr,
        tokio::sync::oneshot::Sender<()>,
        tokio::task::JoinHandle<std::io::Result<()>>,
    ) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("binds");
        let addr = listener.local_addr().expect("address");
        let router = Router::new()
            .route("/", axum::routing::get(|| async { "served" }))
            .route(
                "/echo",
                axum::routing::post(
                    |headers: axum::http::HeaderMap, body: axum::body::Body| async move {
                        match crate::negotiate::read_body(&headers, body, 1 << 20).await {
                            Ok(b) => axum::response::IntoResponse::into_response(b),
                            Err(e) => axum::response::IntoResponse::into_response(e),
                        }
                    },
                ),
            )
            .route(
                "/slow",
                axum::routing::get(|| async {
                    tokio::time::sleep(Duration::from_secs(60)).await;
                    "late"
                }),
            );
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(
            listener,
            router,
            async move {
                let _ = rx.await;
            },
            limits,
            ConnCap::new("rest", 64),
        ));
        (addr, tx, server)
    }

    fn limits(header_read: u64, body_read: u64, idle: u64) -> ConnLimits {
        ConnLimits {
            grace: Duration::from_millis(200),
            max_streams: 16,
            header_read: Duration::from_millis(header_read),
            body_read: Duration::from_millis(body_read),
            idle: Duration::from_millis(idle),
            max_age: None,
            max_age_grace: Duration::ZERO,
        }
    }

    #[tokio::test]
    async fn a_client_that_sends_nothing_or_trickles_its_head_is_cut_at_the_header_read_timeout() {
        let (addr, _stop, _server) = bounded(limits(300, 60_000, 60_000)).await;
        // Silent: never a byte.
        let mut silent = TcpStream::connect(addr).await.expect("connects");
        closed_within(&mut silent, Duration::from_secs(5)).await;
        // A byte every 50 ms of a head that never ends.
        let mut trickle = TcpStream::connect(addr).await.expect("connects");
        let started = std::time::Instant::now();
        let mut cut = false;
        for b in b"GET / HTTP/1.1\r\nx-padding: "
            .iter()
            .chain([b'a'; 200].iter())
        {
            if trickle.write_all(&[*b]).await.is_err() {
                cut = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            if started.elapsed() > Duration::from_secs(5) {
                break;
            }
        }
        if !cut {
            closed_within(&mut trickle, Duration::from_secs(1)).await;
        }
        assert!(started.elapsed() < Duration::from_secs(5), "cut by 5 s");
    }

    #[tokio::test]
    async fn an_idle_keep_alive_connection_is_closed_but_a_busy_one_is_not() {
        let (addr, _stop, _server) = bounded(limits(60_000, 60_000, 400)).await;
        let mut c = TcpStream::connect(addr).await.expect("connects");
        // Busy for three idle periods: a request every 100 ms is answered.
        let started = std::time::Instant::now();
        while started.elapsed() < Duration::from_millis(1200) {
            c.write_all(b"GET / HTTP/1.1\r\nhost: t\r\n\r\n")
                .await
                .expect("still open");
            let mut buf = [0u8; 512];
            let n = c.read(&mut buf).await.expect("answered");
            assert!(
                buf[..n].starts_with(b"HTTP/1.1 200"),
                "{:?}",
                String::from_utf8_lossy(&buf[..n])
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // Then quiet: closed soon after the idle timeout.
        closed_within(&mut c, Duration::from_secs(5)).await;
    }

    #[tokio::test]
    async fn an_idle_h2c_connection_with_no_stream_is_closed() {
        let (addr, _stop, _server) = bounded(limits(60_000, 60_000, 400)).await;
        let mut c = TcpStream::connect(addr).await.expect("connects");
        // The preface and an empty SETTINGS frame, then nothing.
        c.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
            .await
            .expect("writes");
        closed_within(&mut c, Duration::from_secs(5)).await;
    }

    #[tokio::test]
    async fn a_body_that_does_not_arrive_in_time_is_a_408() {
        let (addr, _stop, _server) = bounded(limits(60_000, 300, 60_000)).await;
        let mut c = TcpStream::connect(addr).await.expect("connects");
        c.write_all(b"POST /echo HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n0123456789")
            .await
            .expect("writes");
        let mut buf = [0u8; 1024];
        let n = tokio::time::timeout(Duration::from_secs(5), c.read(&mut buf))
            .await
            .expect("an answer by 5 s")
            .expect("reads");
        let answer = String::from_utf8_lossy(&buf[..n]);
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        assert!(answer.contains("request_timeout"), "{answer}");
    }

    #[tokio::test]
    async fn the_drain_ends_a_second_after_the_grace_whatever_clients_do() {
        let (addr, stop, server) = bounded(limits(60_000, 60_000, 60_000)).await;
        // A request whose answer takes a minute, and a head trickled so
        // slowly that its own timeout is far off.
        let mut slow = TcpStream::connect(addr).await.expect("connects");
        slow.write_all(b"GET /slow HTTP/1.1\r\nhost: t\r\n\r\n")
            .await
            .expect("writes");
        let mut trickle = TcpStream::connect(addr).await.expect("connects");
        trickle
            .write_all(b"GET / HTTP/1.1\r\n")
            .await
            .expect("writes");
        tokio::time::sleep(Duration::from_millis(200)).await;
        let started = std::time::Instant::now();
        let _ = stop.send(());
        tokio::time::timeout(Duration::from_secs(10), server)
            .await
            .expect("the drain ends by 10 s (grace 0.2 s + 1 s)")
            .expect("no panic")
            .expect("no error");
        assert!(started.elapsed() < Duration::from_secs(10));
    }

    #[tokio::test]
    async fn at_shutdown_http2_gets_goaway_at_once_and_idle_http1_its_grace() {
        let mut l = limits(60_000, 60_000, 60_000);
        l.grace = Duration::from_secs(3);
        let (addr, stop, _server) = bounded(l).await;
        let mut h2 = TcpStream::connect(addr).await.expect("connects");
        h2.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
            .await
            .expect("writes");
        let mut h1 = TcpStream::connect(addr).await.expect("connects");
        h1.write_all(b"GET / HTTP/1.1\r\nhost: t\r\n\r\n")
            .await
            .expect("writes");
        let mut buf = [0u8; 512];
        let n = h1.read(&mut buf).await.expect("answered");
        assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
        tokio::time::sleep(Duration::from_millis(200)).await;
        let started = std::time::Instant::now();
        let _ = stop.send(());
        // A GOAWAY frame (length 8, type 7) arrives at once, not after the grace.
        let mut got = Vec::new();
        let goaway = tokio::time::timeout(Duration::from_millis(1500), async {
            let mut chunk = [0u8; 1024];
            loop {
                let n = h2.read(&mut chunk).await.expect("reads");
                assert!(n > 0, "closed before a GOAWAY: {got:?}");
                got.extend_from_slice(&chunk[..n]);
                if got.windows(4).any(|w| w == [0, 0, 8, 7]) {
                    break;
                }
            }
        })
        .await;
        assert!(goaway.is_ok(), "no GOAWAY within 1.5 s");
        assert!(started.elapsed() < Duration::from_millis(1500));
        // The idle HTTP/1.1 connection is still open within its grace.
        let still = tokio::time::timeout(Duration::from_millis(500), h1.read(&mut buf)).await;
        assert!(still.is_err(), "closed before its grace: {still:?}");
    }
}
