//! A bound on the HTTP/2 streams open across a process, whatever the number
//! of connections: SETTINGS_MAX_CONCURRENT_STREAMS bounds one connection,
//! the connection cap bounds their number, but their product (1,024 × 200)
//! is far more streams than the memory of one process holds. Each stream a
//! client opens and the server has not ended costs a few KiB (hyper's
//! stream state and the task serving it) even while it sends nothing.
//!
//! Every HTTP/2 connection the listeners watch ([`super::h2_frames::H2Watch`])
//! holds a [`Share`] of the process's [`StreamBudget`] and tells it how many
//! of its client's streams are open. When the total passes the budget, the
//! connection holding the most is evicted: its socket fails its next read,
//! which ends the connection and every stream on it. A client with a few
//! calls in flight is not the one chosen while another holds many.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::task::Context;

use futures::task::AtomicWaker;

/// Open HTTP/2 streams a process holds across all its connections before
/// it evicts the connection holding the most: 8 times the default call
/// limit (512). A flood of 500 h2c connections × 100 streams that declare
/// bodies and send none grew order-service by about 120 MiB without it,
/// and by about 40 MiB with it (twice this budget grew it by 67 MiB).
pub const OPEN_STREAMS: usize = 4_096;

/// The open HTTP/2 streams of a process, and the connections holding them.
#[derive(Debug)]
pub struct StreamBudget {
    limit: usize,
    open: AtomicUsize,
    holders: Mutex<Holders>,
    evicted: AtomicUsize,
}

#[derive(Debug, Default)]
struct Holders {
    all: Vec<Weak<Held>>,
    /// `all`'s length when it was last pruned of ended connections.
    pruned_at: usize,
}

#[derive(Debug)]
struct Held {
    streams: AtomicUsize,
    evicted: AtomicBool,
    reader: AtomicWaker,
}

impl StreamBudget {
    /// A budget of `limit` open streams (at least 1).
    pub fn new(limit: usize) -> Arc<Self> {
        Arc::new(StreamBudget {
            limit: limit.max(1),
            open: AtomicUsize::new(0),
            holders: Mutex::default(),
            evicted: AtomicUsize::new(0),
        })
    }

    /// The process's budget, [`OPEN_STREAMS`].
    pub fn process() -> Arc<Self> {
        static PROCESS: OnceLock<Arc<StreamBudget>> = OnceLock::new();
        PROCESS
            .get_or_init(|| StreamBudget::new(OPEN_STREAMS))
            .clone()
    }

    /// Streams open across the connections holding a share.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// Connections evicted so far.
    pub fn evicted(&self) -> usize {
        self.evicted.load(Ordering::Relaxed)
    }

    /// A share for one more connection.
    pub fn share(self: &Arc<Self>) -> Share {
        let held = Arc::new(Held {
            streams: AtomicUsize::new(0),
            evicted: AtomicBool::new(false),
            reader: AtomicWaker::new(),
        });
        let mut holders = self.holders.lock().unwrap_or_else(|e| e.into_inner());
        if holders.all.len() >= 2 * holders.pruned_at.max(64) {
            holders.all.retain(|h| h.strong_count() > 0);
            holders.pruned_at = holders.all.len();
        }
        holders.all.push(Arc::downgrade(&held));
        Share {
            budget: self.clone(),
            held,
        }
    }

    /// While over the budget, evicts the connection holding the most
    /// streams (its streams leave the count at once).
    fn evict_while_over(&self) {
        let mut holders = self.holders.lock().unwrap_or_else(|e| e.into_inner());
        while self.open.load(Ordering::Relaxed) > self.limit {
            let most = holders
                .all
                .iter()
                .filter_map(Weak::upgrade)
                .filter(|h| !h.evicted.load(Ordering::Relaxed))
                .max_by_key(|h| h.streams.load(Ordering::Relaxed));
            let Some(most) = most else { return };
            most.evicted.store(true, Ordering::Relaxed);
            let n = most.streams.swap(0, Ordering::Relaxed);
            self.open.fetch_sub(n, Ordering::Relaxed);
            self.evicted.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(
                streams = n,
                "evicting the connection holding the most HTTP/2 streams: the process is over its open-stream budget"
            );
            most.reader.wake();
            holders.all.retain(|h| h.strong_count() > 0);
        }
    }
}

/// One connection's part of a [`StreamBudget`]: its open streams leave the
/// count when it is dropped.
#[derive(Debug)]
pub struct Share {
    budget: Arc<StreamBudget>,
    held: Arc<Held>,
}

impl Default for Share {
    fn default() -> Self {
        StreamBudget::process().share()
    }
}

impl Share {
    /// The connection now holds `streams` open streams.
    pub fn set(&self, streams: usize) {
        if self.held.evicted.load(Ordering::Relaxed) {
            return;
        }
        let before = self.held.streams.swap(streams, Ordering::Relaxed);
        if streams > before {
            let open = self
                .budget
                .open
                .fetch_add(streams - before, Ordering::Relaxed);
            if open + streams - before > self.budget.limit {
                self.budget.evict_while_over();
            }
        } else {
            self.budget
                .open
                .fetch_sub(before - streams, Ordering::Relaxed);
        }
    }

    /// Whether the connection was evicted; if not, the task of `cx` is woken
    /// when it is.
    pub fn evicted(&self, cx: &Context<'_>) -> bool {
        if self.held.evicted.load(Ordering::Relaxed) {
            return true;
        }
        self.held.reader.register(cx.waker());
        self.held.evicted.load(Ordering::Relaxed)
    }

    /// The error the evicted connection's read fails with.
    pub fn eviction() -> std::io::Error {
        std::io::Error::other(
            "the process is over its budget of open HTTP/2 streams and this connection holds the most",
        )
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        let n = self.held.streams.swap(0, Ordering::Relaxed);
        self.budget.open.fetch_sub(n, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cx() -> Context<'static> {
        Context::from_waker(futures::task::noop_waker_ref())
    }

    #[test]
    fn the_connection_holding_the_most_is_evicted_past_the_budget() {
        let budget = StreamBudget::new(10);
        let (small, big, other) = (budget.share(), budget.share(), budget.share());
        small.set(2);
        big.set(6);
        other.set(2);
        assert_eq!(budget.open(), 10);
        assert!(![&small, &big, &other].iter().any(|s| s.evicted(&cx())));
        // The eleventh stream, opened by the small one, evicts the big one.
        small.set(3);
        assert!(big.evicted(&cx()));
        assert!(!small.evicted(&cx()) && !other.evicted(&cx()));
        assert_eq!(budget.open(), 5);
        assert_eq!(budget.evicted(), 1);
        // An evicted connection's later counts do not return to the total.
        big.set(7);
        assert_eq!(budget.open(), 5);
        drop(small);
        assert_eq!(budget.open(), 2);
        drop(big);
        drop(other);
        assert_eq!(budget.open(), 0);
    }

    #[test]
    fn an_eviction_wakes_the_connections_reader() {
        let budget = StreamBudget::new(1);
        let share = budget.share();
        let woken = Arc::new(AtomicBool::new(false));
        struct Flag(Arc<AtomicBool>);
        impl std::task::Wake for Flag {
            fn wake(self: Arc<Self>) {
                self.0.store(true, Ordering::Relaxed);
            }
        }
        let waker = std::task::Waker::from(Arc::new(Flag(woken.clone())));
        assert!(!share.evicted(&Context::from_waker(&waker)));
        share.set(2);
        assert!(woken.load(Ordering::Relaxed));
        assert!(share.evicted(&cx()));
    }

    #[test]
    fn ended_connections_are_pruned_from_the_holders() {
        let budget = StreamBudget::new(100);
        for _ in 0..1_000 {
            drop(budget.share());
        }
        let kept = budget.share();
        assert!(budget.holders.lock().unwrap().all.len() < 200);
        drop(kept);
    }
}
