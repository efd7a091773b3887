//! The packets themselves: per direction, a reader thread takes each packet
//! from one TUN device as the kernel sends it, asks the direction's model
//! ([`crate::link::Direction`]) what becomes of it, and hands it to a writer
//! thread that writes it into the other TUN device at its delivery time,
//! where the other namespace's kernel receives it. A packet due now with
//! nothing ahead of it (none waiting, none being written) is written by the
//! reader itself (no thread hand-off).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::link::{Direction, Fate};

/// What one direction did with its packets (the emulator's own account; the
/// physics tests count on the ends instead).
#[derive(Debug, Default)]
pub struct Counters {
    pub packets: AtomicU64,
    pub delivered: AtomicU64,
    pub bytes_delivered: AtomicU64,
    pub queue_drops: AtomicU64,
    pub lost: AtomicU64,
    pub write_errors: AtomicU64,
    /// Delayed packets written (their write returned), and of them how
    /// many returned before their delivery time.
    pub timed: AtomicU64,
    pub early: AtomicU64,
    /// Summed over the late ones: how long after its delivery time each
    /// packet's write returned, ns; and over the early ones, how long
    /// before.
    pub late_ns: AtomicU64,
    pub early_ns: AtomicU64,
    /// How late each delayed packet's write returned, by powers of two of
    /// microseconds ([`lateness_bucket`]): an early packet counts in 0.
    pub late_buckets: [AtomicU64; LATE_BUCKETS],
    /// Packets dropped while the path was silent ([`Counters::silent`]).
    pub silenced: AtomicU64,
    /// While set, every packet is dropped, as on a dead link or a
    /// partition: nothing is delivered, nothing is refused.
    pub silent: AtomicBool,
}

/// A snapshot of [`Counters`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct DirectionStats {
    pub packets: u64,
    pub delivered: u64,
    pub bytes_delivered: u64,
    pub queue_drops: u64,
    pub lost: u64,
    pub write_errors: u64,
    /// Delayed packets written, and how many of them early; the lateness
    /// of the late ones summed, and the earliness of the early ones, ns.
    pub timed: u64,
    pub early: u64,
    pub late_ns: u64,
    pub early_ns: u64,
    /// Lateness by powers of two of microseconds ([`lateness_bucket`]).
    pub late_buckets: [u64; LATE_BUCKETS],
    /// Dropped while the path was silent.
    pub silenced: u64,
}

/// How many lateness buckets a direction keeps: the last holds every
/// packet 2^(n-2) µs late or more (about 0.5 s and more), and a quantile
/// that falls in it reads as its lower edge doubled, 2^(n-1) µs: "that
/// late or later".
pub const LATE_BUCKETS: usize = 21;

/// The bucket of a packet `late_ns` late: 0 on time or early (under 1 µs),
/// then `i` for lateness in [2^(i-1), 2^i) µs.
pub fn lateness_bucket(late_ns: u64) -> usize {
    let us = late_ns / 1_000;
    ((u64::BITS - us.leading_zeros()) as usize).min(LATE_BUCKETS - 1)
}

/// The upper edge of bucket `i`, µs.
fn bucket_top_us(i: usize) -> u64 {
    if i == 0 { 1 } else { 1 << i }
}

impl DirectionStats {
    /// The lateness below which `q` (0..=1) of the delayed packets were
    /// written, as the upper edge of its power-of-two bucket, µs (at most
    /// twice the true figure); `None` with no delayed packet.
    pub fn late_quantile_us(&self, q: f64) -> Option<u64> {
        let total: u64 = self.late_buckets.iter().sum();
        if total == 0 {
            return None;
        }
        let want = ((q * total as f64).ceil() as u64).clamp(1, total);
        let mut seen = 0;
        for (i, n) in self.late_buckets.iter().enumerate() {
            seen += n;
            if seen >= want {
                return Some(bucket_top_us(i));
            }
        }
        Some(bucket_top_us(LATE_BUCKETS - 1))
    }

    /// Both directions' counts together.
    pub fn plus(&self, o: &DirectionStats) -> DirectionStats {
        DirectionStats {
            packets: self.packets + o.packets,
            delivered: self.delivered + o.delivered,
            bytes_delivered: self.bytes_delivered + o.bytes_delivered,
            queue_drops: self.queue_drops + o.queue_drops,
            lost: self.lost + o.lost,
            write_errors: self.write_errors + o.write_errors,
            timed: self.timed + o.timed,
            early: self.early + o.early,
            late_ns: self.late_ns + o.late_ns,
            early_ns: self.early_ns + o.early_ns,
            late_buckets: std::array::from_fn(|i| self.late_buckets[i] + o.late_buckets[i]),
            silenced: self.silenced + o.silenced,
        }
    }

    /// What happened between `before` and this snapshot.
    pub fn since(&self, before: &DirectionStats) -> DirectionStats {
        DirectionStats {
            packets: self.packets - before.packets,
            delivered: self.delivered - before.delivered,
            bytes_delivered: self.bytes_delivered - before.bytes_delivered,
            queue_drops: self.queue_drops - before.queue_drops,
            lost: self.lost - before.lost,
            write_errors: self.write_errors - before.write_errors,
            timed: self.timed - before.timed,
            early: self.early - before.early,
            late_ns: self.late_ns - before.late_ns,
            early_ns: self.early_ns - before.early_ns,
            late_buckets: std::array::from_fn(|i| self.late_buckets[i] - before.late_buckets[i]),
            silenced: self.silenced - before.silenced,
        }
    }
}

impl Counters {
    pub fn snapshot(&self) -> DirectionStats {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        DirectionStats {
            packets: g(&self.packets),
            delivered: g(&self.delivered),
            bytes_delivered: g(&self.bytes_delivered),
            queue_drops: g(&self.queue_drops),
            lost: g(&self.lost),
            write_errors: g(&self.write_errors),
            timed: g(&self.timed),
            early: g(&self.early),
            late_ns: g(&self.late_ns),
            early_ns: g(&self.early_ns),
            late_buckets: std::array::from_fn(|i| g(&self.late_buckets[i])),
            silenced: g(&self.silenced),
        }
    }
}

type Packet = (Instant, u64, Vec<u8>);

impl Counters {
    /// A delayed packet whose write returned at `written`, due at `at`.
    fn written(&self, at: Instant, written: Instant) {
        self.timed.fetch_add(1, Ordering::Relaxed);
        let late = written.saturating_duration_since(at).as_nanos() as u64;
        if written < at {
            self.early.fetch_add(1, Ordering::Relaxed);
            let early = at.duration_since(written).as_nanos() as u64;
            self.early_ns.fetch_add(early, Ordering::Relaxed);
        } else {
            self.late_ns.fetch_add(late, Ordering::Relaxed);
        }
        self.late_buckets[lateness_bucket(late)].fetch_add(1, Ordering::Relaxed);
    }
}

/// The packets of a direction waiting for their time, earliest first, and
/// the writer's wake-up. The reader wakes the writer only when a packet
/// becomes the earliest (without reordering, only when nothing was
/// waiting), so a busy direction costs no wake-up per packet.
#[derive(Default)]
struct Waiting {
    heap: Mutex<Queue>,
    wake: Condvar,
}

/// What the lock guards: the packets waiting, and whether the writer is
/// writing a batch it took off the heap (outside the lock). While it is, a
/// packet due now goes behind that batch, never around it.
#[derive(Default)]
struct Queue {
    packets: BinaryHeap<Reverse<Packet>>,
    writing: bool,
}

/// Starts one direction: packets read from `from` reach `to`.
pub fn start(
    name: &str,
    from: Arc<tun::Device>,
    to: Arc<tun::Device>,
    mut model: Direction,
    stop: Arc<AtomicBool>,
    counters: Arc<Counters>,
) -> std::io::Result<Vec<JoinHandle<()>>> {
    let waiting = Arc::new(Waiting::default());
    let writer = {
        let (to, stop, counters, waiting) =
            (to.clone(), stop.clone(), counters.clone(), waiting.clone());
        std::thread::Builder::new()
            .name(format!("{name}-write"))
            .spawn(move || {
                // Wake-ups on time to the microsecond, not the default 50 µs late.
                let _ = nix::sys::prctl::set_timerslack(1);
                ahead_of_the_services();
                write_loop(&to, &waiting, &stop, &counters)
            })?
    };
    // Reads that would block wait in poll(2) for at most this long, so the
    // thread sees `stop`; under load every read finds a packet at once.
    from.set_nonblock()?;
    let reader = std::thread::Builder::new()
        .name(format!("{name}-read"))
        .spawn(move || {
            ahead_of_the_services();
            let mut buf = vec![0u8; 65_536];
            let mut seq = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let n = match from.recv(&mut buf) {
                    Ok(n) => n,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        match from.recv_timeout(&mut buf, Duration::from_millis(50)) {
                            Ok(n) => n,
                            Err(e) if is_retry(&e) => continue,
                            Err(_) => break,
                        }
                    }
                    Err(e) if is_retry(&e) => continue,
                    Err(_) => break,
                };
                let now = Instant::now();
                counters.packets.fetch_add(1, Ordering::Relaxed);
                if counters.silent.load(Ordering::Relaxed) {
                    counters.silenced.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                match model.admit(now, n) {
                    Fate::QueueFull => {
                        counters.queue_drops.fetch_add(1, Ordering::Relaxed);
                    }
                    Fate::Lost => {
                        counters.lost.fetch_add(1, Ordering::Relaxed);
                    }
                    Fate::Deliver(at) => {
                        let mut queue = waiting.heap.lock().unwrap_or_else(PoisonError::into_inner);
                        if at <= now && queue.packets.is_empty() && !queue.writing {
                            drop(queue);
                            let _ = deliver(&to, &buf[..n], &counters);
                            continue;
                        }
                        seq += 1;
                        let first = queue
                            .packets
                            .peek()
                            .is_none_or(|Reverse((head, _, _))| at < *head);
                        queue.packets.push(Reverse((at, seq, buf[..n].to_vec())));
                        drop(queue);
                        if first {
                            waiting.wake.notify_one();
                        }
                    }
                }
            }
        })?;
    Ok(vec![reader, writer])
}

/// The real-time priority of the path's threads (`SCHED_FIFO`, the lowest
/// real-time level): any of them ready runs before every ordinary process,
/// as a wire and a router are never kept waiting by the programs at its
/// ends. On a loaded 2-core machine, sharing the cores fairly with the
/// services let the emulator fall behind: delayed packets written
/// milliseconds late, and packets dropped at a TUN queue it had not read.
/// The kernel still leaves ordinary processes 5% of each second (its
/// real-time throttle), and the threads block whenever no packet waits.
pub const PRIORITY: u8 = 1;

/// Puts the calling thread at [`PRIORITY`] with `chrt` (util-linux; the
/// workspace's code makes no system call of its own without a safe
/// wrapper, and nix has none for it). Without root, or without `chrt`, the
/// thread keeps its ordinary priority: the path's own account
/// ([`Counters`]) then shows whether it fell behind.
fn ahead_of_the_services() {
    let tid = nix::unistd::gettid().to_string();
    let _ = std::process::Command::new("chrt")
        .args(["--fifo", "--pid", &PRIORITY.to_string(), &tid])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
}

fn is_retry(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::TimedOut
            | std::io::ErrorKind::Interrupted
            | std::io::ErrorKind::WouldBlock
    )
}

/// Writes one packet into the other side's device; whether it went.
fn deliver(to: &tun::Device, packet: &[u8], counters: &Counters) -> bool {
    match to.send(packet) {
        Ok(_) => {
            counters.delivered.fetch_add(1, Ordering::Relaxed);
            counters
                .bytes_delivered
                .fetch_add(packet.len() as u64, Ordering::Relaxed);
            true
        }
        Err(_) => {
            counters.write_errors.fetch_add(1, Ordering::Relaxed);
            false
        }
    }
}

/// The longest a timed wake-up is assumed to oversleep.
const MAX_LEAD: Duration = Duration::from_micros(300);

fn write_loop(to: &tun::Device, waiting: &Waiting, stop: &AtomicBool, counters: &Counters) {
    let mut due = Vec::new();
    // A packet reaches the other side when its write returns, which is
    // after a timed wait has woken (late by the kernel's timer latency,
    // about 50 µs on a virtual machine) and the write has handed it to the
    // other kernel (as long again: the write wakes the receiver). The
    // writer asks to wake that much early, learning it as it goes (a moving
    // average of how far past its wake-up target the first write of a batch
    // returned), so that packets arrive on time in the median.
    let mut lead = Duration::ZERO;
    let mut asked: Option<Instant> = None;
    let mut queue = waiting.heap.lock().unwrap_or_else(PoisonError::into_inner);
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        let horizon = now + lead;
        while queue
            .packets
            .peek()
            .is_some_and(|Reverse((at, _, _))| *at <= horizon)
        {
            if let Some(Reverse((at, _, p))) = queue.packets.pop() {
                due.push((at, p));
            }
        }
        if !due.is_empty() {
            // Written without the lock, so the reader never waits on a
            // write; the reader sees `writing` and queues behind the batch.
            queue.writing = true;
            drop(queue);
            for (i, (at, p)) in due.drain(..).enumerate() {
                let went = deliver(to, &p, counters);
                // Timed when its write has returned: when the other side's
                // kernel has it (a failed write is a write error, untimed).
                let written = Instant::now();
                if went {
                    counters.written(at, written);
                }
                if let (0, Some(target)) = (i, asked.take()) {
                    let past = written.saturating_duration_since(target);
                    lead = (lead * 15 + past.min(MAX_LEAD)) / 16;
                }
            }
            queue = waiting.heap.lock().unwrap_or_else(PoisonError::into_inner);
            queue.writing = false;
            continue;
        }
        let Some(Reverse((at, _, _))) = queue.packets.peek() else {
            queue = waiting
                .wake
                .wait_timeout(queue, Duration::from_millis(50))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
            continue;
        };
        let target = at.checked_sub(lead).unwrap_or(*at).max(now);
        let (h, timeout) = waiting
            .wake
            .wait_timeout(queue, target - now)
            .unwrap_or_else(PoisonError::into_inner);
        queue = h;
        asked = timeout.timed_out().then_some(target);
    }
}
