//! A TCP proxy that adds a one-way delay, with optional jitter, to each
//! direction of every connection: emulated round-trip time in user space,
//! for a kernel without netem.
//!
//! Bytes read at time `t` are written at `t + delay (+ jitter)`, in the order
//! they were read: a chunk is never released before the chunk read before
//! it, so jitter stretches gaps but never reorders. The proxy does not look
//! at the bytes, so HTTP/1.1, h2, gRPC, the raw-TCP protocol and TLS pass
//! through unchanged; a half-close (FIN) is passed on after the same delay.
//! `TCP_NODELAY` is set on both sides, so the kernel adds no wait of its own.
//!
//! A bandwidth cap ([`Config::rate`]) makes each direction one link of that
//! many bytes per second, shared by every connection of the proxy: a chunk
//! leaves only once the link has sent the chunks before it (on any
//! connection) and its own bytes at that rate, then takes the delay. There
//! is no burst allowance: a link is busy or free.
//!
//! [`Proxy::hold`] stops every byte both ways, a FIN or a reset too, until it
//! is let go: what a silent path looks like to the programs on each side,
//! short of their kernels, which still acknowledge what they are sent (the
//! proxy reads it), so TCP's own keep-alive and `TCP_USER_TIMEOUT` do not
//! see the silence; only the programs' own pings and timeouts do. What was
//! held is written at once when let go.
//!
//! What it does not emulate: loss, and TCP's congestion window over a long
//! path (the kernel sees two loopback hops with no delay). When
//! the client's `connect()` returns is not delayed either; instead a new
//! connection's first client bytes are held one extra round trip
//! ([`Config::handshake`]), the SYN/SYN-ACK a real path costs first.
//!
//! ```no_run
//! use std::time::Duration;
//! use delay_proxy::{Config, Proxy, Route};
//!
//! let upstream = "127.0.0.1:50052".parse().unwrap();
//! let proxy = Proxy::start(
//!     Config::rtt(Duration::from_millis(10)),
//!     &[Route::any_port(upstream)],
//! ).unwrap();
//! println!("dial {} instead", proxy.local_addr(0));
//! ```
//!
//! # Layout
//! - this file: [`Config`], [`Route`], [`Proxy`] (listeners, the registry of
//!   live connections, shutdown) and [`Stats`].
//! - `conn`: one connection: a reader and a writer thread per direction.
//! - `queue`: the byte-bounded FIFO between a direction's reader and writer.
//! - `main.rs`: the `delay-proxy` command.

mod conn;
mod queue;

use std::collections::HashMap;
use std::io;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Stack of every proxy thread: they hold a few locals; the 64 KiB read
/// buffer is on the heap.
const STACK: usize = 128 * 1024;

/// How each direction is delayed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Added to every byte's trip, each direction: half the round trip.
    pub delay: Duration,
    /// A random extra delay per chunk, uniform in `[0, jitter]`, so `delay`
    /// is the least any byte waits. Never reorders bytes.
    pub jitter: Duration,
    /// Hold a new connection's first client bytes until one round trip
    /// (`2 × delay`) after it was accepted, as the TCP handshake over a real
    /// path would.
    pub handshake: bool,
    /// Bytes read but not yet written, per direction, before reading pauses
    /// (back-pressure). Throughput per direction is capped near
    /// `max_buffered / delay`.
    pub max_buffered: usize,
    /// Bytes per second each direction may carry, every connection
    /// together; `None`: as fast as loopback.
    pub rate: Option<u64>,
}

impl Config {
    /// A one-way delay on each direction, no jitter, handshake emulated.
    pub fn one_way(delay: Duration) -> Config {
        Config {
            delay,
            jitter: Duration::ZERO,
            handshake: true,
            max_buffered: 8 << 20,
            rate: None,
        }
    }

    /// A round-trip time: half of it on each direction.
    pub fn rtt(rtt: Duration) -> Config {
        Config::one_way(rtt / 2)
    }

    /// With a jitter of up to `jitter` added per chunk.
    pub fn with_jitter(mut self, jitter: Duration) -> Config {
        self.jitter = jitter;
        self
    }

    /// With each direction capped at `bytes_per_s` (at least 1), every
    /// connection together.
    pub fn with_rate(mut self, bytes_per_s: u64) -> Config {
        self.rate = Some(bytes_per_s.max(1));
        self
    }

    /// `mbit` megabits (10^6 bits) per second as bytes per second.
    pub fn mbit(mbit: f64) -> u64 {
        (mbit * 125_000.0).round() as u64
    }
}

/// One listening address and where its connections go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    pub listen: SocketAddr,
    pub upstream: SocketAddr,
}

impl Route {
    /// Listen on a free port of 127.0.0.1.
    pub fn any_port(upstream: SocketAddr) -> Route {
        Route {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            upstream,
        }
    }
}

/// Counters over the proxy's life, every route together.
#[derive(Debug, Default)]
pub struct Stats {
    connections: AtomicU64,
    upstream_failures: AtomicU64,
    bytes_to_upstream: AtomicU64,
    bytes_to_client: AtomicU64,
    chunks: AtomicU64,
    late_ns_sum: AtomicU64,
    late_ns_max: AtomicU64,
    held: AtomicU64,
}

impl Stats {
    fn record_chunk(&self, late: Duration) {
        let ns = u64::try_from(late.as_nanos()).unwrap_or(u64::MAX);
        self.chunks.fetch_add(1, Ordering::Relaxed);
        self.late_ns_sum.fetch_add(ns, Ordering::Relaxed);
        self.late_ns_max.fetch_max(ns, Ordering::Relaxed);
    }

    fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot {
            connections: self.connections.load(Ordering::Relaxed),
            upstream_failures: self.upstream_failures.load(Ordering::Relaxed),
            bytes_to_upstream: self.bytes_to_upstream.load(Ordering::Relaxed),
            bytes_to_client: self.bytes_to_client.load(Ordering::Relaxed),
            chunks: self.chunks.load(Ordering::Relaxed),
            late_ns_sum: self.late_ns_sum.load(Ordering::Relaxed),
            late_ns_max: self.late_ns_max.load(Ordering::Relaxed),
            held: self.held.load(Ordering::Relaxed),
        }
    }
}

/// The counters at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    /// Connections accepted.
    pub connections: u64,
    /// Accepted connections whose upstream could not be reached.
    pub upstream_failures: u64,
    pub bytes_to_upstream: u64,
    pub bytes_to_client: u64,
    /// Chunks written (each direction's reads).
    pub chunks: u64,
    /// How much later than its release time each chunk was written, summed
    /// (scheduling on a busy machine, or a peer slow to read).
    pub late_ns_sum: u64,
    /// The latest any chunk was written (a hold not counted).
    pub late_ns_max: u64,
    /// Chunks, FINs and resets that waited for a [`Proxy::hold`] to end.
    pub held: u64,
}

impl StatsSnapshot {
    /// The mean lateness of a written chunk.
    pub fn mean_late(&self) -> Duration {
        Duration::from_nanos(self.late_ns_sum.checked_div(self.chunks).unwrap_or(0))
    }

    /// Counts since `earlier` (the maximum is the whole life's).
    pub fn since(&self, earlier: &StatsSnapshot) -> StatsSnapshot {
        StatsSnapshot {
            connections: self.connections - earlier.connections,
            upstream_failures: self.upstream_failures - earlier.upstream_failures,
            bytes_to_upstream: self.bytes_to_upstream - earlier.bytes_to_upstream,
            bytes_to_client: self.bytes_to_client - earlier.bytes_to_client,
            chunks: self.chunks - earlier.chunks,
            late_ns_sum: self.late_ns_sum - earlier.late_ns_sum,
            late_ns_max: self.late_ns_max,
            held: self.held - earlier.held,
        }
    }
}

/// Clones of a live connection's client and upstream sockets.
type LiveSockets = (Option<TcpStream>, Option<TcpStream>);

/// What the listeners and connections share.
#[derive(Debug, Default)]
struct Shared {
    stop: AtomicBool,
    stats: Stats,
    next_id: AtomicU64,
    /// Both sockets of every live connection, so that shutdown can end them.
    live: Mutex<HashMap<u64, LiveSockets>>,
    /// With a bandwidth cap: when each direction's link (to upstream, to
    /// client) has sent everything given to it so far.
    links: [Mutex<Option<Instant>>; 2],
    /// Set while every write waits ([`Proxy::hold`]).
    held: Mutex<bool>,
    /// Signalled when the hold ends.
    let_go: Condvar,
}

impl Shared {
    /// Waits while the proxy holds every byte; when it had to wait, the
    /// instant the hold ended. A stopping proxy holds nothing.
    fn wait_unheld(&self) -> Option<Instant> {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if !*held {
            return None;
        }
        while *held && !self.stop.load(Ordering::SeqCst) {
            held = self
                .let_go
                .wait(held)
                .unwrap_or_else(PoisonError::into_inner);
        }
        self.stats.held.fetch_add(1, Ordering::Relaxed);
        Some(Instant::now())
    }

    fn set_held(&self, on: bool) {
        *self.held.lock().unwrap_or_else(PoisonError::into_inner) = on;
        self.let_go.notify_all();
    }

    /// When `bytes` handed to direction `dir`'s link at `ready` have been
    /// sent at `rate` bytes per second, after whatever it was sending.
    fn transmit(&self, dir: usize, ready: Instant, bytes: usize, rate: u64) -> Instant {
        let mut link = self.links[dir]
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let start = link.map_or(ready, |free| free.max(ready));
        let done = start + Duration::from_secs_f64(bytes as f64 / rate as f64);
        *link = Some(done);
        done
    }

    fn register(&self, client: &TcpStream, upstream: &TcpStream) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let entry = (client.try_clone().ok(), upstream.try_clone().ok());
        self.live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, entry);
        // A shutdown that ran between accept and here must still end us.
        if self.stop.load(Ordering::SeqCst) {
            let _ = client.shutdown(Shutdown::Both);
            let _ = upstream.shutdown(Shutdown::Both);
        }
        id
    }

    fn unregister(&self, id: u64) {
        self.live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&id);
    }
}

/// A running proxy: one listener per [`Route`]. Dropping it stops the
/// listeners and closes every connection.
#[derive(Debug)]
pub struct Proxy {
    addrs: Vec<SocketAddr>,
    routes: Vec<Route>,
    config: Config,
    shared: Arc<Shared>,
    acceptors: Vec<JoinHandle<()>>,
}

impl Proxy {
    /// Binds every route's listen address and starts accepting.
    pub fn start(config: Config, routes: &[Route]) -> io::Result<Proxy> {
        let shared = Arc::new(Shared::default());
        let mut addrs = Vec::new();
        let mut listeners = Vec::new();
        for r in routes {
            let l = TcpListener::bind(r.listen)?;
            addrs.push(l.local_addr()?);
            listeners.push((l, r.upstream));
        }
        let mut acceptors = Vec::new();
        for (l, upstream) in listeners {
            let shared = Arc::clone(&shared);
            let config = config.clone();
            acceptors.push(
                std::thread::Builder::new()
                    .name("delay-proxy-accept".into())
                    .stack_size(STACK)
                    .spawn(move || accept_loop(&l, upstream, &config, &shared))?,
            );
        }
        Ok(Proxy {
            addrs,
            routes: routes.to_vec(),
            config,
            shared,
            acceptors,
        })
    }

    /// Where route `i` listens.
    ///
    /// # Panics
    /// When there is no route `i`.
    pub fn local_addr(&self, i: usize) -> SocketAddr {
        self.addrs[i]
    }

    /// Where every route listens, in the order given.
    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    pub fn routes(&self) -> &[Route] {
        &self.routes
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn stats(&self) -> StatsSnapshot {
        self.shared.stats.snapshot()
    }

    /// Live connections right now.
    pub fn live_connections(&self) -> usize {
        self.shared
            .live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// While `on`, nothing is written either way on any connection, old or
    /// new: bytes read wait (up to [`Config::max_buffered`] a direction,
    /// then reading pauses), and so do a FIN and a reset. Turned off, what
    /// waited is written at once, in order. A silent path, as far as the
    /// programs on either side can tell: their kernels still acknowledge.
    pub fn hold(&self, on: bool) {
        self.shared.set_held(on);
    }

    /// Stops accepting and closes every connection (both sockets shut, so
    /// their threads end). Idempotent.
    pub fn shutdown(&mut self) {
        if self.shared.stop.swap(true, Ordering::SeqCst) {
            return;
        }
        // accept() blocks: a connection of our own wakes each listener up.
        for a in &self.addrs {
            let wake = if a.ip().is_unspecified() {
                SocketAddr::from(([127, 0, 0, 1], a.port()))
            } else {
                *a
            };
            let _ = TcpStream::connect_timeout(&wake, Duration::from_secs(1));
        }
        for t in self.acceptors.drain(..) {
            let _ = t.join();
        }
        let live = self
            .shared
            .live
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for (c, u) in live.values() {
            for s in [c, u].into_iter().flatten() {
                let _ = s.shutdown(Shutdown::Both);
            }
        }
        drop(live);
        // Writers waiting for a hold to end wake, fail and end.
        self.shared.let_go.notify_all();
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn accept_loop(l: &TcpListener, upstream: SocketAddr, config: &Config, shared: &Arc<Shared>) {
    loop {
        let accepted = l.accept();
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        match accepted {
            Ok((client, _)) => {
                let at = Instant::now();
                shared.stats.connections.fetch_add(1, Ordering::Relaxed);
                let shared = Arc::clone(shared);
                let config = config.clone();
                let spawned = std::thread::Builder::new()
                    .name("delay-proxy-conn".into())
                    .stack_size(STACK)
                    .spawn(move || conn::serve(client, upstream, at, config, shared));
                if spawned.is_err() {
                    // Out of threads: the client sees its connection close.
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
            // Out of file descriptors and the like: wait, then go on.
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}
