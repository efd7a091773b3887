//! One proxied connection: two directions, each a reader thread that stamps
//! every chunk with its release time and a writer thread that sleeps until
//! then and writes it.
//!
//! Blocking sockets and `std::thread::sleep` rather than an async runtime:
//! Tokio's timer has a 1 ms granularity, which would turn the 0.5 ms one-way
//! delay of a 1 ms round trip into about 1 ms; a thread's sleep is accurate to
//! tens of microseconds. The price is four threads per connection, fine for
//! the pooled connections between two services.

use std::io::{ErrorKind, Read as _, Write as _};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::queue::{Item, Queue};
use crate::{Config, Shared};

/// Bytes read at once: one chunk at most.
const READ_BUF: usize = 64 * 1024;

/// How long connecting to the upstream may take before the client is
/// closed.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Serves one accepted client until both directions have ended.
pub fn serve(
    client: TcpStream,
    upstream: SocketAddr,
    accepted: Instant,
    config: Config,
    shared: Arc<Shared>,
) {
    let _ = client.set_nodelay(true);
    let up = match TcpStream::connect_timeout(&upstream, CONNECT_TIMEOUT) {
        Ok(u) => u,
        Err(_) => {
            shared
                .stats
                .upstream_failures
                .fetch_add(1, Ordering::Relaxed);
            close_cleanly(client);
            return;
        }
    };
    let _ = up.set_nodelay(true);
    let id = shared.register(&client, &up);
    let seed = id
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(accepted.elapsed().as_nanos() as u64);

    // Client to upstream: a new connection's first bytes wait one more round
    // trip, the SYN and SYN-ACK a real path would have cost before the client
    // could send (its connect() to us returned at once).
    let handshake_done = if config.handshake {
        accepted + config.delay * 2
    } else {
        accepted
    };
    let c2u = match (client.try_clone(), up.try_clone()) {
        (Ok(src), Ok(dst)) => {
            let cfg = config.clone();
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("delay-proxy-c2u".into())
                .stack_size(crate::STACK)
                .spawn(move || {
                    direction(
                        src,
                        dst,
                        handshake_done,
                        &cfg,
                        &shared,
                        Dir::ToUpstream,
                        seed,
                    );
                })
                .ok()
        }
        _ => None,
    };
    if c2u.is_none() {
        let _ = client.shutdown(Shutdown::Both);
        let _ = up.shutdown(Shutdown::Both);
    } else {
        direction(
            up,
            client,
            accepted,
            &config,
            &shared,
            Dir::ToClient,
            seed ^ 0xD1B5_4A32_D192_ED03,
        );
    }
    if let Some(t) = c2u {
        let _ = t.join();
    }
    shared.unregister(id);
}

/// Which way bytes flow, for the byte counters and the links.
#[derive(Debug, Clone, Copy)]
enum Dir {
    ToUpstream = 0,
    ToClient = 1,
}

/// Copies `src` to `dst` with the delay, until EOF or an error on either.
fn direction(
    src: TcpStream,
    dst: TcpStream,
    not_before: Instant,
    config: &Config,
    shared: &Arc<Shared>,
    dir: Dir,
    seed: u64,
) {
    let queue = Arc::new(Queue::new(config.max_buffered));
    let writer = {
        let queue = Arc::clone(&queue);
        let shared = Arc::clone(shared);
        // The writer shuts the source's read side when the destination is
        // gone, so that a reader blocked in read() wakes up and ends.
        let src_ctl = src.try_clone().ok();
        std::thread::Builder::new()
            .name("delay-proxy-write".into())
            .stack_size(crate::STACK)
            .spawn(move || write_loop(&dst, src_ctl.as_ref(), &queue, &shared, dir))
    };
    let Ok(writer) = writer else {
        let _ = src.shutdown(Shutdown::Both);
        return;
    };
    read_loop(&src, not_before, config, shared, dir, &queue, seed);
    let _ = writer.join();
}

fn read_loop(
    src: &TcpStream,
    not_before: Instant,
    config: &Config,
    shared: &Shared,
    dir: Dir,
    queue: &Queue,
    seed: u64,
) {
    let mut rng = SplitMix(seed);
    let mut buf = vec![0u8; READ_BUF];
    let mut last = not_before;
    let mut reader = src;
    loop {
        let got = reader.read(&mut buf);
        let now = Instant::now();
        // Bytes read at `now` leave at now + delay (+ jitter), but never
        // before the previous chunk: jitter must not reorder. With a cap,
        // "now" is when the link has finished sending them.
        let mut sent = now.max(not_before);
        if let (Some(rate), Ok(n @ 1..)) = (config.rate, &got) {
            sent = shared.transmit(dir as usize, sent, *n, rate);
        }
        let mut release = sent + config.delay;
        if !config.jitter.is_zero() {
            release += config.jitter.mul_f64(rng.unit());
        }
        release = release.max(last);
        last = release;
        let item = match got {
            Ok(0) => Item::Eof { release },
            Ok(n) => Item::Data {
                release,
                bytes: buf[..n].to_vec(),
            },
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => Item::Failed { release },
        };
        let last_item = !matches!(item, Item::Data { .. });
        if !queue.push(item) || last_item {
            return;
        }
    }
}

fn write_loop(
    dst: &TcpStream,
    src_ctl: Option<&TcpStream>,
    queue: &Queue,
    shared: &Shared,
    dir: Dir,
) {
    let stats = &shared.stats;
    let mut writer = dst;
    while let Some(item) = queue.pop() {
        let mut release = item.release();
        let now = Instant::now();
        if release > now {
            std::thread::sleep(release - now);
        }
        // A hold stops the writes, whatever they carry; lateness counts
        // from its end.
        if let Some(let_go) = shared.wait_unheld() {
            release = release.max(let_go);
        }
        match item {
            Item::Data { bytes, .. } => {
                let late = Instant::now().saturating_duration_since(release);
                stats.record_chunk(late);
                // Counted before the write, not after: the peer may read
                // these bytes (and a test read the counters) before this
                // thread runs again. A failed write ends the connection.
                let counter = match dir {
                    Dir::ToUpstream => &stats.bytes_to_upstream,
                    Dir::ToClient => &stats.bytes_to_client,
                };
                counter.fetch_add(bytes.len() as u64, Ordering::Relaxed);
                let ok = writer.write_all(&bytes).is_ok();
                if !ok {
                    // The destination is gone: stop this direction, and the
                    // connection with it.
                    queue.close();
                    let _ = dst.shutdown(Shutdown::Both);
                    if let Some(s) = src_ctl {
                        let _ = s.shutdown(Shutdown::Both);
                    }
                    return;
                }
            }
            Item::Eof { .. } => {
                // Half-close: the peer reads EOF; the other direction goes on.
                let _ = dst.shutdown(Shutdown::Write);
                return;
            }
            Item::Failed { .. } => {
                let _ = dst.shutdown(Shutdown::Both);
                if let Some(s) = src_ctl {
                    let _ = s.shutdown(Shutdown::Both);
                }
                return;
            }
        }
    }
}

/// Closes a client whose upstream could not be reached without a reset:
/// send our FIN, then read and drop what the client sends until it closes
/// too (a close with unread bytes would send an RST instead).
fn close_cleanly(client: TcpStream) {
    let _ = client.shutdown(Shutdown::Write);
    let _ = client.set_read_timeout(Some(Duration::from_secs(1)));
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut r = &client;
    while Instant::now() < deadline {
        match r.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
}

/// A tiny fixed-seed generator (SplitMix64) for the jitter: no dependency,
/// and its quality is plenty for spreading delays.
#[derive(Debug)]
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_jitter_generator_stays_in_its_unit_interval_and_spreads() {
        let mut r = SplitMix(7);
        let v: Vec<f64> = (0..10_000).map(|_| r.unit()).collect();
        assert!(v.iter().all(|x| (0.0..1.0).contains(x)));
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        assert!((mean - 0.5).abs() < 0.02, "{mean}");
    }
}
