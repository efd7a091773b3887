//! Floods of bad connections, for both services' flood tests: many
//! connections that send nothing, trickle a request, or announce a large
//! frame and stop. Bounded in count and time; the caller checks what the
//! service did meanwhile.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::AsyncWriteExt as _;
use tokio::net::TcpStream;

/// What each connection of a flood sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Nothing at all.
    Idle,
    /// `first`, then one more byte of an endless header line every tick.
    Trickle { first: &'static [u8] },
    /// A raw-TCP length announcing `bytes`, and one byte of it.
    LargeFrame { bytes: u32 },
}

/// `n` connections of `kind` to `addr`, opened one after another (the
/// ones the server refuses are kept too: they cost the client nothing).
pub async fn open(addr: SocketAddr, n: usize, kind: Kind) -> Vec<TcpStream> {
    let mut conns = Vec::with_capacity(n);
    for _ in 0..n {
        let Ok(mut c) = TcpStream::connect(addr).await else {
            continue;
        };
        let first: &[u8] = match kind {
            Kind::Idle => &[],
            Kind::Trickle { first } => first,
            Kind::LargeFrame { bytes } => &[
                (bytes >> 24) as u8,
                (bytes >> 16) as u8,
                (bytes >> 8) as u8,
                bytes as u8,
                7,
            ],
        };
        if !first.is_empty() && c.write_all(first).await.is_err() {
            continue;
        }
        conns.push(c);
    }
    conns
}

/// One more byte on every connection, `ticks` times, `every` apart (for
/// [`Kind::Trickle`]). Connections the server closed are skipped.
pub async fn trickle(conns: &mut [TcpStream], ticks: usize, every: Duration) {
    for _ in 0..ticks {
        for c in conns.iter_mut() {
            let _ = tokio::time::timeout(Duration::from_millis(50), c.write_all(b"a")).await;
        }
        tokio::time::sleep(every).await;
    }
}

/// This process's resident memory, in KiB (the services under test run in
/// it).
pub fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}
