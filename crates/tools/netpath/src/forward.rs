//! The packets themselves: per direction, a reader thread takes each packet
//! from one TUN device as the kernel sends it, asks the direction's model
//! ([`crate::link::Direction`]) what becomes of it, and hands it to a writer
//! thread that writes it into the other TUN device at its delivery time,
//! where the other namespace's kernel receives it. A packet due now with
//! nothing ahead of it is written by the reader itself (no thread hand-off).

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
    /// Summed over delayed packets: how late each was written, ns.
    pub late_ns: AtomicU64,
    pub timed: AtomicU64,
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
    /// Delayed packets, and their lateness summed (written after their
    /// time; early ones count 0), ns.
    pub timed: u64,
    pub late_ns: u64,
    /// Dropped while the path was silent.
    pub silenced: u64,
}

impl DirectionStats {
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
            late_ns: self.late_ns - before.late_ns,
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
            late_ns: g(&self.late_ns),
            silenced: g(&self.silenced),
        }
    }
}

type Packet = (Instant, u64, Vec<u8>);

/// The packets of a direction waiting for their time, earliest first, and
/// the writer's wake-up. The reader wakes the writer only when a packet
/// becomes the earliest (without reordering, only when nothing was
/// waiting), so a busy direction costs no wake-up per packet.
#[derive(Default)]
struct Waiting {
    heap: Mutex<BinaryHeap<Reverse<Packet>>>,
    wake: Condvar,
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
                write_loop(&to, &waiting, &stop, &counters)
            })?
    };
    // Reads that would block wait in poll(2) for at most this long, so the
    // thread sees `stop`; under load every read finds a packet at once.
    from.set_nonblock()?;
    let reader = std::thread::Builder::new()
        .name(format!("{name}-read"))
        .spawn(move || {
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
                        let mut heap = waiting.heap.lock().unwrap_or_else(PoisonError::into_inner);
                        if at <= now && heap.is_empty() {
                            drop(heap);
                            deliver(&to, &buf[..n], &counters);
                            continue;
                        }
                        seq += 1;
                        let first = heap.peek().is_none_or(|Reverse((head, _, _))| at < *head);
                        heap.push(Reverse((at, seq, buf[..n].to_vec())));
                        drop(heap);
                        if first {
                            waiting.wake.notify_one();
                        }
                    }
                }
            }
        })?;
    Ok(vec![reader, writer])
}

fn is_retry(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::TimedOut
            | std::io::ErrorKind::Interrupted
            | std::io::ErrorKind::WouldBlock
    )
}

fn deliver(to: &tun::Device, packet: &[u8], counters: &Counters) {
    match to.send(packet) {
        Ok(_) => {
            counters.delivered.fetch_add(1, Ordering::Relaxed);
            counters
                .bytes_delivered
                .fetch_add(packet.len() as u64, Ordering::Relaxed);
        }
        Err(_) => {
            counters.write_errors.fetch_add(1, Ordering::Relaxed);
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
    let mut heap = waiting.heap.lock().unwrap_or_else(PoisonError::into_inner);
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        let horizon = now + lead;
        while heap
            .peek()
            .is_some_and(|Reverse((at, _, _))| *at <= horizon)
        {
            if let Some(Reverse((at, _, p))) = heap.pop() {
                let late = now.saturating_duration_since(at).as_nanos() as u64;
                counters.late_ns.fetch_add(late, Ordering::Relaxed);
                counters.timed.fetch_add(1, Ordering::Relaxed);
                due.push(p);
            }
        }
        if !due.is_empty() {
            // Written without the lock, so the reader never waits on a write.
            drop(heap);
            for (i, p) in due.drain(..).enumerate() {
                deliver(to, &p, counters);
                if let (0, Some(target)) = (i, asked.take()) {
                    let past = Instant::now().saturating_duration_since(target);
                    lead = (lead * 15 + past.min(MAX_LEAD)) / 16;
                }
            }
            heap = waiting.heap.lock().unwrap_or_else(PoisonError::into_inner);
            continue;
        }
        let Some(Reverse((at, _, _))) = heap.peek() else {
            heap = waiting
                .wake
                .wait_timeout(heap, Duration::from_millis(50))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
            continue;
        };
        let target = at.checked_sub(lead).unwrap_or(*at).max(now);
        let (h, timeout) = waiting
            .wake
            .wait_timeout(heap, target - now)
            .unwrap_or_else(PoisonError::into_inner);
        heap = h;
        asked = timeout.timed_out().then_some(target);
    }
}
