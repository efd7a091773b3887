//! A TCP proxy a test controls, to break the connections between a service
//! and what it depends on (Postgres, or another service) while both keep
//! running.
//!
//! - [`Proxy::cut`] ends every connection through it at once and closes every
//!   new one as soon as it is accepted, until [`Proxy::restore`]: a restart
//!   of the server behind it, as its clients see one. Pooled connections die,
//!   so a client must replace them.
//! - [`Proxy::set_faults`] makes a share of new connections die (reset, or
//!   stall and then reset) after a random number of bytes in one direction:
//!   mid-request or mid-response. The choice is a function of a seed and the
//!   connection's number, so a run can be replayed.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

/// Which connections die, and how.
#[derive(Debug, Clone, Copy)]
pub struct Faults {
    /// One new connection in this many is faulty (1: every one).
    pub one_in: u64,
    /// A faulty connection dies after 1 to this many bytes in the direction
    /// picked for it (client to server or back, half each).
    pub max_bytes: usize,
    /// Half the faulty connections, instead of dying at once, stall this long
    /// first (nothing more goes through in that direction), so that a client
    /// times out and retries while the first request may still be in the
    /// server.
    pub stall: Duration,
    /// Makes the choice of connections and offsets replayable.
    pub seed: u64,
}

/// A TCP proxy to one target. Dropping it stops accepting; connections
/// already through it live on until [`Proxy::cut`] or their end.
#[derive(Debug)]
pub struct Proxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: tokio::task::JoinHandle<()>,
}

#[derive(Debug)]
struct Shared {
    target: SocketAddr,
    up: AtomicBool,
    links: Mutex<JoinSet<()>>,
    faults: Mutex<Option<Faults>>,
    accepted: AtomicU64,
    killed: AtomicU64,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl Proxy {
    /// A proxy to `target` on a free port of 127.0.0.1.
    pub async fn start(target: SocketAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            target,
            up: AtomicBool::new(true),
            links: Mutex::new(JoinSet::new()),
            faults: Mutex::new(None),
            accepted: AtomicU64::new(0),
            killed: AtomicU64::new(0),
        });
        let s = shared.clone();
        let accept = tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let n = s.accepted.fetch_add(1, Ordering::SeqCst);
                if !s.up.load(Ordering::SeqCst) {
                    drop(inbound);
                    continue;
                }
                let fault = lock(&s.faults).and_then(|f| Fault::pick(&f, n));
                let link = link(inbound, s.clone(), fault);
                let mut links = lock_links(&s);
                links.spawn(link);
                // Reap finished links as we go, so the set stays small.
                while links.try_join_next().is_some() {}
            }
        });
        Ok(Proxy {
            addr,
            shared,
            accept,
        })
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `url` with the target's `host:port` replaced by the proxy's (for a
    /// database URL, say). Panics if `url` does not name the target.
    pub fn url_through(&self, url: &str) -> String {
        let target = self.shared.target.to_string();
        assert!(
            url.contains(&target),
            "{url} does not name the proxy's target {target}"
        );
        url.replacen(&target, &self.addr.to_string(), 1)
    }

    /// Ends every connection through the proxy now, and closes new ones as
    /// soon as they are accepted, until [`Proxy::restore`].
    pub fn cut(&self) {
        self.shared.up.store(false, Ordering::SeqCst);
        lock_links(&self.shared).abort_all();
    }

    /// Lets connections through again.
    pub fn restore(&self) {
        self.shared.up.store(true, Ordering::SeqCst);
    }

    /// Faults for the connections accepted from now on (`None`: no more).
    pub fn set_faults(&self, faults: Option<Faults>) {
        *self.shared.faults.lock().unwrap_or_else(|e| e.into_inner()) = faults;
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.shared.accepted.load(Ordering::SeqCst)
    }

    /// Connections killed by a fault so far.
    pub fn killed(&self) -> u64 {
        self.shared.killed.load(Ordering::SeqCst)
    }
}

fn lock<T: Copy>(m: &Mutex<T>) -> T {
    *m.lock().unwrap_or_else(|e| e.into_inner())
}

fn lock_links(s: &Shared) -> std::sync::MutexGuard<'_, JoinSet<()>> {
    s.links.lock().unwrap_or_else(|e| e.into_inner())
}

/// What kills one connection.
#[derive(Debug, Clone, Copy)]
struct Fault {
    /// Client to server (mid-request), else server to client (mid-response).
    upstream: bool,
    after_bytes: usize,
    stall: Option<Duration>,
}

impl Fault {
    /// The fault of connection `n`, if it has one.
    fn pick(f: &Faults, n: u64) -> Option<Fault> {
        let r = splitmix(f.seed ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        if !r.is_multiple_of(f.one_in.max(1)) {
            return None;
        }
        let r = splitmix(r);
        Some(Fault {
            upstream: r & 1 == 0,
            stall: (r & 2 == 0).then_some(f.stall),
            after_bytes: 1 + ((r >> 8) % f.max_bytes.max(1) as u64) as usize,
        })
    }
}

fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

async fn link(mut inbound: TcpStream, shared: Arc<Shared>, fault: Option<Fault>) {
    let Ok(mut outbound) = TcpStream::connect(shared.target).await else {
        return;
    };
    let _ = inbound.set_nodelay(true);
    let _ = outbound.set_nodelay(true);
    let Some(fault) = fault else {
        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
        return;
    };
    let (up_budget, down_budget) = if fault.upstream {
        (Some(fault.after_bytes), None)
    } else {
        (None, Some(fault.after_bytes))
    };
    let faulted = {
        let (ci, co) = inbound.split();
        let (si, so) = outbound.split();
        let mut up = std::pin::pin!(pump(ci, so, up_budget, fault.stall));
        let mut down = std::pin::pin!(pump(si, co, down_budget, fault.stall));
        let (mut up_done, mut down_done) = (false, false);
        loop {
            let end = tokio::select! {
                e = &mut up, if !up_done => { up_done = true; e }
                e = &mut down, if !down_done => { down_done = true; e }
            };
            match end {
                End::Eof if !(up_done && down_done) => {}
                End::Eof | End::Error => break false,
                End::Fault => break true,
            }
        }
    };
    if faulted {
        shared.killed.fetch_add(1, Ordering::SeqCst);
        // A reset, not a polite FIN: the way a killed process or a broken
        // network ends a connection.
        let _ = inbound.set_zero_linger();
        let _ = outbound.set_zero_linger();
    }
}

/// How one direction of a link ended.
enum End {
    Eof,
    Error,
    Fault,
}

/// Copies `from` to `to`; with a budget, forwards that many bytes, stalls if
/// asked, and ends with [`End::Fault`].
async fn pump(
    mut from: tokio::net::tcp::ReadHalf<'_>,
    mut to: tokio::net::tcp::WriteHalf<'_>,
    mut budget: Option<usize>,
    stall: Option<Duration>,
) -> End {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) => {
                let _ = to.shutdown().await;
                return End::Eof;
            }
            Ok(n) => n,
            Err(_) => return End::Error,
        };
        let pass = budget.map_or(n, |b| b.min(n));
        if to.write_all(&buf[..pass]).await.is_err() {
            return End::Error;
        }
        if let Some(b) = budget.as_mut() {
            *b -= pass;
            if *b == 0 {
                if let Some(d) = stall {
                    tokio::time::sleep(d).await;
                }
                return End::Fault;
            }
        }
    }
}
